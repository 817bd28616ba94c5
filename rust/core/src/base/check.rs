//! `verify_base`: every check a restore applies, collected into one report instead of stopping
//! at the first, so `tflux verify` and `tflux.open` can never disagree about a directory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::format::metadata::Metadata;
use crate::log::recovery::{
    scan_dir, Finding, FindingKind, RecoveryMode, ScanOptions, SegmentInfo,
};
use crate::log::{Log, LogOptions};
use crate::state::QueueInfo;

use super::files;
use super::layout::{kind, Layout};
use super::restore::{
    check_continuity, check_terms, continuity, replay, restore_snapshot, store_scan_options,
    Continuity,
};
use super::settings::Settings;

/// How deep `verify_base` goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VerifyDepth {
    /// The files and how they agree: no state is rebuilt.
    Files,
    /// Also rebuild the state (snapshot + replay), as a read-only open does.
    #[default]
    Replay,
}

#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    pub depth: VerifyDepth,
    /// The dialect asked for (`None`: detect it from the files).
    pub dialect: Option<Dialect>,
    /// Raised by each segment's file size as the log's scan reads it: a progress bar's count,
    /// out of the segment files' total (the replay after it is not counted).
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

/// What a snapshot holds, for the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSummary {
    pub last_index: i64,
    pub last_term: i64,
    pub queues: u64,
    pub records: u64,
    /// Each queue's settings and record count, by name (what `inspect` shows: counted here,
    /// where the snapshot is decoded anyway, not by reading it again into Python objects).
    pub queue_list: Vec<SnapshotQueueSummary>,
}

/// One queue of a snapshot, without its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotQueueSummary {
    pub name: Vec<u8>,
    pub implementation: i32,
    pub last_id: u64,
    /// -1: no limit (as on disk).
    pub max_queue_size: i32,
    pub max_message_size: i32,
    pub key_range: Option<(i64, i64)>,
    pub records: u64,
}

/// Everything `verify_base` found.
#[derive(Debug)]
pub struct BaseReport {
    pub layout: Layout,
    /// Every finding: settings, metadata, snapshot, each segment, their agreement, replay.
    pub problems: Vec<Finding>,
    pub segments: Vec<SegmentInfo>,
    pub records: u64,
    pub bytes: u64,
    /// `(first, last)` LSN of the log as a read-only open would hold it (when sound).
    pub log_bounds: Option<(i64, i64)>,
    /// How the log meets the snapshot (`Unknown` when either could not be read): the restore's
    /// rule ([`super::continuity`]), so a reader never re-derives its cases.
    pub continuity: Continuity,
    pub metadata: Option<Metadata>,
    /// Whether the metadata file exists (absent means the defaults).
    pub metadata_present: bool,
    pub snapshot: Option<SnapshotSummary>,
    /// The rebuilt state (depth `Replay`, no fatal finding before it).
    pub queues: Option<Vec<QueueInfo>>,
    pub replayed: Option<u64>,
    pub log_seconds: f64,
    pub replay_seconds: f64,
}

impl BaseReport {
    /// True when a read-only `tflux.open` of the directory succeeds (and restores, at depth
    /// `Replay`).
    pub fn ok(&self) -> bool {
        !self.problems.iter().any(|p| p.fatal)
    }
}

