//! Repair plans: what a repair would cut or move aside, derived from a scan alone.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::format::dialect::Dialect;

use super::finding::{Finding, FindingKind};
use super::scan::{scan_dir, LogScan, RecoveryMode, ScanOptions};

/// A cut planned inside one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCut {
    pub path: PathBuf,
    /// Where the cut starts: the first bad record.
    pub offset: u64,
    /// Offset just past the last non-zero byte: `[offset, reach)` is zeroed.
    pub reach: u64,
    /// Records of the segment kept before the cut.
    pub records_kept: u64,
    /// LSN of the first entry that leaves the log.
    pub first_lost_lsn: i64,
}

/// What repair would do, decided from a scan and nothing else: keep the segments before the
/// first problem, cut the damaged one at its bad record (keeping a copy of it), and move every
/// later file into `../temp`. Nothing is deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPlan {
    /// The finding that decides the plan (the first fatal one, else a torn tail).
    pub reason: Finding,
    /// Segment files kept whole or cut (a prefix of the scanned files).
    pub kept_files: usize,
    pub cut: Option<PlannedCut>,
    /// Files moved whole into `../temp`: the `.z` of each kept segment found in two versions
    /// (its `.log` is kept), then a suffix of the listed segment files.
    pub moved: Vec<PathBuf>,
}

impl RepairPlan {
    /// The plan for `scan`, or None when the log has nothing repair would change (at most an
    /// uninitialised header, which any writable open initialises).
    pub fn from_scan(scan: &LogScan) -> Option<RepairPlan> {
        // Segments found in two versions keep their `.log` and lose their `.z` to temp; they
        // decide nothing else (the scan read on past them).
        let conflicts = || {
            scan.findings
                .iter()
                .filter(|f| f.kind == FindingKind::TwinConflict)
        };
        let reason = scan
            .findings
            .iter()
            .find(|f| f.fatal && f.kind.in_log() && f.kind != FindingKind::TwinConflict)
            .or_else(|| {
                scan.findings
                    .iter()
                    .find(|f| f.kind == FindingKind::TornTail)
            });
        let Some(reason) = reason.cloned() else {
            return Some(RepairPlan {
                reason: conflicts().next()?.clone(),
                kept_files: scan.files.len(),
                cut: None,
                moved: conflicts().map(|f| f.path.clone()).collect(),
            });
        };
        let k = reason.file?;
        let scanned = &scan.files[k];
        // A problem at a record (not the file's header or its place in the sequence) keeps
        // the records before it; anything else moves the whole file.
        let at_record = matches!(
            reason.kind,
            FindingKind::TornTail | FindingKind::Corruption | FindingKind::TermOrder
        ) && reason.offset.is_some_and(|o| o > 0)
            && scanned.segment.is_some();
        let (cut, first_moved) = if at_record {
            let seg = scanned.segment.as_ref().expect("checked above");
            let offset = reason.offset.unwrap_or_default();
            let cut = PlannedCut {
                path: scanned.file.path.clone(),
                offset,
                reach: reason.reach.unwrap_or(offset),
                records_kept: seg.len() as u64,
                first_lost_lsn: seg.last_lsn().saturating_add(1),
            };
            (Some(cut), k + 1)
        } else {
            (None, k)
        };
        // Every listed segment file from there on moves, scanned or not (the scan stops at the
        // first fatal finding).
        let moved = conflicts()
            .filter(|f| f.file.is_some_and(|i| i < first_moved))
            .map(|f| f.path.clone())
            .chain(
                scan.listed[first_moved.min(scan.listed.len())..]
                    .iter()
                    .flat_map(|f| std::iter::once(f.path.clone()).chain(f.twin.clone())),
            )
            .collect();
        Some(RepairPlan {
            reason,
            kept_files: k + usize::from(at_record),
            cut,
            moved,
        })
    }
}

/// The plan `Log::open(dir, repair)` would execute, computed without writing anything.
pub fn plan_repair(
    dir: &Path,
    empty_entries: bool,
    dialect: Option<Dialect>,
) -> Result<Option<RepairPlan>> {
    let options = ScanOptions {
        mode: RecoveryMode::Repair,
        empty_entries,
        dialect,
        ..ScanOptions::default()
    };
    let scan = scan_dir(dir, options, &crate::io::storage::real())?;
    Ok(RepairPlan::from_scan(&scan))
}
