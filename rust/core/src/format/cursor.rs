//! A bounds-checked big-endian reader shared by the delta and snapshot decoders.
//!
//! Every read checks the bytes actually left before slicing, so no length or count read from
//! the data can size an allocation or index out of bounds. Errors name the field, the byte
//! offset where it starts (relative to the decoded buffer) and the bytes that were left.
//! Nothing here allocates unless a read fails.

use std::fmt;

/// Where and why bytes could not be decoded. The offset is relative to the decoded buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub offset: usize,
    pub reason: String,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Some reasons already say where (a bad name byte); don't repeat it.
        if self.reason.contains(&format!("at offset {}", self.offset)) {
            f.write_str(&self.reason)
        } else {
            write!(f, "{} (at offset {})", self.reason, self.offset)
        }
    }
}

impl std::error::Error for DecodeError {}

pub(crate) type Decoded<T> = Result<T, DecodeError>;

/// First and last byte allowed in a queue name ('!'..'~').
pub const NAME_MIN: u8 = 0x21;
pub const NAME_MAX: u8 = 0x7E;

pub(crate) struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Added to every offset an error reports (where `buf` starts in its file).
    base: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor::at_base(buf, 0)
    }

    /// A cursor over `buf` whose errors report offsets as `base + position in buf`.
    #[inline]
    pub fn at_base(buf: &'a [u8], base: usize) -> Self {
        Cursor { buf, pos: 0, base }
    }

    #[inline]
    pub fn pos(&self) -> usize {
        self.pos
    }

    #[inline]
    pub fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// An error at `pos` (a position in the buffer, reported with the base added).
    #[cold]
    pub fn fail<T>(&self, pos: usize, reason: String) -> Decoded<T> {
        Err(DecodeError {
            offset: self.base + pos,
            reason,
        })
    }

    #[inline]
    pub fn take(&mut self, n: usize, field: &'static str) -> Decoded<&'a [u8]> {
        if n > self.left() {
            return self.fail(
                self.pos,
                format!("{field} runs past the end ({} bytes left)", self.left()),
            );
        }
        let bytes = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    #[inline]
    fn array<const N: usize>(&mut self, field: &'static str) -> Decoded<[u8; N]> {
        let bytes = self.take(N, field)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    #[inline]
    pub fn u8(&mut self, field: &'static str) -> Decoded<u8> {
        Ok(self.array::<1>(field)?[0])
    }

    #[inline]
    pub fn i32(&mut self, field: &'static str) -> Decoded<i32> {
        self.array(field).map(i32::from_be_bytes)
    }

    #[inline]
    pub fn u32(&mut self, field: &'static str) -> Decoded<u32> {
        self.array(field).map(u32::from_be_bytes)
    }

    #[inline]
    pub fn i64(&mut self, field: &'static str) -> Decoded<i64> {
        self.array(field).map(i64::from_be_bytes)
    }

    #[inline]
    pub fn u64(&mut self, field: &'static str) -> Decoded<u64> {
        self.array(field).map(u64::from_be_bytes)
    }

    /// A Bool: exactly 0 or 1 (spec 2: any other value is corruption).
    #[inline]
    pub fn bool(&mut self, field: &'static str) -> Decoded<bool> {
        let at = self.pos;
        match self.u8(field)? {
            0 => Ok(false),
            1 => Ok(true),
            other => self.fail(at, format!("{field} {other:#04X} is not a Bool (0 or 1)")),
        }
    }

    /// An Int32 length or count (>= 0); `min_item` bytes per item must still be available.
    #[inline]
    pub fn len(&mut self, field: &'static str, min_item: usize) -> Decoded<usize> {
        let at = self.pos;
        let n = self.i32(field)?;
        if n < 0 {
            return self.fail(at, format!("{field} {n} is negative"));
        }
        let n = n as usize;
        if n.saturating_mul(min_item) > self.left() {
            return self.fail(
                at,
                format!("{field} {n} runs past the end ({} bytes left)", self.left()),
            );
        }
        Ok(n)
    }

    /// A Buffer: Int32 length (>= 0), then that many bytes.
    #[inline]
    pub fn buffer(&mut self, field: &'static str) -> Decoded<&'a [u8]> {
        let n = self.len(field, 1)?;
        self.take(n, field)
    }

    /// A Nullable<Pair<Int64,Int64>>.
    #[inline]
    pub fn key_range(&mut self) -> Decoded<Option<(i64, i64)>> {
        if self.bool("key range flag")? {
            Ok(Some((
                self.i64("key range min")?,
                self.i64("key range max")?,
            )))
        } else {
            Ok(None)
        }
    }

    /// A QueueName: Byte length, then that many bytes in '!'..'~'.
    #[inline]
    pub fn queue_name(&mut self) -> Decoded<&'a [u8]> {
        let n = self.u8("queue name length")? as usize;
        let start = self.pos;
        if n > self.left() {
            return self.fail(
                start - 1,
                format!(
                    "queue name length {n} runs past the end ({} bytes left)",
                    self.left()
                ),
            );
        }
        let name = self.take(n, "queue name")?;
        if let Some(i) = name.iter().position(|b| !(NAME_MIN..=NAME_MAX).contains(b)) {
            let at = start + i;
            return self.fail(
                at,
                format!(
                    "queue name byte {:#04X} at offset {} is not in '!'..'~'",
                    name[i],
                    self.base + at
                ),
            );
        }
        Ok(name)
    }
}

/// Checks a queue name: 0..255 bytes, each in 0x21..0x7E ('!'..'~'). The empty name is the
/// default queue.
pub fn validate_queue_name(name: &[u8]) -> Result<(), String> {
    if name.len() > u8::MAX as usize {
        return Err(format!(
            "queue name is {} bytes long (at most 255)",
            name.len()
        ));
    }
    match name.iter().position(|b| !(NAME_MIN..=NAME_MAX).contains(b)) {
        Some(i) => Err(format!(
            "queue name byte {:#04X} at index {i} is not in '!'..'~' (printable ASCII without space)",
            name[i]
        )),
        None => Ok(()),
    }
}

/// Appends a QueueName (the caller has validated it).
#[inline]
pub(crate) fn put_name(out: &mut Vec<u8>, name: &[u8]) {
    debug_assert!(validate_queue_name(name).is_ok());
    out.push(name.len() as u8);
    out.extend_from_slice(name);
}

/// Appends a Buffer (the caller has checked the length fits Int32).
#[inline]
pub(crate) fn put_buffer(out: &mut Vec<u8>, data: &[u8]) {
    debug_assert!(data.len() <= i32::MAX as usize);
    out.extend_from_slice(&(data.len() as i32).to_be_bytes());
    out.extend_from_slice(data);
}

/// Appends a Nullable<Pair<Int64,Int64>>.
#[inline]
pub(crate) fn put_key_range(out: &mut Vec<u8>, range: Option<(i64, i64)>) {
    match range {
        Some((min, max)) => {
            out.push(1);
            out.extend_from_slice(&min.to_be_bytes());
            out.extend_from_slice(&max.to_be_bytes());
        }
        None => out.push(0),
    }
}