/// Checks exactly what a restore accepts, reading only: settings, metadata, snapshot (its
/// content too), every segment, the log against the metadata and the snapshot, and at depth
/// `Replay` the replay of the log onto the snapshot's state. The log is checksummed once.
pub fn verify_base(base: &Path, options: VerifyOptions) -> Result<BaseReport> {
    if !base.is_dir() {
        return Err(Error::io(
            "verify",
            base,
            std::io::Error::from_raw_os_error(crate::error::missing_dir_errno(base)),
        ));
    }
    kind(base)?; // a store and a channel in one directory: no check can say OK
    let layout = Layout::detect(base, options.dialect)?;
    let mut report = BaseReport {
        layout: layout.clone(),
        problems: Vec::new(),
        segments: Vec::new(),
        records: 0,
        bytes: 0,
        log_bounds: None,
        continuity: Continuity::Unknown,
        metadata: None,
        metadata_present: std::fs::symlink_metadata(&layout.metadata).is_ok(),
        snapshot: None,
        queues: None,
        replayed: None,
        log_seconds: 0.0,
        replay_seconds: 0.0,
    };
    let problems = &mut report.problems;
    // As a read-only open: a bad settings file is a warning (the defaults are used), so verify
    // still exits 0 exactly when a read-only open succeeds.
    match Settings::load_for_reading(base, None) {
        Ok((_, None)) => {}
        Ok((_, Some(warning))) => {
            let reason = Settings::reason_of(&warning, base).to_string();
            let e = Error::Settings(warning);
            let mut finding = Finding::from_error(FindingKind::Settings, &layout.settings, &e);
            finding.fatal = false;
            finding.reason = reason;
            problems.push(finding);
        }
        Err(e) => {
            let mut finding = Finding::from_error(FindingKind::Settings, &layout.settings, &e);
            if let Error::Settings(message) = &e {
                finding.reason = Settings::reason_of(message, base).to_string();
            }
            problems.push(finding);
        }
    }
    let meta = files::read_metadata_in(&layout.metadata, layout.dialect)
        .map_err(|e| {
            problems.push(Finding::from_error(
                FindingKind::Corruption,
                &layout.metadata,
                &e,
            ))
        })
        .ok();
    report.metadata = meta;
    let restored = match files::read_snapshot_in(&layout.snapshot, layout.dialect) {
        Ok(snap) => {
            report.snapshot = snap.as_ref().map(|s| SnapshotSummary {
                last_index: s.last_index,
                last_term: s.last_term,
                queues: s.queues.len() as u64,
                records: s.queues.iter().map(|q| q.records.len() as u64).sum(),
                queue_list: {
                    let mut list: Vec<_> = s
                        .queues
                        .iter()
                        .map(|q| SnapshotQueueSummary {
                            name: q.name.clone(),
                            implementation: q.implementation,
                            last_id: q.last_id,
                            max_queue_size: q.max_queue_size,
                            max_message_size: q.max_message_size,
                            key_range: q.key_range,
                            records: q.records.len() as u64,
                        })
                        .collect();
                    list.sort_by(|a, b| a.name.cmp(&b.name));
                    list
                },
            });
            // The same rule the store restores with, on the snapshot decoded above: decoding
            // it a second time held two copies of it at once (2.9 GB for 8M records).
            restore_snapshot(&layout, snap)
                .map_err(|e| {
                    problems.push(Finding::from_error(
                        FindingKind::Corruption,
                        &layout.snapshot,
                        &e,
                    ))
                })
                .ok()
        }
        Err(e) => {
            problems.push(Finding::from_error(
                FindingKind::Corruption,
                &layout.snapshot,
                &e,
            ));
            None
        }
    };
    if !layout.log.is_dir() {
        let e = Error::io(
            "open log directory",
            &layout.log,
            std::io::Error::from_raw_os_error(crate::error::missing_dir_errno(&layout.log)),
        );
        problems.push(Finding::from_error(FindingKind::Io, &layout.log, &e));
        return Ok(report);
    }
    let started = Instant::now();
    let scan_options = ScanOptions {
        progress: options.progress.clone(),
        ..store_scan_options(RecoveryMode::ReportOnly, layout.dialect)
    };
    let scan = scan_dir(&layout.log, scan_options, &crate::io::storage::real())?;
    report.log_seconds = started.elapsed().as_secs_f64();
    report.records = scan.records();
    report.bytes = scan.bytes();
    report.segments = scan.files.iter().map(|f| f.info.clone()).collect();
    let log_ok = scan.ok();
    problems.extend(scan.findings.iter().cloned());
    if !log_ok {
        return Ok(report);
    }
    report.log_bounds = Some((scan.start_index(), scan.last_index()));
    if let Some(meta) = &meta {
        if let Err(e) = check_terms(&layout, scan.last_entry(), meta) {
            problems.push(Finding::from_error(
                FindingKind::TermAboveMetadata,
                &layout.log,
                &e,
            ));
        }
    }
    if let Some(r) = &restored {
        let snapshot_index = r.snapshot.map(|s| s.0);
        report.continuity = continuity(scan.start_index(), scan.last_index(), snapshot_index);
        if let Err(e) = check_continuity(&layout, scan.start_index(), snapshot_index) {
            let mut f = Finding::from_error(FindingKind::SnapshotGap, &layout.log, &e);
            if let Some(first) = scan.files.first() {
                // The file where the missing LSNs should have been.
                f.path = first.file.path.clone();
                f.offset = Some(0);
            }
            problems.push(f);
        }
    }
    let (Some(mut restored), VerifyDepth::Replay) = (restored, options.depth) else {
        return Ok(report);
    };
    if problems.iter().any(|p| p.fatal) {
        return Ok(report);
    }
    let started = Instant::now();
    let snapshot_index = restored.snapshot_index();
    let files: Vec<(i64, PathBuf)> = scan
        .files
        .iter()
        .map(|f| (f.file.first_lsn, f.file.path.clone()))
        .collect();
    let mut log = Log::open_from_scan(scan, readonly_store_log(layout.dialect))?;
    match replay(&mut restored.state, &mut log, snapshot_index) {
        Ok(n) => {
            report.replayed = Some(n);
            report.queues = Some(restored.state.infos());
        }
        Err(e) => {
            let lsn = match &e {
                Error::Replay { lsn, .. } => *lsn,
                _ => None,
            };
            // The segment holding the LSN names the file.
            let path = lsn
                .and_then(|l| files.iter().rev().find(|(first, _)| *first <= l))
                .map_or(layout.log.clone(), |(_, p)| p.clone());
            let mut f = Finding::from_error(FindingKind::Replay, &path, &e);
            f.path = path;
            f.lsn = lsn;
            problems.push(f);
        }
    }
    report.replay_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Options of the log a read-only store open uses (the scan is the store's).
fn readonly_store_log(dialect: Dialect) -> LogOptions {
    LogOptions {
        readonly: true,
        empty_entries: false,
        dialect: Some(dialect),
        ..LogOptions::default()
    }
}
