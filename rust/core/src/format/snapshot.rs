//! The snapshot file `data/tflux.snapshot` (spec section 4).
//!
//! ```text
//! Marker B6 38 0F C9 | Int32 last index | Int32 last term | Buffer state | UInt32 CRC(state bytes)
//! state       = Array<QueueData>
//! QueueData   = QueueName | Int32 implementation | UInt64 last id | Int32 max queue size
//!               | Int32 max message size | Nullable<Pair<Int64,Int64>> key range | Array<QueueRecord>
//! QueueRecord = UInt64 id | Int64 priority | Buffer data
//! ```

/// One queue as stored in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueData {
    pub name: Vec<u8>,
    pub implementation: i32,
    pub last_id: u64,
    pub max_queue_size: i32,
    pub max_message_size: i32,
    pub key_range: Option<(i64, i64)>,
    /// `(id, key, data)`; any order on disk.
    pub records: Vec<(u64, i64, Vec<u8>)>,
}

/// A whole snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub last_index: i64,
    pub last_term: i64,
    pub queues: Vec<QueueData>,
}
