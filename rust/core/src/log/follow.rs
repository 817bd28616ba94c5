//! Follows a log directory from an LSN on, by reading its segment files directly: the one
//! reader of every channel receiver, in the writer's process and in others alike. It needs no lock and
//! no scan at open, sees records as soon as they are written, steps into the next segment at
//! roll-over and keeps reading a file that retention deletes meanwhile (its descriptor stays
//! valid).
//!
//! It is the scanner's follow mode: records are taken one at a time by the scanner's own step
//! ([`segment::next_record`]: framing, checksum, term order) and where they stop is judged by the
//! scanner's rule for a segment's end ([`segment::end_of_records`]); headers are checked by
//! [`seg_format::check_header`]. In the active segment a torn record, or an empty record with
//! nothing after it ([`segment::is_ambiguous_empty_record`]), means "nothing more yet": the
//! writer may be writing it. Once the next segment exists the writer has moved on, the segment
//! is sealed, and it is read by the rules of a sealed one: what stops the walk before a clean
//! end is corruption, and an empty record is a record.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::compressed;
use crate::format::dialect::Dialect;
use crate::format::record;
use crate::format::segment as seg_format;
use crate::io::fsutil;
use crate::io::storage::RealStorage;
use crate::segment::bytes::{self as segbytes, SegmentBytes};
use crate::segment::{self, EndOfRecords, MAX_ENTRY_LSN};

/// Channels exist only in the spec dialect (spec section 11).
const DIALECT: Dialect = Dialect::Spec;

/// Bytes read at once while records flow, and while waiting at the end (cheap polls).
const FLOWING_READ: usize = 1 << 20;
const IDLE_READ: usize = 4 << 10;

struct OpenSegment {
    file: File,
    path: PathBuf,
    ino: u64,
    /// The decompressed contents of a `.log.z` (sealed, so they never change).
    bytes: Option<SegmentBytes>,
}

/// Messages in columnar form: message `i` has LSN `first_lsn + i` and the bytes
/// `data[offsets[i]..offsets[i + 1]]` (Arrow's binary layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Messages {
    pub first_lsn: i64,
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
}

