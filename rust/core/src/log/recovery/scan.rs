//! The one walk over a log directory: the scan's options, each segment classified by how it
//! ends, and the directory-level checks (term order, gaps, overlaps, twins), read-only.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::format::dialect::Dialect;
use crate::format::record;
use crate::format::segment::Header;
use crate::format::steps::{Step, Steps};
use crate::io::fsutil::{self, EntryKind, SegmentFile};
use crate::io::storage::Storage;
use crate::segment::{
    end_of_records, scan_file_keeping, ActiveBytes, EndOfRecords, FileScan, ScanStop, Segment,
};

use super::finding::{Finding, FindingKind, SegmentInfo};
// Through the parent: scan -> act would close a circle (act takes the scan's types).
use super::twin_matches;

/// What a scan does with what it finds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecoveryMode {
    /// Every finding but an ignored file refuses the open, a torn tail included.
    Strict,
    /// A torn tail of the last segment (or its half-written header) is cut (initialised);
    /// anything else refuses the open. What a crash leaves, and nothing more.
    #[default]
    TolerateTornTail,
    /// Like `TolerateTornTail`, but the first fatal finding is cut away: the damaged segment
    /// is copied aside and cut at the bad record, later files move into `../temp`.
    Repair,
    /// Nothing refuses: every segment is walked and every finding reported (verify).
    ReportOnly,
}

/// How a log directory is scanned.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    pub mode: RecoveryMode,
    /// Whether the log may hold empty entries; when not, a trailing empty record followed only
    /// by zeros is a torn header (docs/format.md, log decision 2).
    pub empty_entries: bool,
    /// Whether segments are read (mapped, framed, checksummed) on every core; the findings
    /// are the same either way. Defaults to [`Parallelism::from_env`].
    pub parallelism: Parallelism,
    /// What the scanned segments must serve after the walk.
    pub keep: Keep,
    /// Whether the pool's scan of each sealed segment also writes its replay steps
    /// ([`crate::format::steps`]) for the restore it is fed to ([`scan_dir_feeding`]); only with
    /// [`Parallelism::AllCores`]. The findings are the same either way.
    pub steps: bool,
    /// The dialect the caller chose or already decided for the directory (`None`: the first
    /// segment says, else `spec`). The scan refuses a first segment that says another one.
    pub dialect: Option<Dialect>,
    /// Raised by each segment's file size once it is scanned (a progress bar's count: `tflux
    /// verify` on a terminal); nothing else reads it.
    pub progress: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
    /// Where segments are opened, listed and mapped ([`scan_dir`] sets it to the storage it
    /// is given).
    pub storage: Arc<dyn Storage>,
}

impl ScanOptions {
    /// The framing the segments are read in (once [`scan_dir_feeding`] has decided it).
    pub fn framing(&self) -> Dialect {
        self.dialect.unwrap_or(Dialect::Spec)
    }
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            mode: RecoveryMode::TolerateTornTail,
            empty_entries: true,
            parallelism: Parallelism::from_env(),
            keep: Keep::Reads,
            steps: false,
            dialect: None,
            progress: None,
            storage: crate::io::storage::real(),
        }
    }
}

/// What the segments of a [`LogScan`] must serve after the walk; the findings, counts and
/// terms are the same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// Reads of their records (an open, repair, a replay): each sealed segment's index
    /// remembers where every `SEALED_STRIDE`-th record starts.
    Reads,
    /// A report only (`verify`): a sealed segment's index counts its records without their
    /// offsets ([`crate::segment::RecordIndex::counting`]), so reading one walks it from its
    /// start. The last segment keeps its offsets: how it ends is classified from them.
    Report,
}

/// How many cores a scan uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parallelism {
    /// One segment at a time on the calling thread.
    OneCore,
    /// Segments scanned ahead on rayon's pool (`RAYON_NUM_THREADS` sizes it; `crate::cores`), the
    /// findings classified in LSN order on the calling thread.
    AllCores,
}

