//! tflux-core: the storage engine of TaskFlux.
//!
//! Wings, bottom up (each imports only the ones below it): [`codec`] and [`error`];
//! [`format`](mod@format) (byte layouts, no I/O); [`durability`] (sync policies, group commit,
//! the interval thread, disk watermarks); [`io`] (the storage seam, maps, file helpers);
//! [`segment`] (one segment file); [`state`] (the queue state machine); [`log`] (the segmented
//! Raft log, its recovery scanner, `verify` and Arrow columns); [`base`] (a base directory, its
//! settings and files, the restore checks, `verify_base`, `convert`); [`replay`]; [`store`],
//! [`channel`] and [`share`] (several processes). [`events`] is what they report through the
//! `log` crate (owner changes, lease expiries, cuts). Nothing here knows about Python; the
//! `tflux-py` crate wraps these types.

pub mod base;
pub mod channel;
pub mod codec;
pub mod cores;
pub mod durability;
pub mod error;
pub mod events;
pub mod fork;
pub mod format;
pub mod io;
pub mod log;
pub mod replay;
pub mod segment;
pub mod share;
pub mod signal;
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
