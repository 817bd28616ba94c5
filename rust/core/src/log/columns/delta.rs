//! Log deltas decoded into columns: one segment alone, or a range of the log split across the
//! cores (each span decoded by its own [`SpanDecoder`] and appended in LSN order).

use crate::error::{Error, Result};
use crate::format::delta::{self as format_delta, fields, DeltaRef};
use crate::format::dialect::Dialect;
use crate::log::read::{SpanReader, SpanStart, Split};
use crate::log::recovery::Parallelism;
use crate::log::Log;

use super::arrow::{offset, Binary, Bitmap, Fixed, IdLists, Nullable, KIND_NAMES};
use super::pool;
use super::task::TaskColumns;

/// Decoded entries in columns.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct DeltaColumns {
    pub lsn: Vec<i64>,
    pub term: Vec<i32>,
    pub kind: Binary,
    pub queue: Binary,
    pub key: Nullable<i64>,
    /// Record ids are UInt64 on disk; Spark has no unsigned type, ids past 2^63 - 1 are refused.
    pub record_id: Nullable<i64>,
    pub message: Binary,
    pub implementation: Nullable<i32>,
    pub max_queue_size: Nullable<i32>,
    pub max_message_size: Nullable<i32>,
    pub key_min: Nullable<i64>,
    pub key_max: Nullable<i64>,
    /// AddLater: not before; Failed: due (unix ms). Spec section 12, as the next two.
    pub due: Nullable<i64>,
    /// Purge: the ids of the records kept.
    pub kept_ids: IdLists,
    /// QueueRules: the rules it changes, as JSON ([`super::task::rules_json`]).
    pub rules: Binary,
    /// The undecoded record data, when asked for.
    pub raw: Option<Binary>,
    /// The one kind and the one queue of every entry, when they have one: `kind` and `queue`
    /// then have no offsets and no data (their validity is set). See [`DeltaColumns::kind_at`].
    pub repeats: Repeats,
}

/// The value every entry of a batch has in a utf8 column, when all have one: the column is
/// not written (the bindings hand Arrow buffers of the value repeated that they keep for the
/// next batches, [`Binary::repeated`]).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Repeats {
    pub kind: Option<&'static str>,
    pub queue: Option<Vec<u8>>,
}

// Entry codes: TaskFlux's four kinds (their index into `KIND_NAMES`), a CreateQueue with a key
// range apart (it fills `key_min`/`key_max`), then the task-queue kinds (spec section 12).
// `KIND_OF` maps a code to its kind's index into `KIND_NAMES`.
const CREATE: u8 = 0;
const ADD: u8 = 2;
const REMOVE: u8 = 3;
const CREATE_RANGED: u8 = 4;
const RULES: u8 = 5;
const LATER: u8 = 6;
const DELIVERED: u8 = 7;
const FAILED: u8 = 8;
const PURGE: u8 = 9;
/// Entry codes.
const CODES: usize = 10;
const KIND_OF: [usize; CODES] = [0, 1, 2, 3, 0, 4, 5, 6, 7, 8];

/// The entry code of a delta of kind `kind_code` ([`fields::kind_code`]), not a CreateQueue
/// with a key range.
fn code_of_kind(kind_code: u8) -> u8 {
    if kind_code < 4 {
        kind_code
    } else {
        kind_code + 1
    }
}

