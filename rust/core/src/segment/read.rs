//! Reads of a segment's records: locating a record, copying and visiting ranges, and the replay
//! walk over its bytes.

use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::format::record::{with_framing, BadRecord, END_MARKER};
use crate::format::{compressed, segment as header};
use crate::io::bytes::SegmentBytes;
use crate::io::storage::Open;

use super::file::{changed_under_reader, unreadable};
use super::index::{reads_before_full_offsets, RecordIndex, SEALED_STRIDE};
use super::walk::{
    scan_records, walk_frames, walk_framing, walk_in, RecordSink, ScanStop, Scratch,
};
use super::{bytes, Handle, Identity, Segment, REPLAY_WINDOW, SCRATCH_KEPT};

impl Segment {
    /// Offset of the record at `lsn` (inside this segment); walks headers from the nearest
    /// remembered offset in a sealed segment.
    pub(super) fn record_offset(&mut self, lsn: i64) -> Result<u64> {
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
    pub(super) fn record_end(&self, lsn: i64) -> u64 {
        let next = (lsn - self.first_lsn + 1) as usize;
        if next < self.index.len() {
            self.index.offset(next)
        } else {
            self.size
        }
    }

    /// The bytes of a sealed segment, mapped or decompressed on first use.
    pub(super) fn mapped(&mut self) -> Result<&[u8]> {
        if self.map.is_none() {
            let (path, size, compressed) =
                (self.path.clone(), self.size, self.compressed.is_some());
            let storage = Arc::clone(&self.storage);
            let bytes = self.with_file(|file| {
                Ok(if compressed {
                    bytes::decompressed_or_corrupt(&path, file.file()).map(|b| b.0)
                } else {
                    storage
                        .map(file.file(), size)
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
    pub(super) fn read_at(&self, start: u64, end: u64) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; (end - start) as usize];
        self.read_exact_into(&mut buf, start)?;
        Ok(buf)
    }

    /// Fills `buf` from file offset `start` by positioned reads (the active segment).
    pub(super) fn read_exact_into(&self, buf: &mut [u8], start: u64) -> Result<()> {
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
    /// a restored record may borrow its message from (see [`crate::state::payload::Payload`]):
    /// - a sealed plain segment: its map, `Some`. Safe to borrow for as long as a record lives,
    ///   whatever later happens to the file (`io/mmap.rs` has the argument);
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
    pub(super) fn replay_active(
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
    pub(super) fn walk<const CRC: bool>(
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
    pub(super) fn check_stored(
        &self,
        header: &[u8],
        data: &[u8],
    ) -> std::result::Result<(), BadRecord> {
        with_framing!(self.dialect, F => F::check(F::stored_checksum(header), data))
    }

    /// The replay's walk: [`Segment::walk`] checking CRCs when `check_crc`, else only the
    /// framing ([`walk_framing`]), the replay right after open, when it does not re-check what
    /// the scan checked (`Log::replay_rechecks_crc`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn replay_walk(
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
}
