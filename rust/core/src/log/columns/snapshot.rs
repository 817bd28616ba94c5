//! A snapshot's records in columns: queue, implementation, record_id, key, message.

use crate::error::{Error, Result};

use super::arrow::Binary;

/// The records of a snapshot in columns: queue, implementation, record_id, key, message.
#[derive(Debug, Default, Clone)]
pub struct SnapshotColumns {
    pub last_index: i64,
    pub last_term: i64,
    pub queue: Binary,
    pub implementation: Vec<i32>,
    pub record_id: Vec<i64>,
    pub key: Vec<i64>,
    pub message: Binary,
    /// Every queue's settings and last id (queues with no records included), by name.
    pub queues: Vec<crate::format::snapshot::QueueData>,
    /// The queues a task-layout snapshot holds task-queue state for (rules, delayed records,
    /// delivery counts: spec section 12), which these columns do not carry.
    pub task_queues: Vec<Vec<u8>>,
}

impl SnapshotColumns {
    pub fn len(&self) -> usize {
        self.key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// One row per record of every queue (queues by name, records by id).
    pub fn from_snapshot(s: &crate::format::snapshot::Snapshot) -> Result<SnapshotColumns> {
        let mut cols = SnapshotColumns {
            last_index: s.last_index,
            last_term: s.last_term,
            ..SnapshotColumns::default()
        };
        let mut queues: Vec<_> = s.queues.iter().collect();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        for q in queues {
            cols.queues.push(crate::format::snapshot::QueueData {
                records: Vec::new(),
                ..q.clone()
            });
            let mut records: Vec<_> = q.records.iter().collect();
            records.sort_by_key(|r| r.0);
            for (id, key, data) in records {
                let id = i64::try_from(*id)
                    .map_err(|_| Error::InvalidArgument(format!("record id {id} exceeds Int64")))?;
                cols.queue.push(Some(&q.name))?;
                cols.implementation.push(q.implementation);
                cols.record_id.push(id);
                cols.key.push(*key);
                cols.message.push(Some(data))?;
            }
        }
        Ok(cols)
    }
}