/// The column decoder. Each delta is decoded once as it arrives ([`Columns::push`]: the
/// lengths alone for a delta of the queue before it, [`fields::code_in_queue`], else
/// [`format_delta::decode`], the one decoder), and its fields are written at once, while the record
/// is in cache, straight into the vectors that are handed to Python, keeping a code per entry.
/// Columns no entry fills are never written, validity bitmaps are built from the codes at the
/// end (none when all are valid).
pub(super) struct Columns {
    first_lsn: i64,
    /// Per entry: CREATE, 1 (DeleteQueue), ADD, REMOVE, CREATE_RANGED or a task-queue code.
    pub(super) codes: Vec<u8>,
    /// Entries of each code so far, but AddRecords (not counted one by one: [`Columns::counts`]).
    counts: [usize; CODES],
    term: Vec<i32>,
    queue: Binary,
    /// The messages up to the last AddRecord (the null entries after it: [`Binary::pad`]).
    message: Binary,
    key: Fixed<i64>,
    record_id: Fixed<i64>,
    settings: [Fixed<i32>; 3],
    range: [Fixed<i64>; 2],
    /// AddLater's not before, Failed's due.
    due: Fixed<i64>,
    /// Purge's kept ids, QueueRules' change.
    task: TaskColumns,
    /// The queue of the last delta decoded in full ([`format_delta::decode`] accepted the name), to
    /// check the deltas of the same queue after it by their lengths alone
    /// ([`fields::code_in_queue`]). At first the default queue: the empty name, always valid.
    pub(super) queue_seen: Vec<u8>,
    /// Whether every entry so far is of one queue, `queue_first`: then `queue` is left
    /// empty (the batch names the queue once, [`Repeats::queue`]), and only written entry by
    /// entry once another queue appears ([`Columns::queue_catch_up`]).
    one_queue: bool,
    /// The queue of the first entry.
    queue_first: Vec<u8>,
    /// The first entry not of `queue_first`, when there is one (`one_queue` false).
    other_at: usize,
}

impl Columns {
    /// Room for about `n` entries carrying `bytes` of data.
    pub(super) fn new(first_lsn: i64, n: usize, bytes: usize) -> Columns {
        // Checked against int32 offsets at the end (`finish`).
        let binary = |bytes| {
            let mut offsets = pool::take(n + 1);
            offsets.push(0);
            Binary {
                offsets,
                data: pool::take(bytes),
                validity: Bitmap::default(),
            }
        };
        let (queue, message) = (binary(n * 8), binary(bytes));
        Columns {
            first_lsn,
            codes: Vec::with_capacity(n),
            counts: [0; CODES],
            term: pool::take(n),
            queue,
            message,
            key: Fixed::new(n),
            record_id: Fixed::new(n),
            settings: [(); 3].map(|_| Fixed::new(n)),
            range: [(); 2].map(|_| Fixed::new(n)),
            due: Fixed::new(n),
            task: TaskColumns::default(),
            queue_seen: Vec::new(),
            one_queue: true,
            queue_first: Vec::new(),
            other_at: 0,
        }
    }

    /// Decodes the next entry (at `lsn`) into the columns: undecodable data is a
    /// `CorruptionError` naming the LSN, a record id past Int64 an `InvalidArgument` (and
    /// the entry is not added).
    #[inline(always)]
    pub(super) fn push(&mut self, lsn: i64, term: i32, data: &[u8]) -> Result<()> {
        let i = self.codes.len();
        let code = match fields::code_in_queue(data, &self.queue_seen) {
            Some(code) => code,
            None => self.check_in_full(lsn, data)?,
        };
        if code == ADD {
            self.key.put(i, fields::add_key(data));
            self.message.put(i, fields::add_message(data));
        } else {
            self.put_other(lsn, i, code, data)?;
        }
        if !self.one_queue {
            self.queue.put(i, fields::name(data));
        }
        self.codes.push(code);
        self.term.push(term);
        Ok(())
    }

