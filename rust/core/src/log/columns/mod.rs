//! Log entries decoded into columns (Arrow's memory layout: values, int32 offsets for
//! variable-width columns, LSB-first validity bitmaps). The Spark source and Parquet export hand
//! these buffers to pyarrow without a per-record Python object.
//!
//! Columns: lsn, term, kind, queue, key, record_id, message, implementation, max_queue_size,
//! max_message_size, key_min, key_max (and the raw data when asked). Fields that a delta kind
//! does not carry are null.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::format::delta::{self as format_delta, fields, DeltaRef};
use crate::format::dialect::Dialect;
use crate::log::recovery::Parallelism;
use crate::log::{Log, SpanReader, SpanStart, Split};

mod arrow;
mod delta;
pub mod pool;
mod snapshot;
pub use arrow::*;
pub use delta::*;
pub use snapshot::*;

#[cfg(test)]
mod tests;