impl Parallelism {
    /// `TFLUX_THREADS=1` selects one core (for tests and to compare); anything else all cores.
    /// All cores also need rayon's pool to run ([`Parallelism::available`]).
    pub fn from_env() -> Parallelism {
        match std::env::var("TFLUX_THREADS") {
            Ok(v) if v.trim() == "1" => Parallelism::OneCore,
            _ => Parallelism::AllCores.available(),
        }
    }

    /// `self`, or [`Parallelism::OneCore`] where no pool can run (the one check
    /// every parallel path makes before it touches the pool).
    pub fn available(self) -> Parallelism {
        match self {
            Parallelism::AllCores if !crate::cores::available() => Parallelism::OneCore,
            p => p,
        }
    }
}

/// One segment-named entry and what the scan made of it.
#[derive(Debug)]
pub struct ScannedFile {
    pub file: SegmentFile,
    /// Records, sizes and position (sealed or last) as found.
    pub info: SegmentInfo,
    /// The segment (opened read-only) up to its first problem; `None` when the file cannot be
    /// read as a segment (not a regular file, bad header).
    pub segment: Option<Segment>,
}

/// Everything one walk over a log directory found.
#[derive(Debug)]
pub struct LogScan {
    pub dir: PathBuf,
    /// The dialect its segments were read in (decided before any record was read).
    pub dialect: Dialect,
    pub options: ScanOptions,
    pub files: Vec<ScannedFile>,
    /// In segment order, ignored files first. Outside `ReportOnly` the walk stops at the first
    /// fatal finding.
    pub findings: Vec<Finding>,
    pub ignored: Vec<PathBuf>,
    /// Every segment-named entry, in LSN order (`files` is a prefix of it).
    pub listed: Vec<SegmentFile>,
    /// What a writable open does with the second file of each segment found twice.
    pub twins: Vec<TwinAction>,
}

/// The second file of a segment found as both `NNN.log.z` and `NNN.log` (spec section 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TwinAction {
    /// The `.z` decodes: the `.log` is deleted.
    DeletePlain(PathBuf),
    /// The `.z` does not decode: it is moved into `../temp`, the `.log` is kept.
    MoveCompressedAside(PathBuf),
}

impl LogScan {
    pub fn ok(&self) -> bool {
        !self.findings.iter().any(|f| f.fatal)
    }

    pub fn first_fatal(&self) -> Option<&Finding> {
        self.findings.iter().find(|f| f.fatal)
    }

    /// Records of every scanned segment (up to its first problem).
    pub fn records(&self) -> u64 {
        self.files.iter().map(|f| f.info.count).sum()
    }

    /// Bytes of record data (headers included) of every scanned segment.
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.info.size).sum()
    }

    /// LSN of the first entry the log would hold (0 for an empty directory).
    pub fn start_index(&self) -> i64 {
        self.files.first().map_or(0, |f| f.file.first_lsn)
    }

    /// `(lsn, term)` of the last entry a tolerant open keeps, when the log is sound.
    pub fn last_entry(&self) -> Option<(i64, i32)> {
        self.files.iter().rev().find_map(|f| {
            let seg = f.segment.as_ref()?;
            Some((seg.last_lsn(), seg.last_term()?))
        })
    }

    /// LSN of the last entry (`start_index - 1` when there is none).
    pub fn last_index(&self) -> i64 {
        self.files
            .last()
            .and_then(|f| f.segment.as_ref())
            .map_or(self.start_index() - 1, |s| s.last_lsn())
    }
}

/// Where a segment sits in its log: only the last one may end in a torn record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    Sealed,
    Last,
}

/// Scans one segment file (a regular file) and classifies how it ends. Returns the scan and
/// the finding at its end (fatal per `options.mode`), if any.
pub fn scan_segment(
    path: &Path,
    position: Position,
    previous_term: i32,
    options: &ScanOptions,
) -> Result<(FileScan, Option<Finding>)> {
    scan_segment_keeping(
        path,
        position,
        previous_term,
        options,
        ActiveBytes::Kept,
        None,
    )
}

