//! Arrow's memory layout, the primitives every column is built from: nullable fixed-width
//! values, LSB-first validity bitmaps and int32-offset binary columns.

use std::ops::Range;

use crate::error::{Error, Result};

use super::pool;

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
    pub(super) fn push(&mut self, valid: bool) {
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
    pub(super) fn build(len: usize, valid: usize, present: impl Fn(usize) -> bool) -> Bitmap {
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
pub(super) fn offset(end: usize) -> Result<i32> {
    i32::try_from(end).map_err(|_| Error::InvalidArgument("column batch exceeds 2 GiB".into()))
}

impl Binary {
    pub(super) fn push(&mut self, v: Option<&[u8]>) -> Result<()> {
        self.validity.push(v.is_some());
        if let Some(bytes) = v {
            self.data.extend_from_slice(bytes);
        }
        self.offsets.push(offset(self.data.len())?);
        Ok(())
    }

    /// An empty column with room for `len` values and `bytes` of data, which must fit int32
    /// offsets (checked here, once, so that [`Binary::extend`] need not).
    pub(super) fn with_capacity(len: usize, bytes: usize) -> Result<Binary> {
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
    pub(super) fn append(&mut self, other: &Binary) -> Result<()> {
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
    pub(super) fn empty() -> Binary {
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
    pub(super) fn truncate(&mut self, n: usize) {
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
    pub(super) fn put(&mut self, i: usize, value: &[u8]) {
        if self.offsets.len() != i + 1 {
            self.pad(i);
        }
        self.data.extend_from_slice(value);
        self.offsets.push(self.data.len() as i32);
    }

    /// Null (empty) values up to `n` entries.
    pub(super) fn pad(&mut self, n: usize) {
        let end = *self.offsets.last().expect("offsets start with 0");
        if self.offsets.len() < n + 1 {
            self.offsets.resize(n + 1, end);
        }
    }

    /// Appends the values of entries `range` (`None`: null), at most the `bytes` reserved.
    pub(super) fn extend<'a>(
        &mut self,
        range: Range<usize>,
        value: impl Fn(usize) -> Option<&'a [u8]>,
    ) {
        for i in range {
            if let Some(v) = value(i) {
                self.data.extend_from_slice(v);
            }
            self.offsets.push(self.data.len() as i32);
        }
    }
}

pub const KIND_NAMES: [&str; 9] = [
    "create_queue",
    "delete_queue",
    "add_record",
    "remove_record",
    "queue_rules",
    "add_later",
    "delivered",
    "failed",
    "purge",
];

/// A nullable `list<int64>` column (Arrow's layout: int32 offsets into the values of every
/// list, one after another): a Purge's kept record ids.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct IdLists {
    pub offsets: Vec<i32>,
    pub values: Vec<i64>,
    pub validity: Bitmap,
}

impl IdLists {
    /// Entry `i`'s list (empty when null).
    pub fn value(&self, i: usize) -> &[i64] {
        &self.values[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }
}

/// A nullable fixed-width column written an entry at a time, as the entries are decoded.
/// Nothing is written while every entry so far is null: a column no entry fills (most of them,
/// in a log of one delta kind) ends without values (see [`Nullable::values`]) and costs nothing
/// per entry. The null entries before a value are written (zeros) when the value comes, those
/// after the last value at the end ([`Fixed::pad`]).
pub(super) struct Fixed<T> {
    /// The values up to the last entry present (no capacity at all while there is none).
    values: Vec<T>,
    /// Room to reserve when the first value appears.
    capacity: usize,
}

impl<T: Copy + Default + pool::Pooled> Fixed<T> {
    pub(super) fn new(capacity: usize) -> Fixed<T> {
        Fixed {
            values: Vec::new(),
            capacity,
        }
    }

    /// Whether some entry has a value.
    pub(super) fn has_values(&self) -> bool {
        self.values.capacity() > 0
    }

    /// Entry `i`'s value: `i` is past every entry written so far (those between are null).
    #[inline(always)]
    pub(super) fn put(&mut self, i: usize, value: T) {
        if self.values.len() != i || self.values.len() == self.values.capacity() {
            self.make_room(i);
        }
        self.values.push(value);
    }

    /// [`Fixed::put`] of the first value, of a value after null entries, or past the room.
    #[cold]
    #[inline(never)]
    pub(super) fn make_room(&mut self, i: usize) {
        if self.has_values() {
            self.values.resize(i, T::default());
            self.values.reserve(1);
        } else {
            self.values = zeroed(i, self.capacity.max(i + 1));
        }
    }

    /// Zeros up to `n` entries (the null entries after the last value), when there are values.
    pub(super) fn pad(&mut self, n: usize) {
        if self.has_values() {
            self.values.resize(n, T::default());
        }
    }

    /// Keeps the first `n` entries, `valid` of them present: a column none of them fills
    /// has no values, as if it had never had any.
    pub(super) fn truncate(&mut self, n: usize, valid: usize) {
        if valid == 0 {
            pool::give(std::mem::take(&mut self.values));
        } else {
            self.values.truncate(n);
        }
    }

    /// Appends `other`'s `more` entries (a column filled on another thread, for the entries
    /// after these `n`).
    pub(super) fn append(&mut self, n: usize, mut other: Fixed<T>, more: usize) {
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

    pub(super) fn finish(mut self, n: usize, validity: Bitmap) -> Nullable<T> {
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
