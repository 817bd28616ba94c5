//! The checks a restore applies to a base directory, one function each: the snapshot, terms
//! against the metadata, the log's continuity with the snapshot, and the replay itself.
//! `Store::open` stops at the first failure; [`super::verify_base`] collects them all.

use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::format::metadata::Metadata;
use crate::format::snapshot::Snapshot;
use crate::log::recovery::{LogScan, RecoveryMode, ScanOptions};
use crate::log::Log;
use crate::state::QueueState;

use super::files;
use super::layout::Layout;

/// The scan a store restores from: a log holds deltas, which are never empty (a trailing empty
/// record is a torn header).
pub fn store_scan_options(mode: RecoveryMode, dialect: Dialect) -> ScanOptions {
    ScanOptions {
        mode,
        empty_entries: false,
        dialect: Some(dialect),
        ..ScanOptions::default()
    }
}

/// The snapshot's index and term, and the state it describes.
#[derive(Debug)]
pub struct Restored {
    pub state: QueueState,
    /// `(last index, last term)` of the snapshot; None without one.
    pub snapshot: Option<(i64, i64)>,
}

impl Restored {
    /// LSN of the last entry the snapshot covers (-1 without a snapshot).
    pub fn snapshot_index(&self) -> i64 {
        self.snapshot.map_or(-1, |s| s.0)
    }
}

/// Reads the snapshot and rebuilds the state it describes; a snapshot whose content a restore
/// refuses (spec sections 4 and 7) is corruption of the snapshot file.
pub fn load_snapshot(layout: &Layout) -> Result<Restored> {
    match files::read_snapshot_full(&layout.snapshot, layout.dialect)? {
        Some((s, tasks)) if !tasks.is_empty() => {
            let state = QueueState::from_snapshot_with_tasks(&s, &tasks)
                .map_err(|e| Error::corruption(&layout.snapshot, None, e.to_string()))?;
            Ok(Restored {
                state,
                snapshot: Some((s.last_index, s.last_term)),
            })
        }
        s => restore_snapshot(layout, s.map(|(s, _)| s)),
    }
}

/// The state a decoded snapshot (or none) describes, as a restore rebuilds it: content a
/// restore refuses is corruption of the snapshot file.
pub fn restore_snapshot(layout: &Layout, snapshot: Option<Snapshot>) -> Result<Restored> {
    match snapshot {
        None => Ok(Restored {
            state: QueueState::new(),
            snapshot: None,
        }),
        Some(s) => {
            let state = QueueState::from_snapshot(&s)
                .map_err(|e| Error::corruption(&layout.snapshot, None, e.to_string()))?;
            Ok(Restored {
                state,
                snapshot: Some((s.last_index, s.last_term)),
            })
        }
    }
}

/// No log entry may have a term above the metadata's current term.
pub fn check_terms(layout: &Layout, last_entry: Option<(i64, i32)>, meta: &Metadata) -> Result<()> {
    match last_entry {
        Some((lsn, term)) if term > meta.term => Err(Error::corruption(
            &layout.log,
            None,
            format!(
                "entry {lsn} has term {term}, above the current term {} in the metadata",
                meta.term
            ),
        )),
        _ => Ok(()),
    }
}

/// How a log's LSNs meet the snapshot's (what a restore accepts: every case but `Gap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuity {
    /// No snapshot: the log starts at LSN 0.
    FromZero,
    /// The log starts at or before the snapshot's last index + 1 and reaches past it.
    Continues,
    /// The snapshot covers the whole log: the log restarts after the snapshot's last index.
    SnapshotAhead,
    /// LSNs are missing between the snapshot (or 0) and the log's first entry: refused.
    Gap,
    /// Not known: the snapshot or the log could not be read.
    Unknown,
}

impl Continuity {
    pub fn name(self) -> &'static str {
        match self {
            Continuity::FromZero => "from_zero",
            Continuity::Continues => "continues",
            Continuity::SnapshotAhead => "snapshot_ahead",
            Continuity::Gap => "gap",
            Continuity::Unknown => "unknown",
        }
    }
}

/// The one rule of how a log `log_start..=log_last` (`log_last = log_start - 1` when empty)
/// meets a snapshot ending at `snapshot_index` (`None`: no snapshot).
pub fn continuity(log_start: i64, log_last: i64, snapshot_index: Option<i64>) -> Continuity {
    let covered = snapshot_index.unwrap_or(-1);
    match snapshot_index {
        _ if log_start > covered.saturating_add(1) => Continuity::Gap,
        None => Continuity::FromZero,
        Some(i) if log_last < i => Continuity::SnapshotAhead,
        Some(_) => Continuity::Continues,
    }
}

/// The log must continue the snapshot: start at or before its last index + 1 (at 0 without a
/// snapshot). A snapshot ahead of the whole log is accepted (the log restarts after it).
pub fn check_continuity(
    layout: &Layout,
    log_start: i64,
    snapshot_index: Option<i64>,
) -> Result<()> {
    if continuity(log_start, log_start, snapshot_index) != Continuity::Gap {
        return Ok(());
    }
    let what = match snapshot_index {
        Some(i) => format!(
            "the log starts at LSN {log_start} but the snapshot ends at LSN {i} (LSNs {}..{} are missing)",
            i + 1,
            log_start - 1
        ),
        None => format!(
            "the log starts at LSN {log_start} and there is no snapshot (LSNs 0..{} are missing)",
            log_start - 1
        ),
    };
    Err(Error::corruption(
        &layout.log,
        None,
        format!("gap between snapshot and log: {what}"),
    ))
}

/// Checks the scanned log against the metadata and the snapshot (terms, continuity).
/// `snapshot` is [`Restored::snapshot`].
pub fn check_log(
    layout: &Layout,
    scan: &LogScan,
    meta: &Metadata,
    snapshot: Option<(i64, i64)>,
) -> Result<()> {
    check_terms(layout, scan.last_entry(), meta)?;
    check_continuity(layout, scan.start_index(), snapshot.map(|s| s.0))
}

/// Which snapshot file `layout` holds (device, inode, size, modification time; `None` without
/// one): a restore that read the snapshot before scanning the log keeps what it read only if
/// this is unchanged after the scan (a snapshot is replaced by a rename, never rewritten).
pub fn snapshot_identity(
    layout: &Layout,
) -> Option<(u64, u64, u64, Option<std::time::SystemTime>)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(&layout.snapshot).ok()?;
    Some((m.dev(), m.ino(), m.len(), m.modified().ok()))
}

/// Applies the log's entries after the snapshot to the state; returns how many.
pub fn replay(state: &mut QueueState, log: &mut Log, snapshot_index: i64) -> Result<u64> {
    if log.last_index() > snapshot_index {
        crate::replay::replay(state, log, Some(snapshot_index + 1))
    } else {
        Ok(0)
    }
}
