//! One segment file: scanning its records, appending to it, cutting it.
//!
//! The segment keeps an in-memory index (the start offset of each record and the runs of equal
//! terms) built by the scan at open, so reads go straight to a record. Sealed segments are read
//! through a read-only memory map; the active (last) segment is read and written with positioned
//! reads and writes.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::format::compressed::{self, BadCompressed};
use crate::format::dialect::Dialect;
use crate::format::record::{self, BadRecord, ChecksumRun, Frame, Framing, END_MARKER};
use crate::format::segment as header;
use crate::io::mmap::map_readonly;
use crate::io::storage::{Open, Rename, Storage, StorageFile};
use crate::segbytes;
pub use crate::segbytes::SegmentBytes;
use crate::steps::{Step, StepWriter, Steps};
use crate::with_framing;

/// The largest LSN an entry can have. `i64::MAX` itself is kept as the exclusive end past such
/// an entry (the next LSN, the start of a log emptied after it), so that every LSN the log
/// computes fits an i64 (docs/format.md, log decision "LSN limit").
pub const MAX_ENTRY_LSN: i64 = i64::MAX - 1;

/// Where a scan stopped when it did not reach a clean end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanStop {
    /// End marker or physical end of file at a record boundary.
    Clean,
    /// A record that cannot be read: torn (last segment) or corrupt (sealed segment).
    Bad { offset: u64, reason: BadRecord },
    /// A complete record whose term is negative or lower than the one before it.
    Term {
        offset: u64,
        term: i32,
        previous: i32,
    },
}

impl ScanStop {
    pub fn offset(&self) -> Option<u64> {
        match self {
            ScanStop::Clean => None,
            ScanStop::Bad { offset, .. } | ScanStop::Term { offset, .. } => Some(*offset),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ScanStop::Clean => "clean".into(),
            ScanStop::Bad { reason, .. } => reason.to_string(),
            ScanStop::Term { term, previous, .. } if *term < 0 => {
                format!("negative term {term} (previous {previous})")
            }
            ScanStop::Term { term, previous, .. } => {
                format!("term {term} lower than the previous record's term {previous}")
            }
        }
    }
}

/// Walks the spec records of `buf` from offset 8, calling `visit(offset, term, data)` for each
/// good record. Stops at the end marker, the first bad record, or the first decreasing term.
/// Returns the offset just past the last good record and why it stopped.
#[inline]
pub fn scan_records<'a>(
    buf: &'a [u8],
    previous_term: i32,
    visit: impl FnMut(u64, i32, &'a [u8]),
) -> (u64, ScanStop) {
    scan_records_in::<record::Spec>(buf, header::HEADER_LEN, previous_term, visit)
}

/// [`scan_records`] of `dialect`'s records from the record at `at` (a record boundary;
/// `previous_term` is the term of the record before it).
#[inline]
pub fn scan_records_from<'a>(
    dialect: Dialect,
    buf: &'a [u8],
    at: usize,
    previous_term: i32,
    visit: impl FnMut(u64, i32, &'a [u8]),
) -> (u64, ScanStop) {
    with_framing!(dialect, F => scan_records_in::<F>(buf, at, previous_term, visit))
}

/// [`scan_records_from`] with the framing fixed at compile time.
#[inline]
pub fn scan_records_in<'a, F: Framing>(
    buf: &'a [u8],
    mut at: usize,
    mut previous_term: i32,
    mut visit: impl FnMut(u64, i32, &'a [u8]),
) -> (u64, ScanStop) {
    let mut checksums = F::checksum_run(buf);
    loop {
        prefetch_ahead(buf, at);
        // Framing first, then the checksum (the order `parse_in::<F, true>` checks them in),
        // through the run, which may do better knowing the records come in order.
        match record::parse_in::<F, false>(buf, at) {
            Frame::Record { term, data, next } => {
                let from = at + F::HEADER_LEN;
                let stored = F::stored_checksum(&buf[at..]);
                if let Err(reason) = checksums.check(from..from + data.len(), stored) {
                    let offset = at as u64;
                    return (offset, ScanStop::Bad { offset, reason });
                }
                // Neither negative nor below the term before (one comparison: after the first
                // record the term before is never negative).
                if term < previous_term.max(0) {
                    let stop = ScanStop::Term {
                        offset: at as u64,
                        term,
                        previous: previous_term,
                    };
                    return (at as u64, stop);
                }
                visit(at as u64, term, data);
                previous_term = term;
                at = next;
            }
            Frame::End => return (at as u64, ScanStop::Clean),
            Frame::Bad(reason) => {
                return (
                    at as u64,
                    ScanStop::Bad {
                        offset: at as u64,
                        reason,
                    },
                )
            }
        }
    }
}

/// How far ahead of the record being checked the walk asks for bytes: the next record's offset
/// comes from this record's length field, so without a hint each record's first bytes are
/// waited for in turn (and the hardware's prefetcher stops at every page boundary). About a
/// dozen 64-byte records, or one 1 KiB record, ahead.
const PREFETCH_DISTANCE: usize = 1024;

/// Asks the CPU to start loading the bytes `PREFETCH_DISTANCE` past `at`: a hint, with no effect
/// on what the walk reads or finds. `perf` of verify on 64 B records had 31% of the framing's
/// samples on the wait for a record's last word.
#[inline(always)]
fn prefetch_ahead(buf: &[u8], at: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // Not bounds-checked: an address past the end is only a wasted hint (no dereference,
        // so `wrapping_add` needs no bound either).
        let ahead = buf
            .as_ptr()
            .wrapping_add(at.wrapping_add(PREFETCH_DISTANCE));
        // SAFETY: a prefetch reads nothing and never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (buf, at);
}

/// Records between two remembered offsets in a sealed segment's index. Finding a record walks
/// at most this many headers in the memory map; the index costs 8 / 8 = 1 byte per record
/// instead of 8 (the log's only per-record memory, until something reads the segment at random:
/// `Segment::index_every_record`).
const SEALED_STRIDE: usize = 8;

/// The stride of [`RecordIndex::counting`]: no segment holds this many records.
const COUNTING_STRIDE: usize = 1 << (usize::BITS - 1);

/// Small reads of a sealed segment of `records` records after which its full offsets are built
/// ([`Segment::note_random_read`]).
pub fn reads_before_full_offsets(records: usize) -> usize {
    (records / 32).max(1)
}

/// Start offsets of the records of one segment and the runs of equal terms. Dense (every
/// record) for the active segment, which is read with positioned reads; sparse (every
/// `SEALED_STRIDE`-th record) for sealed segments, which are memory-mapped.
#[derive(Debug, Clone)]
pub struct RecordIndex {
    /// Offset of record `k * stride` at position `k`.
    offsets: Vec<u64>,
    stride: usize,
    len: usize,
    /// `(first record index, term)` for each run of equal terms, ascending.
    term_runs: Vec<(usize, i32)>,
}

impl Default for RecordIndex {
    fn default() -> Self {
        RecordIndex {
            offsets: Vec::new(),
            stride: 1,
            len: 0,
            term_runs: Vec::new(),
        }
    }
}

impl RecordIndex {
    /// An empty index that remembers every `stride`-th offset (a power of two): the scan of a
    /// sealed segment builds it directly instead of a dense one to thin out when it seals.
    pub fn sparse(stride: usize) -> RecordIndex {
        debug_assert!(stride.is_power_of_two());
        RecordIndex {
            stride,
            ..RecordIndex::default()
        }
    }

    /// An index that counts records and keeps their terms but remembers only the first offset:
    /// a sealed segment that nothing reads after its scan (`verify`). It stays a correct index,
    /// since finding a record walks from the remembered one, but that walk is the whole segment.
    pub fn counting() -> RecordIndex {
        RecordIndex::sparse(COUNTING_STRIDE)
    }