impl Messages {
    pub fn new(first_lsn: i64) -> Messages {
        Messages {
            first_lsn,
            offsets: vec![0],
            data: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    fn push(&mut self, data: &[u8]) {
        self.data.extend_from_slice(data);
        self.offsets.push(self.data.len() as i32);
    }
}

/// A record found in the window: its term, its data's range in the window, the position after it.
type Found = (i32, std::ops::Range<usize>, usize);

/// Where a tail stands: the segment file it reads, a window of its bytes, the next LSN.
pub struct Tail {
    dir: PathBuf,
    seg: Option<OpenSegment>,
    /// LSN of the next record to deliver.
    next: i64,
    /// Bytes of the open segment from file offset `window_at`.
    window: Vec<u8>,
    window_at: u64,
    /// Position of the next record in `window`.
    pos: usize,
    /// The term of the record before `pos` (-1 before the first one read).
    term: i32,
    /// Whether the open segment is sealed: a later one exists, or it is a `.log.z`.
    sealed: bool,
}

impl Tail {
    /// A tail whose next record is `next` (located lazily, at the first read).
    pub fn new(dir: &Path, next: i64) -> Tail {
        Tail {
            dir: dir.to_path_buf(),
            seg: None,
            next,
            window: Vec::new(),
            window_at: 0,
            pos: 0,
            term: -1,
            sealed: false,
        }
    }

    /// LSN of the next record this tail delivers.
    pub fn next_lsn(&self) -> i64 {
        self.next
    }

    /// Appends up to `max_messages` records (and, after the first, at most `max_bytes` of
    /// data) to `out`; returns how many. Zero means nothing new has been written yet.
    pub fn read(
        &mut self,
        out: &mut Messages,
        max_messages: usize,
        max_bytes: u64,
    ) -> Result<usize> {
        let mut got = 0usize;
        let mut bytes = 0u64;
        while got < max_messages {
            if self.seg.is_none() && !self.locate()? {
                break;
            }
            // Big reads while records flow, small ones at the end (cheap polls).
            let len = if got > 0 { FLOWING_READ } else { IDLE_READ };
            match self.next_here(len)? {
                Some((term, data, next)) => {
                    let n = data.len() as u64;
                    if got > 0 && bytes + n > max_bytes {
                        break;
                    }
                    out.push(&self.window[data]);
                    bytes += n;
                    got += 1;
                    self.pos = next;
                    self.term = term;
                    self.next += 1;
                    if bytes >= max_bytes {
                        break;
                    }
                }
                None => {
                    if !self.advance()? {
                        break;
                    }
                }
            }
        }
        Ok(got)
    }

    /// The record at the window's position as `(term, its data's range in the window, the
    /// position after it)`, by the scanner's rules, re-reading the file once (at least `len`
    /// bytes) when the window does not show it whole. `None`: nothing more in the open segment
    /// (yet, while it is the active one).
    #[inline(always)]
    fn next_here(&mut self, len: usize) -> Result<Option<Found>> {
        match self.record_here() {
            Some(found) => Ok(Some(found)),
            // The window may end inside the record, or hold stale zeros where the writer has
            // written since: read it again before judging.
            None => self.next_after_refill(len),
        }
    }

    /// [`Tail::next_here`] once the window did not show a record: re-read, look again, judge.
    /// Apart (and cold) so the walk over the window stays a loop of inlined steps.
    #[cold]
    #[inline(never)]
    fn next_after_refill(&mut self, len: usize) -> Result<Option<Found>> {
        self.refill(len.max(self.record_need()))?;
        if let Some(found) = self.record_here() {
            return Ok(Some(found));
        }
        let stop = match segment::next_record(DIALECT, &self.window, self.pos, self.term) {
            // An empty record with nothing after it in the active segment: possibly a header
            // the writer has not finished, so wait, as for a torn one.
            Ok(_) => return Ok(None),
            Err(stop) => stop,
        };
        match segment::end_of_records(DIALECT, &self.window, &stop, !self.sealed) {
            EndOfRecords::Clean | EndOfRecords::Torn(_) => Ok(None),
            EndOfRecords::TermOrder(why) | EndOfRecords::Corrupt(why) => {
                let at = self.window_at + stop.offset().unwrap_or(0);
                let path = self
                    .seg
                    .as_ref()
                    .map(|s| s.path.clone())
                    .unwrap_or_default();
                Err(Error::corruption(&path, Some(at), why))
            }
        }
    }

    /// The record the window shows at the position, by the scanner's step; `None` when it
    /// shows none whole, or an empty record with nothing after it in the active segment.
    #[inline(always)]
    fn record_here(&self) -> Option<Found> {
        let (term, data, next) =
            segment::next_record(DIALECT, &self.window, self.pos, self.term).ok()?;
        if data.is_empty()
            && !self.sealed
            && segment::is_ambiguous_empty_record(DIALECT, &self.window, self.pos)
        {
            return None;
        }
        let from = self.pos + record::HEADER_LEN;
        Some((term, from..from + data.len(), next))
    }

    /// Bytes the record at `pos` needs (from its length field when present).
    fn record_need(&self) -> usize {
        let header = &self.window[self.pos.min(self.window.len())..];
        if header.len() >= record::HEADER_LEN {
            record::record_len(record::data_len(header))
        } else {
            record::HEADER_LEN
        }
    }

    /// Re-reads the open segment from the next record on: `len` bytes, or up to the end of
    /// the file.
    fn refill(&mut self, len: usize) -> Result<()> {
        let Some(seg) = &self.seg else {
            return Ok(());
        };
        let at = self.window_at + self.pos as u64;
        let old = std::mem::take(&mut self.window);
        let mut buf = old;
        buf.clear();
        if let Some(bytes) = &seg.bytes {
            let from = (at as usize).min(bytes.len());
            let to = from.saturating_add(len).min(bytes.len());
            buf.extend_from_slice(&bytes[from..to]);
            self.window = buf;
            self.window_at = at;
            self.pos = 0;
            return Ok(());
        }
        // `len` is bounded by the file's real length below, never by a length read from it
        // alone: the read stops at end of file.
        let file_len = seg.file.metadata().ctx("stat segment", &seg.path)?.len();
        let want = (len as u64).min(file_len.saturating_sub(at)) as usize;
        buf.resize(want, 0);
        let mut filled = 0;
        while filled < want {
            match seg.file.read_at(&mut buf[filled..], at + filled as u64) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io("read segment", &seg.path, e)),
            }
        }
        buf.truncate(filled);
        self.window = buf;
        self.window_at = at;
        self.pos = 0;
        Ok(())
    }

