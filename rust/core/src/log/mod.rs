//! The segmented Raft log of one directory (spec section 3).
//!
//! Segments are kept in LSN order; only the last one (the active segment) is written. Opening
//! scans every segment: sealed ones must be perfect, the active one may end in a torn record,
//! which is cut. Every operation that discards records deletes obsolete segments first (newest
//! first) and then rewrites the cut segment (copy-on-truncate), so a crash in between never leaves a
//! gap.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, PoisonCause, Result};
use crate::format::dialect::Dialect;
use crate::io::storage::{self, Storage};
use crate::segment::{self, Segment};
use recovery::RecoveryMode;

pub mod columns;
pub mod dialect;
pub mod follow;
mod maintain;
mod open;
mod read;
pub mod recovery;
pub mod verify;
mod write;
pub use crate::durability::SyncPolicy;
pub use crate::log::recovery::{RecoveryReport, SegmentInfo};
pub use open::PendingOpen;

pub use read::{Entry, EntryBatch, ReadSink, SpanReader, SpanStart, Split};

pub use write::MAX_ENTRY_LSN;

/// A read asking for at most this many data bytes, or ...
const RANDOM_READ_BYTES: u64 = 64 << 10;
/// ... at most this many records, is taken for a random one (`Log::prepare_random_read`).
const RANDOM_READ_RECORDS: u64 = 64;

#[derive(Debug, Clone)]
pub struct LogOptions {
    pub soft_limit: u64,
    pub hard_limit: u64,
    pub preallocate: bool,
    pub sync: SyncPolicy,
    /// What opening does with what the recovery scan finds (cut a torn tail by default;
    /// `Repair` cuts at the first bad record anywhere and moves later segments to `../temp`).
    pub recovery: RecoveryMode,
    /// No lock, no writes (a torn tail is reported, not cut).
    pub readonly: bool,
    /// Commit index after open (default: `start_index - 1`).
    pub commit_index: Option<i64>,
    /// Whether entries may have empty data. A header torn just after its term reads back as an
    /// empty record; when empty entries are not allowed, such a trailing record in the last
    /// segment is cut as torn (and appending empty data is refused).
    pub empty_entries: bool,
    /// Where every change to the directory goes (tests inject faults here).
    pub storage: Arc<dyn Storage>,
    /// The dialect its records are framed in (spec section 11): `None` detects it from the
    /// first segment (an empty or new log is `spec`); a choice the files contradict is refused.
    pub dialect: Option<Dialect>,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            soft_limit: 16 << 20,
            hard_limit: 32 << 20,
            preallocate: true,
            sync: SyncPolicy::Always,
            recovery: RecoveryMode::TolerateTornTail,
            readonly: false,
            commit_index: None,
            empty_entries: true,
            storage: storage::real(),
            dialect: None,
        }
    }
}

impl LogOptions {
    fn validate(&self) -> Result<()> {
        if self.soft_limit == 0 || self.soft_limit > self.hard_limit {
            return Err(Error::InvalidArgument(format!(
                "segment limits must satisfy 0 < soft_limit <= hard_limit (got soft_limit={}, hard_limit={})",
                self.soft_limit, self.hard_limit
            )));
        }
        if self.recovery == RecoveryMode::Repair && self.readonly {
            return Err(Error::InvalidArgument(
                "repair=True needs a writable log (readonly=False)".into(),
            ));
        }
        if self.recovery == RecoveryMode::ReportOnly {
            return Err(Error::InvalidArgument(
                "a log cannot be opened in report-only mode (scan it with recovery::scan_dir)"
                    .into(),
            ));
        }
        Ok(())
    }
}