    /// [`Columns::push`] of the fields of entry `i`, of a kind other than AddRecord.
    #[cold]
    #[inline(never)]
    pub(super) fn put_other(&mut self, lsn: i64, i: usize, code: u8, data: &[u8]) -> Result<()> {
        let id64 = |id: u64| {
            i64::try_from(id).map_err(|_| {
                Error::InvalidArgument(format!("record id {id} at LSN {lsn} exceeds Int64"))
            })
        };
        match code {
            REMOVE => {
                let id = id64(fields::remove_id(data))?;
                self.record_id.put(i, id);
            }
            RULES | LATER | DELIVERED | FAILED | PURGE => {
                // Decoded in full by `check_in_full` just now (no shortcut reads these kinds):
                // decoded again for their fields, the one decoder.
                let d = format_delta::decode(data).map_err(|e| undecodable(lsn, e))?;
                match d {
                    DeltaRef::QueueRules { change, .. } => self.task.put_rules(i, &change),
                    DeltaRef::AddLater {
                        key,
                        not_before,
                        message,
                        ..
                    } => {
                        self.key.put(i, key);
                        self.message.put(i, message);
                        self.due.put(i, not_before);
                    }
                    DeltaRef::Delivered { id, .. } => self.record_id.put(i, id64(id)?),
                    DeltaRef::Failed { id, due, .. } => {
                        self.record_id.put(i, id64(id)?);
                        self.due.put(i, due);
                    }
                    DeltaRef::Purge { kept, .. } => {
                        let ids = kept.iter().map(id64).collect::<Result<Vec<_>>>()?;
                        self.task.put_kept(i, ids);
                    }
                    _ => unreachable!("code {code} is a task-queue kind"),
                }
            }
            CREATE | CREATE_RANGED => {
                let settings = fields::create_settings(data);
                for (column, value) in self.settings.iter_mut().zip(settings) {
                    column.put(i, value);
                }
                if let Some((lo, hi)) = fields::create_range(data) {
                    self.range[0].put(i, lo);
                    self.range[1].put(i, hi);
                }
            }
            _ => {}
        }
        self.counts[code as usize] += 1;
        Ok(())
    }

    /// [`Columns::push`] of a delta not of the queue seen last, or not of a common kind: the
    /// whole decode. Returns the entry's code.
    #[cold]
    #[inline(never)]
    pub(super) fn check_in_full(&mut self, lsn: i64, data: &[u8]) -> Result<u8> {
        let d = format_delta::decode(data).map_err(|e| undecodable(lsn, e))?;
        self.queue_seen.clear();
        self.queue_seen.extend_from_slice(d.name());
        if self.codes.is_empty() {
            self.queue_first.clone_from(&self.queue_seen);
        } else if self.one_queue && self.queue_seen != self.queue_first {
            // From here on every entry writes its queue: the entries before it first.
            self.queue_catch_up(self.codes.len());
            self.one_queue = false;
            self.other_at = self.codes.len();
        }
        let code = match d {
            DeltaRef::CreateQueue {
                key_range: Some(_), ..
            } => CREATE_RANGED,
            _ => code_of_kind(fields::kind_code(&d)),
        };
        Ok(code)
    }

    /// Writes the queue of the entries before `upto` that were left to the end while they
    /// were all of one queue (`one_queue`).
    pub(super) fn queue_catch_up(&mut self, upto: usize) {
        let queue = &mut self.queue;
        for _ in queue.offsets.len() - 1..upto {
            queue.data.extend_from_slice(&self.queue_first);
            queue.offsets.push(queue.data.len() as i32);
        }
    }

    /// Entries of each code.
    pub(super) fn counts(&self) -> [usize; CODES] {
        let mut c = self.counts;
        c[ADD as usize] = self.codes.len() - c.iter().sum::<usize>();
        c
    }

    /// Keeps the first `n` entries, as if no other had been pushed.
    pub(super) fn truncate(&mut self, n: usize) {
        if !self.one_queue && self.other_at >= n {
            // Of one queue again, whatever the spans or the budget (`Repeats::queue`); also
            // when nothing is cut: a delta of another queue whose push failed after its
            // decode (an id past Int64, the read then cut before it) left `one_queue` false.
            self.one_queue = true;
            self.queue.truncate(0);
        }
        if n >= self.codes.len() {
            return;
        }
        self.codes.truncate(n);
        self.counts = [0; CODES];
        for &code in &self.codes {
            self.counts[code as usize] += 1;
        }
        self.counts[ADD as usize] = 0;
        self.term.truncate(n);
        // Nothing written while of one queue.
        self.queue.truncate(n);
        self.message.truncate(n);
        let c = self.counts();
        self.key.truncate(n, c[ADD as usize] + c[LATER as usize]);
        let ids = c[REMOVE as usize] + c[DELIVERED as usize] + c[FAILED as usize];
        self.record_id.truncate(n, ids);
        self.due.truncate(n, c[LATER as usize] + c[FAILED as usize]);
        self.task.truncate(n);
        for column in &mut self.settings {
            column.truncate(n, c[CREATE as usize] + c[CREATE_RANGED as usize]);
        }
        for column in &mut self.range {
            column.truncate(n, c[CREATE_RANGED as usize]);
        }
    }

