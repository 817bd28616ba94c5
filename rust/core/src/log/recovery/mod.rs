//! The recovery scanner: one walk over the segments of a log directory that classifies every
//! finding (torn tail, corruption, term order, gap or overlap, unreadable or ignored entries)
//! into a report, and a mode that decides what the findings mean (raft-engine's habit: one
//! reader of the files, one place for the rules).
//!
//! Opening a log is two steps: [`scan_dir`] reads (never writes), then the caller acts on the
//! result: cut a torn tail, initialise a half-created segment, or execute a [`RepairPlan`]. A
//! refused open therefore changes nothing. `verify`, `verify_base`, `Log::open`, repair and
//! `read_segment_deltas` (the Spark reader) all classify through [`scan_segment`].
//! [`crate::segment::scan_file`] stays the one place that reads a file's records.

mod act;
mod finding;
mod plan;
mod scan;
pub(crate) use act::{recover, twin_matches};
pub use finding::{Finding, FindingKind, RecoveryReport, SegmentInfo};
pub use plan::{plan_repair, PlannedCut, RepairPlan};
pub use scan::{
    scan_dir, scan_dir_feeding, scan_segment, Keep, LogScan, Parallelism, Position, RecoveryMode,
    ScanOptions, ScannedFile, TwinAction,
};
