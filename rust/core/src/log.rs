//! The segmented Raft log of one directory (spec section 3).
//!
//! Segments are kept in LSN order; only the last one (the active segment) is written. Opening
//! scans every segment: sealed ones must be perfect, the active one may end in a torn record,
//! which is cut. Every operation that discards records deletes obsolete segments first (newest
//! first) and then rewrites the cut segment (copy-on-truncate), so a crash in between never leaves a
//! gap.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::{Error, IoContext, PoisonCause, Result};
use crate::format::compressed::Method;
use crate::format::dialect::Dialect;
use crate::format::record;
use crate::format::segment as seg_format;
use crate::io::fsutil::{self, sync_dir};
use crate::io::storage::{self, Storage, StorageFile};
use crate::recovery::{self, LogScan, Parallelism, RecoveryMode, ScanOptions};
use crate::segment::{self, Segment, SegmentBytes};
use crate::with_framing;

/// A read asking for at most this many data bytes, or ...
const RANDOM_READ_BYTES: u64 = 64 << 10;
/// ... at most this many records, is taken for a random one (`Log::prepare_random_read`).
const RANDOM_READ_RECORDS: u64 = 64;

/// When appended records are fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Before every append call returns (durable acknowledgement).
    Always,
    /// Only on `sync()`, at roll-over and at close.
    Batch,
    /// Only on an explicit `sync()`; the operating system decides otherwise.
    Never,
}

impl std::str::FromStr for SyncPolicy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "always" => Ok(SyncPolicy::Always),
            "batch" => Ok(SyncPolicy::Batch),
            "never" => Ok(SyncPolicy::Never),
            other => Err(Error::InvalidArgument(format!(
                "unknown sync policy {other:?} (expected \"always\", \"batch\" or \"never\")"
            ))),
        }
    }
}

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

/// Bytes on disk to read from the active segment for `remaining` bytes of data: the data plus
/// a quarter for framing, at most 8 MiB per positioned read.
fn slack(remaining: u64) -> u64 {
    remaining
        .saturating_add(remaining / 4)
        .saturating_add(64)
        .min(8 << 20)
}

/// Fills an [`EntryBatch`] within a data budget (the first entry always fits).
struct BatchSink {
    batch: EntryBatch,
    start: i64,
    budget: u64,
}

/// Where [`Log::read_into`] puts records: a [`segment::RecordSink`] (which also applies the
/// budget in `admit`) that says how many data bytes it took so far, so that the active segment
/// is read in chunks of about what the budget leaves.
pub trait ReadSink: segment::RecordSink {
    fn used(&self) -> u64;
}

impl ReadSink for BatchSink {
    fn used(&self) -> u64 {
        self.batch.data.len() as u64
    }
}

impl segment::RecordSink for BatchSink {
    fn admit(&mut self, lsn: i64, len: usize) -> bool {
        lsn == self.start || self.batch.data.len() as u64 + len as u64 <= self.budget
    }

    fn data(&mut self) -> &mut Vec<u8> {
        &mut self.batch.data
    }

    fn push(&mut self, _lsn: i64, term: i32) -> bool {
        self.batch.terms.push(term);
        self.batch.offsets.push(self.batch.data.len() as i32);
        true
    }
}

/// How [`Log::locate`] (and the decoding after it) splits the work.
#[derive(Debug, Clone, Copy)]
pub struct Split {
    pub parallelism: Parallelism,
    /// The fewest records a part on its own thread has (tests use small parts).
    pub part_entries: usize,
}

impl Split {
    /// Parts for `n` records: one per thread of rayon's pool, each of at least `part_entries`.
    pub fn parts(&self, n: usize) -> usize {
        match self.parallelism.available() {
            Parallelism::OneCore => 1,
            Parallelism::AllCores => crate::cores::threads().min(n / self.part_entries.max(1)),
        }
        .max(1)
    }
}

/// Records `from..=to` of one segment (index `segment`, first LSN `seg_first`) laid out in
/// `bytes` from index `at` (`bytes[0]` at file offset `base`), for [`Log::locate`] to walk.
struct Span {
    dialect: Dialect,
    bytes: SegmentBytes,
    base: u64,
    at: usize,
    seg_first: i64,
    from: i64,
    to: i64,
    check_crc: bool,
    segment: usize,
}

/// What walking a [`Span`] found: each record's data length, then the failure that stopped
/// the walk, if any (index in the bytes, reason).
struct Walked {
    lens: Vec<u32>,
    failure: Option<(usize, String)>,
}

impl Span {
    /// Walks the span's framing (and CRCs when asked), handing each record to `reader`, and
    /// stops after the record that takes its own data past `budget` (no later record of the
    /// read can be admitted then).
    fn walk(&self, budget: u64, reader: &mut impl SpanReader) -> Walked {
        if self.check_crc {
            self.walk_with::<true>(budget, reader)
        } else {
            self.walk_with::<false>(budget, reader)
        }
    }

    /// [`Span::walk`], checking CRCs when `CRC`: one walk and one closure per instantiation,
    /// so that the closure has one call site and is inlined into the walk's loop (a closure
    /// shared by both walks was called per record, 30 instructions of calling).
    fn walk_with<const CRC: bool>(&self, budget: u64, reader: &mut impl SpanReader) -> Walked {
        let n = (self.to - self.from + 1) as usize;
        let mut lens = crate::pool::take(n);
        let mut own = 0u64;
        let header_len = with_framing!(self.dialect, F => F::HEADER_LEN);
        let step = |_lsn, term, data: &[u8], at: usize| {
            // Data lengths are Int32.
            lens.push(data.len() as u32);
            reader.record(term, data, at + header_len);
            own += data.len() as u64;
            Ok(own <= budget)
        };
        let walked = with_framing!(self.dialect, F => segment::walk_frames::<F, CRC>(
            &self.bytes[..],
            self.at,
            self.seg_first,
            self.from,
            self.to,
            step,
        ));
        Walked {
            lens,
            failure: walked.err(),
        }
    }
}

/// What [`Log::locate`] hands the records of one span (of one segment) to, on the thread that
/// walks it: a reader that decodes them while they are in cache.
pub trait SpanReader: Send {
    /// The span's next record (from its first, in LSN order): its term and data, which
    /// starts at `at` in the bytes the reader was made with ([`SpanStart::bytes`]).
    fn record(&mut self, term: i32, data: &[u8], at: usize);
    /// Only the first `n` records handed over belong to the read (its budget ended there).
    fn truncate(&mut self, n: usize);
}

/// What a [`SpanReader`] is made with, by [`Log::locate`].
pub struct SpanStart<'a> {
    /// The bytes the span's records lie in.
    pub bytes: &'a SegmentBytes,
    /// The LSN of the span's first record.
    pub first_lsn: i64,
    /// The records the span holds (some past the budget may be handed over, then cut).
    pub records: usize,
    /// About how many records and data bytes this round of the read has ([`Log::estimate`]).
    pub read: (usize, usize),
    /// Whether this is the read's first span (whose reader the later spans' records may be
    /// appended to: room for all of them).
    pub first: bool,
}

/// One log entry, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub lsn: i64,
    pub term: i32,
    pub data: Vec<u8>,
}

