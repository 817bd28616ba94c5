//! Read-only checking of a log directory (`crate::verify` resolves a base directory to its log): every record of every segment, the continuity of
//! segments and the order of terms, classified by the recovery scanner in report-only mode.
//! Never writes, never takes the writer lock.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::log::recovery::SegmentInfo;
use crate::log::recovery::{scan_dir, Finding, FindingKind, ScanOptions};

/// A problem found by `verify`: one finding of the recovery scanner.
pub type Problem = Finding;
pub type ProblemKind = FindingKind;

#[derive(Debug, Clone, Default)]
pub struct VerifyReport {
    pub dir: PathBuf,
    /// The dialect its records were read in (spec section 11).
    pub dialect: Dialect,
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

/// Checks the log directory `dir` with `options` (its mode should be `ReportOnly`).
pub fn verify_log_dir(dir: &Path, options: ScanOptions) -> Result<VerifyReport> {
    if !dir.is_dir() {
        return Err(Error::io(
            "verify",
            dir,
            std::io::Error::from_raw_os_error(crate::error::missing_dir_errno(dir)),
        ));
    }
    let scan = scan_dir(dir, options, &crate::io::storage::real())?;
    Ok(VerifyReport {
        dir: dir.to_path_buf(),
        dialect: scan.dialect,
        records: scan.records(),
        bytes: scan.bytes(),
        segments: scan.files.iter().map(|f| f.info.clone()).collect(),
        problems: scan.findings,
    })
}
