//! A queued record's message bytes: its own allocation, or a range of a sealed segment's bytes
//! that the record borrows (restore), in 16 bytes either way, so a `Record` stays 32 bytes.
//!
//! Why borrow: a restore used to copy every surviving message out of the mapped log into a
//! fresh allocation, and with 1 KiB messages the kernel zeroing those fresh pages was about half
//! of the restore (benchmark-notes.md). A borrowed payload holds a reference count on the
//! [`SegmentBytes`] it points into; the bytes stay valid until the last record that borrows them
//! goes, whatever happens to the segment file meanwhile (the rules that make that true are in
//! `io/mmap.rs`). While a restore runs, its pending records are `Lent`s instead, which take no
//! count: the restore's batch holds one per segment until each survivor has taken its own. Which bytes may be borrowed is decided by the one caller that makes borrowed
//! payloads, [`crate::segment::Segment::replay_records`]: the map of a sealed plain segment,
//! never the active segment nor a decompressed `.log.z` (see there).
//!
//! Layout: `ptr` is either the start of a `Box<[u8]>` (the top bit of `off` set; the length is
//! `len` plus the other bits of `off` as bits 32..63) or the `Arc` pointer of a
//! [`SegmentBytes`] whose bytes `[off, off + len)` are the message (`off` below 2^31: bytes
//! further into a segment are copied). Both kinds of owner are `Send + Sync` and immutable, so
//! the payload is too.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use crate::io::bytes::SegmentBytes;

/// The bit of `off` that marks an owned payload (a borrowed one starts below 2^31).
const OWNED: u32 = 1 << 31;

/// The bytes of one queued message; dereferences to `[u8]`.
pub struct Payload {
    ptr: NonNull<u8>,
    len: u32,
    off: u32,
}

// SAFETY: a payload owns either a `Box<[u8]>` or one strong count of an `Arc` over immutable
// bytes (`SegmentBytes`), both `Send + Sync`; nothing is ever written through `ptr`.
unsafe impl Send for Payload {}
unsafe impl Sync for Payload {}

impl Payload {
    /// A copy of `data` in its own allocation.
    pub fn copy_of(data: &[u8]) -> Payload {
        Payload::from(Box::<[u8]>::from(data))
    }

    /// A payload borrowing `data` from `source`, when `data` lies inside `source`'s bytes (at an
    /// offset below 4 GiB); `None` otherwise (the caller copies).
    pub fn borrowed(source: &SegmentBytes, data: &[u8]) -> Option<Payload> {
        let (off, len) = Payload::place_in(source, data)?;
        let ptr = source.clone().into_raw();
        Some(Payload { ptr, len, off })
    }

    /// Where `data` lies in `source` (offset below 2^31, length), if it lies inside it.
    fn place_in(source: &SegmentBytes, data: &[u8]) -> Option<(u32, u32)> {
        place(source.as_ptr() as usize, source.len(), data)
    }

    /// [`Payload::borrowed`] from `source` when given and possible, else a copy.
    pub fn borrowed_or_copied(source: Option<&SegmentBytes>, data: &[u8]) -> Payload {
        source
            .and_then(|s| Payload::borrowed(s, data))
            .unwrap_or_else(|| Payload::copy_of(data))
    }

    /// Whether the bytes are borrowed from a segment (for tests and memory accounting).
    pub fn is_borrowed(&self) -> bool {
        self.off & OWNED == 0
    }

    /// The length of an owned payload (low 32 bits in `len`, the rest in `off`).
    fn owned_len(&self) -> usize {
        ((u64::from(self.off & !OWNED) << 32) | u64::from(self.len)) as usize
    }