/// [`scan_segment`] choosing what the scan of the last segment keeps of its bytes: the walk of
/// [`scan_dir`] only needs its index and findings ([`ActiveBytes::Dropped`]).
fn scan_segment_keeping(
    path: &Path,
    position: Position,
    previous_term: i32,
    options: &ScanOptions,
    active: ActiveBytes,
    steps: Option<Vec<Step>>,
) -> Result<(FileScan, Option<Finding>)> {
    let is_last = position == Position::Last;
    // Sealed segments are mapped; the last one is read (it is about to be written).
    let offsets = is_last || options.keep == Keep::Reads;
    let mut scan = match steps {
        Some(buffer) if !is_last => crate::segment::scan_file_stepping(
            &*options.storage,
            options.framing(),
            path,
            previous_term,
            offsets,
            buffer,
        )?,
        _ => scan_file_keeping(
            &*options.storage,
            options.framing(),
            path,
            false,
            !is_last,
            previous_term,
            offsets,
            active,
        )?,
    };
    // A compressed segment was sealed when it was compressed: nothing in it is a torn tail.
    let is_last = is_last && scan.compressed.is_none() && scan.bad_compressed.is_none();
    let finding = match scan.header {
        _ if scan.bad_compressed.is_some() => {
            let why = scan.bad_compressed.as_ref().expect("checked");
            let e = crate::segment::bytes::bad_compressed(path, why);
            Some(Finding::from_error(FindingKind::Corruption, path, &e))
        }
        Header::Valid => classify_end(path, &mut scan, is_last, options),
        Header::Uninitialised if is_last => Some(Finding::new(
            FindingKind::UninitialisedHeader,
            path,
            Some(0),
            "segment header never written (crash during creation); the next open initialises it"
                .into(),
        )),
        ref other => {
            let message = match other {
                Header::Uninitialised => "segment header missing (file empty or all zeros)".into(),
                Header::BadMarker => "bad segment file marker (expected 12 76 AD 55)".into(),
                Header::UnknownVersion(v) => {
                    format!("unknown segment format version {v} (expected 1)")
                }
                Header::Valid => unreachable!("handled above"),
            };
            Some(Finding::new(
                FindingKind::Corruption,
                path,
                Some(0),
                message,
            ))
        }
    };
    let finding = finding.or_else(|| compressed_last_lsn(path, &scan));
    let finding = finding.map(|mut f| {
        f.fatal = is_fatal(f.kind, options.mode);
        f
    });
    Ok((scan, finding))
}

/// A `.log.z` whose header's last LSN is not the last record inside (checked only when the
/// records end cleanly).
fn compressed_last_lsn(path: &Path, scan: &FileScan) -> Option<Finding> {
    let h = scan.compressed.as_ref()?;
    let counted = h.first_lsn.checked_add(scan.count as i64)? - 1;
    if counted == h.last_lsn {
        return None;
    }
    let why = crate::format::compressed::BadCompressed::LastLsnRecords {
        found: h.last_lsn,
        counted,
    };
    let e = crate::segment::bytes::bad_compressed(path, &why);
    Some(Finding::from_error(FindingKind::Corruption, path, &e))
}

/// Whether `kind` refuses an open in `mode` (ReportOnly reports what a tolerant open refuses).
fn is_fatal(kind: FindingKind, mode: RecoveryMode) -> bool {
    match kind {
        FindingKind::IgnoredFile | FindingKind::CompressedTwin => false,
        k if k.is_crash_residue() => mode == RecoveryMode::Strict,
        _ => true,
    }
}

/// The finding at the end of a segment with a valid header (None when it ends cleanly).
fn classify_end(
    path: &Path,
    scan: &mut FileScan,
    is_last: bool,
    options: &ScanOptions,
) -> Option<Finding> {
    if is_last && !options.empty_entries && scan.ends_with_ambiguous_empty_record() {
        // A trailing empty record followed by zeros in a log without empty entries: a header
        // torn after its term. Forget it; it is cut as a torn tail.
        let last = scan.index.len() - 1;
        let offset = scan.index.offset(last);
        scan.index.truncate(last);
        scan.last_term = scan.index.last_term();
        scan.end = offset;
        scan.stop = ScanStop::Bad {
            offset,
            reason: record::BadRecord::TornHeader,
        };
    }
    scan.count = scan.index.len();
    let offset = scan.stop.offset()?;
    let (kind, message) = match end_of_records(scan.dialect, &scan.bytes, &scan.stop, is_last) {
        EndOfRecords::Clean => return None,
        EndOfRecords::Torn(why) => (
            FindingKind::TornTail,
            format!("torn tail: {why}; the next open cuts it"),
        ),
        EndOfRecords::TermOrder(why) => (FindingKind::TermOrder, why),
        EndOfRecords::Corrupt(why) => (FindingKind::Corruption, why),
    };
    let mut f = Finding::new(kind, path, Some(offset), message);
    f.reach = Some(scan.nonzero_end(offset));
    Some(f)
}

