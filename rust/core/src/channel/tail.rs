//! Follows a log directory from an LSN on, by reading its segment files directly: the one
//! reader of every receiver, in the writer's process and in others alike. It needs no lock and
//! no scan at open, sees records as soon as they are written, steps into the next segment at
//! roll-over and keeps reading a file that retention deletes meanwhile (its descriptor stays
//! valid). Frames are parsed by [`record::parse`] and headers checked by
//! [`seg_format::check_header`]: the format rules live there, not here.
//!
//! What it sees at the end of the active segment is the writer's business: an end marker, a
//! record still being written (a bad frame) or zeros all mean "nothing more yet". A bad frame is
//! corruption only once the next segment exists (the writer moved on, so the record is final).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::compressed;
use crate::format::record::{self, Frame};
use crate::format::segment as seg_format;
use crate::io::fsutil;
use crate::segment::bytes::{self as segbytes, SegmentBytes};
use crate::segment::MAX_ENTRY_LSN;

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
        // The window may hold stale zeros where records have been written since: re-read the
        // file once before concluding that the end is reached.
        let mut refreshed = false;
        while got < max_messages {
            if self.seg.is_none() && !self.locate()? {
                break;
            }
            if self.pos >= self.window.len() {
                // Window used up: read on (big reads while records flow, small ones at the end).
                let len = if got > 0 { FLOWING_READ } else { IDLE_READ };
                self.refill(len)?;
                if self.window.is_empty() {
                    if refreshed || !self.advance()? {
                        break;
                    }
                    refreshed = true;
                }
                continue;
            }
            match record::parse(&self.window, self.pos) {
                // An empty record is never sent (a channel refuses empty messages): it is a
                // header whose rest is not visible yet.
                Frame::Record { data, next, .. } if !data.is_empty() => {
                    let n = data.len() as u64;
                    if got > 0 && bytes + n > max_bytes {
                        break;
                    }
                    out.push(data);
                    bytes += n;
                    got += 1;
                    self.pos = next;
                    self.next += 1;
                    refreshed = false;
                    if bytes >= max_bytes {
                        break;
                    }
                }
                Frame::Bad(
                    record::BadRecord::ShortHeader { .. } | record::BadRecord::PastEnd { .. },
                ) if !refreshed => {
                    // The window ends inside a record: read it whole.
                    refreshed = true;
                    self.refill(self.record_need().max(FLOWING_READ))?;
                }
                _ if !refreshed => {
                    refreshed = true;
                    let len = if got > 0 { FLOWING_READ } else { IDLE_READ };
                    self.refill(len.max(self.record_need()))?;
                }
                _ => {
                    if !self.advance()? {
                        break;
                    }
                    refreshed = false;
                }
            }
        }
        Ok(got)
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
        let (segments, _) = fsutil::list_segments(&self.dir)?;
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
        self.seg = Some(opened);
        self.window.clear();
        self.window_at = seg_format::HEADER_LEN as u64;
        self.pos = 0;
        // Skip the records before `next` (checked, not delivered).
        let mut lsn = segments[k].first_lsn;
        while lsn < self.next {
            match record::parse(&self.window, self.pos) {
                Frame::Record { next, data, .. } if !data.is_empty() => {
                    self.pos = next;
                    lsn += 1;
                }
                _ => {
                    self.refill(FLOWING_READ.max(self.record_need()))?;
                    let more = match record::parse(&self.window, 0) {
                        Frame::Record { data, .. } => !data.is_empty(),
                        _ => false,
                    };
                    if !more {
                        // The log ends before `next` (messages a receiver saw were lost with
                        // the page cache before their fsync): the next send gets that LSN, so
                        // resume there rather than skip what is sent from now on.
                        if is_last {
                            self.next = lsn;
                        }
                        let path = self
                            .seg
                            .as_ref()
                            .map(|s| s.path.clone())
                            .unwrap_or_default();
                        if !is_last {
                            return Err(Error::corruption(
                                &path,
                                Some(self.window_at),
                                format!("segment ends at LSN {} before LSN {}", lsn - 1, self.next),
                            ));
                        }
                        return Ok(true);
                    }
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
            // The writer moved on: whatever is left here must be an end marker.
            self.refill(FLOWING_READ.max(self.record_need()))?;
            if let Frame::Bad(bad) = record::parse(&self.window, self.pos) {
                return Err(Error::corruption(
                    &seg_path,
                    Some(self.window_at + self.pos as u64),
                    bad.to_string(),
                ));
            }
            if let Frame::Record { .. } = record::parse(&self.window, self.pos) {
                return Ok(true);
            }
            let Some(opened) = open_segment(&next_path, true)? else {
                return Ok(false);
            };
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

/// `(first LSN held, LSN after the last complete record)` of a log directory, read from its
/// files (a read-only channel has no log open).
pub fn bounds(dir: &Path) -> Result<(i64, i64)> {
    let (segments, _) = fsutil::list_segments(dir)?;
    let Some(first) = segments.first() else {
        return Ok((0, 0));
    };
    let mut tail = Tail::new(dir, MAX_ENTRY_LSN + 1);
    tail.locate()?;
    Ok((first.first_lsn, tail.next))
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