    /// Appends the entries of `other`, which follow these.
    pub(super) fn append(&mut self, mut other: Columns) -> Result<()> {
        let (n, more) = (self.codes.len(), other.codes.len());
        if !(self.one_queue && other.one_queue && self.queue_first == other.queue_first) {
            self.other_at = match (self.one_queue, other.one_queue) {
                (false, _) => self.other_at,
                (true, false) if self.queue_first == other.queue_first => n + other.other_at,
                _ => n,
            };
            self.queue_catch_up(n);
            other.queue_catch_up(more);
            self.one_queue = false;
        }
        self.codes.extend_from_slice(&other.codes);
        for (count, more) in self.counts.iter_mut().zip(other.counts) {
            *count += more;
        }
        self.term.extend_from_slice(&other.term);
        pool::give(other.term);
        self.message.pad(n);
        other.message.pad(more);
        for (column, more) in [
            (&mut self.queue, other.queue),
            (&mut self.message, other.message),
        ] {
            column.append(&more)?;
            pool::give(more.offsets);
            pool::give(more.data);
        }
        self.key.append(n, other.key, more);
        self.record_id.append(n, other.record_id, more);
        self.due.append(n, other.due, more);
        self.task.append(n, other.task);
        for (column, other) in self.settings.iter_mut().zip(other.settings) {
            column.append(n, other, more);
        }
        for (column, other) in self.range.iter_mut().zip(other.range) {
            column.append(n, other, more);
        }
        Ok(())
    }

    /// The columns.
    pub(super) fn finish(mut self, raw: Option<Binary>) -> Result<DeltaColumns> {
        let n = self.codes.len();
        let c = self.counts();
        let (creates, ranged) = (c[CREATE as usize] + c[CREATE_RANGED as usize], c[4]);
        let adds = c[ADD as usize] + c[LATER as usize];
        let ids = c[REMOVE as usize] + c[DELIVERED as usize] + c[FAILED as usize];
        let dues = c[LATER as usize] + c[FAILED as usize];
        self.message.pad(n);
        for column in [&self.queue, &self.message] {
            offset(column.data.len())?;
        }
        let (kind, one_kind) = self.kind_column()?;
        let codes = &self.codes[..];
        let bits = |valid, of: &[u8]| Bitmap::build(n, valid, |i| of.contains(&codes[i]));
        let [implementation, max_queue_size, max_message_size] = self
            .settings
            .map(|c| c.finish(n, bits(creates, &[CREATE, CREATE_RANGED])));
        let [key_min, key_max] = self
            .range
            .map(|c| c.finish(n, bits(ranged, &[CREATE_RANGED])));
        let (kept_ids, rules) = self.task.finish(n)?;
        let one_queue = (self.one_queue && n > 0).then_some(self.queue_first);
        let mut queue = if let Some(name) = &one_queue {
            Binary::repeated_len(name, n)?;
            pool::give(self.queue.offsets);
            pool::give(self.queue.data);
            Binary::empty()
        } else {
            self.queue
        };
        queue.validity = Bitmap::build(n, n, |_| true);
        let mut message = self.message;
        message.validity = bits(adds, &[ADD, LATER]);
        Ok(DeltaColumns {
            lsn: {
                let mut lsn = pool::take(n);
                lsn.extend(self.first_lsn..self.first_lsn + n as i64);
                lsn
            },
            term: self.term,
            kind,
            queue,
            key: self.key.finish(n, bits(adds, &[ADD, LATER])),
            record_id: self
                .record_id
                .finish(n, bits(ids, &[REMOVE, DELIVERED, FAILED])),
            message,
            implementation,
            max_queue_size,
            max_message_size,
            key_min,
            key_max,
            due: self.due.finish(n, bits(dues, &[LATER, FAILED])),
            kept_ids,
            rules,
            raw,
            repeats: Repeats {
                kind: one_kind,
                queue: one_queue,
            },
        })
    }