/// Contiguous entries in columnar form (Arrow's binary layout for `data`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryBatch {
    pub first_lsn: i64,
    pub terms: Vec<i32>,
    /// `len + 1` positions into `data`.
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
}

impl EntryBatch {
    pub fn len(&self) -> usize {
        self.terms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    pub fn entry(&self, i: usize) -> Entry {
        Entry {
            lsn: self.first_lsn + i as i64,
            term: self.terms[i],
            data: self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize].to_vec(),
        }
    }
}

pub use crate::recovery::{RecoveryReport, SegmentInfo};

/// A log scanned and locked but not yet opened ([`Log::prepare`]).
pub struct PendingOpen {
    dir: PathBuf,
    opts: LogOptions,
    lock: Option<crate::fork::ParentOnly<File>>,
    scan: LogScan,
    /// Read-only: the segments as listed before the scan (a failure explained by a writer's
    /// change since is a stale read).
    before: Option<Vec<FileIdentity>>,
}

impl PendingOpen {
    /// What the scan found.
    pub fn scan(&self) -> &LogScan {
        &self.scan
    }

    /// The error the open will raise for the scan's first fatal finding (none when repairing).
    pub fn check(&self) -> Result<()> {
        if self.opts.recovery == RecoveryMode::Repair {
            return Ok(());
        }
        match (self.scan.first_fatal(), &self.before) {
            (None, _) => Ok(()),
            (Some(f), Some(before)) => Err(stale_if_changed(f.to_error(), &self.dir, before)),
            (Some(f), None) => Err(f.to_error()),
        }
    }

    /// Acts on the scan: refuses on a fatal finding (unless repairing), else cuts a torn tail,
    /// initialises a half-created segment or executes the repair plan, and opens the log.
    pub fn open(self) -> Result<Log> {
        self.check()?;
        let PendingOpen {
            dir,
            opts,
            lock,
            scan,
            ..
        } = self;
        let first = scan.listed.first().map_or(0, |f| f.first_lsn);
        let mut ignored = scan.ignored.clone();
        if !opts.readonly {
            // Only once the open is accepted: a refused open changes nothing.
            if segment::remove_cut_leftovers(&*opts.storage, &dir)? > 0 {
                ignored.retain(|p| p.exists());
            }
            crate::segment::compress::remove_leftovers(&*opts.storage, &dir)?;
        }
        let dialect = scan.dialect;
        let recovered = recovery::recover(scan, !opts.readonly, &opts.storage)?;
        let mut log = Log {
            dir,
            dialect,
            opts,
            segments: recovered.segments,
            commit_index: -1,
            _lock: lock,
            recovery: recovered.report,
            ignored,
            poisoned: None,
            cut_stop: None,
            compress_stop: None,
            sync_failed: None,
            born: crate::fork::Birth::now(),
        };
        if log.segments.is_empty() && !log.opts.readonly {
            log.create_segment(first)?;
        }
        let floor = log.start_index() - 1;
        log.commit_index = match log.opts.commit_index {
            None => floor,
            Some(ci) if ci >= floor && ci <= log.last_index() => ci,
            Some(ci) => {
                return Err(Error::InvalidArgument(format!(
                    "commit_index {ci} is outside the log [{floor}, {}]",
                    log.last_index()
                )))
            }
        };
        Ok(log)
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
    /// Opens (creating it if needed, unless read-only) the log in `dir`: scans it (no writes),
    /// then acts on what the scan found. A refused open changes nothing.
    ///
    /// Read-only, a writer may change the directory while it is scanned (compaction deletes
    /// segments, a cut replaces one, a roll-over adds one): a failure that such a change
    /// explains is [`Error::StaleRead`] (reopen and retry), not corruption.
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<Log> {
        Log::prepare(dir, opts)?.open()
    }

    /// The first half of [`Log::open`]: takes the writer lock (unless read-only) and scans every
    /// segment, writing nothing. The caller may check the scan before [`PendingOpen::open`].
    pub fn prepare(dir: impl AsRef<Path>, opts: LogOptions) -> Result<PendingOpen> {
        Log::prepare_with(dir.as_ref(), opts, &mut |_| {}, false)
    }

    /// [`Log::prepare`] that hands `feed` each sealed segment as soon as the scan has accepted
    /// it for good ([`recovery::scan_dir_feeding`]), in LSN order, while the other segments
    /// are still being scanned: a restore applies one segment while the next ones are checked.
    /// What the scan finds, and the open after it, are exactly those of [`Log::prepare`].
    ///
    /// The pool's scan of each sealed segment also writes its replay steps
    /// ([`crate::segment::steps`], [`Segment::replay_steps`]) for `feed`.
    pub fn prepare_feeding(
        dir: impl AsRef<Path>,
        opts: LogOptions,
        feed: &mut dyn FnMut(&mut Segment),
    ) -> Result<PendingOpen> {
        Log::prepare_with(dir.as_ref(), opts, feed, true)
    }

    fn prepare_with(
        dir: &Path,
        opts: LogOptions,
        feed: &mut dyn FnMut(&mut Segment),
        steps: bool,
    ) -> Result<PendingOpen> {
        if !opts.readonly {
            return Log::prepare_scanned(dir, opts, feed, steps);
        }
        let before = segment_identities(dir);
        let mut pending = Log::prepare_scanned(dir, opts, feed, steps)
            .map_err(|e| stale_if_changed(e, dir, &before))?;
        pending.before = Some(before);
        Ok(pending)
    }

    fn prepare_scanned(
        dir: &Path,
        opts: LogOptions,
        feed: &mut dyn FnMut(&mut Segment),
        steps: bool,
    ) -> Result<PendingOpen> {
        opts.validate()?;
        let dir = dir.to_path_buf();
        if opts.readonly {
            if !dir.is_dir() {
                return Err(Error::io(
                    "open log directory",
                    &dir,
                    std::io::Error::from_raw_os_error(crate::error::missing_dir_errno(&dir)),
                ));
            }
        } else {
            fsutil::create_dir_durable(&*opts.storage, &dir)?;
        }
        let lock = if opts.readonly {
            None
        } else {
            Some(crate::fork::ParentOnly::new(fsutil::lock_dir(
                &*opts.storage,
                &dir,
            )?))
        };
        let scan = recovery::scan_dir_feeding(
            &dir,
            ScanOptions {
                mode: opts.recovery,
                empty_entries: opts.empty_entries,
                steps,
                dialect: opts.dialect,
                ..ScanOptions::default()
            },
            &opts.storage,
            feed,
        )?;
        Ok(PendingOpen {
            dir,
            opts,
            lock,
            scan,
            before: None,
        })
    }

    /// Opens a read-only log from a scan already made (verify: the log is read once).
    pub fn open_from_scan(scan: LogScan, opts: LogOptions) -> Result<Log> {
        opts.validate()?;
        if !opts.readonly {
            return Err(Error::InvalidArgument(
                "only a read-only log opens from an earlier scan (a writer scans under its lock)"
                    .into(),
            ));
        }
        PendingOpen {
            dir: scan.dir.clone(),
            opts,
            lock: None,
            scan,
            before: None,
        }
        .open()
    }

    fn temp_dir(&self) -> Result<PathBuf> {
        fsutil::temp_dir_beside(&*self.opts.storage, &self.dir, self.dialect)
    }

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

    // ----- reads -----

    /// Calls `f` for entries `start..end` in order while it returns true. `budget` limits the
    /// data bytes: the first entry is always visited, a further one only if the running total
    /// stays within the budget.
    ///
    /// `taken`: data bytes a caller already took from the entries before `start` (then the
    /// first entry is not free: it counts against the budget like the others).
    fn visit(
        &mut self,
        start: i64,
        end: i64,
        budget: u64,
        taken: Option<u64>,
        check_crc: bool,
        mut f: impl FnMut(i64, i32, &[u8]) -> bool,
    ) -> Result<()> {
        // A read-only log may share its files with a writer in another process: always check.
        let readonly = self.opts.readonly;
        let check_crc = check_crc || readonly;
        let mut lsn = start;
        let used = std::cell::Cell::new(taken.unwrap_or(0));
        let free = if taken.is_some() { None } else { Some(start) };
        let stopped = std::cell::Cell::new(false);
        // Past the budget nothing more is admitted (not even an empty entry): stop instead of
        // reading the next record only to refuse it.
        while lsn < end && !stopped.get() && used.get() <= budget {
            let k = self.segment_of(lsn);
            let seg = &mut self.segments[k];
            let last = (end - 1).min(seg.last_lsn());
            let chunk_last = if seg.sealed() {
                // Mapped: the budget stops the walk, nothing is read ahead.
                last
            } else {
                // One positioned read of about what the budget takes (framing included); a
                // small read reads little, and the loop reads on when the slack was too small.
                let remaining = budget.saturating_sub(used.get());
                seg.chunk_end(lsn, last, slack(remaining))
            };
            let admit = |l: i64, n: usize| {
                let total = used.get().saturating_add(n as u64);
                if Some(l) != free && total > budget {
                    stopped.set(true);
                    return false;
                }
                used.set(total);
                true
            };
            seg.visit(
                lsn,
                chunk_last,
                check_crc,
                readonly,
                admit,
                |l, term, data| {
                    let go_on = f(l, term, data);
                    stopped.set(!go_on);
                    go_on
                },
            )?;
            lsn = chunk_last + 1;
        }
        Ok(())
    }

    /// A small read (a random one, as far as the log can tell) finds its record through the
    /// segment's full offsets once enough small reads of that sealed segment made them worth a
    /// walk ([`Segment::note_random_read`]): 4 B per record, so a restore, a sequential reader
    /// (large reads) and a few random reads never pay for it.
    fn prepare_random_read(&mut self, start: i64) -> Result<()> {
        if start > self.last_index() {
            return Ok(());
        }
        let k = self.segment_of(start);
        self.segments[k].note_random_read()
    }

    fn check_read_start(&self, start: i64) -> Result<()> {
        let (first, last) = (self.start_index(), self.last_index());
        if start < first {
            return Err(Error::OutOfRange(format!(
                "LSN {start} was compacted away (the log starts at {first})"
            )));
        }
        if start > last + 1 {
            return Err(Error::OutOfRange(format!(
                "LSN {start} is past the end of the log (last LSN {last})"
            )));
        }
        Ok(())
    }

    /// Contiguous entries from `start`: at least one (if any), then while the data bytes stay
    /// within `max_bytes`. `read(last_index + 1)` is empty.
    pub fn read(&mut self, start: i64, max_bytes: Option<u64>) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        self.read_with(start, max_bytes, |lsn, term, data| {
            out.push(Entry {
                lsn,
                term,
                data: data.to_vec(),
            })
        })?;
        Ok(out)
    }