    /// Adds the next record (offsets of a sparse index only at multiples of its stride).
    #[inline]
    pub fn push(&mut self, offset: u64, term: i32) {
        if self.term_runs.last().is_none_or(|&(_, t)| t != term) {
            self.term_runs.push((self.len, term));
        }
        if self.len & (self.stride - 1) == 0 {
            self.offsets.push(offset);
        }
        self.len += 1;
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_dense(&self) -> bool {
        self.stride == 1
    }

    /// Offset of record `i` (dense index). Checked in release builds too: a sparse index would
    /// answer with some other record's offset, silently.
    pub fn offset(&self, i: usize) -> u64 {
        assert!(
            self.is_dense(),
            "offset of a record asked of a sparse index"
        );
        self.offsets[i]
    }

    /// The remembered record at or before `i`: `(its index, its offset)`.
    fn anchor(&self, i: usize) -> (usize, u64) {
        let k = i / self.stride;
        (k * self.stride, self.offsets[k])
    }

    pub fn term(&self, i: usize) -> i32 {
        let run = self.term_runs.partition_point(|&(first, _)| first <= i);
        self.term_runs[run - 1].1
    }

    pub fn last_term(&self) -> Option<i32> {
        self.term_runs.last().map(|&(_, t)| t)
    }

    /// Number of records that start before `offset` (dense index).
    pub fn iter_until(&self, offset: u64) -> usize {
        assert!(self.is_dense(), "record count asked of a sparse index");
        self.offsets.partition_point(|&o| o < offset)
    }

    pub fn truncate(&mut self, len: usize) {
        let len = len.min(self.len);
        self.offsets.truncate(len.div_ceil(self.stride));
        self.len = len;
        let runs = self.term_runs.partition_point(|&(first, _)| first < len);
        self.term_runs.truncate(runs);
    }

    /// Keeps every `stride`-th offset (the segment became sealed).
    fn sparsify(&mut self, stride: usize) {
        if self.is_dense() && stride > 1 {
            self.offsets = self.offsets.iter().copied().step_by(stride).collect();
            self.stride = stride;
        }
    }
}

/// Offset of the record `steps` records after the one at `at`, following the headers' lengths.
/// `None` when a header is missing or a length runs past the bytes: the file changed under a
/// read-only reader (another process truncated it), or was damaged since it was scanned.
fn walk_in(dialect: Dialect, bytes: &[u8], at: usize, steps: usize) -> Option<usize> {
    with_framing!(dialect, F => walk::<F>(bytes, at, steps))
}

/// [`walk_in`] with the framing fixed at compile time.
fn walk<F: Framing>(bytes: &[u8], mut at: usize, steps: usize) -> Option<usize> {
    for _ in 0..steps {
        let header = bytes.get(at..at.checked_add(F::HEADER_LEN)?)?;
        if header[..4] != record::RECORD_MARKER {
            return None;
        }
        at = at.checked_add(F::record_len(F::data_len(header)))?;
        if at > bytes.len() {
            return None;
        }
    }
    Some(at)
}

/// The walk over the records `from..=to` (of a segment whose first LSN is `first_lsn`) laid
/// out in `bytes` from index `at`: frames each record (and checks its CRC when `CRC`) and hands
/// it to `step` with its index in `bytes`. `Err((index, reason))` names a missing or damaged
/// record, or the reason `step` refused one; `Ok(false)` when `step` stopped the walk.
/// `Segment::walk` turns the failure into an error naming the file; a bulk read walking parts
/// of segments on other threads does so afterwards ([`Segment::unreadable_at`]).
pub fn walk_frames<F: Framing, const CRC: bool>(
    bytes: &[u8],
    at: usize,
    first_lsn: i64,
    from: i64,
    to: i64,
    step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, (usize, String)> {
    walk_frames_by(
        record::parse_in::<F, CRC>,
        bytes,
        at,
        first_lsn,
        from,
        to,
        step,
    )
}

/// [`walk_frames`] checking only the framing ([`record::parse_framing`]): for the replay right
/// after open, over bytes the scan at open accepted whole. It asks for the bytes ahead as the
/// scan does (`prefetch_ahead`): the scan read them long before, and at 1 KiB the wait for
/// each record's header was most of the replay's walk.
pub fn walk_framing<F: Framing>(
    bytes: &[u8],
    at: usize,
    first_lsn: i64,
    from: i64,
    to: i64,
    step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, (usize, String)> {
    let parse = |b, at| {
        prefetch_ahead(b, at);
        record::parse_framing_in::<F>(b, at)
    };
    walk_frames_by(parse, bytes, at, first_lsn, from, to, step)
}

#[inline(always)]
fn walk_frames_by<'b>(
    parse: impl Fn(&'b [u8], usize) -> Frame<'b>,
    bytes: &'b [u8],
    mut at: usize,
    first_lsn: i64,
    from: i64,
    to: i64,
    mut step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
) -> std::result::Result<bool, (usize, String)> {
    for lsn in from..=to {
        let reason = match parse(bytes, at) {
            Frame::Record { term, data, next } => match step(lsn, term, data, at) {
                Ok(true) => {
                    at = next;
                    continue;
                }
                Ok(false) => return Ok(false),
                Err(reason) => reason,
            },
            Frame::End => format!("record {lsn} vanished (segment starts at {first_lsn})"),
            Frame::Bad(reason) => reason.to_string(),
        };
        return Err((at, reason));
    }
    Ok(true)
}

/// Where [`Segment::copy_into`] puts records: each record's data is appended to `data()` and
/// checked there, then `push` takes its LSN and term.
pub trait RecordSink {
    /// Whether to copy the record at `lsn` carrying `len` data bytes (false stops the copy).
    fn admit(&mut self, lsn: i64, len: usize) -> bool;
    /// The buffer the next record's data is appended to.
    fn data(&mut self) -> &mut Vec<u8>;
    /// The record's data (the tail of `data()`) is in place and checked; false stops after it.
    fn push(&mut self, lsn: i64, term: i32) -> bool;
}

/// [`Segment::visit`] of a read-only log: each record's data through one reused buffer.
struct Scratch<A, F> {
    data: Vec<u8>,
    admit: A,
    f: F,
}

impl<A: FnMut(i64, usize) -> bool, F: FnMut(i64, i32, &[u8]) -> bool> RecordSink for Scratch<A, F> {
    fn admit(&mut self, lsn: i64, len: usize) -> bool {
        (self.admit)(lsn, len)
    }

    fn data(&mut self) -> &mut Vec<u8> {
        self.data.clear();
        &mut self.data
    }

    fn push(&mut self, lsn: i64, term: i32) -> bool {
        (self.f)(lsn, term, &self.data)
    }
}

/// An open segment file.
#[derive(Debug)]
pub struct Segment {
    path: PathBuf,
    /// How its records are framed (the log's dialect).
    dialect: Dialect,
    first_lsn: i64,
    index: RecordIndex,
    /// Offset just past the last record (header included, end marker excluded).
    size: u64,
    /// Its file: open (shared so that a group-commit fsync can run on it outside the log's
    /// lock), or closed while the segment is sealed ([`Handle`]).
    file: Handle,
    /// Whether its open file counts against [`sealed_budget`] (a sealed segment's).
    budgeted: bool,
    /// Where a read-only segment reopens itself for writing (`unseal`).
    storage: Arc<dyn Storage>,
    writable: bool,
    sealed: bool,
    /// The bytes of a sealed segment (map of a `.log`, decompressed `.log.z`), made on first
    /// read.
    map: Option<SegmentBytes>,
    /// The header of the `.log.z` this segment is read from (always sealed).
    compressed: Option<compressed::Header>,
    /// Offset of every record of a sealed segment, built once random reads of it have paid
    /// for the walk ([`Segment::note_random_read`]): a lookup is then one load instead of the
    /// sparse anchor plus a walk of up to `SEALED_STRIDE - 1` headers (two cache misses). 4 B
    /// per record, paid only by segments something reads at random.
    every_offset: Option<Box<[u32]>>,
    /// Small reads of this sealed segment so far (saturating), for [`Segment::note_random_read`].
    random_reads: u32,
    /// The buffer a read-only read checks each record in, kept between reads (a random read
    /// would otherwise allocate one per call) while at most `SCRATCH_KEPT` bytes.
    scratch: Vec<u8>,
    /// Records (from the first) whose framing and CRC the scan at open checked in the file this
    /// segment still reads: 0 once the segment reads another file (a cut's copy, a
    /// decompressed or compressed twin), or for a segment created after the open. Appends
    /// never raise it. [`crate::log::Log::read_rechecks_crc`] decides with it.
    checked_at_open: usize,
    /// The replay steps its scan at open made (a sealed plain segment fed to a restore while
    /// the next ones are scanned, [`crate::steps`]); taken back once it is applied.
    steps: Option<Steps>,
}

/// The largest scratch buffer a segment keeps between reads.
const SCRATCH_KEPT: usize = 64 << 10;

/// A segment's file, held open or closed. Sealed segments hold a descriptor only within a
/// process-wide budget ([`sealed_budget`]; issue 30 item 9: one per segment made a log of
/// 1,500 segments unopenable under the usual limit of 1,024 open files). Past it a sealed
/// segment's file is closed: its bytes are read through a map, which outlives the descriptor it
/// was made from, and a read that needs the file opens it again by name, for that read only,
/// refused unless the name still names the inode the scan at open checked
/// ([`Segment::with_file`]): the consistency argument of `crate::io::mmap` (a segment reads the
/// inode its scan checked) holds for a closed file too. What a closed file cannot do is keep a
/// reader's view of a segment a writer has replaced since (copy-on-truncate) once its map is
/// dropped: that read is a `StaleRead` (reopen the log), where a held descriptor still reads
/// the old inode. The budget keeps that to logs of hundreds of segments.
#[derive(Debug)]
enum Handle {
    Open(Arc<dyn StorageFile>),
    Closed(Identity),
}

/// Which file a closed segment is, and how long it was when it was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
}

/// Descriptors of sealed segments this process may hold open at once: a quarter of its soft
/// limit of open files (256 of the usual 1,024), or `TFLUX_OPEN_SEALED_SEGMENTS`.
fn sealed_budget() -> &'static std::sync::atomic::AtomicI64 {
    static LEFT: std::sync::OnceLock<std::sync::atomic::AtomicI64> = std::sync::OnceLock::new();
    LEFT.get_or_init(|| {
        let chosen = std::env::var("TFLUX_OPEN_SEALED_SEGMENTS")
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok());
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given, nothing else.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX)
        } else {
            1024
        };
        std::sync::atomic::AtomicI64::new(chosen.unwrap_or(soft / 4).max(0))
    })
}

impl Identity {
    fn of(file: &File) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata().ok()?;
        Some(Identity {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
        })
    }
}

/// Bytes of the active segment the replay after open reads at a time (whole records; a record
/// longer than this is read alone): the scan's window size, so that what one read copies is
/// still in cache when the replay walks it (2 MiB before).
const REPLAY_WINDOW: u64 = 256 << 10;

impl Drop for Segment {
    fn drop(&mut self) {
        self.release_budget();
    }
}

impl Segment {
    /// Wraps an already scanned file (not sealed).
    #[allow(clippy::too_many_arguments)]
    fn from_scan(
        storage: &Arc<dyn Storage>,
        dialect: Dialect,
        path: PathBuf,
        first_lsn: i64,
        file: Arc<dyn StorageFile>,
        writable: bool,
        index: RecordIndex,
        size: u64,
    ) -> Segment {
        Segment {
            path,
            dialect,
            first_lsn,
            index,
            size,
            file: Handle::Open(file),
            budgeted: false,
            storage: Arc::clone(storage),
            writable,
            sealed: false,
            map: None,
            compressed: None,
            every_offset: None,
            random_reads: 0,
            scratch: Vec::new(),
            checked_at_open: 0,
            steps: None,
        }
    }

