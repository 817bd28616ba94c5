//! A 4-ary min-heap of records ordered by `(key, id)`: smallest key first, FIFO (lowest id)
//! among equal keys. Four children per node halve the depth of a binary heap, which makes
//! `pop` (the hot operation of a queue) touch fewer cache lines.

use super::Record;

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

    /// Releases growth slack by moving the records into an allocation of their own size. Not
    /// `Vec::shrink_to_fit`: an allocator may shrink in place (mimalloc keeps a block that stays
    /// at least half used), and then every page the larger array ever touched stays resident.
    /// (A restore hands over an array of exactly its records; pushes grow it by doubling.)
    pub fn shrink_to_fit(&mut self) {
        let len = self.items.len();
        if self.items.capacity() - len > len / 8 {
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
