//! The queue-array implementation: one FIFO per key of a fixed key range. Only keys that hold
//! records take memory (an ordered map of FIFOs), so a huge sparse range such as
//! `(-2^62, 2^62)` costs nothing until used.

use std::collections::{BTreeMap, VecDeque};

use super::Record;

#[derive(Debug, Default)]
pub struct KeyedFifos {
    fifos: BTreeMap<i64, VecDeque<Record>>,
    len: usize,
}

impl KeyedFifos {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn peek(&self) -> Option<&Record> {
        self.fifos.first_key_value().and_then(|(_, q)| q.front())
    }

    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        self.fifos.values().flat_map(|q| q.iter())
    }

    pub fn shrink_to_fit(&mut self) {
        for q in self.fifos.values_mut() {
            q.shrink_to_fit();
        }
    }

    /// Inserts in id order within its key (new records go to the back; a nacked one may not).
    pub fn push(&mut self, record: Record) {
        let q = self.fifos.entry(record.key).or_default();
        if q.back().is_none_or(|b| b.id < record.id) {
            q.push_back(record);
        } else {
            let at = q.partition_point(|r| r.id < record.id);
            q.insert(at, record);
        }
        self.len += 1;
    }

    pub fn pop(&mut self) -> Option<Record> {
        let mut entry = self.fifos.first_entry()?;
        let record = entry.get_mut().pop_front();
        if entry.get().is_empty() {
            entry.remove();
        }
        self.len -= 1;
        record
    }
}
