//! Replay as a batch (restore): nobody dequeues while a log is replayed, so the state does not
//! need to be ready to dequeue after every delta. Added records are appended to the queue's
//! `pending` column (ids arrive in ascending order), a removal marks its record, a DeleteQueue
//! drops the column with the queue, and [`Batch`] settles every queue once at the end: one
//! O(n) heap build (or one append per FIFO) instead of a sift per delta.
//!
//! The rules (what is refused, with which message) stay in `QueueState::apply_delta_in`, shared
//! with the online apply; this module only stores records differently.

use std::collections::VecDeque;

use super::{Applied, Mode, Payload, Queue, QueueState, Record};
use crate::error::Result;
use crate::format::delta::DeltaRef;
use crate::segbytes::SegmentBytes;

/// One record added during a batch; `data` is `None` once removed (its payload freed at once).
#[derive(Debug)]
struct Slot {
    id: u64,
    key: i64,
    data: Option<Payload>,
}

/// Records added during a batch, ascending ids. Removing the front record (what an ack writes)
/// pops it; any other removal marks it, and the marked ones are compacted away when they reach
/// a third of the column, so a removed record costs at most half a live one.
#[derive(Debug, Default)]
pub(super) struct Pending {
    slots: VecDeque<Slot>,
    dead: usize,
}

impl Pending {
    fn index(&self, id: u64) -> Option<usize> {
        let first = self.slots.front()?.id;
        // Without middle removals the ids are consecutive: the guess is exact.
        let guess = id.checked_sub(first)?;
        if let Ok(g) = usize::try_from(guess) {
            if self.slots.get(g).is_some_and(|s| s.id == id) {
                return Some(g);
            }
        }
        self.slots.binary_search_by_key(&id, |s| s.id).ok()
    }

    fn drop_dead_front(&mut self) {
        while self.slots.front().is_some_and(|s| s.data.is_none()) {
            self.slots.pop_front();
            self.dead -= 1;
        }
    }

    fn compact(&mut self) {
        if self.dead > 64 && self.dead * 3 > self.slots.len() {
            self.slots.retain(|s| s.data.is_some());
            self.dead = 0;
        }
    }

    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl Queue {
    /// [`Queue::add`] for a batch: appends to the pending column.
    pub(super) fn add_pending(&mut self, key: i64, data: Payload) -> Option<u64> {
        self.last_id = self.last_id.checked_add(1)?;
        let id = self.last_id;
        self.pending.slots.push_back(Slot {
            id,
            key,
            data: Some(data),
        });
        Some(id)
    }

    /// [`Queue::remove`] for a batch: ids from the pending column's first on are pending (every
    /// present record below them is in `ready` or in flight, and goes the online way).
    pub(super) fn remove_pending(&mut self, id: u64) -> std::result::Result<(), String> {
        let Some(first) = self.pending.slots.front().map(|s| s.id) else {
            return self.remove(id);
        };
        if id < first {
            return self.remove(id);
        }
        let Some(at) = self.pending.index(id) else {
            return Err(self.not_present(id));
        };
        let slot = &mut self.pending.slots[at];
        if slot.data.take().is_none() {
            return Err(self.not_present(id));
        }
        self.pending.dead += 1;
        if at == 0 {
            self.pending.drop_dead_front();
        } else {
            self.pending.compact();
        }
        Ok(())
    }

    /// Moves the pending column into `ready` and `alive`.
    fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let slots = Vec::from(std::mem::take(&mut self.pending).slots);
        // Same size and alignment: collected in place, no second column.
        let records: Vec<Record> = slots
            .into_iter()
            .filter_map(|s| {
                Some(Record {
                    id: s.id,
                    key: s.key,
                    data: s.data?,
                })
            })
            .collect();
        self.extend_ready(records);
    }

    /// Adds records (ascending ids, all above every present id) to `ready` in one build.
    pub(super) fn extend_ready(&mut self, records: Vec<Record>) {
        let above = self
            .alive
            .max()
            .is_none_or(|m| records.first().is_none_or(|r| r.id > m));
        if above && records.is_sorted_by_key(|r| r.id) {
            self.alive
                .append(records.iter().map(|r| r.id))
                .expect("ids checked ascending");
        } else {
            records.iter().for_each(|r| {
                self.alive.insert(r.id);
            });
        }
        self.ready.extend(records);
    }
}

/// Applies deltas to a state as one batch; the state is settled (ready to dequeue, exactly
/// what [`QueueState::apply`] would have built) when the batch is dropped, error or not.
#[derive(Debug)]
pub struct Batch<'s> {
    state: &'s mut QueueState,
}

impl QueueState {
    /// Starts a batch (restore); see [`Batch`].
    pub fn batch(&mut self) -> Batch<'_> {
        Batch { state: self }
    }
}

impl Batch<'_> {
    /// [`QueueState::apply`] in the batch: same rules, same errors.
    pub fn apply(&mut self, lsn: Option<i64>, data: &[u8]) -> Result<Applied> {
        self.state.apply_in(Mode::Batch(None), lsn, data)
    }

    /// [`Batch::apply`] of a delta that lies inside `source` (a sealed segment's bytes): the
    /// messages it adds borrow their bytes from there instead of being copied
    /// ([`Payload::borrowed`]). Same rules, same errors, same state.
    pub fn apply_in_source(
        &mut self,
        lsn: Option<i64>,
        data: &[u8],
        source: Option<&SegmentBytes>,
    ) -> Result<Applied> {
        self.state.apply_in(Mode::Batch(source), lsn, data)
    }

    /// [`QueueState::apply_delta`] in the batch: same rules, same errors.
    pub fn apply_delta(&mut self, lsn: Option<i64>, delta: &DeltaRef<'_>) -> Result<Applied> {
        self.state.apply_delta_in(Mode::Batch(None), lsn, delta)
    }

    /// Settles every queue (dropping the batch does the same).
    pub fn finish(self) {}
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for q in self.state.queues.values_mut() {
            q.settle();
        }
    }
}