    /// The kind names, or (no offsets, no data) the one kind every entry has.
    pub(super) fn kind_column(&self) -> Result<(Binary, Option<&'static str>)> {
        let n = self.codes.len();
        let name = |code: u8| KIND_NAMES[KIND_OF[code as usize]].as_bytes();
        let mut counts = [0; KIND_NAMES.len()];
        for (code, count) in self.counts().into_iter().enumerate() {
            counts[KIND_OF[code]] += count;
        }
        let all = Bitmap::build(n, n, |_| true);
        if let Some(kind) = (0..KIND_NAMES.len()).find(|&k| counts[k] == n && n > 0) {
            let name = KIND_NAMES[kind];
            Binary::repeated_len(name.as_bytes(), n)?;
            let mut column = Binary::empty();
            column.validity = all;
            return Ok((column, Some(name)));
        }
        let bytes = (0..KIND_NAMES.len())
            .map(|k| counts[k] * KIND_NAMES[k].len())
            .sum();
        let mut kind = Binary::with_capacity(n, bytes)?;
        kind.extend(0..n, |i| Some(name(self.codes[i])));
        kind.validity = all;
        Ok((kind, None))
    }
}

/// Undecodable data at `lsn`: corruption naming the LSN and the offset in the delta.
fn undecodable(lsn: i64, e: format_delta::DeltaError) -> Error {
    Error::corruption(
        std::path::Path::new(&format!("<delta at LSN {lsn}>")),
        Some(e.offset as u64),
        format!("undecodable delta at LSN {lsn}: {}", e.reason),
    )
}

impl DeltaColumns {
    pub fn len(&self) -> usize {
        self.lsn.len()
    }

    /// Entry `i`'s kind name.
    pub fn kind_at(&self, i: usize) -> &[u8] {
        match self.repeats.kind {
            Some(name) => name.as_bytes(),
            None => self.kind.value(i),
        }
    }