    /// [`Log::read`] handing each entry's bytes to `f` instead of copying them (the bindings
    /// build their objects straight from the segment's bytes).
    pub fn read_with(
        &mut self,
        start: i64,
        max_bytes: Option<u64>,
        mut f: impl FnMut(i64, i32, &[u8]),
    ) -> Result<()> {
        self.read_after(start, None, max_bytes, &mut f)
    }

    /// [`Log::read_with`] of the entries after ones the caller already took (`taken` data
    /// bytes of them, e.g. through [`Log::read_one`]): `None` is `read_with` (the first entry
    /// always comes); with `Some`, every entry counts against `max_bytes`.
    pub fn read_after(
        &mut self,
        start: i64,
        taken: Option<u64>,
        max_bytes: Option<u64>,
        mut f: impl FnMut(i64, i32, &[u8]),
    ) -> Result<()> {
        self.check_read_start(start)?;
        let end = self.next_index();
        if max_bytes.is_some_and(|m| m <= RANDOM_READ_BYTES) {
            self.prepare_random_read(start)?;
        }
        self.visit(
            start,
            end,
            max_bytes.unwrap_or(u64::MAX),
            taken,
            true,
            |lsn, term, data| {
                f(lsn, term, data);
                true
            },
        )
    }

    /// The entry at `lsn` alone (`None` at `last_index + 1`), its data copied by `copy` and
    /// checked on that copy ([`Segment::read_record`]): the first entry of a small [`Log::read`]
    /// (a random single-record read) without the walk's machinery. A caller that wants more
    /// entries goes on with [`Log::read_after`].
    pub fn read_one<T>(
        &mut self,
        lsn: i64,
        copy: impl FnOnce(&[u8]) -> T,
        copied: impl Fn(&T) -> &[u8],
    ) -> Result<Option<(i32, T)>> {
        self.check_read_start(lsn)?;
        if lsn > self.last_index() {
            return Ok(None);
        }
        let k = self.segment_of(lsn);
        let seg = &mut self.segments[k];
        seg.note_random_read()?;
        seg.read_record(lsn, copy, copied).map(Some)
    }

    /// Entries `start..end` (end exclusive, clamped to the log) as columns, within `max_bytes`
    /// of data (and always under 2 GiB, so offsets fit Arrow's int32).
    pub fn read_batch(&mut self, start: i64, end: i64, max_bytes: u64) -> Result<EntryBatch> {
        self.check_read_start(start)?;
        let end = end.min(self.next_index());
        let mut batch = EntryBatch {
            first_lsn: start,
            terms: Vec::new(),
            offsets: vec![0],
            data: Vec::new(),
        };
        if end <= start {
            return Ok(batch);
        }
        if end - start == 1 {
            // One record (a random read): copied and checked as `read_one` does, without the
            // estimate, the reserves and the walk.
            let one = self.read_one(start, <[u8]>::to_vec, Vec::as_slice)?;
            if let Some((term, data)) = one {
                batch.terms.push(term);
                batch.offsets.push(data.len() as i32);
                batch.data = data;
            }
            return Ok(batch);
        }
        if (end - start) as u64 <= RANDOM_READ_RECORDS || max_bytes <= RANDOM_READ_BYTES {
            self.prepare_random_read(start)?;
        }
        let budget = max_bytes.min(i32::MAX as u64);
        let (count, bytes) = self.estimate(start, end, budget);
        batch.terms.reserve(count);
        batch.offsets.reserve(count);
        batch.data.reserve(bytes);
        let mut sink = BatchSink {
            batch,
            start,
            budget,
        };
        self.read_into(start, end, budget, &mut sink)?;
        Ok(sink.batch)
    }

