//! A base directory (spec section 1): its layout, and the checks a restore applies to it, in
//! one place. `Store::open` calls each check and stops at the first failure; [`verify_base`]
//! calls the same checks and collects every finding, so `tflux verify` and `tflux.open` can
//! never disagree about a directory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::format::metadata::Metadata;
use crate::format::snapshot::Snapshot;
use crate::log::recovery::SegmentInfo;
use crate::log::recovery::{scan_dir, Finding, FindingKind, LogScan, RecoveryMode, ScanOptions};
use crate::log::{Log, LogOptions};
use crate::state::{QueueInfo, QueueState};
use settings::{Settings, SETTINGS_FILE};

mod check;
pub mod convert;
pub mod files;
mod layout;
mod restore;
pub mod settings;
pub use check::*;
pub use layout::*;
pub use restore::*;
