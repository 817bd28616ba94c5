//! Log entries decoded into columns (Arrow's memory layout: values, int32 offsets for
//! variable-width columns, LSB-first validity bitmaps). The Spark source and Parquet export hand
//! these buffers to pyarrow without a per-record Python object.
//!
//! Columns: lsn, term, kind, queue, key, record_id, message, implementation, max_queue_size,
//! max_message_size, key_min, key_max (and the raw data when asked). Fields that a delta kind
//! does not carry are null.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::format::delta::{self, fields, DeltaRef};
use crate::format::dialect::Dialect;
use crate::log::{Log, SpanReader, SpanStart, Split};
use crate::pool;
use crate::recovery::Parallelism;

/// A nullable fixed-width column.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Nullable<T> {
    /// One value per entry (zero where null), or none at all when every entry is null: a
    /// column no entry fills takes no memory (the bindings hand Arrow one shared zero buffer).
    pub values: Vec<T>,
    pub validity: Bitmap,
}

/// LSB-first validity bits (1 = present). `bytes` is empty when every entry is valid (Arrow
/// then needs no validity buffer) or every entry is null (all zeros, which the bindings share
/// between columns), so neither costs any bitmap work.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Bitmap {
    pub bytes: Vec<u8>,
    pub len: usize,
    pub nulls: usize,
}

impl Bitmap {
    fn push(&mut self, valid: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if valid {
            *self.bytes.last_mut().expect("pushed above") |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }

    /// Whether entry `i` is present.
    pub fn is_valid(&self, i: usize) -> bool {
        match self.bytes.get(i / 8) {
            Some(byte) => byte & (1 << (i % 8)) != 0,
            None => self.nulls == 0,
        }
    }

    /// `len` entries of which `valid` are present, entry `i` where `present(i)`: no bytes and
    /// no loop when all or none are.
    fn build(len: usize, valid: usize, present: impl Fn(usize) -> bool) -> Bitmap {
        let nulls = len - valid;
        if nulls == 0 || valid == 0 {
            return Bitmap {
                bytes: Vec::new(),
                len,
                nulls,
            };
        }
        let bytes = (0..len.div_ceil(8))
            .map(|k| {
                let first = k * 8;
                (0..8.min(len - first)).fold(0u8, |b, bit| b | (present(first + bit) as u8) << bit)
            })
            .collect();
        Bitmap { bytes, len, nulls }
    }
}

/// A variable-width column (utf8 or binary) with int32 offsets.
#[derive(Debug, Clone, PartialEq)]
pub struct Binary {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub validity: Bitmap,
}

impl Default for Binary {
    fn default() -> Self {
        Binary {
            offsets: vec![0],
            data: Vec::new(),
            validity: Bitmap::default(),
        }
    }
}

/// Arrow's int32 offsets: a column's data must stay under 2 GiB.
fn offset(end: usize) -> Result<i32> {
    i32::try_from(end).map_err(|_| Error::InvalidArgument("column batch exceeds 2 GiB".into()))
}

impl Binary {
    fn push(&mut self, v: Option<&[u8]>) -> Result<()> {
        self.validity.push(v.is_some());
        if let Some(bytes) = v {
            self.data.extend_from_slice(bytes);
        }
        self.offsets.push(offset(self.data.len())?);
        Ok(())
    }

    /// An empty column with room for `len` values and `bytes` of data, which must fit int32
    /// offsets (checked here, once, so that [`Binary::extend`] need not).
    fn with_capacity(len: usize, bytes: usize) -> Result<Binary> {
        offset(bytes)?;
        let mut offsets = pool::take(len + 1);
        offsets.push(0);
        Ok(Binary {
            offsets,
            data: pool::take(bytes),
            validity: Bitmap::default(),
        })
    }

    /// Appends `other`'s values (the validity is built at the end, from the entries' codes).
    fn append(&mut self, other: &Binary) -> Result<()> {
        let base = self.data.len();
        offset(base + other.data.len())?;
        let shift = base as i32;
        self.data.extend_from_slice(&other.data);
        self.offsets
            .extend(other.offsets[1..].iter().map(|&o| o + shift));
        Ok(())
    }

    /// The data length of `value` `n` times, refused past int32 offsets.
    pub fn repeated_len(value: &[u8], n: usize) -> Result<usize> {
        let len = value
            .len()
            .checked_mul(n)
            .ok_or_else(|| Error::InvalidArgument("column batch exceeds 2 GiB".into()))?;
        offset(len)?;
        Ok(len)
    }