    /// Copies entries `start..end` (end exclusive, clamped to the log) into `sink`, each record
    /// checked (framing and CRC) on its copy, until the sink stops admitting them; `budget` (the
    /// data bytes the sink will admit) sizes the reads of the active segment. The loop of
    /// [`Log::read_batch`], for sinks that build something else (the delta columns).
    pub fn read_into(
        &mut self,
        start: i64,
        end: i64,
        budget: u64,
        sink: &mut impl ReadSink,
    ) -> Result<()> {
        self.check_read_start(start)?;
        let end = end.min(self.next_index());
        let mut lsn = start;
        while lsn < end {
            let k = self.segment_of(lsn);
            let seg = &mut self.segments[k];
            let last = (end - 1).min(seg.last_lsn());
            let to = if seg.sealed() {
                last
            } else {
                // One positioned read of what the budget can take (plus the record that
                // crosses it).
                let remaining = budget.saturating_sub(sink.used());
                seg.chunk_end(lsn, last, slack(remaining))
            };
            if !seg.copy_into(lsn, to, true, sink)? {
                break;
            }
            lsn = to + 1;
        }
        Ok(())
    }

    /// About how many entries and data bytes a read of `start..end` within `budget` returns,
    /// from the average record of the segment holding `start`: what a batch reserves, so its
    /// columns are written once instead of regrown and copied.
    pub fn estimate(&self, start: i64, end: i64, budget: u64) -> (usize, usize) {
        if end <= start || self.segments.is_empty() {
            return (0, 0);
        }
        let seg = &self.segments[self.segment_of(start)];
        let records = seg.len().max(1) as u64;
        let framing = crate::format::segment::HEADER_LEN as u64 + records * 16;
        let avg = (seg.size().saturating_sub(framing) / records).max(1);
        let wanted = (end - start) as u64;
        let count = wanted.min(budget / avg + 1).min(1 << 22);
        let bytes = (count * avg).min(budget.saturating_add(avg)).min(1 << 30);
        (count as usize, bytes as usize)
    }

    /// Calls `f(lsn, term, data)` for entries `start..end` without copying them, until it
    /// returns false. The bulk path of replay.
    pub fn scan(
        &mut self,
        start: i64,
        end: i64,
        f: impl FnMut(i64, i32, &[u8]) -> bool,
    ) -> Result<()> {
        self.check_read_start(start)?;
        let end = end.min(self.next_index());
        self.visit(start, end, u64::MAX, None, true, f)
    }

    /// Whether the replay right after open checks the records' CRCs (and padding) a second
    /// time: no, for a writable and a read-only log alike; it checks only the framing it walks
    /// by (`record::parse_framing`). Every record a log holds up to the replay was
    /// checked by the scan at open (`recovery::scan_dir`) on the file handle the segment then
    /// keeps (`Segment::from_file_scan` adopts the scan's file; later maps and positioned reads
    /// read that same inode), or was written by this process; and no tflux writer, in this
    /// process or another one sharing the directory, changes a byte a scan accepted or shrinks
    /// the file under it (`mmap.rs` has the argument for every writer). So a second pass would
    /// check the same bytes again; the one case it could catch, another program rewriting
    /// segment files in place between the scan and the replay, is outside what any reader of
    /// a map can guard against. Reads after open decide by [`Log::read_rechecks_crc`]
    /// (`Log::read`, `Log::read_batch` and `Log::scan` still check every record).
    pub fn replay_rechecks_crc() -> bool {
        false
    }

    /// Whether a read re-checks the CRC of the record at `lsn` in `seg` (and of those before
    /// it in that segment): not when the scan at open checked it in the file the segment still
    /// reads ([`Segment::checked_at_open`]), by the argument of [`Log::replay_rechecks_crc`],
    /// which holds for as long as the segment reads that file: no tflux writer changes a byte
    /// a scan accepted. Every other record is checked: one this process appended after the
    /// scan, one in a file a cut or a (de)compression wrote since. A read-only log never
    /// reaches past what its scan checked (it does not follow a writer's appends; a refresh
    /// opens a new log), so none of its records is checked twice. The one place that decides
    /// it for reads (docs/format.md, log decision on re-checks); `read_deltas` asks it.
    pub fn read_rechecks_crc(seg: &Segment, lsn: i64) -> bool {
        !seg.checked_at_open(lsn)
    }

