//! Read-only checking of a log directory: every record of every segment, the continuity of
//! segments and the order of terms. Never writes, never takes the writer lock.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::segment::Header;
use crate::log::{list_segments, SegmentInfo};
use crate::segment::{scan_file, ScanStop};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemKind {
    /// The last segment ends in an incomplete record: the next writable open trims it.
    TornTail,
    Corruption,
    /// Consecutive segments do not continue each other's LSNs.
    Gap,
    /// A file in the log directory that is not named like a segment.
    IgnoredFile,
}

impl ProblemKind {
    pub fn as_str(&self) -> &'static str {
        match self {
            ProblemKind::TornTail => "torn_tail",
            ProblemKind::Corruption => "corruption",
            ProblemKind::Gap => "gap",
            ProblemKind::IgnoredFile => "ignored_file",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: PathBuf,
    pub offset: Option<u64>,
    pub kind: ProblemKind,
    pub message: String,
    pub fatal: bool,
}

#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    pub dir: PathBuf,
    pub segments: Vec<SegmentInfo>,
    pub records: u64,
    pub bytes: u64,
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        !self.problems.iter().any(|p| p.fatal)
    }
}

/// The log directory of `path`: `path/data/log` when it is a base directory, else `path`.
pub fn resolve_log_dir(path: &Path) -> PathBuf {
    let nested = path.join("data").join("log");
    if nested.is_dir() {
        nested
    } else {
        path.to_path_buf()
    }
}

/// Checks every byte of the log at `path` (a base directory or a log directory).
pub fn verify(path: impl AsRef<Path>) -> Result<VerifyReport> {
    let dir = resolve_log_dir(path.as_ref());
    if !dir.is_dir() {
        return Err(Error::io(
            "verify",
            &dir,
            std::io::Error::from_raw_os_error(crate::error::missing_dir_errno(&dir)),
        ));
    }
    let (files, ignored) = list_segments(&dir)?;
    let mut report = VerifyReport {
        dir,
        ..Default::default()
    };
    for path in ignored {
        report.problems.push(Problem {
            message: format!(
                "{} is not named like a segment and is ignored",
                path.display()
            ),
            path,
            offset: None,
            kind: ProblemKind::IgnoredFile,
            fatal: false,
        });
    }
    let mut previous_term = 0;
    // LSN the next segment must start at; None after a damaged segment (its count is unknown).
    let mut expected: Option<i64> = None;
    for (k, (first_lsn, path)) in files.iter().enumerate() {
        let is_last = k + 1 == files.len();
        let mut problem = |offset: Option<u64>, kind, message: String, fatal| {
            report.problems.push(Problem {
                path: path.clone(),
                offset,
                kind,
                message,
                fatal,
            })
        };
        if let Some(exp) = expected {
            if *first_lsn != exp {
                let what = if *first_lsn > exp { "gap" } else { "overlap" };
                problem(
                    Some(0),
                    ProblemKind::Gap,
                    format!("{what}: the previous segment ends at LSN {}, this one starts at {first_lsn}", exp - 1),
                    true,
                );
            }
        }
        let scan = scan_file(path, false, true, previous_term, false)?;
        let mut damaged = false;
        match &scan.header {
            Header::Valid => {}
            Header::Uninitialised if is_last => {
                problem(
                    Some(0),
                    ProblemKind::TornTail,
                    "segment header never written (crash during creation); the next open initialises it".into(),
                    false,
                );
            }
            other => {
                let message = match other {
                    Header::Uninitialised => {
                        "segment header missing (file empty or all zeros)".to_string()
                    }
                    Header::BadMarker => {
                        "bad segment file marker (expected 12 76 AD 55)".to_string()
                    }
                    Header::UnknownVersion(v) => format!("unknown segment format version {v}"),
                    Header::Valid => unreachable!(),
                };
                problem(Some(0), ProblemKind::Corruption, message, true);
                damaged = true;
            }
        }
        match &scan.stop {
            ScanStop::Clean => {}
            ScanStop::Term { offset, .. } if is_last && scan.stop_is_torn_header() => problem(
                Some(*offset),
                ProblemKind::TornTail,
                "torn tail: record header never completed; the next open cuts it".into(),
                false,
            ),
            ScanStop::Bad { offset, reason } if is_last => problem(
                Some(*offset),
                ProblemKind::TornTail,
                format!("torn tail: {reason}; the next open cuts it"),
                false,
            ),
            stop => {
                problem(
                    stop.offset(),
                    ProblemKind::Corruption,
                    stop.describe(),
                    true,
                );
                damaged = true;
            }
        }
        report.records += scan.count as u64;
        report.bytes += scan.end;
        report.segments.push(SegmentInfo {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            path: path.clone(),
            start_lsn: *first_lsn,
            count: scan.count as u64,
            size: scan.end.max(8),
            file_size: scan.bytes.len() as u64,
            sealed: !is_last,
        });
        if let Some(t) = scan.last_term {
            previous_term = t;
        }
        expected = (!damaged).then_some(first_lsn + scan.count as i64);
    }
    Ok(report)
}
