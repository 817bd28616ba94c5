//! Log entries decoded into columns (Arrow's memory layout: values, int32 offsets for
//! variable-width columns, LSB-first validity bitmaps). The Spark source and Parquet export hand
//! these buffers to pyarrow without a per-record Python object.
//!
//! Columns: lsn, term, kind, queue, key, record_id, message, implementation, max_queue_size,
//! max_message_size, key_min, key_max, then the task-queue deltas' (spec section 12): due,
//! kept_ids, rules (and the raw data when asked). Fields that a delta kind does not carry are
//! null.

mod arrow;
mod delta;
pub mod pool;
mod snapshot;
mod task;
pub use arrow::{Binary, Bitmap, IdLists, Nullable, KIND_NAMES};
pub use delta::{
    read_deltas, read_deltas_with, read_segment_deltas, DeltaColumns, DeltaRead, Repeats,
    PART_ENTRIES,
};

#[cfg(test)]
use delta::Columns;
pub use snapshot::SnapshotColumns;
pub use task::rules_json;

#[cfg(test)]
mod tests;