    /// Creates a new, empty segment file: reserve `preallocate` bytes, write the header and the
    /// end marker, sync the file. The caller syncs the directory.
    pub fn create(
        storage: &Arc<dyn Storage>,
        dialect: Dialect,
        dir: &Path,
        first_lsn: i64,
        preallocate: u64,
    ) -> Result<Segment> {
        let path = dir.join(header::file_name(first_lsn));
        let file = storage
            .open(&path, Open::CreateNew)
            .ctx("create segment", &path)?;
        if preallocate > 0 {
            reserve(&*file, preallocate).ctx("preallocate segment", &path)?;
        }
        initialise(&*file, &path)?;
        Ok(Segment::from_scan(
            storage,
            dialect,
            path,
            first_lsn,
            file,
            true,
            RecordIndex::default(),
            header::HEADER_LEN as u64,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How its records are framed.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub fn first_lsn(&self) -> i64 {
        self.first_lsn
    }

    /// LSN of the last record, `first_lsn - 1` when empty.
    pub fn last_lsn(&self) -> i64 {
        self.first_lsn + self.index.len() as i64 - 1
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn sealed(&self) -> bool {
        self.sealed
    }

    pub fn file_size(&self) -> u64 {
        match &self.file {
            Handle::Open(file) => file.file_len().unwrap_or(0),
            Handle::Closed(id) => id.len,
        }
    }

    /// Runs `f` on the segment's file: the open one, or (closed) the file its name names now,
    /// opened read-only for this call and refused unless it is the same inode
    /// ([`Error::StaleRead`]: a writer replaced or removed it since).
    fn with_file<T>(
        &self,
        f: impl FnOnce(&dyn StorageFile) -> std::io::Result<T>,
    ) -> Result<std::io::Result<T>> {
        match &self.file {
            Handle::Open(file) => Ok(f(&**file)),
            Handle::Closed(id) => {
                let file = self
                    .storage
                    .open(&self.path, Open::Read)
                    .map_err(|e| self.gone(e))?;
                match Identity::of(file.file()) {
                    Some(now) if (now.dev, now.ino) == (id.dev, id.ino) => Ok(f(&*file)),
                    _ => Err(Error::stale_read(
                        &self.path,
                        None,
                        "the segment file was replaced since the log was opened",
                    )),
                }
            }
        }
    }

    /// The error for a closed segment's file that cannot be opened again.
    fn gone(&self, e: std::io::Error) -> Error {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::stale_read(
                &self.path,
                None,
                "the segment file was removed since the log was opened",
            )
        } else {
            Error::io("reopen segment", &self.path, e)
        }
    }

    /// A sealed segment's open file stays open while [`sealed_budget`] allows, else is closed
    /// (its bytes come from a map, or are decoded again when read). Kept open where its
    /// identity cannot be read.
    fn settle_sealed(&mut self) {
        use std::sync::atomic::Ordering;
        let (true, false, Handle::Open(file)) = (self.sealed, self.budgeted, &self.file) else {
            return;
        };
        let budget = sealed_budget();
        if budget.fetch_sub(1, Ordering::Relaxed) > 0 {
            self.budgeted = true;
            return;
        }
        budget.fetch_add(1, Ordering::Relaxed);
        if let Some(id) = Identity::of(file.file()) {
            self.file = Handle::Closed(id);
        }
    }

    /// Gives back this segment's share of [`sealed_budget`] (unsealed, dropped).
    fn release_budget(&mut self) {
        if std::mem::take(&mut self.budgeted) {
            sealed_budget().fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The identity of the file the segment reads, for the errors of reads that fail.
    fn identity(&self) -> Option<Identity> {
        match &self.file {
            Handle::Open(file) => Identity::of(file.file()),
            Handle::Closed(id) => Some(*id),
        }
    }

    pub fn last_term(&self) -> Option<i32> {
        self.index.last_term()
    }

    /// Term of the record at `lsn` (must be inside this segment).
    pub fn term_at(&self, lsn: i64) -> i32 {
        self.index.term((lsn - self.first_lsn) as usize)
    }

    /// Offset of the record at `lsn` (inside this segment); walks headers from the nearest
    /// remembered offset in a sealed segment.
    fn record_offset(&mut self, lsn: i64) -> Result<u64> {
        let i = (lsn - self.first_lsn) as usize;
        if self.index.is_dense() {
            return Ok(self.index.offset(i));
        }
        let records = self.index.len().max(1) as u64;
        let avg = (self.size.saturating_sub(header::HEADER_LEN as u64) / records) as usize;
        if let Some(&offset) = self.every_offset.as_ref().and_then(|o| o.get(i)) {
            // Touch where the record should be (at the segment's average record length) while
            // its offset loads, so that the two cache misses overlap (exact when the records
            // have one size). A guess: a miss costs nothing.
            if let Some(map) = self.map.as_deref() {
                std::hint::black_box(map.get(header::HEADER_LEN + i * avg).copied());
            }
            return Ok(u64::from(offset));
        }
        let (anchor, offset) = self.index.anchor(i);
        let steps = i - anchor;
        let dialect = self.dialect;
        let map = self.mapped()?;
        if steps > 1 {
            // Each header of the walk depends on the one before it: touch where the headers
            // should be (at the segment's average record length) first, so that their cache
            // misses overlap instead of following one another. A guess: misses cost nothing.
            let mut touched = 0u8;
            for k in 1..=steps {
                if let Some(b) = map.get(offset as usize + k * avg) {
                    touched ^= *b;
                }
            }
            std::hint::black_box(touched);
        }
        let found = walk_in(dialect, map, offset as usize, steps);
        found.map(|o| o as u64).ok_or_else(|| {
            changed_under_reader(&self.path, self.identity(), self.size, offset, lsn)
        })
    }

    /// End offset of the record at `lsn` (dense index).
    fn record_end(&self, lsn: i64) -> u64 {
        let next = (lsn - self.first_lsn + 1) as usize;
        if next < self.index.len() {
            self.index.offset(next)
        } else {
            self.size
        }
    }

    /// The bytes of a sealed segment, mapped or decompressed on first use.
    fn mapped(&mut self) -> Result<&[u8]> {
        if self.map.is_none() {
            let (path, size, compressed) =
                (self.path.clone(), self.size, self.compressed.is_some());
            let bytes = self.with_file(|file| {
                Ok(if compressed {
                    segbytes::decompressed_or_corrupt(&path, file.file()).map(|b| b.0)
                } else {
                    map_readonly(file.file(), size)
                        .ctx("map segment", &path)
                        .map(SegmentBytes::mapped)
                })
            })?;
            self.map = Some(bytes.map_err(|e| Error::io("read segment", &self.path, e))??);
        }
        Ok(self.map.as_deref().unwrap_or(&[]))
    }

    /// The segment as spec section 9 compresses it: its header and records, checked again
    /// (header, framing, CRC, the count the index holds), then the end marker.
    pub fn original_bytes(&mut self) -> Result<Vec<u8>> {
        let (size, count) = (self.size as usize, self.index.len());
        let path = self.path.clone();
        let map = self.mapped()?;
        let bad = |offset: usize, why: String| Error::corruption(&path, Some(offset as u64), why);
        if map.len() < size || map.get(..header::HEADER_LEN) != Some(&header::header()[..]) {
            return Err(bad(0, "segment header or length changed since open".into()));
        }
        let mut seen = 0usize;
        let (end, stop) = scan_records(&map[..size], 0, |_, _, _| seen += 1);
        if stop != ScanStop::Clean || end as usize != size || seen != count {
            let why = format!(
                "records changed since open ({seen} of {count} read back, {})",
                stop.describe()
            );
            return Err(bad(end as usize, why));
        }
        let mut out = Vec::with_capacity(size + END_MARKER.len());
        out.extend_from_slice(&map[..size]);
        out.extend_from_slice(&END_MARKER);
        Ok(out)
    }

    /// The header of the `.log.z` file this segment is read from, if compressed.
    pub fn compression(&self) -> Option<&compressed::Header> {
        self.compressed.as_ref()
    }

    /// Marks the segment read-only; it will be memory-mapped for reads and keeps a sparse index.
    pub fn seal(&mut self) {
        self.sealed = true;
        self.index.sparsify(SEALED_STRIDE);
        self.settle_sealed();
    }

    /// Counts a small (random, as far as the log can tell) read of this segment, and builds its
    /// full offsets ([`Segment::index_every_record`]) at the read that makes them worth it. The
    /// walk costs about 18 ns per record; a lookup through the full offsets saves about 0.5 µs
    /// over the sparse index (both measured on 64 B records), so building after `count / 32`
    /// reads spends on the walk about what those reads already lost (the ski-rental rule): a
    /// segment read at random only a few times never pays for a walk of millions of headers,
    /// and one read at random all day pays at most about twice the best choice. Tried once: a
    /// walk that finds the bytes changed is not repeated by every later read.
    pub fn note_random_read(&mut self) -> Result<()> {
        if !self.sealed || self.index.is_dense() || self.every_offset.is_some() {
            return Ok(());
        }
        self.random_reads = self.random_reads.saturating_add(1);
        if self.random_reads as usize == reads_before_full_offsets(self.index.len()) {
            self.index_every_record()?;
        }
        Ok(())
    }

    /// Builds the offset of every record of a sealed segment for random reads (once; a no-op
    /// for the active segment, whose index is dense, and for a segment of 4 GiB or more). One
    /// walk of the map, each anchor of the sparse index checked on the way: if the bytes no
    /// longer agree with the scan (another program changed the file), nothing is built and the
    /// reads walk (and report) as before.
    pub fn index_every_record(&mut self) -> Result<()> {
        if !self.sealed
            || self.index.is_dense()
            || self.every_offset.is_some()
            || self.size > u64::from(u32::MAX)
        {
            return Ok(());
        }
        let (count, size, dialect) = (self.index.len(), self.size as usize, self.dialect);
        self.mapped()?;
        let map = self.map.as_deref().unwrap_or(&[]);
        let map = &map[..size.min(map.len())];
        let mut offsets = Vec::with_capacity(count);
        let mut at = header::HEADER_LEN;
        for i in 0..count {
            if i % SEALED_STRIDE == 0 && self.index.anchor(i).1 != at as u64 {
                return Ok(());
            }
            offsets.push(at as u32);
            match walk_in(dialect, map, at, 1) {
                Some(next) => at = next,
                None => return Ok(()),
            }
        }
        self.every_offset = Some(offsets.into_boxed_slice());
        Ok(())
    }

    /// Whether [`Segment::index_every_record`] has built this segment's full offsets.
    pub fn indexes_every_record(&self) -> bool {
        self.every_offset.is_some()
    }

    /// Makes a sealed segment the active one again (after a cut reached into it): drops the map
    /// before anything writes to the file.
    pub fn unseal(&mut self) -> Result<()> {
        self.every_offset = None;
        self.random_reads = 0;
        if !self.index.is_dense() {
            // Positioned reads need every offset again: walk the map once.
            let count = self.index.len();
            let mut dense = RecordIndex::default();
            let mut at = header::HEADER_LEN;
            let terms: Vec<i32> = (0..count).map(|i| self.index.term(i)).collect();
            let (first_lsn, dialect) = (self.first_lsn, self.dialect);
            self.mapped()?;
            let map = self.map.as_deref().unwrap_or(&[]);
            for (i, term) in terms.into_iter().enumerate() {
                dense.push(at as u64, term);
                let lsn = first_lsn + i as i64;
                at = walk_in(dialect, map, at, 1).ok_or_else(|| {
                    changed_under_reader(&self.path, self.identity(), self.size, at as u64, lsn)
                })?;
            }
            self.index = dense;
        }
        if self.compressed.is_some() {
            self.decompress_in_place()?;
        }
        self.map = None;
        self.sealed = false;
        self.release_budget();
        if !self.writable || matches!(self.file, Handle::Closed(_)) {
            let file = self
                .storage
                .open(&self.path, Open::ReadWrite)
                .ctx("reopen segment for writing", &self.path)?;
            if let (Handle::Closed(id), Some(now)) = (&self.file, Identity::of(file.file())) {
                if (id.dev, id.ino) != (now.dev, now.ino) {
                    return Err(Error::stale_read(
                        &self.path,
                        None,
                        "the segment file was replaced since the log was opened",
                    ));
                }
            }
            self.file = Handle::Open(file);
            self.writable = true;
        }
        Ok(())
    }

    /// Bytes `[start, end)` of the file by one positioned read (the active segment).
    fn read_at(&self, start: u64, end: u64) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; (end - start) as usize];
        self.read_exact_into(&mut buf, start)?;
        Ok(buf)
    }

    /// Fills `buf` from file offset `start` by positioned reads (the active segment).
    fn read_exact_into(&self, buf: &mut [u8], start: u64) -> Result<()> {
        let end = start + buf.len() as u64;
        match self.with_file(|file| file.read_exact_at(buf, start))? {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                // The records were there at open: the file was shortened since.
                let reason = format!("the file ends before offset {end}");
                Err(unreadable(
                    &self.path,
                    self.identity(),
                    self.size,
                    start,
                    reason,
                ))
            }
            Err(e) => Err(Error::io("read segment", &self.path, e)),
        }
    }

    /// The last LSN in `from..=to` such that the records `from..=last` span at most `max_span`
    /// bytes on disk (always at least `from`). Sealed segments are mapped: no bound needed.
    pub fn chunk_end(&mut self, from: i64, to: i64, max_span: u64) -> i64 {
        if !self.index.is_dense() {
            // Sealed: walk the mapped headers (no I/O), so that a small read of a big segment
            // touches (and, read-only, copies) only what it returns.
            let Ok(start) = self.record_offset(from) else {
                return from;
            };
            let dialect = self.dialect;
            let Ok(map) = self.mapped() else {
                return from;
            };
            let mut at = start as usize;
            let mut included = from;
            for lsn in from..=to {
                match walk_in(dialect, map, at, 1) {
                    Some(next) if lsn == from || (next as u64) - start <= max_span => {
                        at = next;
                        included = lsn;
                    }
                    _ => break,
                }
            }
            return included;
        }
        let start = self.index.offset((from - self.first_lsn) as usize);
        let (lo, hi) = (
            (from - self.first_lsn) as usize,
            (to - self.first_lsn) as usize,
        );
        // First record index in lo+1..=hi whose end would exceed the span.
        let mut a = lo + 1;
        let mut b = hi + 1;
        while a < b {
            let mid = a + (b - a) / 2;
            let end = self.record_end(self.first_lsn + mid as i64);
            if end - start <= max_span {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        self.first_lsn + a as i64 - 1
    }

    /// Visits the records `from..=to` (LSNs inside this segment) in order while `admit` (asked
    /// with each record's LSN and data length before it is checked) and then `f` return true,
    /// re-checking each record's framing and checksum.
    /// `copy` is for read-only logs, whose files another process may change while they are
    /// read: the records are copied out of the map first, and checked (CRC included) on the
    /// copy, so a concurrent truncation can only make the read fail, never return bytes that
    /// differ from the ones checked.
    pub fn visit(
        &mut self,
        from: i64,
        to: i64,
        check_crc: bool,
        copy: bool,
        admit: impl FnMut(i64, usize) -> bool,
        mut f: impl FnMut(i64, i32, &[u8]) -> bool,
    ) -> Result<()> {
        if from > to {
            return Ok(());
        }
        // A decompressed segment is private memory whose whole CRC was checked when it was
        // decoded (and every record's at the scan): nobody can change it under the reader, so
        // neither the copy nor a second CRC pass buys anything.
        let immutable = self.compressed.is_some();
        if copy && self.sealed && !immutable {
            // One record at a time through a scratch buffer that stays in cache, instead of a
            // copy of the whole chunk into fresh pages.
            let mut sink = Scratch {
                data: std::mem::take(&mut self.scratch),
                admit,
                f,
            };
            let copied = self.copy_into(from, to, true, &mut sink).map(drop);
            if sink.data.capacity() <= SCRATCH_KEPT {
                self.scratch = sink.data;
            }
            return copied;
        }
        let mut admit = admit;
        let start = self.record_offset(from)?;
        let check_crc = check_crc && !immutable;
        let owned;
        let bytes: &[u8] = if self.sealed {
            self.mapped()?;
            let map = self.map.as_deref().unwrap_or(&[]);
            map.get(start as usize..self.size as usize).unwrap_or(&[])
        } else {
            owned = self.read_at(start, self.record_end(to))?;
            &owned
        };
        let walked = self.walk::<false>(bytes, start, 0, from, to, |lsn, term, data, at| {
            // Admitted first, so a record the caller does not take is never checksummed.
            if !admit(lsn, data.len()) {
                return Ok(false);
            }
            if check_crc {
                self.check_stored(&bytes[at..], data)
                    .map_err(|bad| bad.to_string())?;
            }
            Ok(f(lsn, term, data))
        });
        walked.map(drop)
    }

    /// Copies the data of records `from..=to` (LSNs inside this segment) into `sink` while it
    /// admits them, straight from the map (sealed) or from one positioned read (active), and
    /// checks each record's checksum on that copy: what the caller gets is what was checked,
    /// even if another process changes the file meanwhile (a read-only log), with no copy of
    /// the whole chunk first. Returns false when the sink stopped before `to`.
    pub fn copy_into(
        &mut self,
        from: i64,
        to: i64,
        check_crc: bool,
        sink: &mut impl RecordSink,
    ) -> Result<bool> {
        if from > to {
            return Ok(true);
        }
        let start = self.record_offset(from)?;
        let check_crc = check_crc && self.compressed.is_none();
        let owned;
        let bytes: &[u8] = if self.sealed {
            // Walk the map from `start` up to the records' end; only what is copied is touched.
            self.mapped()?;
            let map = self.map.as_deref().unwrap_or(&[]);
            map.get(start as usize..self.size as usize).unwrap_or(&[])
        } else {
            owned = self.read_at(start, self.record_end(to))?;
            &owned
        };
        self.walk::<false>(bytes, start, 0, from, to, |lsn, term, data, at| {
            if !sink.admit(lsn, data.len()) {
                return Ok(false);
            }
            let header = &bytes[at..];
            let out = sink.data();
            let begin = out.len();
            out.extend_from_slice(data);
            if check_crc {
                if let Err(bad) = self.check_stored(header, &out[begin..]) {
                    out.truncate(begin);
                    return Err(bad.to_string());
                }
            }
            Ok(sink.push(lsn, term))
        })
    }

    /// The one record at `lsn` (inside this segment) for a random single-record read: framed
    /// as [`Segment::copy_into`] frames it, its data handed to `copy` straight from the map
    /// (sealed) or from one positioned read of that record (active), and its CRC checked on
    /// what `copy` made (`copied(&made)`), so that the caller returns what was checked even if
    /// another process changes the file meanwhile, with no scratch copy in between. Not
    /// checked again in a decompressed segment (its whole CRC was checked when it was decoded).
    pub fn read_record<T>(
        &mut self,
        lsn: i64,
        copy: impl FnOnce(&[u8]) -> T,
        copied: impl Fn(&T) -> &[u8],
    ) -> Result<(i32, T)> {
        let start = self.record_offset(lsn)?;
        let check_crc = self.compressed.is_none();
        let owned;
        let bytes: &[u8] = if self.sealed {
            self.mapped()?;
            let map = self.map.as_deref().unwrap_or(&[]);
            map.get(start as usize..self.size as usize).unwrap_or(&[])
        } else {
            owned = self.read_at(start, self.record_end(lsn))?;
            &owned
        };
        let (mut copy, mut made) = (Some(copy), None);
        self.walk::<false>(bytes, start, 0, lsn, lsn, |_, term, data, at| {
            let header = &bytes[at..];
            let Some(copy) = copy.take() else {
                return Ok(false);
            };
            let out = copy(data);
            if check_crc {
                self.check_stored(header, copied(&out))
                    .map_err(|bad| bad.to_string())?;
            }
            made = Some((term, out));
            Ok(true)
        })?;
        made.ok_or_else(|| self.unreadable_at(start, format!("record {lsn} was not read")))
    }

    /// Whether the scan at open checked the record at `lsn` (and every one before it) in the
    /// file this segment still reads ([`Segment::checked_at_open`]'s field).
    pub fn checked_at_open(&self, lsn: i64) -> bool {
        lsn < self.first_lsn.saturating_add(self.checked_at_open as i64)
    }

    /// The bytes the records `from..=to` (LSNs inside this segment) lie in, for a reader that
    /// walks and decodes them itself, maybe on another thread: the map of a sealed segment
    /// (shared), or one positioned read of the active one; with the file offset of their first
    /// byte and the index of record `from` in them. Whether the CRCs need checking is
    /// [`crate::log::Log::read_rechecks_crc`]'s to say, and never for a decompressed segment
    /// (its whole CRC was checked when it was decoded): see [`Segment::is_compressed`].
    pub fn span(&mut self, from: i64, to: i64) -> Result<(SegmentBytes, u64, usize)> {
        let start = self.record_offset(from)?;
        if self.sealed {
            self.mapped()?;
            let map = self.map.clone().unwrap_or_else(SegmentBytes::empty);
            Ok((map, 0, start as usize))
        } else {
            let read = self.read_at(start, self.record_end(to))?;
            Ok((SegmentBytes::owned(read), start, 0))
        }
    }

    /// Whether the segment is read from a `.log.z` (decompressed, checked whole).
    pub fn is_compressed(&self) -> bool {
        self.compressed.is_some()
    }

    /// Visits the records `from..=to` (LSNs inside this segment) for the replay right after
    /// open, in one walk (no chunks), while `f` returns true. Each record comes with the bytes
    /// a restored record may borrow its message from (see [`crate::payload::Payload`]):
    /// - a sealed plain segment: its map, `Some`. Safe to borrow for as long as a record lives,
    ///   whatever later happens to the file (`mmap.rs` has the argument);
    /// - the active segment: `None` (read into a private buffer; the records are copied, so
    ///   the buffer of up to a whole segment is not pinned by a few records);
    /// - a decompressed `.log.z`: `None` (copied too: a borrowing record would pin the whole
    ///   decompressed segment, framing and removed records included, in anonymous memory,
    ///   outside the bound of the decompression cache).
    ///
    /// Framing is checked; CRCs and padding only with `check_crc` (the scan at open checked them all).
    pub fn replay_records(
        &mut self,
        from: i64,
        to: i64,
        check_crc: bool,
        mut f: impl FnMut(i64, i32, &[u8], Option<&SegmentBytes>) -> bool,
    ) -> Result<()> {
        if from > to {
            return Ok(());
        }
        if !self.sealed {
            return self.replay_active(from, to, check_crc, f);
        }
        let start = self.record_offset(from)?;
        self.mapped()?;
        let bytes = self.map.clone().unwrap_or_else(SegmentBytes::empty);
        let source = self.compressed.is_none().then_some(&bytes);
        let check_crc = check_crc && self.compressed.is_none();
        let step = |lsn, term, data: &[u8], _at| Ok(f(lsn, term, data, source));
        self.replay_walk(check_crc, &bytes, 0, start as usize, from, to, step)
            .map(drop)
    }

    /// [`Segment::replay_records`] of the active segment (dense index): whole records read
    /// about [`REPLAY_WINDOW`] bytes at a time into one buffer, reused. The records are copied
    /// out by the caller, so nothing needs the segment's bytes at once; reading all of them
    /// into a fresh buffer had the kernel zero its pages at the end of every restore.
    fn replay_active(
        &mut self,
        from: i64,
        to: i64,
        check_crc: bool,
        mut f: impl FnMut(i64, i32, &[u8], Option<&SegmentBytes>) -> bool,
    ) -> Result<()> {
        let mut buf = Vec::new();
        let mut lsn = from;
        while lsn <= to {
            let last = self.chunk_end(lsn, to, REPLAY_WINDOW);
            let start = self.record_offset(lsn)?;
            let end = self.record_end(last);
            let n = (end - start) as usize;
            if buf.len() < n {
                buf.resize(n, 0);
            }
            self.read_exact_into(&mut buf[..n], start)?;
            let step = |lsn, term, data: &[u8], _at| Ok(f(lsn, term, data, None));
            if !self.replay_walk(check_crc, &buf[..n], start, 0, lsn, last, step)? {
                break;
            }
            lsn = last + 1;
        }
        Ok(())
    }

    /// The one walk over the records `from..=to` laid out in `bytes` from index `at` (`bytes[0]`
    /// is at file offset `base`): [`walk_frames`], its failure turned into the error naming the
    /// file and offset. The walk returns false when `step` stopped it early.
    fn walk<const CRC: bool>(
        &self,
        bytes: &[u8],
        base: u64,
        at: usize,
        from: i64,
        to: i64,
        step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
    ) -> Result<bool> {
        with_framing!(self.dialect, F => walk_frames::<F, CRC>(bytes, at, self.first_lsn, from, to, step))
            .map_err(|(at, reason)| self.unreadable_at(base + at as u64, reason))
    }

    /// Whether `data` has the checksum stored in the record header at the start of `header`.
    fn check_stored(&self, header: &[u8], data: &[u8]) -> std::result::Result<(), BadRecord> {
        with_framing!(self.dialect, F => F::check(F::stored_checksum(header), data))
    }

    /// The replay's walk: [`Segment::walk`] checking CRCs when `check_crc`, else only the
    /// framing ([`walk_framing`]), the replay right after open, when it does not re-check what
    /// the scan checked (`Log::replay_rechecks_crc`).
    #[allow(clippy::too_many_arguments)]
    fn replay_walk(
        &self,
        check_crc: bool,
        bytes: &[u8],
        base: u64,
        at: usize,
        from: i64,
        to: i64,
        step: impl FnMut(i64, i32, &[u8], usize) -> std::result::Result<bool, String>,
    ) -> Result<bool> {
        if check_crc {
            return self.walk::<true>(bytes, base, at, from, to, step);
        }
        with_framing!(self.dialect, F => walk_framing::<F>(bytes, at, self.first_lsn, from, to, step))
            .map_err(|(at, reason)| self.unreadable_at(base + at as u64, reason))
    }

    /// The error for a record at file `offset` that no longer reads (`reason`): corruption, or
    /// a stale read when the file was replaced or shortened since the open.
    pub fn unreadable_at(&self, offset: u64, reason: String) -> Error {
        unreadable(&self.path, self.identity(), self.size, offset, reason)
    }

    /// Writes already framed records (`encoded`, followed here by the end marker) at the end
    /// of the data, then records their offsets and terms. Returns nothing until the bytes are
    /// written; syncing is the caller's decision.
    ///
    /// All or nothing for readers that follow the file while it is written (channel receivers,
    /// read-only opens): everything but the first record's marker goes behind the current end
    /// marker first, then that one aligned word replaces the end marker and makes the whole
    /// batch visible at once. A write that fails or stops short leaves the end marker in place,
    /// so no reader (and no reopen) finds part of a failed call, even when no clean-up can run.
    pub fn append_encoded(&mut self, encoded: &mut Vec<u8>, records: &[(u64, i32)]) -> Result<()> {
        debug_assert!(!self.sealed && self.writable);
        debug_assert!(encoded.len() >= END_MARKER.len());
        debug_assert!(self.dialect != Dialect::Spec || self.size.is_multiple_of(4));
        encoded.extend_from_slice(&END_MARKER);
        let head = END_MARKER.len();
        let file = self.shared_file()?;
        file.write_all_at(&encoded[head..], self.size + head as u64)
            .map_err(|e| Error::io("write segment", &self.path, e))?;
        if let Err(e) = file.write_all_at(&encoded[..head], self.size) {
            // The word may be half written: put the end marker back (best effort).
            let _ = file.write_all_at(&END_MARKER, self.size);
            return Err(Error::io("write segment", &self.path, e));
        }
        encoded.truncate(encoded.len() - END_MARKER.len());
        let base = self.size;
        for &(rel, term) in records {
            self.index.push(base + rel, term);
        }
        self.size += encoded.len() as u64;
        Ok(())
    }

    /// Discards the records from `lsn` on by copy-on-truncate ([`rewrite_prefix`]): the records
    /// kept go into a new file that replaces this one, and writing continues there. The old
    /// file is never changed, so a reader that indexed it keeps reading the entries that were
    /// at its LSNs (never a new record written where an old one was).
    pub fn cut_at(&mut self, lsn: i64, opts: &RewriteOptions) -> Result<()> {
        let keep = (lsn - self.first_lsn) as usize;
        if keep >= self.index.len() {
            return Ok(());
        }
        debug_assert!(!self.sealed, "cuts happen in the active segment");
        let cut = self.record_offset(lsn)?;
        let file = self.shared_file()?;
        self.file = Handle::Open(rewrite_prefix(
            &*self.storage,
            &*file,
            &self.path,
            cut,
            opts,
        )?);
        self.checked_at_open = 0;
        self.writable = true;
        self.index.truncate(keep);
        self.size = cut;
        Ok(())
    }

    /// The open file of the active segment (or of one just unsealed); a sealed segment's
    /// file is closed and has none to share (an error, never a panic).
    pub fn shared_file(&self) -> Result<Arc<dyn StorageFile>> {
        match &self.file {
            Handle::Open(file) => Ok(Arc::clone(file)),
            Handle::Closed(_) => Err(Error::InvalidArgument(format!(
                "{}: a sealed segment's file is not held open",
                self.path.display()
            ))),
        }
    }

    /// Drops the memory map of a sealed segment (it is made again on the next read), so a
    /// long-lived process does not keep the whole log resident after replaying it.
    pub fn unmap(&mut self) {
        self.map = None;
    }

    /// Whether the segment holds its bytes (a map, or a decompressed `.log.z`) right now.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    pub fn sync(&self) -> Result<()> {
        self.with_file(|file| file.sync_data())?
            .ctx("fsync segment", &self.path)
    }
}

fn changed_under_reader(
    path: &Path,
    held: Option<Identity>,
    size: u64,
    offset: u64,
    lsn: i64,
) -> Error {
    unreadable(
        path,
        held,
        size,
        offset,
        format!("record {lsn} is no longer where the index says"),
    )
}

/// The error for a record that checked fine when the segment was opened and cannot be read
/// now: [`Error::StaleRead`] when the file changed under the reader (its path names another
/// file, none, or a file shorter than the records indexed: a writer cut, replaced or deleted
/// it), [`Error::Corruption`] when it is the same file, still long enough (damage in place).
fn unreadable(
    path: &Path,
    held: Option<Identity>,
    size: u64,
    offset: u64,
    reason: String,
) -> Error {
    use std::os::unix::fs::MetadataExt;
    let now = std::fs::metadata(path).ok();
    let replaced = match (&held, &now) {
        (Some(h), Some(n)) => (h.dev, h.ino) != (n.dev(), n.ino()) || n.len() < size,
        _ => true,
    };
    let shorter = held.is_some_and(|h| h.len < size);
    if replaced || shorter {
        Error::stale_read(path, Some(offset), reason)
    } else {
        Error::corruption(path, Some(offset), reason)
    }
}

/// Reserves `len` bytes for the file by writing zeros (never shrinking it). Real zeros, not
/// `fallocate`'s unwritten extents: an fdatasync after writing into unwritten extents must also
/// commit the extent conversion, which made durable appends about 1.6x slower on ext4.
fn reserve(file: &dyn StorageFile, len: u64) -> std::io::Result<()> {
    let current = file.file_len()?;
    if current >= len {
        return Ok(());
    }
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(len - current) as usize];
    let mut at = current;
    while at < len {
        let n = CHUNK.min(len - at) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Writes a fresh header and end marker at the start of `file` and syncs it.
pub fn initialise(file: &dyn StorageFile, path: &Path) -> Result<()> {
    let mut first = header::header().to_vec();
    first.extend_from_slice(&END_MARKER);
    file.write_all_at(&first, 0)
        .ctx("write segment header", path)?;
    file.sync_all().ctx("fsync segment", path)
}

/// Steps of [`rewrite_prefix`], in order. A crash after any of them leaves, under the
/// segment's name, either the old file or the new one (never neither), and at most a leftover
/// `.cut` file that the next writable open removes ([`remove_cut_leftovers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RewriteStep {
    /// The `.cut` file exists, reserved and zero-filled.
    Created,
    /// The kept bytes and the end marker are written into it.
    Written,
    /// It is fsynced.
    Synced,
    /// It is renamed over the segment.
    Renamed,
    /// The directory is fsynced: the cut is durable.
    DirSynced,
}

/// How [`rewrite_prefix`] makes the new file.
#[derive(Debug, Clone, Default)]
pub struct RewriteOptions {
    /// Bytes reserved (written as zeros) in the new file, as for a new segment; 0 = none.
    pub preallocate: u64,
    /// Fault injection for crash tests: fail right after this step, leaving the files exactly
    /// as a kill there would.
    pub stop_after: Option<RewriteStep>,
}

/// Suffix of the file a cut writes before renaming it over the segment (`<segment name>.cut`,
/// in the log directory: never taken for a segment, and renamed within one directory).
pub const CUT_SUFFIX: &str = ".cut";

/// Replaces the segment file at `path` by a new file holding its bytes `[0, end)` (the header
/// and the records kept; `end` must be a record boundary) followed by an end marker and zeros:
/// copy-on-truncate. The new file is written beside it as `<name>.cut`, reserved like a new
/// segment, fsynced, renamed over `path`, and the directory fsynced. `source` (the open old
/// file) is only read: a reader that holds it keeps seeing the records it indexed. Returns
/// the new file, open for reading and writing. The one way to cut a segment: `truncate_after`,
/// `insert_range` and repair all use it.
pub fn rewrite_prefix(
    storage: &dyn Storage,
    source: &dyn StorageFile,
    path: &Path,
    end: u64,
    opts: &RewriteOptions,
) -> Result<Arc<dyn StorageFile>> {
    let temp = cut_temp_path(path);
    match storage.remove_file(&temp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("remove leftover cut file", &temp, e))
        }
        _ => {}
    }
    let file = match write_prefix_copy(storage, source, path, &temp, end, opts) {
        Ok(file) => file,
        Err(e) => {
            // Keep a stopped (simulated crash) rewrite's file for the crash test to find.
            if opts.stop_after.is_none() {
                let _ = storage.remove_file(&temp);
            }
            return Err(e);
        }
    };
    storage
        .rename(&temp, path, Rename::Replace)
        .ctx("rename cut segment over", path)?;
    stop_if(opts, RewriteStep::Renamed, path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    crate::io::fsutil::sync_dir(storage, dir)?;
    stop_if(opts, RewriteStep::DirSynced, path)?;
    Ok(file)
}

/// Steps up to the fsync of [`rewrite_prefix`]: the new file, complete and durable.
fn write_prefix_copy(
    storage: &dyn Storage,
    source: &dyn StorageFile,
    path: &Path,
    temp: &Path,
    end: u64,
    opts: &RewriteOptions,
) -> Result<Arc<dyn StorageFile>> {
    let file = storage
        .open(temp, Open::CreateNew)
        .ctx("create cut segment", temp)?;
    reserve(&*file, opts.preallocate).ctx("preallocate cut segment", temp)?;
    stop_if(opts, RewriteStep::Created, temp)?;
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK.min(end) as usize];
    let mut at = 0;
    while at < end {
        let n = CHUNK.min(end - at) as usize;
        source
            .read_exact_at(&mut buf[..n], at)
            .ctx("read segment", path)?;
        file.write_all_at(&buf[..n], at)
            .ctx("write cut segment", temp)?;
        at += n as u64;
    }
    file.write_all_at(&END_MARKER, end)
        .ctx("write cut segment", temp)?;
    stop_if(opts, RewriteStep::Written, temp)?;
    file.sync_all().ctx("fsync cut segment", temp)?;
    stop_if(opts, RewriteStep::Synced, temp)?;
    Ok(file)
}

fn stop_if(opts: &RewriteOptions, step: RewriteStep, path: &Path) -> Result<()> {
    if opts.stop_after == Some(step) {
        let why = std::io::Error::other(format!("stopped after {step:?} (fault injection)"));
        return Err(Error::io("cut segment", path, why));
    }
    Ok(())
}

/// `<segment>.cut` beside the segment.
pub fn cut_temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(CUT_SUFFIX);
    path.with_file_name(name)
}