    /// Entries `start..end` (end exclusive, clamped to the log) within `budget` data bytes
    /// (the first entry always) handed, per span of one segment, to a reader made by `make`
    /// that decodes them itself, maybe on several threads: the readers of the spans the read
    /// takes, in LSN order. Framing is checked here, CRCs where [`Log::read_rechecks_crc`]
    /// says. The walk runs on parts of about equal size as `split` says: the records about
    /// `budget` reaches (from the average record, [`Log::estimate`]) are walked at once, each
    /// span's reader taking its records as they are walked, then the budget is applied in LSN
    /// order, as a walk of one part at a time would (so a part may walk a few records past
    /// the end the budget sets: its reader is told to drop them); records the estimate did
    /// not reach are walked in a next round.
    pub fn locate<R: SpanReader>(
        &mut self,
        start: i64,
        end: i64,
        budget: u64,
        split: &Split,
        make: impl Fn(SpanStart<'_>) -> R + Sync,
    ) -> Result<Vec<R>> {
        self.check_read_start(start)?;
        let end = end.min(self.next_index());
        let mut readers = Vec::new();
        let mut used = 0u64;
        let mut lsn = start;
        while lsn < end {
            let left = budget.saturating_sub(used);
            let (count, bytes) = self.estimate(lsn, end, left);
            let horizon = (lsn + count.max(1) as i64 - 1).min(end - 1);
            let (spans, covered) = self.spans(lsn, horizon, split, left)?;
            let walk = |(k, span): (usize, &Span)| {
                let mut reader = make(SpanStart {
                    bytes: &span.bytes,
                    first_lsn: span.from,
                    records: (span.to - span.from + 1) as usize,
                    read: (count.max(1), bytes),
                    first: k == 0 && lsn == start,
                });
                (span.walk(left, &mut reader), reader)
            };
            let walked: Vec<(Walked, R)> = if spans.len() > 1 {
                use rayon::prelude::*;
                crate::cores::install(|| spans.par_iter().enumerate().map(walk).collect())
            } else {
                spans.iter().enumerate().map(walk).collect()
            };
            for (span, (walked, mut reader)) in spans.into_iter().zip(walked) {
                let mut take = 0;
                for &len in &walked.lens {
                    let total = used.saturating_add(u64::from(len));
                    if span.from + take as i64 != start && total > budget {
                        break;
                    }
                    used = total;
                    take += 1;
                }
                let walked_all = take == walked.lens.len();
                crate::pool::give(walked.lens);
                let complete = take == (span.to - span.from + 1) as usize;
                if take > 0 {
                    if !walked_all {
                        reader.truncate(take);
                    }
                    readers.push(reader);
                }
                if !walked_all || (!complete && walked.failure.is_none()) {
                    // The budget ends here (a walk stops early only past its budget).
                    return Ok(readers);
                }
                if let Some((at, reason)) = walked.failure {
                    let offset = span.base + at as u64;
                    return Err(self.segments[span.segment].unreadable_at(offset, reason));
                }
            }
            lsn = covered + 1;
        }
        Ok(readers)
    }

    /// The records `from..=to` cut into spans for [`Log::locate`] to walk, as many parts as
    /// `split` says, none across segments; the active segment is read only as far as `left`
    /// budget bytes reach. Returns the last LSN the spans cover.
    fn spans(&mut self, from: i64, to: i64, split: &Split, left: u64) -> Result<(Vec<Span>, i64)> {
        let n = (to - from + 1) as usize;
        let per = n.div_ceil(split.parts(n)).max(1) as i64;
        let mut spans = Vec::new();
        let mut lsn = from;
        let mut covered = to;
        while lsn <= covered {
            let k = self.segment_of(lsn);
            let seg = &mut self.segments[k];
            let mut last = covered.min(seg.last_lsn());
            if !seg.sealed() {
                // One positioned read of what the budget can take (plus the record that
                // crosses it), as `read_into`.
                last = seg.chunk_end(lsn, last, slack(left));
                covered = last;
            }
            // Part boundaries at `from + i * per`.
            let part_end = from + ((lsn - from) / per + 1) * per - 1;
            let span_to = last.min(part_end);
            let (bytes, base, at) = seg.span(lsn, span_to)?;
            spans.push(Span {
                dialect: seg.dialect(),
                bytes,
                base,
                at,
                seg_first: seg.first_lsn(),
                from: lsn,
                to: span_to,
                check_crc: Self::read_rechecks_crc(seg, span_to) && !seg.is_compressed(),
                segment: k,
            });
            lsn = span_to + 1;
        }
        Ok((spans, covered))
    }

    /// [`Log::scan`] for the replay right after open, without re-checking checksums (see
    /// [`Log::replay_rechecks_crc`]). Each entry
    /// comes with the bytes its data may be borrowed from (see
    /// [`crate::segment::Segment::replay_records`]): the map of a sealed plain segment, else
    /// `None`.
    pub fn scan_checked_at_open(
        &mut self,
        start: i64,
        end: i64,
        f: impl FnMut(i64, i32, &[u8], Option<&SegmentBytes>) -> bool,
    ) -> Result<()> {
        self.check_read_start(start)?;
        let end = end.min(self.next_index());
        let mut f = f;
        let mut lsn = start;
        while lsn < end {
            let k = self.segment_of(lsn);
            let seg_end = (self.segments[k].last_lsn() + 1).min(end);
            if !Self::replay_segment(&mut self.segments[k], lsn, seg_end - 1, &mut f)? {
                break;
            }
            lsn = seg_end;
        }
        Ok(())
    }

    /// The records `from..=to` of one segment for the replay right after open, as
    /// [`Log::scan_checked_at_open`] hands them (the one place that reads them: the replay
    /// after the scan and the replay overlapped with it, [`Log::prepare_feeding`], both call
    /// it). A sealed segment's map is dropped once read: what stays mapped is what restored
    /// records borrow. Returns false when `f` stopped.
    pub fn replay_segment(
        seg: &mut Segment,
        from: i64,
        to: i64,
        f: &mut impl FnMut(i64, i32, &[u8], Option<&SegmentBytes>) -> bool,
    ) -> Result<bool> {
        let check_crc = Self::replay_rechecks_crc();
        let mut go_on = true;
        seg.replay_records(from, to, check_crc, |l, t, d, src| {
            go_on = f(l, t, d, src);
            go_on
        })?;
        if seg.sealed() {
            seg.unmap();
        }
        Ok(go_on)
    }

    /// A handle on the active segment and the last LSN written to it, so that a caller can
    /// fsync outside any lock it holds around the log (group commit).
    /// Refused after a failed fsync (see `sync_failed`).
    pub fn sync_handle(&self) -> Result<(Arc<dyn StorageFile>, i64)> {
        if let Some(cause) = &self.sync_failed {
            return Err(Error::Poisoned {
                cause: cause.clone(),
            });
        }
        let active = self.segments.last().ok_or_else(|| {
            if self.opts.readonly {
                Error::ReadOnly {
                    path: self.dir.clone(),
                }
            } else {
                Error::Closed("log")
            }
        })?;
        Ok((active.shared_file()?, self.last_index()))
    }

    /// Drops the memory maps of sealed segments (remade on demand).
    pub fn unmap_sealed(&mut self) {
        for seg in &mut self.segments {
            seg.unmap();
        }
    }

    // ----- writes -----

    fn check_writable(&self) -> Result<()> {
        if self.opts.readonly {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
            });
        }
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned {
                cause: cause.clone(),
            });
        }
        Ok(())
    }

    /// Runs a write operation; an I/O error poisons the log (fail-stop until reopened).
    fn write_op<T>(&mut self, op: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_writable()?;
        let result = op(self);
        if let Err(Error::Io { .. }) = &result {
            if let Err(e) = &result {
                self.poisoned = Some(PoisonCause::from_error(e));
            }
        }
        result
    }

    /// Appends one entry; returns its LSN.
    pub fn append(&mut self, term: i32, data: &[u8]) -> Result<i64> {
        self.append_many(term, &[data])
    }

    /// Appends entries of one term with one write (and one sync); returns the first LSN.
    pub fn append_many<D: AsRef<[u8]>>(&mut self, term: i32, items: &[D]) -> Result<i64> {
        self.write_op(|log| {
            let first = log.next_index();
            let entries = items.iter().map(|d| (term, d.as_ref()));
            log.append_entries(entries, Commit::Leave)?;
            Ok(first)
        })
    }

    /// [`Log::append_many`] that also commits the entries in the same step (a writer that is
    /// its own quorum, as the store): once the entries are written the call succeeds, and a
    /// failed roll-over only stops later writes. Appending and committing as two calls would
    /// let the roll-over fail the commit of entries that are already in the log.
    pub fn append_many_committed<D: AsRef<[u8]>>(&mut self, term: i32, items: &[D]) -> Result<i64> {
        self.write_op(|log| {
            let first = log.next_index();
            let entries = items.iter().map(|d| (term, d.as_ref()));
            log.append_entries(entries, Commit::Through)?;
            Ok(first)
        })
    }

    /// The LSN the next appended entry gets.
    fn next_index(&self) -> i64 {
        // Never overflows: no entry is ever placed past MAX_ENTRY_LSN.
        self.last_index() + 1
    }

    /// Validates terms and sizes, then writes the entries into the active segment.
    fn append_entries<'a>(
        &mut self,
        entries: impl Iterator<Item = (i32, &'a [u8])> + Clone,
        commit: Commit,
    ) -> Result<()> {
        let mut previous = self.last_term_or_zero();
        let mut bytes = 0usize;
        check_lsn_room(self.next_index(), entries.clone().count())?;
        for (term, data) in entries.clone() {
            check_term(term, previous)?;
            if data.is_empty() && !self.opts.empty_entries {
                return Err(Error::InvalidArgument(
                    "empty entries are disabled for this log (empty_entries=False)".into(),
                ));
            }
            if data.len() > i32::MAX as usize {
                return Err(Error::InvalidArgument(format!(
                    "entry of {} bytes exceeds the format's limit of {} bytes",
                    data.len(),
                    i32::MAX
                )));
            }
            previous = term;
            bytes += with_framing!(self.dialect, F => F::record_len(data.len()));
        }
        if bytes == 0 {
            return Ok(());
        }
        let mut encoded = Vec::with_capacity(bytes + record::END_MARKER.len());
        let mut placed = Vec::new();
        for (term, data) in entries {
            placed.push((encoded.len() as u64, term));
            with_framing!(self.dialect, F => F::encode(&mut encoded, term, data));
        }
        let active = self.active();
        active.append_encoded(&mut encoded, &placed)?;
        if commit == Commit::Through {
            self.commit_index = self.last_index();
        }
        if self.opts.sync == SyncPolicy::Always {
            self.sync_active()?;
        }
        // The entries are written (and synced per policy): a failed roll-over must not report
        // them as failed, or the caller's view would diverge from the log. It stops further
        // writes instead (fail-stop), and the next open finds a consistent log.
        if let Err(e) = self.maybe_roll() {
            self.poisoned = Some(PoisonCause::from_error(&e));
        }
        Ok(())
    }

    fn active(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a writable log always has an active segment")
    }

    /// Follower path: entries replace the log from `start` on; a gap restarts the log at `start`.
    pub fn insert_range<D: AsRef<[u8]>>(&mut self, start: i64, entries: &[(i32, D)]) -> Result<()> {
        self.write_op(|log| {
            if start < log.start_index() {
                return Err(Error::InvalidArgument(format!(
                    "insert_range at {start} is before the start of the log ({})",
                    log.start_index()
                )));
            }
            if start <= log.commit_index {
                return Err(Error::InvalidArgument(format!(
                    "insert_range at {start} would overwrite committed entries (commit index {})",
                    log.commit_index
                )));
            }
            check_lsn_room(start, entries.len())?;
            let gap = start > log.next_index();
            // Validate every term before discarding anything.
            let mut previous = if gap || start == log.start_index() {
                0
            } else {
                log.term_at(start - 1)?
            };
            for (term, _) in entries {
                check_term(*term, previous)?;
                previous = *term;
            }
            if gap {
                log.restart(start)?;
            } else {
                log.discard_from(start)?;
            }
            let entries_ref = entries.iter().map(|(t, d)| (*t, d.as_ref()));
            log.append_entries(entries_ref, Commit::Leave)?;
            if entries.is_empty() {
                log.sync_if(SyncPolicy::Always)?;
            }
            Ok(())
        })
    }

    /// Raises the commit index (never lowers it); may roll the active segment over.
    pub fn commit(&mut self, lsn: i64) -> Result<()> {
        self.write_op(|log| {
            if lsn > log.last_index() {
                return Err(Error::InvalidArgument(format!(
                    "cannot commit {lsn}: the last LSN is {}",
                    log.last_index()
                )));
            }
            if lsn < log.commit_index {
                return Ok(()); // below the commit index, commit does nothing (spec 3.1)
            }
            // Checked also when the index stays put: a truncation may have made the active
            // segment fully committed since the last commit.
            log.commit_index = lsn;
            // As after an append: the commit stands; a failed roll-over stops later writes.
            if let Err(e) = log.maybe_roll() {
                log.poisoned = Some(PoisonCause::from_error(&e));
            }
            Ok(())
        })
    }

    /// Drops the uncommitted entries after `lsn`.
    pub fn truncate_after(&mut self, lsn: i64) -> Result<()> {
        self.write_op(|log| {
            if lsn < log.commit_index {
                return Err(Error::InvalidArgument(format!(
                    "cannot truncate after {lsn}: entries up to {} are committed",
                    log.commit_index
                )));
            }
            if lsn >= log.last_index() {
                return Ok(());
            }
            log.discard_from(lsn + 1)?;
            log.sync_if(SyncPolicy::Always)
        })
    }

    /// Deletes the leading sealed segments whose entries are all `<= snapshot_index`.
    /// Returns how many segment files were deleted.
    pub fn compact(&mut self, snapshot_index: i64) -> Result<usize> {
        self.write_op(|log| {
            if snapshot_index > log.commit_index {
                return Err(Error::InvalidArgument(format!(
                    "cannot compact up to {snapshot_index}: only entries up to {} are committed",
                    log.commit_index
                )));
            }
            let obsolete = log.segments[..log.segments.len() - 1]
                .iter()
                .take_while(|s| s.last_lsn() <= snapshot_index)
                .count();
            for seg in log.segments.drain(..obsolete) {
                let path = seg.path();
                let removed = log.opts.storage.remove_file(path);
                removed.ctx("delete compacted segment", path)?;
            }
            if obsolete > 0 {
                sync_dir(&*log.opts.storage, &log.dir)?;
            }
            Ok(obsolete)
        })
    }

    /// Makes every written entry durable.
    pub fn sync(&mut self) -> Result<()> {
        self.write_op(|log| log.sync_active())
    }

    /// [`Error::Forked`] in a process forked after the log was opened: every use by a binding
    /// checks this first (the one place the rule is kept for a log; `crate::fork`).
    pub fn check_process(&self) -> Result<()> {
        self.born.check("log")
    }

    /// Syncs per policy and releases the directory lock. A forked child's copy lets go of its
    /// files without writing anything.
    pub fn close(mut self) -> Result<()> {
        if !self.born.is_here() {
            return Ok(());
        }
        if !self.opts.readonly && self.poisoned.is_none() && self.opts.sync == SyncPolicy::Batch {
            self.sync_active()?;
        }
        Ok(())
    }

    /// Like `close`, for an owner that cannot give the log away: syncs per policy, releases
    /// the directory lock and every file; the log holds nothing afterwards and refuses writes.
    pub fn release(&mut self) -> Result<()> {
        let result = if !self.opts.readonly
            && self.poisoned.is_none()
            && self.opts.sync == SyncPolicy::Batch
            && !self.segments.is_empty()
        {
            self.sync_active()
        } else {
            Ok(())
        };
        self.segments.clear();
        self._lock = None;
        self.poisoned = Some(PoisonCause::because("the log was closed"));
        result
    }

    fn sync_if(&mut self, policy: SyncPolicy) -> Result<()> {
        if self.opts.sync == policy {
            self.sync_active()?;
        }
        Ok(())
    }

    /// Discards entries from `lsn` on: delete obsolete segments newest first, then rewrite the
    /// segment holding the cut without the discarded records ([`segment::rewrite_prefix`]).
    /// Fsyncs the active segment, remembering a failure (see `sync_failed`).
    fn sync_active(&mut self) -> Result<()> {
        let result = self.active().sync();
        if let Err(e) = &result {
            self.sync_failed = Some(PoisonCause::from_error(e));
        }
        result
    }

    /// Why writes are refused, if they are (an I/O error, a failed roll-over, a close).
    pub fn poisoned(&self) -> Option<&PoisonCause> {
        self.poisoned.as_ref()
    }

    /// Discards entries from `lsn` on: delete obsolete segments newest first, then zero the cut.
    fn discard_from(&mut self, lsn: i64) -> Result<()> {
        if lsn > self.last_index() {
            return Ok(());
        }
        let k = self.segment_of(lsn);
        while self.segments.len() > k + 1 {
            let seg = self.segments.pop().expect("len > k + 1");
            let path = seg.path();
            let removed = self.opts.storage.remove_file(path);
            removed.ctx("delete discarded segment", path)?;
        }
        if self.segments.len() > 1 || k > 0 {
            sync_dir(&*self.opts.storage, &self.dir)?;
        }
        let opts = segment::RewriteOptions {
            preallocate: self.preallocation(),
            stop_after: self.cut_stop,
        };
        let seg = self.active();
        seg.unseal()?;
        seg.cut_at(lsn, &opts)
    }

    /// Bytes reserved in a new segment file (and in the file a cut writes).
    fn preallocation(&self) -> u64 {
        if self.opts.preallocate {
            self.opts.soft_limit
        } else {
            0
        }
    }

    /// Fault injection for crash tests: the next cuts stop right after `step`, leaving the
    /// files as a kill there would (the call fails and the log refuses further writes).
    #[doc(hidden)]
    pub fn stop_cuts_after(&mut self, step: Option<segment::RewriteStep>) {
        self.cut_stop = step;
    }

    /// Fault injection for crash tests: the next compressions stop right after `step`.
    #[doc(hidden)]
    pub fn stop_compress_after(&mut self, step: Option<crate::segment::compress::CompressStep>) {
        self.compress_stop = step;
    }

    /// First LSNs of the sealed segments not yet compressed (never the active segment).
    /// Compressed segments (spec section 9) exist only in the spec dialect (section 11): a
    /// taskflux log refuses to compress, so TaskFlux can still open every file.
    fn check_compressible_dialect(&self) -> Result<()> {
        match self.dialect {
            Dialect::Spec => Ok(()),
            Dialect::Taskflux => Err(Error::Dialect {
                path: self.dir.clone(),
                reason: "this log is in the taskflux dialect: compressed segments (spec \
                         section 9) exist only in the spec dialect, so nothing was compressed"
                    .into(),
            }),
        }
    }

    pub fn compressible(&self) -> Vec<i64> {
        let sealed = &self.segments[..self.segments.len().saturating_sub(1)];
        sealed
            .iter()
            .filter(|s| s.sealed() && !s.is_empty() && s.compression().is_none())
            // Original = header through end marker; a `.z` holds at most MAX_ORIGINAL_LEN.
            .filter(|s| s.size() + 4 <= crate::format::compressed::MAX_ORIGINAL_LEN)
            .map(|s| s.first_lsn())
            .collect()
    }

    /// Replaces the sealed segment starting at `first_lsn` by a `.log.z` (spec section 9);
    /// `None` when there is no such segment still to compress (compacted, already compressed,
    /// or the active one). One segment per call, so that an owner can release its lock between
    /// segments. A failure leaves the segment readable (the `.log` goes only once the `.z` is
    /// durable) and, unlike other writes, does not stop later writes: the active segment is
    /// never touched.
    pub fn compress_one(&mut self, first_lsn: i64, method: Method) -> Result<Option<PathBuf>> {
        self.check_writable()?;
        self.check_compressible_dialect()?;
        let log = self;
        {
            let last = log.segments.len().saturating_sub(1);
            let Some(k) = log.segments[..last]
                .iter()
                .position(|s| s.first_lsn() == first_lsn)
            else {
                return Ok(None);
            };
            if !log.compressible().contains(&first_lsn) {
                return Ok(None);
            }
            let opts = crate::segment::compress::CompressOptions {
                method,
                stop_after: log.compress_stop,
            };
            let (storage, dir) = (Arc::clone(&log.opts.storage), log.dir.clone());
            let seg = &mut log.segments[k];
            crate::segment::compress::compress_segment(&storage, &dir, seg, &opts).map(Some)
        }
    }

    /// Compresses every sealed segment not yet compressed; returns the new `.log.z` files.
    pub fn compress(&mut self, method: Method) -> Result<Vec<PathBuf>> {
        self.check_writable()?;
        self.check_compressible_dialect()?;
        let mut made = Vec::new();
        for first in self.compressible() {
            made.extend(self.compress_one(first, method)?);
        }
        Ok(made)
    }

    /// Discards the whole log and starts it again, empty, at `start`.
    fn restart(&mut self, start: i64) -> Result<()> {
        self.restart_moving(start, None)
    }

    /// Starts the log again, empty, at `start`, moving every segment file into `../temp`
    /// (`restart-<unix time>-<name>`) instead of deleting it; returns the new paths. For a
    /// snapshot found ahead of the whole log: if that snapshot's index is itself damaged (it is
    /// outside the snapshot's checksum), the entries are still on disk to recover.
    pub fn restart_moving_aside(&mut self, start: i64) -> Result<Vec<PathBuf>> {
        self.write_op(|log| {
            let temp = log.temp_dir()?;
            let mut moved = Vec::new();
            log.restart_moving(start, Some((&temp, &mut moved)))?;
            sync_dir(&*log.opts.storage, &temp)?;
            Ok(moved)
        })
    }

    fn restart_moving(
        &mut self,
        start: i64,
        mut aside: Option<(&Path, &mut Vec<PathBuf>)>,
    ) -> Result<()> {
        while let Some(seg) = self.segments.pop() {
            match aside.as_mut() {
                Some((temp, moved)) if !seg.is_empty() => {
                    let storage = &*self.opts.storage;
                    moved.push(fsutil::move_aside(storage, seg.path(), temp, "restart")?);
                }
                _ => {
                    let removed = self.opts.storage.remove_file(seg.path());
                    removed.ctx("delete discarded segment", seg.path())?
                }
            }
        }
        sync_dir(&*self.opts.storage, &self.dir)?;
        self.create_segment(start)?;
        self.commit_index = start - 1;
        Ok(())
    }

    fn maybe_roll(&mut self) -> Result<()> {
        let (soft, hard) = (self.opts.soft_limit, self.opts.hard_limit);
        let committed = self.commit_index;
        let active = self.active();
        if active.is_empty() {
            return Ok(());
        }
        let size = active.size();
        let all_committed = committed >= active.last_lsn();
        if (soft < size && all_committed) || hard < size {
            let next = active.last_lsn() + 1;
            if self.opts.sync == SyncPolicy::Batch {
                self.sync_active()?;
            }
            // The new segment first, then the old one sealed: a new segment that cannot be made
            // (disk full while preallocating) and left nothing behind leaves the active one as
            // it was, still active. The roll-over is then tried again after the next write (the
            // limits are hints), and nothing stops: a channel can still collect and free the
            // space it needs (issue 30 item 5: the log refused every write, again after each
            // reopen, and collection too).
            match self.try_create_segment(next) {
                Ok(()) => {
                    let previous = self.segments.len() - 2;
                    self.segments[previous].seal();
                }
                Err((_, Leftover::Nothing)) => {}
                Err((e, Leftover::File)) => return Err(e),
            }
        }
        Ok(())
    }

    fn create_segment(&mut self, first_lsn: i64) -> Result<()> {
        self.try_create_segment(first_lsn).map_err(|(e, _)| e)
    }

    /// Creates and adds the segment starting at `first_lsn`; on failure, whether a file of it
    /// may be left on disk (one that would be taken for the active segment at the next open,
    /// and overlap the records written meanwhile).
    fn try_create_segment(&mut self, first_lsn: i64) -> std::result::Result<(), (Error, Leftover)> {
        let preallocate = self.preallocation();
        let seg = match Segment::create(
            &self.opts.storage,
            self.dialect,
            &self.dir,
            first_lsn,
            preallocate,
        ) {
            Ok(seg) => seg,
            Err(e) => {
                // Do not leave a half-made file behind (e.g. disk full while preallocating).
                let path = self.dir.join(seg_format::file_name(first_lsn));
                let left = match self.opts.storage.remove_file(&path) {
                    Ok(()) => Leftover::Nothing,
                    Err(r) if r.kind() == std::io::ErrorKind::NotFound => Leftover::Nothing,
                    Err(_) => Leftover::File,
                };
                return Err((e, left));
            }
        };
        // A failed directory fsync proves nothing about what is on disk: the file may be.
        sync_dir(&*self.opts.storage, &self.dir).map_err(|e| (e, Leftover::File))?;
        self.segments.push(seg);
        Ok(())
    }
}