    fn as_slice(&self) -> &[u8] {
        if !self.is_borrowed() {
            let len = self.owned_len();
            // SAFETY: `ptr` and `len` came from `Box::into_raw` of a `[u8]` of `len` bytes that
            // this payload owns until it is dropped.
            return unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) };
        }
        // SAFETY: `ptr` came from `SegmentBytes::into_raw` and this payload owns one strong
        // count of it, so the bytes live at least as long as `&self`; `ManuallyDrop` keeps the
        // count. `Payload::borrowed` checked `off + len <= bytes.len()`, and the bytes of a
        // `SegmentBytes` never move nor change while it is alive (a map's address is fixed, an
        // owned buffer is never written after it was made).
        let len = self.len as usize;
        let source = ManuallyDrop::new(unsafe { SegmentBytes::from_raw(self.ptr) });
        let bytes = &source[self.off as usize..self.off as usize + len];
        unsafe { std::slice::from_raw_parts(bytes.as_ptr(), len) }
    }
}

/// Where `data` lies in the `len` bytes from address `base` (offset below 2^31, length), if it
/// lies inside them: the one rule for what a payload may borrow.
#[inline]
fn place(base: usize, len: usize, data: &[u8]) -> Option<(u32, u32)> {
    let at = (data.as_ptr() as usize).checked_sub(base)?;
    let end = at.checked_add(data.len())?;
    if end > len {
        return None;
    }
    let off = u32::try_from(at).ok().filter(|&o| o < OWNED)?;
    let len = u32::try_from(data.len()).ok()?;
    Some((off, len))
}

/// A source's bytes as [`Lent`]s borrow them: its `Arc` pointer (no count) and where its bytes
/// lie, read once per source instead of once per message (reading them through
/// [`SegmentBytes`]'s `Deref` was most of the 50 instructions a restore spent per Add making
/// a `Lent`). Valid only while someone holds a count of the source (a restore's `Batch`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lender {
    raw: NonNull<u8>,
    base: usize,
    len: usize,
}

impl Lender {
    pub(crate) fn of(source: &SegmentBytes) -> Lender {
        Lender {
            raw: source.as_raw(),
            base: source.as_ptr() as usize,
            len: source.len(),
        }
    }
}

/// A [`Payload`] whose borrowed bytes are kept alive by its holder instead of a count of its
/// own: a pending record of a restore's [`crate::state::Batch`], which holds one count of each
/// segment it was fed for the whole batch. A count per record was an atomic add on every Add
/// and an atomic subtract on every Remove, a third of applying a delta (benchmark-notes.md);
/// now only the records that survive the batch take theirs, when it settles them
/// ([`Lent::into_payload`]). Same 16 bytes. An owned one owns its allocation as a `Payload`
/// does. It gives no access to its bytes: nothing can read through a `Lent` whose source is
/// gone, and dropping one never touches the source.
pub(crate) struct Lent(ManuallyDrop<Payload>);

impl Lent {
    /// A `Lent` borrowing `data` from the lender's source when it lies inside it (see
    /// [`Payload::borrowed`]), without taking a count; else a copy.
    #[inline]
    pub(crate) fn lent_or_copied(lender: Option<&Lender>, data: &[u8]) -> Lent {
        if let Some(l) = lender {
            if let Some((off, len)) = place(l.base, l.len, data) {
                // The `Arc` pointer without a count (the `Lent` never gives one back).
                return Lent(ManuallyDrop::new(Payload {
                    ptr: l.raw,
                    len,
                    off,
                }));
            }
        }
        Lent::copied(data)
    }

    #[cold]
    #[inline(never)]
    fn copied(data: &[u8]) -> Lent {
        Lent(ManuallyDrop::new(Payload::copy_of(data)))
    }

    /// The payload, taking its own count of the source when it borrows.
    ///
    /// # Safety
    /// When it borrows, the [`SegmentBytes`] it borrows from must still be alive (someone holds
    /// a count of it until this returns).
    pub(crate) unsafe fn into_payload(self) -> Payload {
        let this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the payload is moved out exactly once.
        let payload = unsafe { std::ptr::read(&*this.0) };
        if payload.is_borrowed() {
            // SAFETY: `ptr` is the `Arc` pointer of a live `SegmentBytes` (the caller's
            // promise); the count taken here is the one the returned payload owns and gives
            // back when dropped.
            unsafe { SegmentBytes::increment_count(payload.ptr) };
        }
        payload
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if !self.0.is_borrowed() {
            // SAFETY: an owned payload owns its allocation; it is dropped once, here.
            unsafe { ManuallyDrop::drop(&mut self.0) };
        }
    }
}