/// Removes the `<segment name>.cut` files a crash in [`rewrite_prefix`] left in `dir` (the
/// segment itself is intact: the name only exists before the rename). Returns how many.
pub fn remove_cut_leftovers(storage: &dyn Storage, dir: &Path) -> Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).ctx("list log directory", dir)? {
        let entry = entry.ctx("list log directory", dir)?;
        let name = entry.file_name();
        let is_leftover = name
            .to_str()
            .and_then(|n| n.strip_suffix(CUT_SUFFIX))
            .and_then(header::parse_file_name)
            .is_some();
        if is_leftover {
            let path = entry.path();
            storage
                .remove_file(&path)
                .ctx("remove leftover cut file", &path)?;
            removed += 1;
        }
    }
    if removed > 0 {
        crate::io::fsutil::sync_dir(storage, dir)?;
    }
    Ok(removed)
}

/// Overwrites `[start, end)` with zeros, in bounded chunks.
pub fn zero_range(file: &dyn StorageFile, path: &Path, start: u64, end: u64) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(end.saturating_sub(start)) as usize];
    let mut at = start;
    while at < end {
        let n = CHUNK.min(end - at) as usize;
        file.write_all_at(&zeros[..n], at)
            .ctx("zero discarded records", path)?;
        at += n as u64;
    }
    Ok(())
}