/// What a failed segment creation may have left on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    Nothing,
    File,
}

/// Whether entries are committed as they are appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    Leave,
    Through,
}

pub use crate::segment::MAX_ENTRY_LSN;

/// Refuses to place `count` entries from `first` on when the last would be past
/// [`MAX_ENTRY_LSN`].
fn check_lsn_room(first: i64, count: usize) -> Result<()> {
    let last = i64::try_from(count)
        .ok()
        .and_then(|n| first.checked_add(n))
        .map(|end| end - 1);
    match last {
        _ if count == 0 => Ok(()),
        Some(last) if last <= MAX_ENTRY_LSN => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{count} entries from LSN {first} would pass the largest LSN {MAX_ENTRY_LSN}"
        ))),
    }
}

fn check_term(term: i32, previous: i32) -> Result<()> {
    if term < 0 {
        return Err(Error::InvalidArgument(format!(
            "term must be >= 0 (got {term})"
        )));
    }
    if term < previous {
        return Err(Error::InvalidArgument(format!(
            "terms never decrease along the log: {term} after {previous}"
        )));
    }
    Ok(())
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

/// Name, device, inode and birth time of a file: a file deleted and made again under the same
/// name may reuse the inode number, not the birth time (where the file system records one).
type FileIdentity = (std::ffi::OsString, u64, u64, Option<SystemTime>);

/// The [`FileIdentity`] of every segment-named entry of `dir`, sorted; empty when the
/// directory cannot be listed. Two equal lists mean no segment was added, removed or replaced
/// in between (appends do not count).
fn segment_identities(dir: &Path) -> Vec<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| {
                    seg_format::parse_file_name(n)
                        .or_else(|| crate::format::compressed::parse_file_name(n))
                })
                .is_some()
        })
        .filter_map(|e| {
            let meta = fs::metadata(e.path()).ok()?;
            Some((e.file_name(), meta.dev(), meta.ino(), meta.created().ok()))
        })
        .collect();
    out.sort();
    out
}