pub struct Log {
    dir: PathBuf,
    /// How its records are framed (decided by the scan at open).
    dialect: Dialect,
    opts: LogOptions,
    segments: Vec<Segment>,
    commit_index: i64,
    _lock: Option<crate::fork::ParentOnly<File>>,
    recovery: RecoveryReport,
    ignored: Vec<PathBuf>,
    poisoned: Option<PoisonCause>,
    /// See [`Log::stop_cuts_after`].
    cut_stop: Option<segment::RewriteStep>,
    /// See [`Log::stop_compress_after`].
    compress_stop: Option<crate::segment::compress::CompressStep>,
    /// Set by a failed fsync: after one, a later fsync that succeeds proves nothing (the kernel
    /// may have dropped the dirty pages), so no durability is ever claimed again.
    sync_failed: Option<PoisonCause>,
    /// The process that opened the log (a forked child's copy refuses use: `crate::fork`).
    born: crate::fork::Birth,
    /// Set by [`Log::ensure_room`] when it refuses a write (read and cleared by `write_op`).
    refused_for_room: bool,
    /// The last roll-over that was due failed and left nothing behind (`Log::ensure_room`).
    roll_failed: bool,
    /// `(first LSN, file length)` of the active segment as its preallocation last left it
    /// (`Log::grow_preallocation`); another first LSN means unknown.
    reserved: (i64, u64),
}

impl std::fmt::Debug for Log {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Log")
            .field("dir", &self.dir)
            .field("start_index", &self.start_index())
            .field("last_index", &self.last_index())
            .field("commit_index", &self.commit_index)
            .finish()
    }
}

impl Log {
    /// The dialect its records are framed in.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    fn last_term_or_zero(&self) -> i32 {
        self.last_term().unwrap_or(0)
    }

    // ----- state -----

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn readonly(&self) -> bool {
        self.opts.readonly
    }

    /// LSN of the first entry held (of the first segment, even when it is empty).
    pub fn start_index(&self) -> i64 {
        self.segments.first().map_or(0, |s| s.first_lsn())
    }

    /// LSN of the last entry; `start_index - 1` when the log holds none.
    pub fn last_index(&self) -> i64 {
        self.segments
            .last()
            .map_or(self.start_index() - 1, |s| s.last_lsn())
    }

    pub fn commit_index(&self) -> i64 {
        self.commit_index
    }

    pub fn len(&self) -> u64 {
        (self.last_index() - self.start_index() + 1) as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn last_term(&self) -> Option<i32> {
        self.segments.iter().rev().find_map(|s| s.last_term())
    }

    /// `(lsn, term)` of the last entry.
    pub fn last_entry(&self) -> Option<(i64, i32)> {
        let last = self.last_index();
        (last >= self.start_index()).then(|| (last, self.term_at(last).unwrap_or_default()))
    }

    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub fn ignored_files(&self) -> &[PathBuf] {
        &self.ignored
    }

    pub fn segments(&self) -> Vec<SegmentInfo> {
        self.segments.iter().map(segment_info).collect()
    }

    pub fn segments_len(&self) -> usize {
        self.segments.len()
    }

    /// Sealed segments whose entries all come after `lsn` (snapshot trigger).
    pub fn sealed_segments_after(&self, lsn: i64) -> usize {
        self.segments
            .iter()
            .filter(|s| s.sealed() && s.first_lsn() > lsn)
            .count()
    }

    fn segment_of(&self, lsn: i64) -> usize {
        self.segments
            .partition_point(|s| s.first_lsn() <= lsn)
            .saturating_sub(1)
    }

    pub fn term_at(&self, lsn: i64) -> Result<i32> {
        self.check_held(lsn)?;
        Ok(self.segments[self.segment_of(lsn)].term_at(lsn))
    }

    fn check_held(&self, lsn: i64) -> Result<()> {
        let (start, last) = (self.start_index(), self.last_index());
        if lsn < start || lsn > last {
            return Err(Error::OutOfRange(format!(
                "LSN {lsn} is not in the log (it holds [{start}, {last}])"
            )));
        }
        Ok(())
    }
}

fn segment_info(s: &Segment) -> SegmentInfo {
    SegmentInfo {
        name: s
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        path: s.path().to_path_buf(),
        start_lsn: s.first_lsn(),
        count: s.len() as u64,
        size: s.size(),
        file_size: s.file_size(),
        sealed: s.sealed(),
        compression: s.compression().map(|h| h.method),
    }
}

#[cfg(test)]
mod tests;
