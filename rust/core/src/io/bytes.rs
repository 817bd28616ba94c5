//! Bytes shared by everyone who reads them and never written after they were made: a read-only
//! map of a file (or a prefix of it), or a buffer of its own. A segment's records are read
//! through one, and a queued record may borrow its message from one
//! ([`crate::state::payload::Payload`]) for as long as it lives, whatever happens to the file
//! meanwhile (the consistency rules are `mmap`'s).

use std::ops::Deref;
use std::sync::Arc;

use memmap2::Mmap;

/// One segment's bytes, cheap to clone (shared).
#[derive(Clone)]
pub struct SegmentBytes(Arc<Held>);

enum Held {
    /// A map and how much of it the bytes are (a scan maps the whole file; a segment reads
    /// only its records, see [`SegmentBytes::map_prefix`]).
    Mapped(Mmap, usize),
    Owned(Vec<u8>),
    Empty,
}

impl SegmentBytes {
    pub fn mapped(map: Option<Mmap>) -> SegmentBytes {
        SegmentBytes(Arc::new(map.map_or(Held::Empty, |m| {
            let len = m.len();
            Held::Mapped(m, len)
        })))
    }

    /// The first `len` bytes of a map nothing else shares yet, as bytes of their own (the
    /// mapping itself is kept, not remade); `None` when these bytes are not a map, are shared,
    /// or are shorter than `len`.
    pub fn map_prefix(self, len: usize) -> Option<SegmentBytes> {
        match Arc::try_unwrap(self.0).ok()? {
            Held::Mapped(m, n) if len <= n => Some(SegmentBytes(Arc::new(Held::Mapped(m, len)))),
            _ => None,
        }
    }

    pub fn owned(bytes: Vec<u8>) -> SegmentBytes {
        SegmentBytes(Arc::new(Held::Owned(bytes)))
    }

    pub fn empty() -> SegmentBytes {
        SegmentBytes(Arc::new(Held::Empty))
    }

    /// The shared pointer, for a [`crate::state::payload::Payload`] that packs it with an offset.
    pub(crate) fn into_raw(self) -> std::ptr::NonNull<u8> {
        let raw = Arc::into_raw(self.0) as *mut u8;
        std::ptr::NonNull::new(raw).expect("Arc pointers are non-null")
    }

    /// The shared pointer [`SegmentBytes::into_raw`] would give, without taking a count.
    pub(crate) fn as_raw(&self) -> std::ptr::NonNull<u8> {
        let raw = Arc::as_ptr(&self.0) as *mut u8;
        std::ptr::NonNull::new(raw).expect("Arc pointers are non-null")
    }

    /// Takes one more count of the bytes behind `raw`, for a later [`SegmentBytes::from_raw`].
    ///
    /// # Safety
    /// `raw` must come from `into_raw` or `as_raw` of a `SegmentBytes` that is still alive.
    pub(crate) unsafe fn increment_count(raw: std::ptr::NonNull<u8>) {
        unsafe { Arc::increment_strong_count(raw.as_ptr() as *const Held) }
    }

    /// Whether both are the same shared bytes (not merely equal ones).
    #[inline]
    pub fn same_as(&self, other: &SegmentBytes) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// How many holders share these bytes (tests: counts are neither leaked nor lost).
    pub fn holders(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// Takes back a pointer from [`SegmentBytes::into_raw`].
    ///
    /// # Safety
    /// `raw` must come from `into_raw` and own the strong count it took (each count is taken
    /// back once).
    pub(crate) unsafe fn from_raw(raw: std::ptr::NonNull<u8>) -> SegmentBytes {
        SegmentBytes(unsafe { Arc::from_raw(raw.as_ptr() as *const Held) })
    }
}

impl Deref for SegmentBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.0 {
            Held::Mapped(m, len) => &m[..*len],
            Held::Owned(v) => v,
            Held::Empty => &[],
        }
    }
}

impl std::fmt::Debug for SegmentBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SegmentBytes({} bytes)", self.len())
    }
}