    /// No offsets and no data: a column of [`Repeats`].
    fn empty() -> Binary {
        Binary {
            offsets: Vec::new(),
            data: Vec::new(),
            validity: Bitmap::default(),
        }
    }

    /// `value` `n` times (by doubling copies; all valid).
    pub fn repeated(value: &[u8], n: usize) -> Result<Binary> {
        let len = Self::repeated_len(value, n)?;
        let mut column = Binary::with_capacity(n, len)?;
        column
            .offsets
            .extend((1..=n).map(|i| (i * value.len()) as i32));
        column.data.extend_from_slice(value);
        while column.data.len() < len {
            let more = column.data.len().min(len - column.data.len());
            column.data.extend_from_within(..more);
        }
        column.data.truncate(len);
        column.validity = Bitmap::build(n, n, |_| true);
        Ok(column)
    }

    /// Keeps the first `n` values (the validity is built at the end).
    fn truncate(&mut self, n: usize) {
        if n + 1 < self.offsets.len() {
            self.offsets.truncate(n + 1);
            self.data.truncate(self.offsets[n] as usize);
        }
    }

    /// Entry `i`'s value (empty when null).
    pub fn value(&self, i: usize) -> &[u8] {
        &self.data[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Entry `i`'s value: `i` is past every entry written so far (those between are null).
    /// Offsets are checked to fit int32 at the end (`Columns::finish`).
    #[inline(always)]
    fn put(&mut self, i: usize, value: &[u8]) {
        if self.offsets.len() != i + 1 {
            self.pad(i);
        }
        self.data.extend_from_slice(value);
        self.offsets.push(self.data.len() as i32);
    }

    /// Null (empty) values up to `n` entries.
    fn pad(&mut self, n: usize) {
        let end = *self.offsets.last().expect("offsets start with 0");
        if self.offsets.len() < n + 1 {
            self.offsets.resize(n + 1, end);
        }
    }

    /// Appends the values of entries `range` (`None`: null), at most the `bytes` reserved.
    fn extend<'a>(&mut self, range: Range<usize>, value: impl Fn(usize) -> Option<&'a [u8]>) {
        for i in range {
            if let Some(v) = value(i) {
                self.data.extend_from_slice(v);
            }
            self.offsets.push(self.data.len() as i32);
        }
    }
}

pub const KIND_NAMES: [&str; 4] = [
    "create_queue",
    "delete_queue",
    "add_record",
    "remove_record",
];

/// A nullable fixed-width column written an entry at a time, as the entries are decoded.
/// Nothing is written while every entry so far is null: a column no entry fills (most of them,
/// in a log of one delta kind) ends without values (see [`Nullable::values`]) and costs nothing
/// per entry. The null entries before a value are written (zeros) when the value comes, those
/// after the last value at the end ([`Fixed::pad`]).
struct Fixed<T> {
    /// The values up to the last entry present (no capacity at all while there is none).
    values: Vec<T>,
    /// Room to reserve when the first value appears.
    capacity: usize,
}

impl<T: Copy + Default + pool::Pooled> Fixed<T> {
    fn new(capacity: usize) -> Fixed<T> {
        Fixed {
            values: Vec::new(),
            capacity,
        }
    }

    /// Whether some entry has a value.
    fn has_values(&self) -> bool {
        self.values.capacity() > 0
    }

    /// Entry `i`'s value: `i` is past every entry written so far (those between are null).
    #[inline(always)]
    fn put(&mut self, i: usize, value: T) {
        if self.values.len() != i || self.values.len() == self.values.capacity() {
            self.make_room(i);
        }
        self.values.push(value);
    }

    /// [`Fixed::put`] of the first value, of a value after null entries, or past the room.
    #[cold]
    #[inline(never)]
    fn make_room(&mut self, i: usize) {
        if self.has_values() {
            self.values.resize(i, T::default());
            self.values.reserve(1);
        } else {
            self.values = zeroed(i, self.capacity.max(i + 1));
        }
    }

    /// Zeros up to `n` entries (the null entries after the last value), when there are values.
    fn pad(&mut self, n: usize) {
        if self.has_values() {
            self.values.resize(n, T::default());
        }
    }