    /// Entry `i`'s queue name.
    pub fn queue_at(&self, i: usize) -> &[u8] {
        match &self.repeats.queue {
            Some(name) => name,
            None => self.queue.value(i),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lsn.is_empty()
    }
}

/// Decodes every record of one segment file (named by its first LSN) without opening the log
/// it belongs to: the recovery scanner classifies it ([`crate::log::recovery::scan_segment`]), so a
/// torn tail ends the records of the last segment (`Position::Last`) and anything else the
/// scanner finds fatal is a `CorruptionError`. Entries outside `from..=to` are skipped.
#[allow(clippy::too_many_arguments)]
pub fn read_segment_deltas(
    path: &std::path::Path,
    position: crate::log::recovery::Position,
    from: Option<i64>,
    to: Option<i64>,
    raw: bool,
    dialect: Option<Dialect>,
) -> Result<DeltaColumns> {
    use crate::format::record::{self, Frame};
    use crate::format::segment as seg_format;
    use crate::log::recovery::{scan_segment, ScanOptions};
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let first_lsn = seg_format::parse_file_name(name)
        .or_else(|| crate::format::compressed::parse_file_name(name))
        .ok_or_else(|| {
            Error::InvalidArgument(format!("{} is not named like a segment", path.display()))
        })?;
    // Readers look for the `.z` first (spec section 9): a segment listed as `.log` may have
    // been compressed since.
    let zpath = path.with_file_name(crate::format::compressed::file_name(first_lsn));
    let owned_path;
    let path = if zpath.is_file() {
        owned_path = zpath;
        owned_path.as_path()
    } else {
        path
    };
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat segment", path, e))?;
    if !meta.is_file() {
        // Never opened: a FIFO would block, a device would never end.
        return Err(Error::corruption(
            path,
            None,
            "named like a segment but is not a regular file: its records cannot be read",
        ));
    }
    // Deltas are never empty: a trailing empty record is a torn header (as the store opens).
    // Read in the dialect asked for, or the one its first record says (spec section 11): a
    // segment of the other dialect is never read as damage.
    let dialect =
        crate::log::dialect::file_dialect(crate::log::dialect::plain_segment_says(path)?, dialect)?;
    let options = ScanOptions {
        empty_entries: false,
        dialect: Some(dialect),
        ..ScanOptions::default()
    };
    let (scan, finding) = scan_segment(path, position, 0, &options)?;
    if let Some(f) = finding.filter(|f| f.fatal) {
        return Err(f.to_error());
    }
    // The entries of `from..=to` this segment holds: indexes `lo..hi`.
    let count = scan.index.len();
    let index_of = |lsn: i64| lsn.saturating_sub(first_lsn).clamp(0, count as i64) as usize;
    let lo = from.map_or(0, index_of);
    let hi = to.map_or(count, |t| index_of(t.saturating_add(1))).max(lo);
    let mut columns = Columns::new(first_lsn + lo as i64, hi - lo, scan.bytes.len());
    let mut raw = raw
        .then(|| Binary::with_capacity(hi - lo, scan.bytes.len()))
        .transpose()?;
    // The records one after another from the first (a sealed segment's index is sparse).
    let mut at = seg_format::HEADER_LEN;
    for i in 0..hi {
        // Checked by the scan just now: framing only.
        let frame = crate::format::record::with_framing!(dialect, F => record::parse_in::<F, false>(&scan.bytes, at));
        let Frame::Record { term, data, next } = frame else {
            let e = Error::corruption(path, Some(at as u64), "record changed while it was read");
            return Err(e);
        };
        at = next;
        if i < lo {
            continue;
        }
        columns.push(first_lsn + i as i64, term, data)?;
        if let Some(raw) = &mut raw {
            raw.data.extend_from_slice(data);
            raw.offsets.push(offset(raw.data.len())?);
        }
    }
    if let Some(raw) = &mut raw {
        let len = raw.offsets.len() - 1;
        raw.validity = Bitmap::build(len, len, |_| true);
    }
    columns.finish(raw)
}

/// How [`read_deltas_with`] reads.
#[derive(Debug, Clone, Copy)]
pub struct DeltaRead {
    /// Record data to stop after (at least one entry; at most 2 GiB, for int32 offsets).
    pub max_bytes: u64,
    /// Whether to add the undecoded record data as a column.
    pub raw: bool,
    /// Whether the records are decoded on every core (the columns are the same either way).
    pub parallelism: Parallelism,
    /// The fewest entries a part decoded on its own thread has ([`PART_ENTRIES`]; tests use
    /// small parts).
    pub part_entries: usize,
}

/// Entries below which a part is not worth a thread of its own (and the copy that appends it).
pub const PART_ENTRIES: usize = 8192;

/// Decodes entries `start..end` of `log` (clamped to the log) into columns, stopping after
/// `max_bytes` of record data (at least one entry). Undecodable data is a `CorruptionError`
/// naming the LSN. On every core unless `TFLUX_THREADS=1` ([`read_deltas_with`]).
pub fn read_deltas(
    log: &mut Log,
    start: i64,
    end: i64,
    max_bytes: u64,
    raw: bool,
) -> Result<DeltaColumns> {
    let opts = DeltaRead {
        max_bytes,
        raw,
        parallelism: Parallelism::from_env(),
        part_entries: PART_ENTRIES,
    };
    read_deltas_with(log, start, end, &opts)
}

/// [`read_deltas`] with its options. The log walks the records' framing ([`Log::locate`]:
/// the budget, CRCs where a read must check them) in spans of about equal size on rayon's
/// pool, and each span's records are decoded as they are walked, straight from the segment's
/// bytes (no copy first, no second pass over them) into the span's own columns, column at a
/// time (`Columns`); the spans are appended to the first, which was sized for all of them.
pub fn read_deltas_with(
    log: &mut Log,
    start: i64,
    end: i64,
    opts: &DeltaRead,
) -> Result<DeltaColumns> {
    let budget = opts.max_bytes.min(i32::MAX as u64);
    let split = Split {
        parallelism: opts.parallelism,
        part_entries: opts.part_entries,
    };
    let make = |span: SpanStart<'_>| {
        let (n, bytes) = if span.first {
            span.read
        } else {
            // The span's share of the estimate.
            let (count, bytes) = span.read;
            (
                span.records,
                span.records.saturating_mul(bytes / count.max(1) + 1),
            )
        };
        SpanDecoder {
            first_lsn: span.first_lsn,
            columns: Columns::new(span.first_lsn, n, bytes),
            raw: opts
                .raw
                .then(|| Binary::with_capacity(n, bytes.min(budget as usize))),
            wants_raw: opts.raw,
            failed: None,
        }
    };
    let mut spans = log.locate(start, end, budget, &split, make)?.into_iter();
    let Some(first) = spans.next() else {
        let raw = opts.raw.then(Binary::default);
        return Columns::new(start, 0, 0).finish(raw);
    };
    let (mut columns, mut raw) = first.finish()?;
    for span in spans {
        let (more, more_raw) = span.finish()?;
        columns.append(more)?;
        if let (Some(raw), Some(more)) = (&mut raw, more_raw) {
            raw.append(&more)?;
        }
    }
    if let Some(raw) = &mut raw {
        let len = raw.offsets.len() - 1;
        raw.validity = Bitmap::build(len, len, |_| true);
    }
    columns.finish(raw)
}

