//! Column vectors kept for the next bulk read once Python dropped the buffers that held them
//! (`tflux.ColumnBuffer`), or once a read was done with its own (the walk of `Log::locate`).
//! A loop of `read_deltas` then writes its columns into pages that are already resident: mimalloc
//! hands freed pages back to the system 10 ms after they empty, so a reader slower than that
//! between two batches got pages the kernel zeroed again for every column of every batch. At
//! most [`KEPT`] bytes are kept, all element types together.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Bytes of vectors kept at most, all shelves together.
pub const KEPT: usize = 64 << 20;

/// Bytes of vectors kept now, all shelves together.
static KEPT_NOW: AtomicUsize = AtomicUsize::new(0);

/// Bytes of vectors kept now.
pub fn kept() -> usize {
    KEPT_NOW.load(Ordering::Relaxed)
}
/// Vectors smaller than this are not worth keeping.
const SMALLEST: usize = 64 << 10;

pub struct Shelf<T> {
    vecs: Vec<Vec<T>>,
}

/// The element types of columns.
pub trait Pooled: Sized + Copy + 'static {
    fn shelf() -> &'static Mutex<Shelf<Self>>;
}

macro_rules! pooled {
    ($t:ty) => {
        impl Pooled for $t {
            fn shelf() -> &'static Mutex<Shelf<$t>> {
                static SHELF: Mutex<Shelf<$t>> = Mutex::new(Shelf { vecs: Vec::new() });
                &SHELF
            }
        }
    };
}
pooled!(u8);
pooled!(i32);
pooled!(i64);
pooled!(u32);
pooled!(usize);
// A shelf of its own for the unit test (other tests read, and use the other shelves).
#[cfg(test)]
pooled!(u16);

fn bytes<T>(v: &Vec<T>) -> usize {
    v.capacity() * std::mem::size_of::<T>()
}

/// An empty vector with room for `capacity` items: a kept one when one is big enough
/// (the smallest such), else a new one.
pub fn take<T: Pooled>(capacity: usize) -> Vec<T> {
    if capacity * std::mem::size_of::<T>() >= SMALLEST {
        let mut shelf = T::shelf().lock().unwrap_or_else(|e| e.into_inner());
        let best = (0..shelf.vecs.len())
            .filter(|&i| shelf.vecs[i].capacity() >= capacity)
            .min_by_key(|&i| shelf.vecs[i].capacity());
        if let Some(i) = best {
            let v = shelf.vecs.swap_remove(i);
            KEPT_NOW.fetch_sub(bytes(&v), Ordering::Relaxed);
            return v;
        }
    }
    Vec::with_capacity(capacity)
}

/// Keeps `v` (emptied) for a later [`take`], unless it is small or the pool is full.
pub fn give<T: Pooled>(mut v: Vec<T>) {
    let size = bytes(&v);
    if size < SMALLEST {
        return;
    }
    if KEPT_NOW.fetch_add(size, Ordering::Relaxed) + size > KEPT {
        KEPT_NOW.fetch_sub(size, Ordering::Relaxed);
        return;
    }
    v.clear();
    let mut shelf = T::shelf().lock().unwrap_or_else(|e| e.into_inner());
    shelf.vecs.push(v);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_vector_comes_back_empty_and_small_ones_are_not_kept() {
        let mut v: Vec<u16> = Vec::with_capacity(1 << 20);
        v.extend([7, 8, 9]);
        let at = v.as_ptr();
        give(v);
        let again: Vec<u16> = take(1000 << 10);
        assert_eq!((again.len(), again.as_ptr()), (0, at));
        assert!(again.capacity() >= 1 << 20);
        // Nothing kept fits a bigger request: a new vector.
        let bigger: Vec<u16> = take(2 << 20);
        assert_ne!(bigger.as_ptr(), at);
        give(Vec::<u16>::with_capacity(16));
        let small: Vec<u16> = take(16);
        assert!(small.capacity() < 1 << 20);
        // The pool never keeps more than KEPT bytes.
        for _ in 0..(KEPT / (2 << 20) + 2) {
            give(Vec::<u16>::with_capacity(1 << 20));
        }
        assert!(kept() <= KEPT);
    }
}