    /// Finds and opens the segment holding `next`. False when there is none yet.
    fn locate(&mut self) -> Result<bool> {
        let segments = list_segments(&self.dir)?;
        let Some(first) = segments.first() else {
            return Ok(false);
        };
        if self.next < first.first_lsn {
            return Err(Error::OutOfRange(format!(
                "LSN {} was collected (the channel's log starts at {})",
                self.next, first.first_lsn
            )));
        }
        let k = segments.partition_point(|s| s.first_lsn <= self.next) - 1;
        let is_last = k + 1 == segments.len();
        let path = segments[k].path.clone();
        let Some(opened) = open_segment(&path, is_last)? else {
            return Ok(false);
        };
        self.sealed = !is_last || opened.bytes.is_some();
        self.seg = Some(opened);
        self.window.clear();
        self.window_at = seg_format::HEADER_LEN as u64;
        self.pos = 0;
        self.term = -1;
        // Skip the records before `next` (checked, not delivered).
        let mut lsn = segments[k].first_lsn;
        while lsn < self.next {
            match self.next_here(FLOWING_READ)? {
                Some((term, _, next)) => {
                    self.pos = next;
                    self.term = term;
                    lsn += 1;
                }
                None if is_last => {
                    // The log ends before `next` (messages a receiver saw were lost with the
                    // page cache before their fsync): the next send gets that LSN, so resume
                    // there rather than skip what is sent from now on.
                    self.next = lsn;
                    return Ok(true);
                }
                None => {
                    let path = self
                        .seg
                        .as_ref()
                        .map(|s| s.path.clone())
                        .unwrap_or_default();
                    return Err(Error::corruption(
                        &path,
                        Some(self.window_at + self.pos as u64),
                        format!("segment ends at LSN {} before LSN {}", lsn - 1, self.next),
                    ));
                }
            }
        }
        Ok(true)
    }

    /// At the end of the open segment: steps into the next one when it exists, or reopens the
    /// same name when the writer replaced the file (a cut at its reopen). False: stay.
    fn advance(&mut self) -> Result<bool> {
        let Some(seg) = &self.seg else {
            return Ok(false);
        };
        let seg_path = seg.path.clone();
        let seg_ino = seg.ino;
        let mut next_path = self.dir.join(seg_format::file_name(self.next));
        let zipped = self.dir.join(compressed::file_name(self.next));
        if !next_path.exists() && zipped.exists() {
            // A reader far behind: the next segment is sealed and compressed already.
            next_path = zipped;
        }
        if next_path != seg_path && next_path.exists() {
            if !self.sealed {
                // The writer moved on: this segment is final. Look at its end again by the
                // rules of a sealed segment (corruption is an error, an empty record a record).
                self.sealed = true;
                return Ok(true);
            }
            let Some(opened) = open_segment(&next_path, true)? else {
                return Ok(false);
            };
            self.sealed = opened.bytes.is_some();
            self.seg = Some(opened);
            self.window.clear();
            self.window_at = seg_format::HEADER_LEN as u64;
            self.pos = 0;
            return Ok(true);
        }
        let replaced = match std::fs::metadata(&seg_path) {
            Ok(meta) => meta.ino() != seg_ino,
            Err(_) => false,
        };
        if replaced {
            self.seg = None;
            return Ok(true);
        }
        Ok(false)
    }
}

