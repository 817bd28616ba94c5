//! The open-time scan of one segment file: what a first look at it tells (its records, where
//! they end, its replay steps) and the segment built from that.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::format::compressed::{self, BadCompressed};
use crate::format::dialect::Dialect;
use crate::format::record::{with_framing, BadRecord, END_MARKER};
use crate::format::segment as header;
use crate::format::steps::{Step, StepWriter, Steps};
use crate::io::bytes::SegmentBytes;
use crate::io::storage::{Open, Storage, StorageFile};

use super::index::{RecordIndex, SEALED_STRIDE};
use super::walk::{self, scan_records_from, walk_in, ScanStop};
use super::{bytes, Handle, Segment};

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
    /// In the last segment, whether a scan that stopped on a term violation met a torn header
    /// ([`walk::is_torn_header`]).
    pub fn stop_is_torn_header(&self) -> bool {
        walk::is_torn_header(self.dialect, &self.bytes, &self.stop)
    }

    /// True when the last record read is empty and nothing but zeros follows its term
    /// ([`walk::is_ambiguous_empty_record`]).
    pub fn ends_with_ambiguous_empty_record(&self) -> bool {
        let Some(last) = self.index.len().checked_sub(1) else {
            return false;
        };
        let at = self.index.offset(last) as usize;
        let empty = with_framing!(self.dialect, F => self.end as usize == at + F::HEADER_LEN);
        empty && walk::is_ambiguous_empty_record(self.dialect, &self.bytes, at)
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
/// `io/mmap.rs`). The active segment is read in chunks only as far as its records go
/// (`ActiveRead`). A `.log.z` is always decompressed (and its header's length and CRC
/// checked). Terms must not go below `previous_term`. Without `build_index` the scan of the
/// active segment leaves its index empty (`count` and the terms say what it found), and a
/// mapped segment's index counts its records without their offsets ([`RecordIndex::counting`]):
/// enough for a report, not for reads.
pub fn scan_file(
    storage: &dyn Storage,
    dialect: Dialect,
    path: &Path,
    writable: bool,
    map: bool,
    previous_term: i32,
    build_index: bool,
) -> Result<FileScan> {
    scan_file_keeping(
        storage,
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
#[allow(clippy::too_many_arguments)]
pub fn scan_file_keeping(
    storage: &dyn Storage,
    dialect: Dialect,
    path: &Path,
    writable: bool,
    map: bool,
    previous_term: i32,
    build_index: bool,
    active: ActiveBytes,
) -> Result<FileScan> {
    scan_file_with(
        storage,
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
/// the segment right after its scan ([`crate::format::steps`]), when its records are long enough for
/// steps to pay (`steps_pay`). Same findings, same index.
pub fn scan_file_stepping(
    storage: &dyn Storage,
    dialect: Dialect,
    path: &Path,
    previous_term: i32,
    build_index: bool,
    steps: Vec<Step>,
) -> Result<FileScan> {
    scan_file_with(
        storage,
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
pub(super) fn scan_file_with(
    storage: &dyn Storage,
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
    let file = storage
        .open_file(path, writable)
        .ctx("open segment", path)?;
    let len = file.metadata().ctx("stat segment", path)?.len();
    let plain_active = !map && !bytes::is_compressed(path);
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
    let bytes = if bytes::is_compressed(path) {
        match bytes::decompressed(path, &file)? {
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
        SegmentBytes::mapped(storage.map(&file, len).ctx("map segment", path)?)
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
/// ([`crate::format::steps::MIN_AVERAGE`]), judged on its first [`crate::format::steps::PROBE`] records; a
/// segment with fewer records (or whose first ones do not frame: the scan will say why) gets
/// them.
fn steps_pay(dialect: Dialect, bytes: &[u8]) -> bool {
    use crate::format::steps::{MIN_AVERAGE, PROBE};
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
pub(super) struct ActiveRead<'p> {
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
    pub(super) const CHUNK: u64 = 256 << 10;

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
    /// bounded cache of `bytes`) are dropped here.
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
    /// scan made steps for every record ([`crate::format::steps`]); `None` otherwise (the caller then
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
    pub(super) fn decompress_in_place(&mut self) -> Result<()> {
        let bytes = match self.map.take() {
            Some(b) => b,
            None => {
                let path = self.path.clone();
                self.with_file(|file| {
                    Ok(bytes::decompressed_or_corrupt(&path, file.file()).map(|b| b.0))
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

    pub(super) fn dir(&self) -> PathBuf {
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
