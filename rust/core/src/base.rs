//! A base directory (spec section 1): its layout, and the checks a restore applies to it, in
//! one place. `Store::open` calls each check and stops at the first failure; [`verify_base`]
//! calls the same checks and collects every finding, so `tflux verify` and `tflux.open` can
//! never disagree about a directory.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::files;
use crate::format::dialect::Dialect;
use crate::format::metadata::Metadata;
use crate::format::snapshot::Snapshot;
use crate::log::recovery::SegmentInfo;
use crate::log::recovery::{scan_dir, Finding, FindingKind, LogScan, RecoveryMode, ScanOptions};
use crate::log::{Log, LogOptions};
use crate::settings::{Settings, SETTINGS_FILE};
use crate::state::{QueueInfo, QueueState};

/// Paths of a base directory (spec section 1). The one place that knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The dialect its files are written in (spec section 11): says the temp directory's
    /// name and how the snapshot and metadata are read and written.
    pub dialect: Dialect,
    pub base: PathBuf,
    pub data: PathBuf,
    pub log: PathBuf,
    pub temp: PathBuf,
    pub snapshot: PathBuf,
    pub metadata: PathBuf,
    pub settings: PathBuf,
}

impl Layout {
    /// The layout of a spec-dialect base directory.
    pub fn new(base: &Path) -> Layout {
        Layout::in_dialect(base, Dialect::Spec)
    }

    /// The layout of a base directory in `dialect`.
    pub fn in_dialect(base: &Path, dialect: Dialect) -> Layout {
        let data = base.join("data");
        Layout {
            dialect,
            base: base.to_path_buf(),
            log: data.join("log"),
            temp: data.join(dialect.temp_dir()),
            snapshot: data.join("tflux.snapshot"),
            metadata: data.join("tflux.metadata"),
            settings: base.join(SETTINGS_FILE),
            data,
        }
    }

    /// The layout of `base` in the dialect its files say (agreeing with `chosen`; a directory
    /// whose files say nothing is in `chosen`, else `spec`): [`crate::dialect::decide`].
    pub fn detect(base: &Path, chosen: Option<Dialect>) -> Result<Layout> {
        let probe = Layout::new(base);
        let dialect = crate::dialect::base_dialect(probe.dialect_files(), chosen)?;
        Ok(Layout::in_dialect(base, dialect))
    }

    /// The files whose bytes say the directory's dialect (`crate::dialect::base_says`).
    pub fn dialect_files(&self) -> crate::dialect::BaseFiles<'_> {
        crate::dialect::BaseFiles {
            metadata: &self.metadata,
            snapshot: &self.snapshot,
            log: &self.log,
        }
    }
}

/// The dialect of whatever `path` is, agreeing with `chosen` (spec section 11): a base
/// directory (what its metadata, snapshot and first segment say), a log directory (its first
/// segment), or one file (a segment's first record, a metadata file's length, a snapshot's
/// header). What says nothing is `chosen`, else `spec`. For readers handed a path (Spark,
/// export) that must read it in the dialect its owner would.
pub fn dialect_of(path: &Path, chosen: Option<Dialect>) -> Result<Dialect> {
    let layout = Layout::new(path);
    if layout.data.is_dir() {
        return Ok(Layout::detect(path, chosen)?.dialect);
    }
    if path.is_dir() {
        let (segments, _) = crate::io::fsutil::list_segments(path)?;
        return crate::dialect::log_dialect(&segments, chosen);
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let found = if crate::format::segment::parse_file_name(name).is_some() {
        crate::dialect::plain_segment_says(path)?
    } else if Some(name) == layout_name(|l| &l.metadata) {
        crate::dialect::metadata_file_says(path)?
    } else {
        crate::dialect::snapshot_file_says(path)?
    };
    crate::dialect::file_dialect(found, chosen)
}

/// The file name of one of [`Layout`]'s files (the one place that names them).
fn layout_name(file: impl Fn(&Layout) -> &PathBuf) -> Option<&'static str> {
    static LAYOUT: std::sync::OnceLock<Layout> = std::sync::OnceLock::new();
    let layout = LAYOUT.get_or_init(|| Layout::new(Path::new("")));
    file(layout).file_name().and_then(|n| n.to_str())
}

/// What a base directory holds: a store's (its metadata file or snapshot), a channel's (its
/// `data/cursors`, spec section 10), or neither yet (a new directory, or a log alone). The one
/// place this is decided: each open refuses the other's directory, and verify never lowers its
/// checks because a folder appeared (issue 30 item 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Store,
    Channel,
    Unknown,
}

impl Kind {
    pub fn name(self) -> Option<&'static str> {
        match self {
            Kind::Store => Some("store"),
            Kind::Channel => Some("channel"),
            Kind::Unknown => None,
        }
    }
}

/// The [`Kind`] of `base`; a directory holding both a store's files and a channel's cursors is
/// corruption naming both (no reader can tell which it is).
pub fn kind(base: &Path) -> Result<Kind> {
    let layout = Layout::new(base);
    let cursors = layout.data.join("cursors");
    let present = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let store_file = [&layout.metadata, &layout.snapshot]
        .into_iter()
        .find(|p| present(p));
    match (store_file, present(&cursors)) {
        (Some(file), true) => Err(Error::corruption(
            &cursors,
            None,
            format!(
                "a channel's cursors beside a store's {}: a directory is a store or a channel, \
                 never both (move data/cursors aside if a channel was opened on a store by mistake)",
                file.display()
            ),
        )),
        (Some(_), false) => Ok(Kind::Store),
        (None, true) => Ok(Kind::Channel),
        (None, false) => Ok(Kind::Unknown),
    }
}

/// Refuses to open `base` as `want` when it is the other kind: a clear error naming what it is
/// and which open to use.
pub fn require_kind(base: &Path, want: Kind) -> Result<()> {
    match kind(base)? {
        Kind::Unknown => Ok(()),
        found if found == want => Ok(()),
        Kind::Store => Err(Error::InvalidArgument(format!(
            "{} is a store's base directory (it holds data/tflux.snapshot or data/tflux.metadata): \
             open it with tflux.open, not as a channel",
            base.display()
        ))),
        Kind::Channel => Err(Error::InvalidArgument(format!(
            "{} is a channel directory (it holds data/cursors): open it with tflux.Channel.open, \
             not as a store",
            base.display()
        ))),
    }
}

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
    restore_snapshot(
        layout,
        files::read_snapshot_in(&layout.snapshot, layout.dialect)?,
    )
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

/// The log must continue the snapshot: start at or before its last index + 1 (at 0 without a
/// snapshot). A snapshot ahead of the whole log is accepted (the log restarts after it).
pub fn check_continuity(
    layout: &Layout,
    log_start: i64,
    snapshot_index: Option<i64>,
) -> Result<()> {
    let covered = snapshot_index.unwrap_or(-1);
    if log_start <= covered.saturating_add(1) {
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
            let e = Error::Settings(warning);
            let mut finding = Finding::from_error(FindingKind::Settings, &layout.settings, &e);
            finding.fatal = false;
            problems.push(finding);
        }
        Err(e) => problems.push(Finding::from_error(
            FindingKind::Settings,
            &layout.settings,
            &e,
        )),
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
        if let Err(e) = check_continuity(&layout, scan.start_index(), r.snapshot.map(|s| s.0)) {
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