/// The bytes of a whole segment file (the name before [`SegmentBytes`] replaced it).
pub type FileBytes = SegmentBytes;

/// Everything a first look at a segment file tells.
pub struct FileScan {
    pub file: File,
    /// The framing its records were read in.
    pub dialect: Dialect,
    /// The file's length when it was opened (a `.log.z`'s compressed length).
    pub file_len: u64,
    /// The segment's bytes: mapped, read, or decompressed from a `.log.z`.
    pub bytes: SegmentBytes,
    pub header: header::Header,
    /// The `.log.z` header when the file is a compressed segment.
    pub compressed: Option<compressed::Header>,
    /// Why a `.log.z` file cannot be decompressed (`bytes` is then empty).
    pub bad_compressed: Option<BadCompressed>,
    /// Record offsets and terms (see [`scan_file`] for `build_index = false`).
    pub index: RecordIndex,
    pub count: usize,
    pub first_term: Option<i32>,
    pub last_term: Option<i32>,
    /// Offset just past the last good record.
    pub end: u64,
    pub stop: ScanStop,
    /// The replay steps of a sealed segment's records, when the scan was asked for them
    /// ([`scan_file_stepping`]).
    pub steps: Option<Steps>,
}

impl FileScan {
    /// In the last segment, a scan that stopped on a term violation may have met a torn header:
    /// a record marker followed by nothing but zeros reads as an empty record of term 0. That
    /// cannot be a real record (its term would decrease), so it is a torn write, not corruption.
    pub fn stop_is_torn_header(&self) -> bool {
        if self.dialect != Dialect::Spec {
            return false; // only the spec's term field can read as a decreasing 0
        }
        match self.stop {
            ScanStop::Term {
                offset, term: 0, ..
            } => self.zero_after(offset + 4),
            _ => false,
        }
    }

