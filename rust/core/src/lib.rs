//! tflux-core: the storage engine of TaskFlux.
//!
//! Layers, bottom up: [`codec`] (big-endian primitives and the CRC), [`format`](mod@format) (byte layouts of
//! records and segment headers), [`segment`] (one segment file: scan, append, cut), [`log`] (the
//! segmented Raft log), [`log::recovery`] (the one scanner that classifies a log directory),
//! [`log::verify`] (read-only checking of a log directory).
//! Nothing here knows about Python; the `tflux-py` crate wraps these types.

pub mod base;
pub mod channel;
pub mod codec;
pub mod cores;
pub mod durability;
pub mod error;
pub mod fork;
pub mod format;
pub mod io;
pub mod log;
pub mod replay;
pub mod segment;
pub mod share;
pub mod state;
pub mod store;

pub use base::{verify, verify_in};
pub use base::{verify_base, BaseReport, Layout, VerifyDepth, VerifyOptions};
pub use error::{Error, Result};
pub use log::recovery::{Finding, FindingKind, RecoveryMode, RepairPlan, ScanOptions};
pub use log::verify::{Problem, ProblemKind, VerifyReport};
pub use log::{
    Entry, EntryBatch, Log, LogOptions, PendingOpen, RecoveryReport, SegmentInfo, SyncPolicy,
};