/// Whether `count` records from `first_lsn` on would place one past the largest LSN (a hostile
/// or damaged file name; the arithmetic of the log must never overflow).
fn past_max_entry_lsn(first_lsn: i64, count: usize) -> bool {
    let end = i64::try_from(count)
        .ok()
        .and_then(|n| first_lsn.checked_add(n));
    count > 0 && end.is_none_or(|end| end - 1 > crate::segment::MAX_ENTRY_LSN)
}

/// Segments scanned ahead of the classifying walk of [`scan_dir`]. Each is scanned as if no
/// term came before it (`previous_term` 0); the walk keeps that result when the segment's first
/// term is at least the term the walk has reached (the scan is then identical: the previous
/// term is only ever compared with the first record) and scans again on the calling thread
/// otherwise. The scans run on rayon's pool a few segments per core ahead of the walk, a new
/// one starting as soon as the walk takes a result (no batch waits for its slowest segment,
/// and the pool keeps scanning while the walk classifies and unmaps), which bounds the maps
/// and open files held at once. Dropping it waits for the scans still running, so none reads
/// a file that the caller goes on to cut or move.
struct ScanAhead<'a> {
    entries: &'a [SegmentFile],
    options: &'a ScanOptions,
    /// How many segments may be scanned ahead of the one the walk waits for.
    width: usize,
    /// Entries before this one have been handed to the pool (or skipped: not regular files).
    submitted: usize,
    in_flight: usize,
    done: Vec<Option<Result<SegmentScan>>>,
    sender: std::sync::mpsc::Sender<(usize, Result<SegmentScan>)>,
    results: std::sync::mpsc::Receiver<(usize, Result<SegmentScan>)>,
    /// Step buffers given back once their segment was applied, for the next scans
    /// ([`ScanOptions::steps`]): a handful go round, so their pages are written again instead
    /// of fresh ones being zeroed for every segment.
    buffers: Arc<Mutex<Vec<Vec<Step>>>>,
}

type SegmentScan = (FileScan, Option<Finding>);

/// The walk of [`scan_dir`] keeps no bytes of the last segment: only its index and findings.
const DROPPED: ActiveBytes = ActiveBytes::Dropped;

impl<'a> ScanAhead<'a> {
    fn new(entries: &'a [SegmentFile], options: &'a ScanOptions) -> Self {
        let (sender, results) = std::sync::mpsc::channel();
        ScanAhead {
            entries,
            options,
            width: match options.parallelism {
                Parallelism::AllCores => 2 * crate::cores::threads().max(1),
                Parallelism::OneCore => 0,
            },
            submitted: 0,
            in_flight: 0,
            done: entries.iter().map(|_| None).collect(),
            sender,
            results,
            buffers: Arc::default(),
        }
    }

    /// Gives a segment's step buffer back for the next scans.
    fn give_back(&self, steps: Steps) {
        let buffer = steps.into_buffer();
        if let Ok(mut free) = self.buffers.lock() {
            free.push(buffer);
        }
    }

    fn position(&self, k: usize) -> Position {
        if k + 1 == self.entries.len() {
            Position::Last
        } else {
            Position::Sealed
        }
    }

