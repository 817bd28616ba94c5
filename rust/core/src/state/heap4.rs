//! A 4-ary min-heap of records ordered by `(key, id)`: smallest key first, FIFO (lowest id)
//! among equal keys. Four children per node halve the depth of a binary heap, which makes
//! `pop` (the hot operation of a queue) touch fewer cache lines.

use super::Record;

/// Slack (bytes) from which [`Heap4::shrink_to_fit`] releases pages instead of copying.
const RELEASE_IN_PLACE: usize = 1 << 21;

/// Gives the whole pages of `v`'s unused capacity back to the kernel: they take no memory
/// until written again (and then read as zeros). Nothing is lost: that capacity holds no values.
fn release_spare_pages<T>(v: &mut Vec<T>) {
    let spare = v.spare_capacity_mut();
    let start = spare.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(spare);
    // SAFETY: `sysconf` takes no pointers.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let (from, to) = (start.next_multiple_of(page), end / page * page);
    if to > from {
        // SAFETY: `[from, to)` lies inside the spare capacity of an allocation `v` owns, which
        // holds no values (uninitialised memory); `MADV_DONTNEED` only drops the pages' current
        // contents. A failure (e.g. locked pages) leaves them resident, which is harmless.
        unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED) };
    }
}

/// Writes `record` at position `at` of the array at `items`, whose positions `0..at` form a
/// heap, moving each larger parent down into the hole it leaves: positions `0..=at` then form
/// a heap. [`Heap4::push`] and a restore's settle (which builds a queue's heap while it
/// settles the records in id order, in the same pass: `state::batch`) use it. The array is
/// the one the swapping sift-up built.
///
/// # Safety
/// `items` is valid for reads and writes of `at + 1` records; positions `0..at` hold
/// records; position `at` holds none (uninitialised, or a value already moved out): it is
/// overwritten without being dropped.
#[inline(always)]
pub(super) unsafe fn sift_up_into(items: *mut Record, mut at: usize, record: Record) {
    let key = rank(&record);
    // SAFETY: every index is at most the caller's `at`; each parent moved down fills the hole
    // and leaves one at its own place, which the record fills at the end; nothing between can
    // panic.
    unsafe {
        while at > 0 {
            let parent = (at - 1) / 4;
            if rank(&*items.add(parent)) <= key {
                break;
            }
            std::ptr::copy_nonoverlapping(items.add(parent), items.add(at), 1);
            at = parent;
        }
        std::ptr::write(items.add(at), record);
    }
}

#[derive(Debug, Default)]
pub struct Heap4 {
    items: Vec<Record>,
}

#[inline]
fn less(a: &Record, b: &Record) -> bool {
    rank(a) < rank(b)
}

/// `(key, id)` as one unsigned number with the same order (the key's sign bit flipped above
/// the id): one compare instead of two, and a select instead of a branch.
#[inline(always)]
fn rank(r: &Record) -> u128 {
    (u128::from(r.key as u64 ^ (1 << 63)) << 64) | u128::from(r.id)
}

impl Heap4 {
    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn peek(&self) -> Option<&Record> {
        self.items.first()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        self.items.iter()
    }

    /// Releases growth slack. A large slack (a restore's record array is the column its
    /// pending records were appended to, with the address space reserved for the whole log)
    /// gives its pages back to the kernel where it lies, without copying the records into
    /// fresh pages. A small one moves the records into an allocation of their own size: not
    /// `Vec::shrink_to_fit`, since an allocator may shrink in place (mimalloc keeps a block that
    /// stays at least half used), and then every page the larger array ever touched stays
    /// resident.
    pub fn shrink_to_fit(&mut self) {
        let len = self.items.len();
        let slack = self.items.capacity() - len;
        if slack <= len / 8 {
            return;
        }
        if slack * std::mem::size_of::<Record>() >= RELEASE_IN_PLACE {
            release_spare_pages(&mut self.items);
        } else {
            let mut exact = Vec::with_capacity(len);
            exact.append(&mut self.items);
            self.items = exact;
        }
    }

    pub fn push(&mut self, record: Record) {
        self.items.reserve(1);
        let at = self.items.len();
        // SAFETY: positions `0..at` hold the heap and `at` is within the capacity reserved
        // above; after the call `0..=at` hold records.
        unsafe {
            sift_up_into(self.items.as_mut_ptr(), at, record);
            self.items.set_len(at + 1);
        }
    }

    /// A heap of `items`, which already are one (a restore's settle built it in place,
    /// [`sift_up_into`]).
    pub(super) fn from_heap(items: Vec<Record>) -> Heap4 {
        debug_assert!((1..items.len()).all(|i| !less(&items[i], &items[(i - 1) / 4])));
        Heap4 { items }
    }

    /// Adds many records: pushed one by one when few, else appended and the whole heap rebuilt
    /// bottom-up in O(n) (Floyd).
    pub fn extend(&mut self, records: Vec<Record>) {
        if records.len() < self.items.len() / 8 {
            records.into_iter().for_each(|r| self.push(r));
            return;
        }
        if self.items.is_empty() {
            self.items = records;
        } else {
            self.items.extend(records);
        }
        let n = self.items.len();
        if n > 1 {
            for i in (0..=(n - 2) / 4).rev() {
                self.sift_down(i);
            }
        }
    }

