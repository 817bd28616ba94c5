//! The columns only the task-queue deltas fill (spec section 12; docs/format.md "Task-queue
//! deltas"): `kept_ids` (a Purge's kept record ids, `list<int64>`) and `rules` (a QueueRules'
//! change as JSON text). Such deltas are rare beside AddRecords, so their values are kept
//! sparse (entry index, value) while the entries are decoded, and laid out in Arrow's form once
//! at the end ([`TaskColumns::finish`]). `due` (AddLater's not before, Failed's due) is a
//! plain [`Fixed`](super::Fixed) column of `Columns`.

use crate::error::Result;
use crate::format::rules::RulesChange;

use super::arrow::{offset, Binary, Bitmap, IdLists};

/// The sparse values of the entries decoded so far.
#[derive(Debug, Default)]
pub(super) struct TaskColumns {
    /// (entry, kept ids) of each Purge.
    kept: Vec<(usize, Vec<i64>)>,
    /// (entry, the change as JSON) of each QueueRules.
    rules: Vec<(usize, String)>,
}

impl TaskColumns {
    pub(super) fn put_kept(&mut self, i: usize, ids: Vec<i64>) {
        self.kept.push((i, ids));
    }

    pub(super) fn put_rules(&mut self, i: usize, change: &RulesChange<&[u8]>) {
        self.rules.push((i, rules_json(change)));
    }

    /// Keeps the values of the first `n` entries.
    pub(super) fn truncate(&mut self, n: usize) {
        self.kept.retain(|(i, _)| *i < n);
        self.rules.retain(|(i, _)| *i < n);
    }

    /// Appends `other`'s values (of the entries after these `n`).
    pub(super) fn append(&mut self, n: usize, other: TaskColumns) {
        self.kept
            .extend(other.kept.into_iter().map(|(i, v)| (i + n, v)));
        self.rules
            .extend(other.rules.into_iter().map(|(i, v)| (i + n, v)));
    }

    /// `kept_ids` and `rules` for `n` entries (null where a delta has no such field).
    pub(super) fn finish(self, n: usize) -> Result<(IdLists, Binary)> {
        let mut kept = IdLists {
            offsets: Vec::with_capacity(n + 1),
            values: Vec::new(),
            validity: Bitmap::default(),
        };
        kept.offsets.push(0);
        let mut at = 0;
        for (i, ids) in &self.kept {
            kept.offsets.resize(i + 1, offset(kept.values.len())?);
            kept.values.extend_from_slice(ids);
            kept.offsets.push(offset(kept.values.len())?);
            at = i + 1;
        }
        debug_assert!(at <= n);
        kept.offsets.resize(n + 1, offset(kept.values.len())?);
        let entries: Vec<usize> = self.kept.iter().map(|(i, _)| *i).collect();
        kept.validity = Bitmap::build(n, entries.len(), |i| entries.binary_search(&i).is_ok());
        let mut rules = Binary::default();
        for (i, json) in &self.rules {
            rules.put(*i, json.as_bytes());
        }
        rules.pad(n);
        offset(rules.data.len())?;
        let entries: Vec<usize> = self.rules.iter().map(|(i, _)| *i).collect();
        rules.validity = Bitmap::build(n, entries.len(), |i| entries.binary_search(&i).is_ok());
        Ok((kept, rules))
    }
}

/// A QueueRules' change as one JSON object, in spec order, with the names of
/// `tests/data/task/task_deltas.json`: a rule the delta leaves as it is is absent, one it clears
/// is `null`; `dead_letter` is `[queue, deliveries]`, `retry_backoff` in millionths, times in
/// milliseconds. The JVM reader writes the same text.
pub fn rules_json(change: &RulesChange<&[u8]>) -> String {
    let mut parts: Vec<String> = Vec::with_capacity(5);
    if let Some(dead) = &change.dead_letter {
        let value = match dead {
            // Queue names are printable ASCII (0x21..0x7E): only `"` and `\` need escapes.
            Some((queue, n)) => {
                let mut q = String::with_capacity(queue.len() + 2);
                for &b in *queue {
                    if b == b'"' || b == b'\\' {
                        q.push('\\');
                    }
                    q.push(char::from(b));
                }
                format!("[\"{q}\",{n}]")
            }
            None => "null".to_string(),
        };
        parts.push(format!("\"dead_letter\":{value}"));
    }
    for (name, value) in [
        ("retry_delay_ms", change.retry_delay_ms),
        ("retry_backoff", change.retry_backoff),
        ("retry_max_delay_ms", change.retry_max_delay_ms),
        ("lease_ms", change.lease_ms),
    ] {
        if let Some(value) = value {
            let value = value.map_or_else(|| "null".to_string(), |v| v.to_string());
            parts.push(format!("\"{name}\":{value}"));
        }
    }
    format!("{{{}}}", parts.join(","))
}