/// Decodes the records of one span while [`Log::locate`] walks them ([`Columns::push`] each
/// as it comes, while it is in cache).
struct SpanDecoder {
    first_lsn: i64,
    columns: Columns,
    /// The records' undecoded data, when asked for (or an error making it: data past 2 GiB).
    raw: Option<Result<Binary>>,
    /// Whether `raw` is asked for (one test per record instead of two).
    wants_raw: bool,
    /// The first record that could not be decoded (its index in the span, the error); the
    /// records after it are walked (the framing comes first) but not decoded.
    failed: Option<(usize, Error)>,
}

impl SpanDecoder {
    #[inline(never)]
    pub(super) fn push_raw(&mut self, record: &[u8]) {
        if let Some(Ok(raw)) = &mut self.raw {
            raw.data.extend_from_slice(record);
            match offset(raw.data.len()) {
                Ok(end) => raw.offsets.push(end),
                Err(e) => self.raw = Some(Err(e)),
            }
        }
    }

    /// The span's columns and raw data, or its first record's error.
    pub(super) fn finish(self) -> Result<(Columns, Option<Binary>)> {
        if let Some((_, e)) = self.failed {
            return Err(e);
        }
        Ok((self.columns, self.raw.transpose()?))
    }
}

impl SpanReader for SpanDecoder {
    #[inline(always)]
    fn record(&mut self, term: i32, record: &[u8], _at: usize) {
        if self.failed.is_some() {
            return;
        }
        // Every record before it pushed (none failed).
        let i = self.columns.codes.len();
        if let Err(e) = self.columns.push(self.first_lsn + i as i64, term, record) {
            self.failed = Some((i, e));
            return;
        }
        if self.wants_raw {
            self.push_raw(record);
        }
    }

    fn truncate(&mut self, n: usize) {
        if matches!(self.failed, Some((i, _)) if i >= n) {
            self.failed = None;
        }
        if self.failed.is_some() {
            return;
        }
        self.columns.truncate(n);
        if let Some(Ok(raw)) = &mut self.raw {
            raw.truncate(n);
        }
    }
}
