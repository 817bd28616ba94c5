//! A snapshot's records in columns: queue, implementation, record_id, key, message, and what a
//! task-layout snapshot (spec section 12) holds of each record: due, attempts.

use crate::error::{Error, Result};
use crate::format::rules::QueueRules;
use crate::format::snapshot::{QueueData, QueueTasks, Snapshot};

use super::arrow::{Binary, Bitmap, Nullable};

/// The records of a snapshot in columns: queue, implementation, record_id, key, message; and
/// from a task-layout snapshot's tasks (`format::snapshot::decode_full`), due and attempts.
#[derive(Debug, Default, Clone)]
pub struct SnapshotColumns {
    pub last_index: i64,
    pub last_term: i64,
    pub queue: Binary,
    pub implementation: Vec<i32>,
    pub record_id: Vec<i64>,
    pub key: Vec<i64>,
    pub message: Binary,
    /// Per record: when a delayed record is due (unix ms), null when it is ready. No values
    /// and every entry null when no record is delayed (a plain snapshot costs nothing here).
    pub due: Nullable<i64>,
    /// Per record: its counted deliveries (0: none counted). Empty when the snapshot counts
    /// none (every record 0).
    pub attempts: Vec<i32>,
    /// Every queue's settings and last id (queues with no records included), by name.
    pub queues: Vec<QueueData>,
    /// The queues a task-layout snapshot holds task-queue state for (spec section 12), by
    /// name, with their rules (a queue with delayed records or counts only has none set).
    pub tasks: Vec<(Vec<u8>, QueueRules)>,
}

impl SnapshotColumns {
    pub fn len(&self) -> usize {
        self.key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// One row per record of every queue (queues by name, records by id).
    pub fn from_snapshot(s: &Snapshot) -> Result<SnapshotColumns> {
        SnapshotColumns::from_snapshot_with_tasks(s, Vec::new())
    }

    /// [`SnapshotColumns::from_snapshot`], with the task-queue state `tasks` of a task-layout
    /// snapshot (as `decode_full` returns it: each queue's delayed and counted ids ascending,
    /// each one of its records) in `due`, `attempts` and `tasks`.
    pub fn from_snapshot_with_tasks(
        s: &Snapshot,
        tasks: Vec<QueueTasks>,
    ) -> Result<SnapshotColumns> {
        let mut cols = SnapshotColumns {
            last_index: s.last_index,
            last_term: s.last_term,
            ..SnapshotColumns::default()
        };
        let delayed = tasks.iter().any(|t| !t.delayed.is_empty());
        let counted = tasks.iter().any(|t| !t.attempts.is_empty());
        let mut due_bits = Bitmap::default();
        let mut queues: Vec<_> = s.queues.iter().collect();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        for q in queues {
            cols.queues.push(QueueData {
                records: Vec::new(),
                ..q.clone()
            });
            let t = tasks.iter().find(|t| t.name == q.name);
            let (mut dues, mut counts) = match t {
                Some(t) => (&t.delayed[..], &t.attempts[..]),
                None => (&[][..], &[][..]),
            };
            let mut records: Vec<_> = q.records.iter().collect();
            records.sort_by_key(|r| r.0);
            for (id, key, data) in records {
                let rid = i64::try_from(*id)
                    .map_err(|_| Error::InvalidArgument(format!("record id {id} exceeds Int64")))?;
                cols.queue.push(Some(&q.name))?;
                cols.implementation.push(q.implementation);
                cols.record_id.push(rid);
                cols.key.push(*key);
                cols.message.push(Some(data))?;
                // Both lists are ascending ids of this queue's records: one walk beside them.
                if delayed {
                    let due = take(&mut dues, *id);
                    cols.due.values.push(due.unwrap_or(0));
                    due_bits.push(due.is_some());
                }
                if counted {
                    let n = take(&mut counts, *id).unwrap_or(0);
                    cols.attempts.push(i32::try_from(n).map_err(|_| {
                        Error::InvalidArgument(format!("attempts {n} of record {id} exceed Int32"))
                    })?);
                }
            }
        }
        let n = cols.len();
        cols.due.validity = if delayed {
            due_bits
        } else {
            Bitmap {
                bytes: Vec::new(),
                len: n,
                nulls: n,
            }
        };
        cols.tasks = tasks.into_iter().map(|t| (t.name, t.rules)).collect();
        Ok(cols)
    }
}

/// The value of `id` at the head of `list` (ascending ids), advancing past it.
fn take<T: Copy>(list: &mut &[(u64, T)], id: u64) -> Option<T> {
    match list.first() {
        Some(&(first, value)) if first == id => {
            *list = &list[1..];
            Some(value)
        }
        _ => None,
    }
}
