//! Deltas: the data of each log record (spec section 6).
//!
//! ```text
//! CreateQueue  'C' | QueueName | Int32 implementation | Int32 max queue size
//!                  | Int32 max message size | Nullable<Pair<Int64,Int64>> key range
//! DeleteQueue  'D' | QueueName
//! AddRecord    'A' | QueueName | Int64 priority (key) | Buffer message
//! RemoveRecord 'R' | QueueName | UInt64 record id
//! QueueName    Byte length N (0..255) | N ASCII bytes in 0x21..0x7E   (empty = default queue)
//! ```
//! A delta must consume its bytes exactly.

/// A decoded delta borrowing from the record's bytes (replay decodes millions of these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaRef<'a> {
    CreateQueue {
        name: &'a [u8],
        implementation: i32,
        max_queue_size: i32,
        max_message_size: i32,
        key_range: Option<(i64, i64)>,
    },
    DeleteQueue {
        name: &'a [u8],
    },
    AddRecord {
        name: &'a [u8],
        key: i64,
        message: &'a [u8],
    },
    RemoveRecord {
        name: &'a [u8],
        id: u64,
    },
}