    /// True when the last record read is empty and nothing but zeros follows its term: either a
    /// genuine empty record or a header torn after its term (the two are identical on disk).
    pub fn ends_with_ambiguous_empty_record(&self) -> bool {
        let Some(last) = self.index.len().checked_sub(1) else {
            return false;
        };
        let at = self.index.offset(last) as usize;
        with_framing!(self.dialect, F => F::EMPTY_CHECKSUM_IS_ZERO
            && self.end as usize == at + F::HEADER_LEN
            && self.zero_after((at + F::CRC_AT) as u64))
    }

    fn zero_after(&self, offset: u64) -> bool {
        let from = (offset as usize).min(self.bytes.len());
        self.bytes[from..].iter().all(|&b| b == 0)
    }

    /// Offset just past the last non-zero byte at or after `from`: how far garbage reaches.
    pub fn nonzero_end(&self, from: u64) -> u64 {
        let from = (from as usize).min(self.bytes.len());
        self.bytes[from..]
            .iter()
            .rposition(|&b| b != 0)
            .map_or(from as u64, |i| (from + i + 1) as u64)
    }
}

/// Opens and scans one segment file. `map` chooses a memory map (sealed segments, verify) over
/// ordinary reads (the active segment, which is about to be written, and which a writer in
/// another process may be appending to: a map must only cover bytes that never change, see
/// `mmap.rs`). The active segment is read in chunks only as far as its records go
/// (`ActiveRead`). A `.log.z` is always decompressed (and its header's length and CRC
/// checked). Terms must not go below `previous_term`. Without `build_index` the scan of the
/// active segment leaves its index empty (`count` and the terms say what it found), and a
/// mapped segment's index counts its records without their offsets ([`RecordIndex::counting`]):
/// enough for a report, not for reads.
pub fn scan_file(
    dialect: Dialect,
    path: &Path,
    writable: bool,
    map: bool,
    previous_term: i32,
    build_index: bool,
) -> Result<FileScan> {
    scan_file_keeping(
        dialect,
        path,
        writable,
        map,
        previous_term,
        build_index,
        ActiveBytes::Kept,
    )
}

/// What a scan of the active segment (read, not mapped) keeps of the bytes it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActiveBytes {
    /// All of them, in [`FileScan::bytes`] (a reader of the records right after the scan).
    Kept,
    /// None when the records end cleanly: the file is read through one window of
    /// `ActiveRead::CHUNK` bytes, reused, instead of a buffer of the whole segment, whose
    /// fresh pages the kernel had to zero (an open and verify only need the index). Any other
    /// end (a torn or bad record, a wrong term, a trailing empty record) is scanned again as
    /// [`ActiveBytes::Kept`] does, so the findings and what they read are the same.
    Dropped,
}

/// [`scan_file`] choosing what a scan of the active segment keeps ([`ActiveBytes`]).
pub fn scan_file_keeping(
    dialect: Dialect,
    path: &Path,
    writable: bool,
    map: bool,
    previous_term: i32,
    build_index: bool,
    active: ActiveBytes,
) -> Result<FileScan> {
    scan_file_with(
        dialect,
        path,
        writable,
        map,
        previous_term,
        build_index,
        ActiveRead::CHUNK,
        active,
        None,
    )
}

/// [`scan_file_keeping`] of a sealed segment (mapped) that also writes the replay steps of its
/// records into `steps` (a buffer reused from segment to segment), for a restore that applies
/// the segment right after its scan ([`crate::steps`]), when its records are long enough for
/// steps to pay (`steps_pay`). Same findings, same index.
pub fn scan_file_stepping(
    dialect: Dialect,
    path: &Path,
    previous_term: i32,
    build_index: bool,
    steps: Vec<Step>,
) -> Result<FileScan> {
    scan_file_with(
        dialect,
        path,
        false,
        true,
        previous_term,
        build_index,
        ActiveRead::CHUNK,
        ActiveBytes::Dropped,
        Some(steps),
    )
}

/// [`scan_file_keeping`] reading the active segment `chunk` bytes at a time (tests vary it),
/// writing a sealed segment's replay steps into `steps` when given ([`scan_file_stepping`]).
#[allow(clippy::too_many_arguments)]
fn scan_file_with(
    dialect: Dialect,
    path: &Path,
    writable: bool,
    map: bool,
    previous_term: i32,
    build_index: bool,
    chunk: u64,
    active: ActiveBytes,
    steps: Option<Vec<Step>>,
) -> Result<FileScan> {
    let file = OpenOptions::new()
        .read(true)
        .write(writable)
        .open(path)
        .ctx("open segment", path)?;
    let len = file.metadata().ctx("stat segment", path)?.len();
    let plain_active = !map && !segbytes::is_compressed(path);
    if plain_active && active == ActiveBytes::Dropped {
        let windowed = scan_windowed(dialect, &file, path, len, chunk, previous_term, build_index)?;
        if let Some(w) = windowed {
            return Ok(FileScan {
                dialect,
                file_len: len,
                bytes: SegmentBytes::empty(),
                header: header::Header::Valid,
                compressed: None,
                bad_compressed: None,
                index: w.index,
                count: w.count,
                first_term: w.first_term,
                last_term: w.last_term,
                end: w.end,
                stop: ScanStop::Clean,
                file,
                steps: None,
            });
        }
    }
    let mut compressed = None;
    let mut bad_compressed = None;
    let mut reading = None;
    let bytes = if segbytes::is_compressed(path) {
        match segbytes::decompressed(path, &file)? {
            Ok((bytes, h)) => {
                compressed = Some(h);
                bytes
            }
            Err(why) => {
                bad_compressed = Some(why);
                SegmentBytes::empty()
            }
        }
    } else if map {
        SegmentBytes::mapped(map_readonly(&file, len).ctx("map segment", path)?)
    } else {
        let mut read = ActiveRead::start(&file, path, len, chunk)?;
        if read.buf.get(..header::HEADER_LEN) != Some(&header::header()[..]) {
            // Not a valid header: its check may look at the whole rest of the file.
            read.rest(&file)?;
        }
        reading = Some(read);
        SegmentBytes::empty()
    };
    let rest_is_zero = |b: &[u8]| {
        b.get(header::HEADER_LEN..)
            .is_none_or(|r| r.iter().all(|&x| x == 0))
    };
    let head = {
        let b = reading.as_ref().map_or(&bytes[..], |r| &r.buf[..]);
        // Only consult the (possibly long) rest when the header is not valid.
        header::check_header(
            b,
            b.get(..header::HEADER_LEN) != Some(&header::header()[..]) && rest_is_zero(b),
        )
    };
    let mut scan = FileScan {
        dialect,
        file_len: len,
        bytes,
        header: head,
        compressed,
        bad_compressed,
        index: RecordIndex::default(),
        count: 0,
        first_term: None,
        last_term: None,
        end: 0,
        stop: ScanStop::Clean,
        file,
        steps: None,
    };
    if scan.header != header::Header::Valid {
        if let Some(read) = reading {
            scan.bytes = SegmentBytes::owned(read.buf);
        }
        return Ok(scan);
    }
    // A mapped segment is a sealed one: its index is sparse from the start, and only counts
    // when no index is asked for (growing even a sparse one was 6% of `verify`'s CPU time, in
    // fresh pages the kernel zeroes).
    let mut index = match (map, build_index) {
        (true, true) => RecordIndex::sparse(SEALED_STRIDE),
        (true, false) => RecordIndex::counting(),
        (false, _) => RecordIndex::default(),
    };
    let build_index = build_index || map;
    let mut count = 0usize;
    let mut first_term = None;
    let (end, stop) = if build_index {
        match reading.as_mut() {
            Some(read) => {
                let visit = |offset, term, _: &[u8]| index.push(offset, term);
                read.scan(dialect, &scan.file, previous_term, visit)?
            }
            None => match steps.filter(|_| steps_pay(dialect, &scan.bytes)) {
                Some(buffer) => {
                    let mut writer = StepWriter::new(buffer, scan.bytes.len() as u64);
                    let header_len = with_framing!(dialect, F => F::HEADER_LEN);
                    let visit = |offset: u64, term, data| {
                        index.push(offset, term);
                        writer.note(offset as usize + header_len, data);
                    };
                    let at = header::HEADER_LEN;
                    let walked = scan_records_from(dialect, &scan.bytes, at, previous_term, visit);
                    scan.steps = Some(writer.finish());
                    walked
                }
                None => {
                    let visit = |offset, term, _: &[u8]| index.push(offset, term);
                    let at = header::HEADER_LEN;
                    scan_records_from(dialect, &scan.bytes, at, previous_term, visit)
                }
            },
        }
    } else {
        let mut last = None;
        let visit = |_, term, _: &[u8]| {
            count += 1;
            first_term.get_or_insert(term);
            last = Some(term);
        };
        let r = match reading.as_mut() {
            Some(read) => read.scan(dialect, &scan.file, previous_term, visit)?,
            None => scan_records_from(
                dialect,
                &scan.bytes,
                header::HEADER_LEN,
                previous_term,
                visit,
            ),
        };
        scan.last_term = last;
        r
    };
    if let Some(read) = reading {
        scan.bytes = SegmentBytes::owned(read.buf);
    }
    if build_index {
        count = index.len();
        first_term = (!index.is_empty()).then(|| index.term(0));
        scan.last_term = index.last_term();
    }
    scan.index = index;
    scan.count = count;
    scan.first_term = first_term;
    scan.end = end;
    scan.stop = stop;
    Ok(scan)
}

/// Whether a sealed segment's records are long enough for replay steps to pay
/// ([`crate::steps::MIN_AVERAGE`]), judged on its first [`crate::steps::PROBE`] records; a
/// segment with fewer records (or whose first ones do not frame: the scan will say why) gets
/// them.
fn steps_pay(dialect: Dialect, bytes: &[u8]) -> bool {
    use crate::steps::{MIN_AVERAGE, PROBE};
    walk_in(dialect, bytes, header::HEADER_LEN, PROBE)
        .is_none_or(|end| (end - header::HEADER_LEN) / PROBE >= MIN_AVERAGE)
}

/// What [`scan_windowed`] found in an active segment whose records end cleanly.
struct Windowed {
    index: RecordIndex,
    count: usize,
    first_term: Option<i32>,
    last_term: Option<i32>,
    end: u64,
}

