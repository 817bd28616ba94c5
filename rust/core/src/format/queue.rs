//! A queue's settings as CreateQueue deltas and snapshots store them (spec section 7), and the
//! rules every stored queue obeys. Replay, restore and the snapshot codec all call these, so a
//! file the codec accepts is a file a restore accepts.

/// Implementation code 1: a 4-ary heap (any key).
pub const IMPL_HEAP: i32 = 1;
/// Implementation code 2: a queue array (one FIFO per key; requires a key range).
pub const IMPL_ARRAY: i32 = 2;

/// The queue implementations: the code written in deltas and snapshots and the name the API
/// uses. The one table: every other layer (bindings, CLI, Spark) looks codes and names up here.
pub const IMPLEMENTATIONS: [(i32, &str); 2] = [(IMPL_HEAP, "heap"), (IMPL_ARRAY, "array")];

/// The name of implementation `code`, if it is one.
pub fn implementation_name(code: i32) -> Option<&'static str> {
    IMPLEMENTATIONS
        .iter()
        .find(|(c, _)| *c == code)
        .map(|(_, name)| *name)
}

/// The code of the implementation called `name`, if it is one.
pub fn implementation_code(name: &str) -> Option<i32> {
    IMPLEMENTATIONS
        .iter()
        .find(|(_, n)| *n == name)
        .map(|(code, _)| *code)
}

/// "1 = heap, 2 = array", for messages.
fn implementations_text() -> String {
    IMPLEMENTATIONS
        .iter()
        .map(|(code, name)| format!("{code} = {name}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A queue's fixed settings (`None` = no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    pub implementation: i32,
    pub max_queue_size: Option<u32>,
    pub max_message_size: Option<u32>,
    pub key_range: Option<(i64, i64)>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            implementation: IMPL_HEAP,
            max_queue_size: None,
            max_message_size: None,
            key_range: None,
        }
    }
}

impl QueueConfig {
    /// Checks a configuration as written in a delta or snapshot (-1 = no limit).
    pub fn from_raw(
        implementation: i32,
        max_queue_size: i32,
        max_message_size: i32,
        key_range: Option<(i64, i64)>,
    ) -> Result<QueueConfig, String> {
        let limit = |v: i32, what: &str| match v {
            -1 => Ok(None),
            v if v >= 0 => Ok(Some(v as u32)),
            v => Err(format!("{what} {v} is invalid (-1 or 0..2147483647)")),
        };
        let config = QueueConfig {
            implementation,
            max_queue_size: limit(max_queue_size, "max queue size")?,
            max_message_size: limit(max_message_size, "max message size")?,
            key_range,
        };
        config.validate()?;
        Ok(config)
    }

    pub fn validate(&self) -> Result<(), String> {
        match self.implementation {
            IMPL_HEAP => {}
            IMPL_ARRAY if self.key_range.is_none() => {
                return Err(
                    "an \"array\" queue needs a key range (min, max): it keeps one FIFO per key"
                        .into(),
                )
            }
            IMPL_ARRAY => {}
            other => {
                return Err(format!(
                    "unknown queue implementation code {other} ({})",
                    implementations_text()
                ))
            }
        }
        for (what, v) in [
            ("max queue size", self.max_queue_size),
            ("max message size", self.max_message_size),
        ] {
            if v.is_some_and(|v| v > i32::MAX as u32) {
                return Err(format!("{what} must be at most 2147483647"));
            }
        }
        if let Some((min, max)) = self.key_range {
            if min > max {
                return Err(format!("key range min {min} is greater than max {max}"));
            }
        }
        Ok(())
    }

    /// A size limit as stored (-1 = no limit).
    pub fn raw_size(v: Option<u32>) -> i32 {
        v.map_or(-1, |v| v as i32)
    }

    /// Whether the queue can hold a record with `key` at all: a queue array holds only keys
    /// inside its range (it has one FIFO per key). This is a storage rule, checked on replay and
    /// restore; the key-range *policy* on a client enqueue is separate.
    pub fn check_stored_key(&self, key: i64) -> Result<(), String> {
        match (self.implementation, self.key_range) {
            (IMPL_ARRAY, Some((min, max))) if key < min || key > max => Err(format!(
                "key {key} is outside the array queue's range [{min}, {max}]"
            )),
            _ => Ok(()),
        }
    }
}
