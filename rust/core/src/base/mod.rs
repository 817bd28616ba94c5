//! A base directory (spec section 1): its layout, and the checks a restore applies to it, in
//! one place. `Store::open` calls each check and stops at the first failure; [`verify_base`]
//! calls the same checks and collects every finding, so `tflux verify` and `tflux.open` can
//! never disagree about a directory.

mod check;
pub mod convert;
pub mod files;
mod layout;
pub mod locate;
mod restore;
pub mod settings;
pub use check::{
    verify_base, BaseReport, SnapshotQueueSummary, SnapshotSummary, VerifyDepth, VerifyOptions,
};

pub use locate::{locate, open_segments, Located, PathKind};

pub use layout::{
    dialect_of, kind, named_dir_of_log, require_kind, resolve_log_dir, verify, verify_in, Kind,
    Layout,
};

pub use restore::{
    check_continuity, check_log, continuity, load_snapshot, replay, restore_snapshot,
    snapshot_identity, store_scan_options, Continuity, Restored,
};
