//! The read path: entries by LSN range, batches, random single records, and the span walk
//! that splits a range of the log for parallel decoding.

use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::format::record::with_framing;
use crate::io::bytes::SegmentBytes;
use crate::segment::{self, Segment};

use super::recovery::Parallelism;
use super::{Log, RANDOM_READ_BYTES, RANDOM_READ_RECORDS};

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
        let mut lens = crate::log::columns::pool::take(n);
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

impl Log {
    // ----- reads -----

    /// Calls `f` for entries `start..end` in order while it returns true. `budget` limits the
    /// data bytes: the first entry is always visited, a further one only if the running total
    /// stays within the budget.
    ///
    /// `taken`: data bytes a caller already took from the entries before `start` (then the
    /// first entry is not free: it counts against the budget like the others).
    pub(super) fn visit(
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
    pub(super) fn prepare_random_read(&mut self, start: i64) -> Result<()> {
        if start > self.last_index() {
            return Ok(());
        }
        let k = self.segment_of(start);
        self.segments[k].note_random_read()
    }

    pub(super) fn check_read_start(&self, start: i64) -> Result<()> {
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
    /// the file under it (`io/mmap.rs` has the argument for every writer). So a second pass would
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
                crate::log::columns::pool::give(walked.lens);
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
}
