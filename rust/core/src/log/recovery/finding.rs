//! What the scan reports: each finding (its kind, file and offset) and the report of a recovery
//! that acted on them.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// One segment file as the log holds it (or as a scan found it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentInfo {
    pub name: String,
    pub path: PathBuf,
    pub start_lsn: i64,
    pub count: u64,
    pub size: u64,
    pub file_size: u64,
    pub sealed: bool,
    /// How the file is compressed (a `.log.z`); `file_size` is then the compressed size and
    /// `size` the original's.
    pub compression: Option<crate::format::compressed::Method>,
}

/// What opening had to do: the torn tail it cut (or, read-only, would cut) and what repair moved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub cut_path: Option<PathBuf>,
    pub cut_offset: Option<u64>,
    pub bytes_cut: u64,
    pub records_kept: u64,
    pub reason: Option<String>,
    pub moved: Vec<PathBuf>,
}

impl RecoveryReport {
    pub fn truncated(&self) -> bool {
        self.cut_offset.is_some()
    }
}

/// What a finding is (`as_str` names it for Python and the CLI).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// The last segment ends in an incomplete record: a crash mid-write; cut at open.
    TornTail,
    /// The last segment's header was never completed: a crash while creating it; initialised
    /// at open.
    UninitialisedHeader,
    /// Bytes that do not follow the format (a bad record, a bad header), or a file of the base
    /// directory that a restore refuses.
    Corruption,
    /// A complete record whose term is negative or lower than the term before it.
    TermOrder,
    /// A segment starts after the LSN the previous one ends at (LSNs missing).
    Gap,
    /// A segment starts before the LSN the previous one ends at.
    Overlap,
    /// A segment-named entry that is not a regular file (directory, FIFO, device, dangling
    /// symlink): its records cannot be read, so it is never skipped silently.
    NotRegularFile,
    /// An entry not named like a segment: the log ignores it.
    IgnoredFile,
    /// The log starts after the snapshot's last index + 1 (or after 0 without a snapshot).
    SnapshotGap,
    /// A log entry's term is above the metadata's current term.
    TermAboveMetadata,
    /// A bad settings file.
    Settings,
    /// A delta that cannot be applied while rebuilding the state.
    Replay,
    /// An operating-system error while reading a file.
    Io,
    /// Both `NNN.log.z` and `NNN.log` exist (a compression stopped between its rename and its
    /// delete): the scan reads the `.z` when it decodes, and a writable open removes the other
    /// file (spec section 9). Never refuses an open.
    CompressedTwin,
    /// Both files of a segment exist and the `.z` decodes, but not to the `.log`'s bytes: two
    /// versions of one segment. Refuses every open; repair reads the `.log` and moves the `.z`
    /// into `../temp`; nothing is ever deleted for it.
    TwinConflict,
}

impl FindingKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            FindingKind::TornTail => "torn_tail",
            FindingKind::UninitialisedHeader => "uninitialised_header",
            FindingKind::Corruption => "corruption",
            FindingKind::TermOrder => "term_order",
            FindingKind::Gap => "gap",
            FindingKind::Overlap => "overlap",
            FindingKind::NotRegularFile => "not_regular_file",
            FindingKind::IgnoredFile => "ignored_file",
            FindingKind::SnapshotGap => "snapshot_gap",
            FindingKind::TermAboveMetadata => "term_above_metadata",
            FindingKind::Settings => "settings",
            FindingKind::Replay => "replay",
            FindingKind::Io => "io_error",
            FindingKind::CompressedTwin => "compressed_twin",
            FindingKind::TwinConflict => "twin_conflict",
        }
    }

    /// Whether a crash alone can leave this (the last segment's end): cut or initialised by a
    /// tolerant open.
    pub fn is_crash_residue(&self) -> bool {
        matches!(
            self,
            FindingKind::TornTail | FindingKind::UninitialisedHeader
        )
    }

    /// Whether repair can cut it away (a problem of the segments themselves).
    pub fn in_log(&self) -> bool {
        matches!(
            self,
            FindingKind::TornTail
                | FindingKind::UninitialisedHeader
                | FindingKind::Corruption
                | FindingKind::TermOrder
                | FindingKind::Gap
                | FindingKind::Overlap
                | FindingKind::NotRegularFile
                | FindingKind::TwinConflict
        )
    }
}

/// One finding: the file, the byte offset where the problem starts (when it has one), and
/// whether the scan's mode refuses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub kind: FindingKind,
    pub path: PathBuf,
    pub offset: Option<u64>,
    pub message: String,
    /// What is wrong without where (the file and offset are `path` and `offset`): what a
    /// reader prints beside its own location, without parsing `message`.
    pub reason: String,
    pub fatal: bool,
    /// Offset just past the last non-zero byte from `offset` on: how far a cut must zero.
    pub reach: Option<u64>,
    /// Index of the segment file in [`super::LogScan::files`].
    pub file: Option<usize>,
    /// The entry concerned, when known (a replay failure).
    pub lsn: Option<i64>,
}

impl Finding {
    /// Whether repair can cut it away: a problem of the kind [`FindingKind::in_log`] says, in a
    /// segment file itself (what `tflux repair` may act on).
    pub fn in_log(&self) -> bool {
        self.kind.in_log()
            && self
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(crate::format::compressed::parse_any_file_name)
                .is_some()
    }

    pub fn new(kind: FindingKind, path: &Path, offset: Option<u64>, message: String) -> Finding {
        Finding {
            kind,
            path: path.to_path_buf(),
            offset,
            reason: message.clone(),
            message,
            fatal: !matches!(kind, FindingKind::IgnoredFile | FindingKind::CompressedTwin),
            reach: None,
            file: None,
            lsn: None,
        }
    }

    /// A finding for an error (the error's own file and offset when it has them).
    pub fn from_error(kind: FindingKind, path: &Path, e: &Error) -> Finding {
        let (path, offset, message, reason) = match e {
            Error::Corruption {
                path,
                offset,
                reason,
            } => (path.clone(), *offset, reason.clone(), reason.clone()),
            Error::Io {
                path, op, source, ..
            } => (path.clone(), None, e.to_string(), format!("{op}: {source}")),
            Error::Dialect { path, reason } => (path.clone(), None, e.to_string(), reason.clone()),
            _ => (path.to_path_buf(), None, e.to_string(), e.to_string()),
        };
        let kind = match (kind, e) {
            (FindingKind::Corruption, Error::Io { .. }) => FindingKind::Io,
            (k, _) => k,
        };
        Finding {
            reason,
            ..Finding::new(kind, &path, offset, message)
        }
    }

    /// The error a refused open raises for this finding.
    pub fn to_error(&self) -> Error {
        Error::corruption(&self.path, self.offset, self.message.clone())
    }
}