    /// Keeps the first `n` entries, `valid` of them present: a column none of them fills
    /// has no values, as if it had never had any.
    fn truncate(&mut self, n: usize, valid: usize) {
        if valid == 0 {
            pool::give(std::mem::take(&mut self.values));
        } else {
            self.values.truncate(n);
        }
    }

    /// Appends `other`'s `more` entries (a column filled on another thread, for the entries
    /// after these `n`).
    fn append(&mut self, n: usize, mut other: Fixed<T>, more: usize) {
        if !other.has_values() {
            self.pad(n + more);
            return;
        }
        other.pad(more);
        if self.has_values() {
            self.pad(n);
        } else {
            self.values = zeroed(n, self.capacity.max(n + more));
        }
        self.values.extend_from_slice(&other.values);
        pool::give(other.values);
    }

    fn finish(mut self, n: usize, validity: Bitmap) -> Nullable<T> {
        self.pad(n);
        Nullable {
            values: self.values,
            validity,
        }
    }
}

/// `len` zeros with room for `capacity` values, in a kept vector when there is one.
fn zeroed<T: pool::Pooled + Default>(len: usize, capacity: usize) -> Vec<T> {
    let mut values = pool::take(capacity.max(len));
    values.resize(len, T::default());
    values
}

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

// Entry codes: the kind's index into `KIND_NAMES` (`code & 3`), and a CreateQueue with a key
// range apart (it fills `key_min`/`key_max`).
const CREATE: u8 = 0;
const ADD: u8 = 2;
const REMOVE: u8 = 3;
const CREATE_RANGED: u8 = 4;

/// The column decoder. Each delta is decoded once as it arrives ([`Columns::push`]: the
/// lengths alone for a delta of the queue before it, [`fields::code_in_queue`], else
/// [`delta::decode`], the one decoder), and its fields are written at once, while the record
/// is in cache, straight into the vectors that are handed to Python, keeping a code per entry.
/// Columns no entry fills are never written, validity bitmaps are built from the codes at the
/// end (none when all are valid).
struct Columns {
    first_lsn: i64,
    /// Per entry: CREATE, 1 (DeleteQueue), ADD, REMOVE or CREATE_RANGED.
    codes: Vec<u8>,
    /// Entries of each code so far, but AddRecords (not counted one by one: [`Columns::counts`]).
    counts: [usize; 5],
    term: Vec<i32>,
    queue: Binary,
    /// The messages up to the last AddRecord (the null entries after it: [`Binary::pad`]).
    message: Binary,
    key: Fixed<i64>,
    record_id: Fixed<i64>,
    settings: [Fixed<i32>; 3],
    range: [Fixed<i64>; 2],
    /// The queue of the last delta decoded in full ([`delta::decode`] accepted the name), to
    /// check the deltas of the same queue after it by their lengths alone
    /// ([`fields::code_in_queue`]). At first the default queue: the empty name, always valid.
    queue_seen: Vec<u8>,
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
    fn new(first_lsn: i64, n: usize, bytes: usize) -> Columns {
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
            counts: [0; 5],
            term: pool::take(n),
            queue,
            message,
            key: Fixed::new(n),
            record_id: Fixed::new(n),
            settings: [(); 3].map(|_| Fixed::new(n)),
            range: [(); 2].map(|_| Fixed::new(n)),
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
    fn push(&mut self, lsn: i64, term: i32, data: &[u8]) -> Result<()> {
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
    fn put_other(&mut self, lsn: i64, i: usize, code: u8, data: &[u8]) -> Result<()> {
        match code {
            REMOVE => {
                let id = fields::remove_id(data);
                let id = i64::try_from(id).map_err(|_| {
                    Error::InvalidArgument(format!("record id {id} at LSN {lsn} exceeds Int64"))
                })?;
                self.record_id.put(i, id);
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
    fn check_in_full(&mut self, lsn: i64, data: &[u8]) -> Result<u8> {
        let d = delta::decode(data).map_err(|e| {
            Error::corruption(
                std::path::Path::new(&format!("<delta at LSN {lsn}>")),
                Some(e.offset as u64),
                format!("undecodable delta at LSN {lsn}: {}", e.reason),
            )
        })?;
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
            _ => fields::kind_code(&d),
        };
        Ok(code)
    }

    /// Writes the queue of the entries before `upto` that were left to the end while they
    /// were all of one queue (`one_queue`).
    fn queue_catch_up(&mut self, upto: usize) {
        let queue = &mut self.queue;
        for _ in queue.offsets.len() - 1..upto {
            queue.data.extend_from_slice(&self.queue_first);
            queue.offsets.push(queue.data.len() as i32);
        }
    }

    /// Entries of each code.
    fn counts(&self) -> [usize; 5] {
        let mut c = self.counts;
        c[ADD as usize] = self.codes.len() - c.iter().sum::<usize>();
        c
    }

    /// Keeps the first `n` entries, as if no other had been pushed.
    fn truncate(&mut self, n: usize) {
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
        self.counts = [0; 5];
        for &code in &self.codes {
            self.counts[code as usize] += 1;
        }
        self.counts[ADD as usize] = 0;
        self.term.truncate(n);
        // Nothing written while of one queue.
        self.queue.truncate(n);
        self.message.truncate(n);
        let c = self.counts();
        self.key.truncate(n, c[ADD as usize]);
        self.record_id.truncate(n, c[REMOVE as usize]);
        for column in &mut self.settings {
            column.truncate(n, c[CREATE as usize] + c[CREATE_RANGED as usize]);
        }
        for column in &mut self.range {
            column.truncate(n, c[CREATE_RANGED as usize]);
        }
    }

    /// Appends the entries of `other`, which follow these.
    fn append(&mut self, mut other: Columns) -> Result<()> {
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
        for (column, other) in self.settings.iter_mut().zip(other.settings) {
            column.append(n, other, more);
        }
        for (column, other) in self.range.iter_mut().zip(other.range) {
            column.append(n, other, more);
        }
        Ok(())
    }

    /// The columns.
    fn finish(mut self, raw: Option<Binary>) -> Result<DeltaColumns> {
        let n = self.codes.len();
        let c = self.counts();
        let (creates, ranged, adds, removes) = (c[0] + c[4], c[4], c[2], c[3]);
        self.message.pad(n);
        for column in [&self.queue, &self.message] {
            offset(column.data.len())?;
        }
        let (kind, one_kind) = self.kind_column()?;
        let codes = &self.codes[..];
        let bits = |valid, code: u8, mask: u8| Bitmap::build(n, valid, |i| codes[i] & mask == code);
        let [implementation, max_queue_size, max_message_size] =
            self.settings.map(|c| c.finish(n, bits(creates, CREATE, 3)));
        let [key_min, key_max] = self
            .range
            .map(|c| c.finish(n, bits(ranged, CREATE_RANGED, 0xFF)));
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
        message.validity = bits(adds, ADD, 0xFF);
        Ok(DeltaColumns {
            lsn: {
                let mut lsn = pool::take(n);
                lsn.extend(self.first_lsn..self.first_lsn + n as i64);
                lsn
            },
            term: self.term,
            kind,
            queue,
            key: self.key.finish(n, bits(adds, ADD, 0xFF)),
            record_id: self.record_id.finish(n, bits(removes, REMOVE, 0xFF)),
            message,
            implementation,
            max_queue_size,
            max_message_size,
            key_min,
            key_max,
            raw,
            repeats: Repeats {
                kind: one_kind,
                queue: one_queue,
            },
        })
    }

    /// The kind names, or (no offsets, no data) the one kind every entry has.
    fn kind_column(&self) -> Result<(Binary, Option<&'static str>)> {
        let n = self.codes.len();
        let name = |code: u8| KIND_NAMES[(code & 3) as usize].as_bytes();
        let mut counts = [0; 4];
        for (code, count) in self.counts().into_iter().enumerate() {
            counts[code & 3] += count;
        }
        let all = Bitmap::build(n, n, |_| true);
        if let Some(kind) = (0..4).find(|&k| counts[k] == n && n > 0) {
            let name = KIND_NAMES[kind];
            Binary::repeated_len(name.as_bytes(), n)?;
            let mut column = Binary::empty();
            column.validity = all;
            return Ok((column, Some(name)));
        }
        let bytes = (0..4).map(|k| counts[k] * KIND_NAMES[k].len()).sum();
        let mut kind = Binary::with_capacity(n, bytes)?;
        kind.extend(0..n, |i| Some(name(self.codes[i])));
        kind.validity = all;
        Ok((kind, None))
    }
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
/// it belongs to: the recovery scanner classifies it ([`crate::recovery::scan_segment`]), so a
/// torn tail ends the records of the last segment (`Position::Last`) and anything else the
/// scanner finds fatal is a `CorruptionError`. Entries outside `from..=to` are skipped.
#[allow(clippy::too_many_arguments)]
pub fn read_segment_deltas(
    path: &std::path::Path,
    position: crate::recovery::Position,
    from: Option<i64>,
    to: Option<i64>,
    raw: bool,
    dialect: Option<Dialect>,
) -> Result<DeltaColumns> {
    use crate::format::record::{self, Frame};
    use crate::format::segment as seg_format;
    use crate::recovery::{scan_segment, ScanOptions};
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
    let dialect = crate::dialect::file_dialect(crate::dialect::plain_segment_says(path)?, dialect)?;
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
        let frame =
            crate::with_framing!(dialect, F => record::parse_in::<F, false>(&scan.bytes, at));
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
    fn push_raw(&mut self, record: &[u8]) {
        if let Some(Ok(raw)) = &mut self.raw {
            raw.data.extend_from_slice(record);
            match offset(raw.data.len()) {
                Ok(end) => raw.offsets.push(end),
                Err(e) => self.raw = Some(Err(e)),
            }
        }
    }

    /// The span's columns and raw data, or its first record's error.
    fn finish(self) -> Result<(Columns, Option<Binary>)> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::delta::Delta;
    use crate::{LogOptions, SyncPolicy};

    #[test]
    fn every_kind_lands_in_its_columns_with_nulls_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                sync: SyncPolicy::Never,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let deltas = [
            Delta::CreateQueue {
                name: b"q".to_vec(),
                implementation: 2,
                max_queue_size: 5,
                max_message_size: -1,
                key_range: Some((-3, 3)),
            },
            Delta::AddRecord {
                name: b"q".to_vec(),
                key: -2,
                message: b"hi".to_vec(),
            },
            Delta::RemoveRecord {
                name: b"q".to_vec(),
                id: 1,
            },
            Delta::DeleteQueue {
                name: b"q".to_vec(),
            },
        ];
        let bytes: Vec<Vec<u8>> = deltas.iter().map(|d| d.encode()).collect();
        log.append_many(1, &bytes).unwrap();
        let c = read_deltas(&mut log, 0, 10, u64::MAX, true).unwrap();
        assert_eq!(c.lsn, vec![0, 1, 2, 3]);
        assert_eq!(
            c.kind.data,
            b"create_queueadd_recordremove_recorddelete_queue"
        );
        assert_eq!(c.key.values, vec![0, -2, 0, 0]);
        assert_eq!(c.key.validity.bytes, vec![0b0010]);
        assert_eq!(c.record_id.validity.bytes, vec![0b0100]);
        assert_eq!(c.key_min.values[0], -3);
        assert_eq!(c.key_max.validity.nulls, 3);
        assert_eq!(c.message.offsets, vec![0, 0, 2, 2, 2]);
        assert_eq!(
            c.raw.unwrap().data.len(),
            bytes.iter().map(Vec::len).sum::<usize>()
        );
        // A budget of one byte still returns the first entry.
        assert_eq!(read_deltas(&mut log, 1, 10, 1, false).unwrap().lsn, vec![1]);
    }

    #[test]
    fn a_sealed_segment_decodes_alone_every_record_and_any_range() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                sync: SyncPolicy::Never,
                soft_limit: 512,
                hard_limit: 1024,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let add = |k: i64| {
            Delta::AddRecord {
                name: b"q".to_vec(),
                key: k,
                message: vec![b'm'; k as usize % 7],
            }
            .encode()
        };
        for k in 0..40 {
            log.append_many(1, &[add(k)]).unwrap();
        }
        let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
        // More records than a sealed segment's index remembers offsets for.
        let seg = sealed
            .iter()
            .find(|s| s.count > 9)
            .expect("a long sealed segment");
        let position = crate::recovery::Position::Sealed;
        let all = read_segment_deltas(&seg.path, position, None, None, false, None).unwrap();
        let lsns: Vec<i64> = (seg.start_lsn..seg.start_lsn + seg.count as i64).collect();
        assert_eq!(all.lsn, lsns);
        assert_eq!(all.key.values, lsns);
        let (from, to) = (seg.start_lsn + 3, seg.start_lsn + 8);
        let some =
            read_segment_deltas(&seg.path, position, Some(from), Some(to), false, None).unwrap();
        assert_eq!(some.lsn, (from..=to).collect::<Vec<_>>());
        assert_eq!(some.key.values, (from..=to).collect::<Vec<_>>());
    }

    proptest::proptest! {
        /// `Columns::check` (which skips the full decode for deltas of the queue seen last)
        /// keeps the codes, and stops at the error, that decoding every delta in full gives.
        #[test]
        fn check_agrees_with_a_full_decode_of_every_delta(
            deltas in proptest::collection::vec(
                (0usize..3, 0u8..4, proptest::prelude::any::<u64>(), 0usize..40, 0u8..5),
                1..60,
            ),
        ) {
            let names: [&[u8]; 3] = [b"", b"q", b"jobs"];
            let records: Vec<Vec<u8>> = deltas
                .iter()
                .map(|&(q, kind, x, at, change)| {
                    let name = names[q].to_vec();
                    let mut bytes = match kind {
                        0 => Delta::AddRecord { name, key: x as i64, message: vec![1; at % 9] },
                        1 => Delta::RemoveRecord { name, id: x >> (at % 2) },
                        2 => Delta::DeleteQueue { name },
                        _ => Delta::CreateQueue {
                            name,
                            implementation: 1,
                            max_queue_size: -1,
                            max_message_size: -1,
                            key_range: None,
                        },
                    }
                    .encode();
                    let at = at % bytes.len();
                    match change {
                        0 => bytes[at] ^= x as u8 | 1,
                        1 => bytes.truncate(at),
                        2 => bytes.insert(at, x as u8),
                        _ => {}
                    }
                    bytes
                })
                .collect();
            let mut columns = Columns::new(0, records.len(), 0);
            let mut got = Ok(());
            for (lsn, data) in records.iter().enumerate() {
                got = columns.push(lsn as i64, 1, data);
                if got.is_err() {
                    break;
                }
            }
            let mut model = Columns::new(0, records.len(), 0);
            let mut want = Ok(());
            for (lsn, data) in records.iter().enumerate() {
                // Longer than any name: every delta decoded in full.
                model.queue_seen = vec![b'q'; 256];
                want = model.push(lsn as i64, 1, data);
                if want.is_err() {
                    break;
                }
            }
            proptest::prop_assert_eq!(&columns.codes, &model.codes);
            proptest::prop_assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
    }

    #[test]
    fn undecodable_data_names_the_lsn() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                sync: SyncPolicy::Never,
                ..LogOptions::default()
            },
        )
        .unwrap();
        log.append_many(1, &[b"Z".to_vec()]).unwrap();
        let e = read_deltas(&mut log, 0, 1, u64::MAX, false).unwrap_err();
        assert!(e.to_string().contains("LSN 0"), "{e}");
    }
}

/// The records of a snapshot in columns: queue, implementation, record_id, key, message.
#[derive(Debug, Default, Clone)]
pub struct SnapshotColumns {
    pub last_index: i64,
    pub last_term: i64,
    pub queue: Binary,
    pub implementation: Vec<i32>,
    pub record_id: Vec<i64>,
    pub key: Vec<i64>,
    pub message: Binary,
    /// Every queue's settings and last id (queues with no records included), by name.
    pub queues: Vec<crate::format::snapshot::QueueData>,
}

impl SnapshotColumns {
    pub fn len(&self) -> usize {
        self.key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// One row per record of every queue (queues by name, records by id).
    pub fn from_snapshot(s: &crate::format::snapshot::Snapshot) -> Result<SnapshotColumns> {
        let mut cols = SnapshotColumns {
            last_index: s.last_index,
            last_term: s.last_term,
            ..SnapshotColumns::default()
        };
        let mut queues: Vec<_> = s.queues.iter().collect();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        for q in queues {
            cols.queues.push(crate::format::snapshot::QueueData {
                records: Vec::new(),
                ..q.clone()
            });
            let mut records: Vec<_> = q.records.iter().collect();
            records.sort_by_key(|r| r.0);
            for (id, key, data) in records {
                let id = i64::try_from(*id)
                    .map_err(|_| Error::InvalidArgument(format!("record id {id} exceeds Int64")))?;
                cols.queue.push(Some(&q.name))?;
                cols.implementation.push(q.implementation);
                cols.record_id.push(id);
                cols.key.push(*key);
                cols.message.push(Some(data))?;
            }
        }
        Ok(cols)
    }
}