/// How often a reader lists the log directory again when what it listed changed under it (a
/// segment deleted by collection, a roll-over that has not written the new header yet) before
/// it gives up with `StaleRead`.
const LIST_TRIES: u32 = 64;

/// The segments of `dir`, listed again when one vanished between the listing and its `stat`
/// (the writer collected it: issue 43 saw `TfluxIOError` ENOENT from a read-only channel's
/// bounds); `StaleRead` when that keeps happening.
fn list_segments(dir: &Path) -> Result<Vec<fsutil::SegmentFile>> {
    for _ in 0..LIST_TRIES {
        match fsutil::list_segments(&RealStorage, dir) {
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {}
            listed => return listed.map(|(segments, _)| segments),
        }
    }
    Err(stale(dir))
}

fn stale(dir: &Path) -> Error {
    Error::StaleRead {
        path: dir.to_path_buf(),
        offset: None,
        reason: format!(
            "its segments changed under {LIST_TRIES} listings in a row (the writer collects or \
             rolls over)"
        ),
    }
}

/// `(first LSN held, LSN after the last complete record)` of a log directory, read from its
/// files (a read-only channel has no log open). Both come from one listing; a segment that
/// vanished, or a last segment whose header is not written yet, is looked at again.
pub fn bounds(dir: &Path) -> Result<(i64, i64)> {
    for attempt in 0..LIST_TRIES {
        let segments = list_segments(dir)?;
        let Some(first) = segments.first() else {
            return Ok((0, 0));
        };
        let mut tail = Tail::new(dir, MAX_ENTRY_LSN + 1);
        if tail.locate()? {
            return Ok((first.first_lsn, tail.next));
        }
        if attempt > 0 {
            // A roll-over between its create and its header write: a moment.
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    Err(stale(dir))
}

/// Positions the tail now (normally done at the first read); false when the log has no
/// segment yet.
impl Tail {
    pub fn locate_now(&mut self) -> Result<bool> {
        if self.seg.is_some() {
            return Ok(true);
        }
        self.locate()
    }
}

/// Opens a segment file and checks its header; `None` when it is the last segment and its
/// header is not written yet (a roll-over in progress).
fn open_segment(path: &Path, is_last: bool) -> Result<Option<OpenSegment>> {
    let file = match File::open(path) {
        Ok(f) => f,
        // Deleted since it was listed (collection): the caller lists again.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("open segment", path, e)),
    };
    let meta = file.metadata().ctx("stat segment", path)?;
    if !meta.is_file() {
        return Err(Error::corruption(path, None, "not a regular file"));
    }
    if segbytes::is_compressed(path) {
        // Checked against its header's length and CRC by the one decompressor.
        let (bytes, _) = segbytes::decompressed_or_corrupt(path, &file)?;
        if seg_format::check_header(&bytes[..bytes.len().min(8)], false)
            != seg_format::Header::Valid
        {
            return Err(Error::corruption(path, Some(0), "bad segment header"));
        }
        return Ok(Some(OpenSegment {
            file,
            path: path.to_path_buf(),
            ino: meta.ino(),
            bytes: Some(bytes),
        }));
    }
    let mut header = [0u8; seg_format::HEADER_LEN];
    let mut n = 0;
    while n < header.len() {
        match file.read_at(&mut header[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read segment header", path, e)),
        }
    }
    match seg_format::check_header(&header[..n], true) {
        seg_format::Header::Valid => {}
        seg_format::Header::Uninitialised if is_last => return Ok(None),
        other => {
            return Err(Error::corruption(
                path,
                Some(0),
                format!("bad segment header ({other:?})"),
            ))
        }
    }
    Ok(Some(OpenSegment {
        file,
        path: path.to_path_buf(),
        ino: meta.ino(),
        bytes: None,
    }))
}