/// A read-only open's failure becomes [`Error::StaleRead`] when the segments changed since
/// `before` (a writer deleted, replaced or added one while they were scanned) and the failure
/// is one such a change causes: corruption (a gap, a record being written or replaced) or a
/// file gone missing.
fn stale_if_changed(err: Error, dir: &Path, before: &[FileIdentity]) -> Error {
    let changed = || segment_identities(dir) != before;
    match err {
        Error::Corruption {
            path,
            offset,
            reason,
        } if changed() => Error::stale_read(&path, offset, reason),
        // A segment listed (and stat'ed), then not found: deleted since. Only a dangling
        // symbolic link under a segment's name is not found for good. (No identity check: a
        // roll-over and a cut can delete a file and make the same names and inode numbers
        // again within one timestamp tick.)
        Error::Io { op, path, source }
            if source.kind() == std::io::ErrorKind::NotFound
                && path != dir
                && (path.symlink_metadata().is_err() || path.exists() || changed()) =>
        {
            Error::stale_read(&path, None, format!("{op}: {source}"))
        }
        err => err,
    }
}

#[cfg(test)]
mod tests {
    use super::{Log, LogOptions, SyncPolicy};
    use crate::segment::reads_before_full_offsets;

    fn indexed(log: &Log) -> Vec<bool> {
        log.segments
            .iter()
            .map(|s| s.indexes_every_record())
            .collect()
    }