/// Scans the active segment through one window of `chunk` bytes (reused; grown only for a
/// record longer than half of it), never reading past `len`: `Some` when the records end at an
/// end marker after a non-empty record, exactly as [`ActiveRead::scan`] would have found
/// (every frame before that marker lies whole in the window it was read in); `None` for any
/// other end, which the caller scans again with the whole file at hand (its classification
/// may read all of it: how far garbage reaches, whether only zeros follow). Reads with
/// positioned reads, so the file's cursor stays at the start for that scan.
fn scan_windowed(
    dialect: Dialect,
    file: &File,
    path: &Path,
    len: u64,
    chunk: u64,
    previous_term: i32,
    build_index: bool,
) -> Result<Option<Windowed>> {
    // The window's size comes from the file's own length (real bytes), never a length field.
    let first = usize::try_from(chunk.clamp(1, len.max(1))).unwrap_or(usize::MAX);
    let mut buf = vec![0u8; first];
    let mut filled = read_full_at(file, path, &mut buf, 0)?;
    let mut eof = filled < buf.len();
    if buf[..filled].get(..header::HEADER_LEN) != Some(&header::header()[..]) {
        return Ok(None);
    }
    let mut index = RecordIndex::default();
    let (mut count, mut first_term, mut last_term) = (0usize, None, None);
    let (mut base, mut at, mut previous) = (0u64, header::HEADER_LEN, previous_term);
    // Whether the last record visited, in this window or an earlier one, was empty: a window
    // may end just after it, and the next one then visits no record before the end marker.
    let mut last_empty = false;
    let clean_end = loop {
        let (end, stop) = scan_records_from(dialect, &buf[..filled], at, previous, |o, t, d| {
            last_empty = d.is_empty();
            if build_index {
                index.push(base + o, t);
            } else {
                count += 1;
                first_term.get_or_insert(t);
            }
            last_term = Some(t);
        });
        let end = end as usize;
        let marker_read = end + END_MARKER.len() <= filled;
        let complete = eof || base + filled as u64 >= len;
        match stop {
            ScanStop::Clean if marker_read && !last_empty => break base + end as u64,
            _ if complete => return Ok(None),
            // The window ends before the marker or inside the next record: read on.
            ScanStop::Clean if !marker_read => {}
            ScanStop::Bad {
                reason: BadRecord::ShortHeader { .. } | BadRecord::PastEnd { .. },
                ..
            } => {}
            _ => return Ok(None),
        }
        // Keep the bytes from the last good record's end, read the next ones after them.
        buf.copy_within(end..filled, 0);
        filled -= end;
        base += end as u64;
        at = 0;
        previous = last_term.unwrap_or(previous_term);
        if filled * 2 > buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        let want = (buf.len() - filled)
            .min(usize::try_from(len - (base + filled as u64)).unwrap_or(usize::MAX));
        let got = read_full_at(
            file,
            path,
            &mut buf[filled..filled + want],
            base + filled as u64,
        )?;
        eof = got < want;
        filled += got;
    };
    if build_index {
        count = index.len();
        first_term = (!index.is_empty()).then(|| index.term(0));
        last_term = index.last_term();
    }
    Ok(Some(Windowed {
        index,
        count,
        first_term,
        last_term,
        end: clean_end,
    }))
}

/// Reads `buf.len()` bytes at `offset` (fewer at the end of the file): how many were read.
fn read_full_at(file: &File, path: &Path, buf: &mut [u8], offset: u64) -> Result<usize> {
    crate::io::fsutil::read_full_at(file, path, "read segment", buf, offset)
}

/// The active segment read in chunks, from the start, only as far as its scan needs: a
/// preallocated segment is mostly zeros past its end marker, and reading (copying into fresh
/// pages) all of it cost more than checking its records.
struct ActiveRead<'p> {
    path: &'p Path,
    /// The file's length when the scan opened it: never read past (like a map of that length).
    len: u64,
    /// The bytes read so far, from offset 0.
    buf: Vec<u8>,
    /// A read returned less than asked before `len`: the file is shorter now.
    eof: bool,
    /// Bytes read at a time.
    chunk: u64,
}

impl<'p> ActiveRead<'p> {
    /// Bytes read at a time: at most this much past its end marker. Small enough for the
    /// window of [`scan_windowed`] to stay in the core's own cache between the copy out of the
    /// page cache and the walk over it: the active segment of the 1M-delta 64 B log (9.3 MB of
    /// records) scanned in 2.44 ms through 256 KiB against 2.97 ms through 2 MiB (best of 80
    /// interleaved rounds; 1 MiB 2.55, 128 KiB 2.43).
    const CHUNK: u64 = 256 << 10;

    /// Reads the first chunk.
    fn start(file: &File, path: &'p Path, len: u64, chunk: u64) -> Result<ActiveRead<'p>> {
        // The capacity is the file's own length (real bytes on disk, not a length field), so
        // that the buffer never moves; pages of it that are never read are never touched. When
        // even that much address space is refused, the buffer grows as it is read (a read
        // that cannot grow it fails with an I/O error, as a whole read did).
        let cap = usize::try_from(len).unwrap_or(usize::MAX);
        let mut buf = Vec::new();
        let _ = buf.try_reserve_exact(cap);
        let mut read = ActiveRead {
            path,
            len,
            buf,
            eof: false,
            chunk: chunk.max(1),
        };
        read.more(file)?;
        Ok(read)
    }

    fn complete(&self) -> bool {
        self.eof || self.buf.len() as u64 >= self.len
    }

    /// Reads the next chunk (nothing once complete).
    fn more(&mut self, file: &File) -> Result<()> {
        if self.complete() {
            return Ok(());
        }
        let want = self.chunk.min(self.len - self.buf.len() as u64);
        let mut chunk = std::io::Read::take(file, want);
        let got =
            std::io::Read::read_to_end(&mut chunk, &mut self.buf).ctx("read segment", self.path)?;
        self.eof = (got as u64) < want;
        Ok(())
    }

    /// Reads everything up to the file's length.
    fn rest(&mut self, file: &File) -> Result<()> {
        while !self.complete() {
            self.more(file)?;
        }
        Ok(())
    }

    /// [`scan_records`] over the file, reading more whenever the walk's stop could depend on
    /// bytes not read yet. The result is exactly the walk of the whole file: a walk that stops
    /// at an end marker lying inside the bytes read looked at nothing past them (every frame
    /// before it is complete there), and every other stop (a bad or torn record, a decreasing
    /// term, the end of the bytes read) is taken only once the whole file is read, because
    /// classifying it reads the rest (how far garbage reaches, whether only zeros follow). So
    /// is a walk whose last record is empty (an empty record followed by zeros may be a torn
    /// header, docs/format.md log decision 2).
    fn scan(
        &mut self,
        dialect: Dialect,
        file: &File,
        mut previous_term: i32,
        mut visit: impl FnMut(u64, i32, &[u8]),
    ) -> Result<(u64, ScanStop)> {
        let mut at = header::HEADER_LEN;
        let mut last_empty = false;
        loop {
            let mut last_term = None;
            let (end, stop) =
                scan_records_from(dialect, &self.buf, at, previous_term, |o, t, d| {
                    last_empty = d.is_empty();
                    last_term = Some(t);
                    visit(o, t, d);
                });
            let marker_read = end + END_MARKER.len() as u64 <= self.buf.len() as u64;
            if self.complete() || (stop == ScanStop::Clean && marker_read && !last_empty) {
                return Ok((end, stop));
            }
            // Resume at the last good record's end, after the term it left.
            at = end as usize;
            previous_term = last_term.unwrap_or(previous_term);
            if stop == ScanStop::Clean && marker_read {
                self.rest(file)?;
            } else {
                self.more(file)?;
            }
        }
    }
}

impl Segment {
    /// Builds the segment from a scan. A sealed plain segment keeps the scan's map (as far as
    /// its records go) for the replay right after the scan, so the log is not mapped and
    /// faulted in twice; the caller drops it ([`Segment::unmap`]) when nothing reads the
    /// segment now, so that opening a long log does not leave all of it mapped. Any other
    /// scan's bytes (the active segment's buffer, a decompressed `.log.z`, which stays in the
    /// bounded cache of `segbytes`) are dropped here.
    pub fn from_file_scan(
        storage: &Arc<dyn Storage>,
        path: PathBuf,
        first_lsn: i64,
        scan: FileScan,
        writable: bool,
        sealed: bool,
    ) -> Segment {
        let size = scan.end.max(header::HEADER_LEN as u64);
        let file = storage.adopt(scan.file, &path);
        let mut seg = Segment::from_scan(
            storage,
            scan.dialect,
            path,
            first_lsn,
            file,
            writable,
            scan.index,
            size,
        );
        seg.compressed = scan.compressed;
        // Every record the scan indexed, it checked (framing and CRC) in `file`, kept above.
        seg.checked_at_open = seg.index.len();
        if sealed || seg.compressed.is_some() {
            seg.seal();
        }
        if seg.sealed && seg.compressed.is_none() {
            seg.map = usize::try_from(size)
                .ok()
                .and_then(|size| scan.bytes.map_prefix(size));
            seg.steps = scan.steps.filter(|s| s.len() == seg.index.len());
        }
        // Past the budget, reads go through the map (made again from the same inode if
        // dropped) and no descriptor is held.
        seg.settle_sealed();
        seg
    }

    /// Takes the replay steps its scan made, if any (see [`Segment::replay_steps`]).
    pub fn take_steps(&mut self) -> Option<Steps> {
        self.steps.take()
    }

    /// The replay steps of the records `from..=to` (LSNs inside this sealed segment) with the
    /// bytes they point into (the scan's map, which the records may borrow from), when the
    /// scan made steps for every record ([`crate::steps`]); `None` otherwise (the caller then
    /// walks the records, [`Segment::replay_records`]).
    pub fn replay_steps(&self, from: i64, to: i64) -> Option<(&[Step], &SegmentBytes)> {
        let (map, steps) = (self.map.as_ref()?, self.steps.as_ref()?);
        if !self.sealed || self.compressed.is_some() || from > to || from < self.first_lsn {
            return None;
        }
        let start = usize::try_from(from - self.first_lsn).ok()?;
        let end = usize::try_from(to - self.first_lsn).ok()?.checked_add(1)?;
        Some((steps.get(start, end)?, map))
    }

    /// Turns a compressed segment back into a plain `NNN.log` (a cut reaches into it, or it is
    /// the last segment of a writable log): write the original bytes, fsync, fsync the
    /// directory, then remove the `.z`. A crash before the removal leaves both files, and the
    /// next writable open keeps the `.z` (it decodes) and deletes the `.log`: nothing is lost.
    fn decompress_in_place(&mut self) -> Result<()> {
        let bytes = match self.map.take() {
            Some(b) => b,
            None => {
                let path = self.path.clone();
                self.with_file(|file| {
                    Ok(segbytes::decompressed_or_corrupt(&path, file.file()).map(|b| b.0))
                })?
                .map_err(|e| Error::io("read segment", &self.path, e))??
            }
        };
        let zpath = self.path.clone();
        let plain = self.dir().join(header::file_name(self.first_lsn));
        match self.storage.remove_file(&plain) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io("remove stale segment", &plain, e))
            }
            _ => {}
        }
        let file = self
            .storage
            .open(&plain, Open::CreateNew)
            .ctx("create segment", &plain)?;
        file.write_all_at(&bytes, 0).ctx("write segment", &plain)?;
        file.sync_all().ctx("fsync segment", &plain)?;
        let dir = self.dir();
        crate::io::fsutil::sync_dir(&*self.storage, &dir)?;
        self.storage
            .remove_file(&zpath)
            .ctx("remove compressed segment", &zpath)?;
        crate::io::fsutil::sync_dir(&*self.storage, &dir)?;
        self.path = plain;
        self.file = Handle::Open(file);
        self.checked_at_open = 0;
        self.writable = true;
        self.compressed = None;
        Ok(())
    }

    fn dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// After [`Log::compress`](crate::log::Log::compress) replaced this segment's file by
    /// `path` (a `.log.z` holding the same bytes): read from there from now on.
    pub fn adopt_compressed(
        &mut self,
        path: PathBuf,
        file: Arc<dyn StorageFile>,
        header: compressed::Header,
    ) {
        debug_assert!(self.sealed);
        self.path = path;
        self.file = Handle::Open(file);
        self.checked_at_open = 0;
        self.writable = false;
        self.compressed = Some(header);
        self.map = None;
        self.release_budget();
        self.settle_sealed();
    }
}

#[cfg(test)]
mod tests {
    use super::{
        scan_file, scan_file_with, scan_records, ActiveBytes, ActiveRead, FileScan, RecordIndex,
        ScanStop,
    };
    use crate::format::dialect::Dialect;
    use crate::format::record::{self, BadRecord};
    use crate::format::segment as header;
    use crate::recovery::{scan_segment, FindingKind, Position, ScanOptions};
    use proptest::prelude::*;