impl std::fmt::Debug for Lent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (kind, len) = if self.0.is_borrowed() {
            ("lent", self.0.len as usize)
        } else {
            ("owned", self.0.owned_len())
        };
        write!(f, "Lent({kind}, {len} bytes)")
    }
}

impl From<Box<[u8]>> for Payload {
    fn from(data: Box<[u8]>) -> Payload {
        let n = data.len() as u64;
        // Lengths up to 2^63 fit (no allocation comes near): low bits in `len`, high in `off`.
        let (len, high) = (n as u32, (n >> 32) as u32 & !OWNED);
        let raw = Box::into_raw(data) as *mut u8;
        // A Box is never null (an empty one holds a dangling, non-null pointer).
        let ptr = NonNull::new(raw).expect("Box pointers are non-null");
        Payload {
            ptr,
            len,
            off: OWNED | high,
        }
    }
}

impl From<&[u8]> for Payload {
    fn from(data: &[u8]) -> Payload {
        Payload::copy_of(data)
    }
}

impl From<Vec<u8>> for Payload {
    fn from(data: Vec<u8>) -> Payload {
        Payload::from(data.into_boxed_slice())
    }
}

impl Drop for Payload {
    fn drop(&mut self) {
        if !self.is_borrowed() {
            let slice = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.owned_len());
            // SAFETY: the pointer and length of the `Box<[u8]>` this payload owns (see `From`).
            drop(unsafe { Box::from_raw(slice) });
        } else {
            // SAFETY: this payload's strong count, from `SegmentBytes::into_raw`.
            drop(unsafe { SegmentBytes::from_raw(self.ptr) });
        }
    }
}

impl Clone for Payload {
    fn clone(&self) -> Payload {
        if !self.is_borrowed() {
            return Payload::copy_of(self);
        }
        // SAFETY: as in `as_slice`; the clone takes a strong count of its own.
        let source = ManuallyDrop::new(unsafe { SegmentBytes::from_raw(self.ptr) });
        let ptr = SegmentBytes::clone(&source).into_raw();
        Payload {
            ptr,
            len: self.len,
            off: self.off,
        }
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Payload {}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.is_borrowed() {
            "borrowed"
        } else {
            "owned"
        };
        write!(f, "Payload({kind}, {:?})", self.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_is_16_bytes_and_a_record_32() {
        assert_eq!(std::mem::size_of::<Payload>(), 16);
        assert_eq!(std::mem::size_of::<Option<Payload>>(), 16);
        assert_eq!(std::mem::size_of::<crate::state::Record>(), 32);
    }

    #[test]
    fn owned_and_borrowed_payloads_hold_their_bytes() {
        let source = SegmentBytes::owned((0u8..100).collect());
        let inside = &source[10..20];
        let b = Payload::borrowed(&source, inside).expect("inside the source");
        assert!(b.is_borrowed());
        let c = b.clone();
        drop(source);
        assert_eq!(&*b, &(10u8..20).collect::<Vec<_>>()[..]);
        drop(b);
        assert_eq!(&*c, &(10u8..20).collect::<Vec<_>>()[..]);
        let o = Payload::copy_of(b"abc");
        assert!(!o.is_borrowed());
        assert_eq!(o.clone(), Payload::from(b"abc".to_vec()));
        assert_eq!(&*Payload::copy_of(b""), b"");
    }

    #[test]
    fn bytes_outside_the_source_are_copied() {
        let source = SegmentBytes::owned(vec![1; 8]);
        let other = vec![2u8; 4];
        assert!(Payload::borrowed(&source, &other).is_none());
        assert!(Payload::borrowed(&SegmentBytes::empty(), &other).is_none());
        let p = Payload::borrowed_or_copied(Some(&source), &other);
        assert!(!p.is_borrowed());
        assert_eq!(&*p, &other[..]);
    }
}