    /// The full offsets (4 B per record) are built for the segment small reads land in, once
    /// they are worth a walk of it, and only then: opening, replaying, reading in large batches
    /// and a few random reads leave every sealed segment with its sparse index.
    #[test]
    fn only_enough_random_reads_build_a_segments_full_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LogOptions {
            soft_limit: 4096,
            hard_limit: 8192,
            sync: SyncPolicy::Never,
            ..LogOptions::default()
        };
        let mut log = Log::open(dir.path(), opts.clone()).unwrap();
        for i in 0..1000u32 {
            let lsn = log.append(1, &i.to_be_bytes().repeat(3)).unwrap();
            log.commit(lsn).unwrap(); // segments roll at a commit
        }
        drop(log);
        for readonly in [false, true] {
            let mut log = Log::open(
                dir.path(),
                LogOptions {
                    readonly,
                    ..opts.clone()
                },
            )
            .unwrap();
            let segments = log.segments.len();
            assert!(segments > 4);
            let mut lsn = 0;
            while lsn <= log.last_index() {
                lsn += log.read_batch(lsn, i64::MAX, 4 << 20).unwrap().len() as i64;
            }
            log.scan(0, i64::MAX, |_, _, _| true).unwrap();
            assert_eq!(log.read(0, None).unwrap().len(), 1000);
            assert!(indexed(&log).iter().all(|&b| !b));

            let k = log.segment_of(503);
            let need = reads_before_full_offsets(log.segments[k].len());
            assert!(need > 1, "a segment of this test must need several reads");
            for _ in 1..need {
                let one = log.read(503, Some(1)).unwrap();
                assert_eq!(one[0].data, 503u32.to_be_bytes().repeat(3));
            }
            assert!(indexed(&log).iter().all(|&b| !b));
            assert_eq!(
                log.read(503, Some(1)).unwrap()[0].data,
                503u32.to_be_bytes().repeat(3)
            );
            let want: Vec<bool> = (0..segments).map(|i| i == k).collect();
            assert_eq!(indexed(&log), want);
            for _ in 0..reads_before_full_offsets(log.segments[0].len()) {
                let batch = log.read_batch(7, 8, 4 << 20).unwrap();
                assert_eq!(batch.data, 7u32.to_be_bytes().repeat(3));
            }
            assert!(log.segments[0].indexes_every_record());
        }
    }
}