    /// Hands the regular files up to `end` (exclusive) to the pool.
    fn submit_until(&mut self, end: usize) {
        let end = end.min(self.entries.len());
        while self.submitted < end {
            let j = self.submitted;
            self.submitted += 1;
            let entry = &self.entries[j];
            if !matches!(entry.kind, EntryKind::Regular) {
                continue;
            }
            let (path, position, options) =
                (entry.path.clone(), self.position(j), self.options.clone());
            let sender = self.sender.clone();
            let buffers =
                (options.steps && position == Position::Sealed).then(|| Arc::clone(&self.buffers));
            self.in_flight += 1;
            crate::cores::spawn(move || {
                let steps =
                    buffers.map(|b| b.lock().ok().and_then(|mut f| f.pop()).unwrap_or_default());
                let scanned = scan_segment_keeping(&path, position, 0, &options, DROPPED, steps);
                // The receiver lives until every scan handed out has reported (Drop).
                let _ = sender.send((j, scanned));
            });
        }
    }

    /// The scan of regular file `k` on the calling thread, given the term before it (no
    /// steps: they serve only scans made ahead of a restore's apply).
    fn scan_here(&self, k: usize, previous_term: i32) -> Result<SegmentScan> {
        let path = &self.entries[k].path;
        let position = self.position(k);
        scan_segment_keeping(path, position, previous_term, self.options, DROPPED, None)
    }

    /// The scan of regular file `k` (walked in order) given the term before it.
    fn scan(&mut self, k: usize, previous_term: i32) -> Result<SegmentScan> {
        // On one of the pool's own threads a blocking wait could hold up the scans it waits for.
        let on_pool = rayon::current_thread_index().is_some();
        if self.options.parallelism == Parallelism::OneCore || on_pool {
            return self.scan_here(k, previous_term);
        }
        self.submit_until(k + 1 + self.width);
        let submitted = matches!(self.entries[k].kind, EntryKind::Regular);
        while submitted && self.done[k].is_none() && self.in_flight > 0 {
            let (j, scanned) = self.results.recv().expect("the sender is held by self");
            self.in_flight -= 1;
            self.done[j] = Some(scanned);
        }
        match self.done[k].take() {
            Some(Ok(done)) if previous_term == 0 || keeps_previous_term(&done.0, previous_term) => {
                Ok(done)
            }
            Some(Err(e)) => Err(e),
            _ => self.scan_here(k, previous_term),
        }
    }
}

impl Drop for ScanAhead<'_> {
    fn drop(&mut self) {
        while self.in_flight > 0 && self.results.recv().is_ok() {
            self.in_flight -= 1;
        }
    }
}

/// Whether scanning `scan`'s file after `previous_term` would give the same result as the scan
/// after term 0: its first record is at or above it, or it stopped before any term check.
fn keeps_previous_term(scan: &FileScan, previous_term: i32) -> bool {
    match scan.first_term {
        Some(t) => t >= previous_term,
        None => !matches!(scan.stop, ScanStop::Term { .. }),
    }
}

/// Walks every segment of `dir` in LSN order and classifies what it finds. Reads only: opens
/// regular files read-only, never opens anything else. With [`Parallelism::AllCores`] the
/// segments are read ahead on every core (`ScanAhead`); the findings do not change.
/// `storage` is where the scanned segments will later write (nothing is written here).
pub fn scan_dir(dir: &Path, options: ScanOptions, storage: &Arc<dyn Storage>) -> Result<LogScan> {
    scan_dir_feeding(dir, options, storage, &mut |_| {})
}

/// Whether a segment's records are final as soon as the walk has classified it, so that a
/// replay may apply them while later segments are still being scanned: the one rule of what
/// must be checked before a record is applied during the scan. A sealed segment (not the
/// last: a torn tail is cut only after the whole scan) with no fatal finding, in a mode that
/// stops at the first fatal finding (so every segment before it had none), is kept whole by
/// every open that accepts the scan (a repair cuts and moves only from the first fatal finding
/// on). Whatever later findings refuse the open, the caller drops what it applied.
fn final_once_walked(mode: RecoveryMode, position: Position, damaged: bool) -> bool {
    mode != RecoveryMode::ReportOnly && position == Position::Sealed && !damaged
}

