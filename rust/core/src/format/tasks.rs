//! The tasks Buffer of a task-layout snapshot (spec 12, `snapshot::encode_with_tasks`): the
//! task-queue state of each queue that has any.
//!
//! ```text
//! tasks      = Array<QueueTasks>
//! QueueTasks = QueueName | RulesChange rules (format::rules; every rule named: 01 00 none, 01 01 value)
//!              | Array<Pair<UInt64,Int64>> delayed records (id, due unix ms)
//!              | Array<Pair<UInt64,Int32>> deliveries (id, attempts >= 1)
//! ```
//! Every queue named is one of the state's, every id one of its records, at most once per list;
//! the rules obey `QueueRules::check`. A violation is corruption at the queue's entry.

use super::cursor::{put_name, Cursor, Decoded};
use super::rules::{decode_change, QueueRules};
use crate::error::{Error, Result};

/// The task-queue state of one queue, as a snapshot carries it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueTasks {
    pub name: Vec<u8>,
    pub rules: QueueRules,
    /// `(id, due)`, ascending ids.
    pub delayed: Vec<(u64, i64)>,
    /// `(id, attempts)`, ascending ids.
    pub attempts: Vec<(u64, u32)>,
}

impl QueueTasks {
    /// Whether there is nothing to carry.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.delayed.is_empty() && self.attempts.is_empty()
    }
}

/// The tasks bytes.
pub(crate) fn encode(tasks: &[QueueTasks]) -> Result<Vec<u8>> {
    let count = |n: usize| {
        i32::try_from(n)
            .map(|n| n.to_be_bytes())
            .map_err(|_| Error::InvalidArgument(format!("{n} entries (at most 2147483647)")))
    };
    let mut out = Vec::new();
    out.extend_from_slice(&count(tasks.len())?);
    for t in tasks {
        t.rules
            .check(&t.name)
            .map_err(|r| Error::InvalidArgument(format!("rules of a snapshot queue: {r}")))?;
        put_name(&mut out, &t.name);
        t.rules.as_change().encode(&mut out);
        out.extend_from_slice(&count(t.delayed.len())?);
        for (id, due) in &t.delayed {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&due.to_be_bytes());
        }
        out.extend_from_slice(&count(t.attempts.len())?);
        for (id, n) in &t.attempts {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&(*n as i32).to_be_bytes());
        }
    }
    Ok(out)
}

/// Reads the tasks bytes (at offset `base` of the file), each queue's entry checked by `check`
/// against the state and the entries before it (`snapshot::check_tasks`: the snapshot's rule,
/// kept where the snapshot is).
pub(crate) fn decode(
    bytes: &[u8],
    base: usize,
    check: impl Fn(&QueueTasks, &[QueueTasks]) -> std::result::Result<(), String>,
) -> Decoded<Vec<QueueTasks>> {
    let mut c = Cursor::at_base(bytes, base);
    let n = c.len("task queue count", 1 + 1 + 4 + 4)?;
    let mut out: Vec<QueueTasks> = Vec::with_capacity(n);
    for _ in 0..n {
        let at = c.pos();
        let name = c.queue_name()?.to_vec();
        let rules = QueueRules::default().changed(&decode_change(&mut c)?);
        let mut delayed = Vec::new();
        for _ in 0..c.len("delayed count", 16)? {
            delayed.push((c.u64("delayed id")?, c.i64("due")?));
        }
        let mut attempts = Vec::new();
        for _ in 0..c.len("attempts count", 12)? {
            let id = c.u64("attempts id")?;
            let k = c.i32("attempts")?;
            if k < 1 {
                return c.fail(c.pos() - 4, format!("attempts {k} is below 1"));
            }
            attempts.push((id, k as u32));
        }
        let t = QueueTasks {
            name,
            rules,
            delayed,
            attempts,
        };
        if let Err(reason) = check(&t, &out) {
            return c.fail(at, reason);
        }
        out.push(t);
    }
    if c.left() != 0 {
        return c.fail(
            c.pos(),
            format!("{} trailing bytes after the tasks", c.left()),
        );
    }
    Ok(out)
}