    /// Everything a scan's classification reads, for comparing two scans of one file.
    fn outcome(s: &FileScan) -> String {
        let offsets: Vec<u64> = if s.index.is_dense() {
            (0..s.index.len()).map(|i| s.index.offset(i)).collect()
        } else {
            Vec::new()
        };
        let ambiguous = s.index.is_dense() && s.ends_with_ambiguous_empty_record();
        let ambiguous_reach = ambiguous.then(|| s.nonzero_end(*offsets.last().unwrap()));
        // How far garbage reaches only matters where the scan stopped on a problem.
        let reach = (s.stop != ScanStop::Clean).then(|| s.nonzero_end(s.end));
        format!(
            "{:?} len {} count {} end {} stop {:?} terms {:?}..{:?} index {offsets:?} \
             reach {reach:?} torn header {} ambiguous {ambiguous} {ambiguous_reach:?}",
            s.header,
            s.file_len,
            s.count,
            s.end,
            s.stop,
            s.first_term,
            s.last_term,
            s.stop_is_torn_header(),
        )
    }

    /// `scan_records_from` stops at the first record whose term is negative or below the term
    /// before it (the one given for the first record, which may itself be negative), naming
    /// that term and the one before, and visits every record before it.
    #[test]
    fn the_scan_stops_at_the_first_negative_or_decreasing_term() {
        let terms = prop::collection::vec(-3i32..4, 0..8);
        proptest!(|(terms in terms, previous_term in -3i32..4)| {
            let mut buf = header::header().to_vec();
            let mut starts = Vec::new();
            for &t in &terms {
                starts.push(buf.len() as u64);
                record::encode_any_term(&mut buf, t, b"x");
            }
            let mut seen = Vec::new();
            let (end, stop) = scan_records(&buf, previous_term, |o, t, _| seen.push((o, t)));
            let mut before = previous_term;
            let mut expected = (buf.len() as u64, ScanStop::Clean);
            for (k, &t) in terms.iter().enumerate() {
                if t < 0 || t < before {
                    let offset = starts[k];
                    expected = (offset, ScanStop::Term { offset, term: t, previous: before });
                    break;
                }
                before = t;
            }
            prop_assert_eq!((end, stop), expected.clone());
            let visited = starts.iter().take_while(|&&o| o < expected.0).count();
            let want: Vec<(u64, i32)> = starts.iter().copied().zip(terms.iter().copied()).take(visited).collect();
            prop_assert_eq!(seen, want);
        });
    }

    /// The active segment read `chunk` bytes at a time against the whole file read at once.
    fn same_as_whole(bytes: &[u8], chunk: u64, build_index: bool) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0000000000000000000.log");
        std::fs::write(&path, bytes).unwrap();
        let scan = |chunk, active| {
            scan_file_with(
                Dialect::Spec,
                &path,
                false,
                false,
                0,
                build_index,
                chunk,
                active,
                None,
            )
            .unwrap()
        };
        let whole = scan(u64::MAX, ActiveBytes::Kept);
        let chunked = scan(chunk, ActiveBytes::Kept);
        assert_eq!(outcome(&chunked), outcome(&whole), "chunk {chunk}");
        let end = whole.end as usize;
        assert_eq!(chunked.bytes.get(..end), whole.bytes.get(..end));
        // Through a window: the same findings; the bytes only when the records do not end
        // cleanly (then they are scanned again whole).
        for chunk in [chunk, u64::MAX] {
            let windowed = scan(chunk, ActiveBytes::Dropped);
            assert_eq!(outcome(&windowed), outcome(&whole), "window {chunk}");
            if windowed.bytes.is_empty() {
                assert_eq!(windowed.stop, ScanStop::Clean, "window {chunk}");
            } else {
                assert_eq!(windowed.bytes.get(..end), whole.bytes.get(..end));
            }
        }
    }

    /// Records of 64 bytes from the header on, the last one sized so they end at `end`.
    fn records_until(end: usize) -> Vec<u8> {
        let mut buf = header::header().to_vec();
        let mut k = 0u8;
        while end - buf.len() >= 64 + 80 {
            record::encode(&mut buf, 1, &[k; 48]);
            k = k.wrapping_add(1);
        }
        let last = end - buf.len() - record::HEADER_LEN;
        record::encode(&mut buf, 1, &vec![0xA5; last]);
        assert_eq!(buf.len(), end);
        buf
    }

    const CHUNK: usize = ActiveRead::CHUNK as usize;

    #[test]
    fn a_trailing_empty_record_is_seen_whatever_window_its_end_marker_falls_in() {
        // A window that ends right after the empty record leaves the end marker to the next
        // window, which visits no record: the scan must still know the last one was empty.
        let mut bytes = header::header().to_vec();
        for k in 0..3u8 {
            record::encode(&mut bytes, 1, &[k + 1; 20]);
        }
        record::encode(&mut bytes, 1, &[]);
        bytes.resize(bytes.len() + 64, 0);
        for chunk in 1..=bytes.len() as u64 {
            same_as_whole(&bytes, chunk, true);
            same_as_whole(&bytes, chunk, false);
        }
    }

    #[test]
    fn an_end_marker_at_or_across_a_chunk_boundary_ends_the_scan_as_a_whole_read_does() {
        // Record ends are 4-aligned, so is the chunk: the marker sits just before, right at,
        // or just after the boundary (the property test below straddles it).
        for end in [CHUNK - 8, CHUNK - 4, CHUNK, CHUNK + 4] {
            let mut bytes = records_until(end);
            bytes.resize(5 << 20, 0);
            same_as_whole(&bytes, ActiveRead::CHUNK, true);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("0000000000000000000.log");
            std::fs::write(&path, &bytes).unwrap();
            let scan = scan_file(Dialect::Spec, &path, false, false, 0, true).unwrap();
            assert_eq!((scan.end, &scan.stop), (end as u64, &ScanStop::Clean));
        }
    }

    #[test]
    fn a_bad_record_past_the_first_chunk_is_found_where_a_whole_read_finds_it() {
        // A flipped data byte at about 3 MiB, then garbage at 4.5 MiB the cut must reach.
        let mut bytes = records_until(3 << 20);
        let bad = bytes.len();
        record::encode(&mut bytes, 1, &[7; 48]);
        bytes.extend(records_until(1 << 20)[header::HEADER_LEN..].iter());
        bytes[bad + record::HEADER_LEN + 5] ^= 0x40;
        bytes.resize(9 << 19, 0);
        bytes.extend_from_slice(&[1, 2, 3]);
        bytes.resize(5 << 20, 0);
        same_as_whole(&bytes, ActiveRead::CHUNK, true);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0000000000000000000.log");
        std::fs::write(&path, &bytes).unwrap();
        let options = ScanOptions::default();
        let (scan, finding) = scan_segment(&path, Position::Last, 0, &options).unwrap();
        let f = finding.expect("a torn tail");
        assert_eq!(f.kind, FindingKind::TornTail);
        assert_eq!(f.offset, Some(bad as u64));
        assert_eq!(f.reach, Some((9 << 19) + 3));
        assert!(matches!(
            scan.stop,
            ScanStop::Bad {
                reason: BadRecord::BadChecksum { .. },
                ..
            }
        ));
    }

    #[test]
    fn an_absurd_length_near_a_chunk_boundary_is_judged_against_the_whole_file() {
        for at in [CHUNK - 16, CHUNK - 8, CHUNK - 4, CHUNK] {
            let mut bytes = records_until(at);
            record::encode(&mut bytes, 1, &[9; 40]);
            // Length fields past the chunk, past the file, and negative.
            for len in [(CHUNK as u32) + 100, 0x7FFF_FFF0, 0x8000_0000] {
                let mut bytes = bytes.clone();
                bytes[at + 12..at + 16].copy_from_slice(&len.to_be_bytes());
                bytes.resize(3 << 20, 0);
                same_as_whole(&bytes, ActiveRead::CHUNK, true);
                let dir = tempfile::tempdir().unwrap();
                let path = dir.path().join("0000000000000000000.log");
                std::fs::write(&path, &bytes).unwrap();
                let scan = scan_file(Dialect::Spec, &path, false, false, 0, true).unwrap();
                let ScanStop::Bad { offset, reason } = &scan.stop else {
                    panic!("{:?}", scan.stop)
                };
                assert_eq!(*offset, at as u64);
                if let BadRecord::PastEnd { available, .. } = reason {
                    assert_eq!(*available, bytes.len() - at);
                }
            }
        }
    }

    #[test]
    fn a_trailing_empty_record_is_judged_on_the_whole_rest_of_the_file() {
        // An empty record followed by zeros may be a torn header: whether only zeros follow is
        // a question about every byte of the file, also those past the first chunk.
        for garbage in [None, Some(CHUNK + 1000)] {
            let mut bytes = records_until(4096);
            record::encode(&mut bytes, 1, &[]);
            bytes.resize(3 << 20, 0);
            if let Some(at) = garbage {
                bytes[at] = 0x11;
            }
            same_as_whole(&bytes, ActiveRead::CHUNK, true);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("0000000000000000000.log");
            std::fs::write(&path, &bytes).unwrap();
            let scan = scan_file(Dialect::Spec, &path, false, false, 0, true).unwrap();
            assert_eq!(scan.ends_with_ambiguous_empty_record(), garbage.is_none());
        }
    }

    fn segment_bytes() -> impl Strategy<Value = (Vec<u8>, u64, bool)> {
        let len = prop_oneof![1 => Just(0usize), 4 => 0usize..120];
        let records = prop::collection::vec((0i32..4, len), 0..30);
        (
            records,
            any::<bool>(),
            prop::option::weighted(0.4, (0u16..1000, any::<u8>())),
            prop::option::weighted(0.2, (0usize..30, any::<u32>())),
            prop::option::weighted(0.2, 0u16..1000),
            0usize..600,
            prop::option::weighted(0.3, 0u16..1000),
            (1u64..400, any::<bool>()),
        )
            .prop_map(
                |(mut records, marker, flip, length, cut, zeros, garbage, (chunk, index))| {
                    if records.len() % 3 != 0 {
                        records.sort_by_key(|r| r.0);
                    }
                    let mut buf = header::header().to_vec();
                    let mut starts = Vec::new();
                    for (k, &(term, len)) in records.iter().enumerate() {
                        starts.push(buf.len());
                        record::encode(&mut buf, term, &vec![k as u8 | 1; len]);
                    }
                    if marker {
                        buf.extend_from_slice(&record::END_MARKER);
                    }
                    buf.resize(buf.len() + zeros, 0);
                    if let Some((at, word)) = length.filter(|_| !starts.is_empty()) {
                        let at = starts[at % starts.len()] + 12;
                        buf[at..at + 4].copy_from_slice(&word.to_be_bytes());
                    }
                    if let Some((at, x)) = flip {
                        let at = buf.len() * at as usize / 1000;
                        buf[at] ^= x | 1;
                    }
                    if let Some(at) = garbage {
                        let at = buf.len() * at as usize / 1000;
                        buf[at] = 0xEE;
                    }
                    if let Some(c) = cut {
                        buf.truncate(buf.len() * c as usize / 1000);
                    }
                    (buf, chunk, index)
                },
            )
    }

    proptest! {
        #[test]
        fn the_active_segment_read_in_chunks_scans_like_the_whole_file(
            (bytes, chunk, index) in segment_bytes()
        ) {
            same_as_whole(&bytes, chunk, index);
        }
    }

    #[test]
    #[should_panic(expected = "sparse index")]
    fn a_sparse_index_refuses_to_answer_for_one_record_even_in_release_builds() {
        let mut index = RecordIndex::sparse(8);
        for i in 0..20 {
            index.push(8 + 16 * i, 1);
        }
        // Record 9's offset is not remembered; the answer would be another record's.
        index.offset(9);
    }

    #[test]
    fn a_dense_index_answers_for_every_record() {
        let mut index = RecordIndex::default();
        for i in 0..20 {
            index.push(8 + 16 * i, 1);
        }
        assert_eq!(index.offset(9), 8 + 16 * 9);
        assert_eq!(index.iter_until(8 + 16 * 9), 9);
    }
}