/// [`scan_dir`] that calls `feed` with each segment `final_once_walked` accepts, in LSN
/// order, on the calling thread while the pool scans the next segments (`ScanAhead`): a
/// restore's apply then overlaps the scan. The findings and the scan are those of
/// [`scan_dir`]; `feed` may read its segment (and drop its map), nothing else.
pub fn scan_dir_feeding(
    dir: &Path,
    options: ScanOptions,
    storage: &Arc<dyn Storage>,
    feed: &mut dyn FnMut(&mut Segment),
) -> Result<LogScan> {
    let (entries, ignored) = fsutil::list_segments(&**storage, dir)?;
    // Before anything is read as records: a log of another dialect is not damage.
    let dialect = crate::log::dialect::log_dialect(&entries, options.dialect)?;
    let options = ScanOptions {
        parallelism: options.parallelism.available(),
        dialect: Some(dialect),
        storage: Arc::clone(storage),
        ..options
    };
    let mut scan = LogScan {
        dir: dir.to_path_buf(),
        dialect,
        options: options.clone(),
        files: Vec::with_capacity(entries.len()),
        findings: Vec::new(),
        ignored: ignored.clone(),
        listed: entries.clone(),
        twins: Vec::new(),
    };
    for path in ignored {
        let message = format!(
            "{} is not named like a segment and is ignored",
            path.display()
        );
        scan.findings
            .push(Finding::new(FindingKind::IgnoredFile, &path, None, message));
    }
    let report_only = options.mode == RecoveryMode::ReportOnly;
    let mut previous_term = 0;
    // LSN the next segment must start at; None at the start and after a damaged segment.
    let mut expected: Option<i64> = None;
    let total = entries.len();
    let mut ahead = ScanAhead::new(&entries, &options);
    for (k, mut entry) in entries.iter().cloned().enumerate() {
        let is_last = k + 1 == total;
        let mut found = Vec::new();
        let position = if is_last {
            Position::Last
        } else {
            Position::Sealed
        };
        // A segment found twice is read from the `.z` when it decodes to the `.log`'s bytes,
        // else from the `.log`; two different versions are never resolved by a delete.
        let mut prescanned = None;
        if let Some(plain) = entry.twin.clone() {
            let (zscan, zend) = ahead.scan(k, previous_term)?;
            let decodes = zscan.compressed.is_some();
            let differs = match &zscan.compressed {
                Some(header) => !twin_matches(&plain, header)?,
                None => false,
            };
            let (action, message) = if differs {
                // Two versions: fatal in every mode, nothing deleted. The `.log` is read (the
                // version the `.z` was made from); repair moves the `.z` into temp.
                let message = format!(
                    "two different versions of this segment: {} decodes, but not to the bytes of \
                     {}; nothing is deleted (repair reads the .log and moves the .z into temp)",
                    entry.path.display(),
                    plain.display()
                );
                found.push(Finding::new(
                    FindingKind::TwinConflict,
                    &entry.path,
                    None,
                    message,
                ));
                let compressed = std::mem::replace(&mut entry.path, plain.clone());
                entry.twin = Some(compressed);
                scan.listed[k] = entry.clone();
                (None, String::new())
            } else if decodes {
                prescanned = Some((zscan, zend));
                let m = "both the segment and its compressed copy exist (a compression was stopped before its delete); the .z is read, and the next writable open deletes the .log";
                (Some(TwinAction::DeletePlain(plain.clone())), m.to_string())
            } else {
                let why = zend.map(|f| f.message).unwrap_or_default();
                let compressed = std::mem::replace(&mut entry.path, plain.clone());
                entry.twin = Some(compressed.clone());
                scan.listed[k] = entry.clone();
                let m = format!("a compressed copy beside the segment does not decode ({why}); the .log is read, and the next writable open moves the .z into temp");
                (Some(TwinAction::MoveCompressedAside(compressed)), m)
            };
            if let Some(action) = action {
                let twin_path = match &action {
                    TwinAction::DeletePlain(p) | TwinAction::MoveCompressedAside(p) => p.clone(),
                };
                found.push(Finding::new(
                    FindingKind::CompressedTwin,
                    &twin_path,
                    None,
                    message,
                ));
                scan.twins.push(action);
            }
        }
        let path = entry.path.clone();
        if let Some(exp) = expected {
            if entry.first_lsn != exp {
                let (kind, what) = if entry.first_lsn > exp {
                    (FindingKind::Gap, "gap")
                } else {
                    (FindingKind::Overlap, "overlap")
                };
                let message = format!(
                    "{what} between segments: the previous segment ends at LSN {}, this one starts at {}",
                    exp - 1,
                    entry.first_lsn
                );
                found.push(Finding::new(kind, &path, Some(0), message));
            }
        }
        let mut info = SegmentInfo {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            path: path.clone(),
            start_lsn: entry.first_lsn,
            count: 0,
            size: 0,
            file_size: 0,
            sealed: !is_last,
            compression: None,
        };
        let mut segment = None;
        match entry.kind {
            EntryKind::Other(what) => {
                let message =
                    format!("named like a segment but is {what}: its records cannot be read");
                found.push(Finding::new(
                    FindingKind::NotRegularFile,
                    &path,
                    None,
                    message,
                ));
            }
            EntryKind::Regular => {
                let (file_scan, end) = match prescanned {
                    Some(done) => done,
                    // The `.z` of a twin did not decode: the `.log` is read instead.
                    None if entry.twin.is_some() => scan_segment_keeping(
                        &path,
                        position,
                        previous_term,
                        &options,
                        DROPPED,
                        None,
                    )?,
                    None => ahead.scan(k, previous_term)?,
                };
                info.count = file_scan.count as u64;
                info.size = file_scan.end.max(crate::format::segment::HEADER_LEN as u64);
                info.file_size = file_scan.file_len;
                if file_scan.compressed.is_some() || file_scan.bad_compressed.is_some() {
                    info.file_size = file_scan.file.metadata().map_or(0, |m| m.len());
                    info.compression = file_scan.compressed.map(|h| h.method);
                    info.sealed = true;
                }
                let past_max = past_max_entry_lsn(entry.first_lsn, file_scan.count);
                if past_max {
                    let message = format!(
                        "{} records from LSN {} run past the largest LSN {}",
                        file_scan.count,
                        entry.first_lsn,
                        crate::segment::MAX_ENTRY_LSN
                    );
                    found.push(Finding::new(FindingKind::Corruption, &path, None, message));
                }
                let compressed = file_scan.compressed.is_some();
                // A damaged `.z` is unreadable as a whole (its offsets are the original's, and
                // repair moves the file aside rather than cutting inside it).
                let damaged_z = compressed && end.as_ref().is_some_and(|f| f.fatal);
                let readable = matches!(file_scan.header, Header::Valid | Header::Uninitialised)
                    && { (is_last && !compressed) || file_scan.header == Header::Valid }
                    && file_scan.bad_compressed.is_none()
                    && !damaged_z
                    && !past_max;
                if let Some(t) = file_scan.last_term {
                    previous_term = t;
                }
                if readable {
                    segment = Some(Segment::from_file_scan(
                        storage,
                        path.clone(),
                        entry.first_lsn,
                        file_scan,
                        false,
                        !is_last || compressed,
                    ));
                }
                found.extend(end);
            }
        }
        // Two versions of a segment refuse the open, but the `.log` read here is whole: the
        // scan goes on (repair keeps it and moves only the `.z`).
        let damaged = found
            .iter()
            .any(|f| f.fatal && f.kind != FindingKind::TwinConflict);
        if let Some(seg) = segment.as_mut() {
            if final_once_walked(options.mode, position, damaged) {
                feed(seg);
            }
            // The scan's map (and steps) were kept for `feed` only (`Segment::from_file_scan`).
            seg.unmap();
            if let Some(steps) = seg.take_steps() {
                ahead.give_back(steps);
            }
        }
        expected = match &segment {
            Some(seg) if !damaged => Some(seg.last_lsn().saturating_add(1)),
            _ => None,
        };
        for mut f in found {
            f.file = Some(k);
            scan.findings.push(f);
        }
        if let Some(progress) = &scan.options.progress {
            progress.fetch_add(info.file_size, std::sync::atomic::Ordering::Relaxed);
        }
        scan.files.push(ScannedFile {
            file: entry,
            info,
            segment,
        });
        if damaged && !report_only {
            break;
        }
    }
    Ok(scan)
}
