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

#[derive(Debug, Default)]
pub struct Heap4 {
    items: Vec<Record>,
}

#[inline]
fn less(a: &Record, b: &Record) -> bool {
    (a.key, a.id) < (b.key, b.id)
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
        self.items.push(record);
        let mut i = self.items.len() - 1;
        while i > 0 {
            let parent = (i - 1) / 4;
            if !less(&self.items[i], &self.items[parent]) {
                break;
            }
            self.items.swap(i, parent);
            i = parent;
        }
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

    fn sift_down(&mut self, mut i: usize) {
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