    pub fn pop(&mut self) -> Option<Record> {
        let last = self.items.pop()?;
        if self.items.is_empty() {
            return Some(last);
        }
        let top = std::mem::replace(&mut self.items[0], last);
        self.sift_down(0);
        Some(top)
    }

    /// Moves record `i` down to where it is not above its children. The record is held aside
    /// while each smaller child moves up into the hole (one 32-byte move per level, where a
    /// swap wrote two), and the smallest of four children is found by selects; ties cannot
    /// occur (ids are unique in a queue), and the first smallest child is taken anyway, so
    /// the array is the one the swapping version built (`sift_down_swapping`, the tests').
    fn sift_down(&mut self, i: usize) {
        let n = self.items.len();
        if i >= n || 4 * i + 1 >= n {
            return;
        }
        let base = self.items.as_mut_ptr();
        // SAFETY: every index read or written is below `n`, the vector's length, and the
        // record taken out of `i` is written back exactly once, into the final hole; nothing
        // between can panic (integer compares and moves only), so no record is dropped twice
        // or lost.
        unsafe {
            let held = std::ptr::read(base.add(i));
            let key = rank(&held);
            let mut hole = i;
            loop {
                let first = 4 * hole + 1;
                if first >= n {
                    break;
                }
                let at = |c: usize| rank(&*base.add(c));
                let (best, least) = if first + 4 <= n {
                    let (r0, r1, r2, r3) = (at(first), at(first + 1), at(first + 2), at(first + 3));
                    let (b01, l01) = if r1 < r0 {
                        (first + 1, r1)
                    } else {
                        (first, r0)
                    };
                    let (b23, l23) = if r3 < r2 {
                        (first + 3, r3)
                    } else {
                        (first + 2, r2)
                    };
                    if l23 < l01 {
                        (b23, l23)
                    } else {
                        (b01, l01)
                    }
                } else {
                    let (mut best, mut least) = (first, at(first));
                    for c in first + 1..n {
                        let r = at(c);
                        if r < least {
                            (best, least) = (c, r);
                        }
                    }
                    (best, least)
                };
                if least >= key {
                    break;
                }
                std::ptr::copy_nonoverlapping(base.add(best), base.add(hole), 1);
                hole = best;
            }
            std::ptr::write(base.add(hole), held);
        }
    }

    /// The sift by swaps that [`Heap4::sift_down`] replaced (tests: both build the same array).
    #[cfg(test)]
    fn sift_down_swapping(&mut self, mut i: usize) {
        let n = self.items.len();
        loop {
            let first = 4 * i + 1;
            if first >= n {
                return;
            }
            let mut best = first;
            for c in first + 1..(first + 4).min(n) {
                if less(&self.items[c], &self.items[best]) {
                    best = c;
                }
            }
            if !less(&self.items[best], &self.items[i]) {
                return;
            }
            self.items.swap(i, best);
            i = best;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::payload::Payload;

    fn records(keys: &[i64]) -> Vec<Record> {
        keys.iter()
            .enumerate()
            .map(|(i, &key)| Record {
                id: i as u64 + 1,
                key,
                data: Payload::copy_of(&(i as u64).to_le_bytes()),
            })
            .collect()
    }

    fn layout(h: &Heap4) -> Vec<(i64, u64)> {
        h.items.iter().map(|r| (r.key, r.id)).collect()
    }

    /// The build and the pops through the holding sift leave exactly the arrays the swapping
    /// sift left (so dequeue order and the heap's layout are unchanged), over keys at both
    /// ends of i64 (the rank's flipped sign bit), few distinct keys (ties broken by id) and
    /// sizes that leave a node with one to three children; every record keeps its own bytes.
    #[test]
    fn the_holding_sift_builds_and_pops_as_the_swapping_one_did() {
        use proptest::prelude::*;
        let key = prop_oneof![
            -3i64..3,
            any::<i64>(),
            Just(i64::MIN),
            Just(i64::MAX),
            Just(-1i64),
            Just(0i64),
        ];
        let keys = prop::collection::vec(key, 0..300);
        proptest!(ProptestConfig::with_cases(256), |(keys in keys, pops in 0usize..40)| {
            let mut held = Heap4::default();
            held.extend(records(&keys));
            let mut swapped = Heap4 { items: records(&keys) };
            let n = swapped.items.len();
            if n > 1 {
                for i in (0..=(n - 2) / 4).rev() {
                    swapped.sift_down_swapping(i);
                }
            }
            prop_assert_eq!(layout(&held), layout(&swapped));
            for _ in 0..pops {
                let a = held.pop();
                let b = swapped.items.pop().map(|last| {
                    if swapped.items.is_empty() {
                        return last;
                    }
                    let top = std::mem::replace(&mut swapped.items[0], last);
                    swapped.sift_down_swapping(0);
                    top
                });
                prop_assert_eq!(a.as_ref().map(|r| (r.key, r.id)), b.as_ref().map(|r| (r.key, r.id)));
                if let Some(r) = a {
                    prop_assert_eq!(&r.data[..], &(r.id - 1).to_le_bytes()[..]);
                }
                prop_assert_eq!(layout(&held), layout(&swapped));
            }
            let mut sorted: Vec<(i64, u64)> = layout(&held);
            sorted.sort_unstable();
            let mut order = Vec::new();
            while let Some(r) = held.pop() {
                prop_assert_eq!(&r.data[..], &(r.id - 1).to_le_bytes()[..]);
                order.push((r.key, r.id));
            }
            prop_assert_eq!(order, sorted);
        });
    }
}
