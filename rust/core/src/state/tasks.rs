//! The task-queue part of a queue (spec section 12, docs/format.md "Task-queue deltas"): its
//! rules, its delayed records, the deliveries of each record, and the replay of the five deltas
//! that carry them (QueueRules, AddLater, Delivered, Failed, Purge).
//!
//! Delayed records live apart from the ready ones, in a timer heap keyed by due time (then id);
//! they join the ready records (whose order is unchanged: smallest key, then lowest id) when the
//! store promotes them at a time it gives ([`Queue::promote`]). The state itself has no clock:
//! replay never promotes by time. So a replayed Delivered or Failed may name a record that the
//! replay still holds delayed: the live store had promoted it, and with it every record due no
//! later, which the replay then promotes too (same set, same order).
//!
//! A replayed Failed of a ready record that is not at the front of its heap leaves it in the
//! heap, marked deferred (id -> due): it counts as delayed, and moves to the timer heap when it
//! reaches the front or is promoted when its time comes. The live store only fails records in
//! flight, so outside a replay nothing is deferred.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use roaring::RoaringTreemap;

use crate::format::queue::IMPL_ARRAY;
use crate::format::rules::{QueueRules, RulesChange};

use super::{Queue, Ready, Record};

/// An in-flight record and its deliveries so far (this one included).
#[derive(Debug)]
pub(super) struct Flight {
    pub(super) record: Record,
    pub(super) attempts: u32,
}

/// A delayed record: 40 bytes (a ready one is 32) in the timer heap, plus a bit in `ids`.
#[derive(Debug)]
struct Due {
    due: i64,
    record: Record,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    /// Reversed: `BinaryHeap` is a max-heap, the earliest due (then lowest id) comes first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.due, other.record.id).cmp(&(self.due, self.record.id))
    }
}

/// The delayed records of a queue: a timer heap and the set of their ids.
#[derive(Debug, Default)]
pub(super) struct Delayed {
    heap: BinaryHeap<Due>,
    ids: RoaringTreemap,
}

impl Delayed {
    pub(super) fn push(&mut self, due: i64, record: Record) {
        self.ids.insert(record.id);
        self.heap.push(Due { due, record });
    }

    pub(super) fn len(&self) -> u64 {
        self.heap.len() as u64
    }

    pub(super) fn contains(&self, id: u64) -> bool {
        !self.heap.is_empty() && self.ids.contains(id)
    }

    /// Takes record `id` out, with its due time (a scan: only replay and purge take a delayed
    /// record by id).
    pub(super) fn remove(&mut self, id: u64) -> Option<(i64, Record)> {
        if !self.contains(id) {
            return None;
        }
        self.ids.remove(id);
        let mut items = std::mem::take(&mut self.heap).into_vec();
        let at = items.iter().position(|d| d.record.id == id)?;
        let d = items.swap_remove(at);
        self.heap = BinaryHeap::from(items);
        Some((d.due, d.record))
    }

    /// The earliest due time.
    pub(super) fn next_due(&self) -> Option<i64> {
        self.heap.peek().map(|d| d.due)
    }

    /// The earliest record, when it is due at or before `limit`.
    fn pop_due(&mut self, limit: i64) -> Option<Record> {
        if self.heap.peek()?.due > limit {
            return None;
        }
        let d = self.heap.pop()?;
        self.ids.remove(d.record.id);
        Some(d.record)
    }

    pub(super) fn records(&self) -> impl Iterator<Item = &Record> {
        self.heap.iter().map(|d| &d.record)
    }

    /// `(id, due)` of every delayed record, in no particular order.
    pub(super) fn dues(&self) -> impl Iterator<Item = (u64, i64)> + '_ {
        self.heap.iter().map(|d| (d.record.id, d.due))
    }

    fn retain(&mut self, keep: impl Fn(u64) -> bool) {
        let mut items = std::mem::take(&mut self.heap).into_vec();
        items.retain(|d| keep(d.record.id));
        self.ids = items.iter().map(|d| d.record.id).collect();
        self.heap = BinaryHeap::from(items);
    }
}

impl Queue {
    /// The queue's task-queue rules (empty when it has none).
    pub fn rules(&self) -> &QueueRules {
        &self.rules
    }

    /// Records that are present but not ready yet.
    pub fn delayed_count(&self) -> u64 {
        self.delayed.len() + self.deferred.len() as u64
    }

    /// How many promotions have scanned the deferred records so far (a diagnostic for tests:
    /// a promotion scans them only when one may be due).
    #[doc(hidden)]
    pub fn deferred_scans(&self) -> u64 {
        self.deferred_scans
    }

    /// When the next delayed record is due (unix ms).
    pub fn next_due(&self) -> Option<i64> {
        // The deferred records' bound: one below the truth wakes a waiter early, whose
        // promotion then makes it exact.
        let deferred = (!self.deferred.is_empty()).then_some(self.deferred_due);
        match (self.delayed.next_due(), deferred) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Deliveries so far of present record `id` (in flight: this one included).
    pub fn attempts_of(&self, id: u64) -> u32 {
        match self.in_flight.get(&id) {
            Some(f) => f.attempts,
            None => self.attempts.get(&id).copied().unwrap_or(0),
        }
    }

    /// Whether a present record (ready, delayed or in flight) has an id in `first..end`.
    pub fn holds_any(&self, first: u64, end: u64) -> bool {
        if end <= first {
            return false;
        }
        let below = first.checked_sub(1).map_or(0, |b| self.alive.rank(b));
        self.alive.rank(end - 1) > below
    }

    /// Present records (ready, delayed and in flight).
    pub fn present_count(&self) -> u64 {
        self.alive.len()
    }

    /// The lowest id of a ready record: the one enqueued first (ids grow with each enqueue).
    /// Bounded by the bitmaps, not by the delayed records: those are taken out in one
    /// difference, and only records in flight or deferred are skipped one by one.
    pub fn oldest_ready_id(&self) -> Option<u64> {
        let skip = |id: &u64| self.in_flight.contains_key(id) || self.deferred.contains_key(id);
        if self.delayed.len() == 0 {
            return self.alive.iter().find(|id| !skip(id));
        }
        let ready = &self.alive - &self.delayed.ids;
        ready.iter().find(|id| !skip(id))
    }

    /// The ids of the records in flight.
    pub fn in_flight_ids(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.in_flight.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// `(id, due)` of every delayed record (a snapshot's), ascending ids.
    pub fn delayed_dues(&self) -> Vec<(u64, i64)> {
        let mut out: Vec<(u64, i64)> = self
            .delayed
            .dues()
            .chain(self.deferred.iter().map(|(&id, &due)| (id, due)))
            .collect();
        out.sort_unstable();
        out
    }

    /// `(id, attempts)` of every present record delivered at least once, ascending ids.
    pub fn attempts_list(&self) -> Vec<(u64, u32)> {
        let mut out: Vec<(u64, u32)> = self
            .attempts
            .iter()
            .map(|(&id, &n)| (id, n))
            .chain(
                self.in_flight
                    .iter()
                    .filter(|(_, f)| f.attempts > 0)
                    .map(|(&id, f)| (id, f.attempts)),
            )
            .collect();
        out.sort_unstable();
        out
    }

    /// Moves every delayed record due at or before `limit` (unix ms) to the ready records;
    /// returns how many.
    pub fn promote(&mut self, limit: i64) -> u64 {
        let mut moved = 0;
        while let Some(r) = self.delayed.pop_due(limit) {
            self.ready.push(r);
            moved += 1;
        }
        if !self.deferred.is_empty() && self.deferred_due <= limit {
            let before = self.deferred.len();
            self.deferred_scans += 1;
            self.deferred.retain(|_, due| *due > limit);
            moved += (before - self.deferred.len()) as u64;
            self.deferred_due = self.deferred.values().copied().min().unwrap_or(i64::MAX);
        }
        moved
    }

    /// Sets the rules (checked by the caller). A dead-letter rule that starts or ends restarts
    /// the count: one that starts counts from the log only (deliveries counted in memory before
    /// it, not logged, are forgotten, so the live state is what a replay of the log builds);
    /// one that ends forgets the logged count, which a snapshot no longer carries, so a
    /// restore from the log and one from a snapshot agree.
    pub(super) fn set_rules(&mut self, rules: QueueRules) {
        if self.rules.dead_letter.is_some() != rules.dead_letter.is_some() {
            self.attempts.clear();
            self.in_flight.values_mut().for_each(|f| f.attempts = 0);
        }
        self.rules = rules;
    }

    /// The rules after `change`, checked ([`QueueRules::check`]).
    pub(super) fn changed_rules(&self, change: &RulesChange<&[u8]>) -> Result<QueueRules, String> {
        let rules = self.rules.changed(change);
        rules.check(&self.name)?;
        Ok(rules)
    }

    /// AddLater: a record with the next id, delayed until `due`; `None` when the ids are
    /// exhausted.
    pub(super) fn add_later(&mut self, key: i64, data: &[u8], due: i64) -> Option<u64> {
        self.last_id = self.last_id.checked_add(1)?;
        let id = self.last_id;
        self.alive.insert(id);
        self.delayed.push(
            due,
            Record {
                id,
                key,
                data: data.into(),
            },
        );
        Some(id)
    }

    /// Makes a delayed (or deferred) record `id` ready, with every record due no later (what
    /// the live store had done when it delivered it); false when it is neither.
    fn promote_through(&mut self, id: u64) -> bool {
        if let Some((due, r)) = self.delayed.remove(id) {
            self.promote(due);
            self.ready.push(r);
            return true;
        }
        match self.deferred.get(&id).copied() {
            Some(due) => {
                self.promote(due);
                true
            }
            None => false,
        }
    }

    /// Delivered: one more delivery of record `id`, which stays where the replay holds it (a
    /// replay has nothing in flight: the live store took the record, a restore gives it back).
    pub(super) fn count_delivery(&mut self, id: u64) -> Result<(), String> {
        if let Some(f) = self.in_flight.get_mut(&id) {
            f.attempts = f.attempts.saturating_add(1);
            return Ok(());
        }
        if !self.alive.contains(id) {
            return Err(self.not_present(id));
        }
        self.promote_through(id);
        let n = self.attempts.entry(id).or_insert(0);
        *n = n.saturating_add(1);
        Ok(())
    }

    /// Failed: record `id` is delayed until `due` (from flight, or in a replay from wherever
    /// the replay holds it).
    pub(super) fn fail(&mut self, id: u64, due: i64) -> Result<(), String> {
        if let Some(f) = self.in_flight.remove(&id) {
            if f.attempts > 0 {
                self.attempts.insert(id, f.attempts);
            }
            self.delayed.push(due, f.record);
            return Ok(());
        }
        if !self.alive.contains(id) {
            return Err(self.not_present(id));
        }
        self.promote_through(id);
        // Ready now, in the heap.
        if self.peek().is_some_and(|r| r.id == id) {
            let r = self.ready.pop().expect("peeked");
            self.delayed.push(due, r);
        } else {
            self.deferred.insert(id, due);
            self.deferred_due = self.deferred_due.min(due);
        }
        Ok(())
    }

    /// Purge: every record but `kept` goes; returns how many went.
    pub(super) fn purge(&mut self, kept: &[u64]) -> Result<u64, String> {
        if let Some(&id) = kept.iter().find(|&&id| !self.alive.contains(id)) {
            return Err(self.not_present(id));
        }
        let keep: RoaringTreemap = kept.iter().copied().collect();
        let gone = self.alive.len() - keep.len();
        let ready: Vec<Record> = self
            .ready
            .iter()
            .filter(|r| keep.contains(r.id) && !self.tombstones.contains(r.id))
            .cloned()
            .collect();
        self.ready = if self.config.implementation == IMPL_ARRAY {
            Ready::Array(Default::default())
        } else {
            Ready::Heap(Default::default())
        };
        let mut ready = ready;
        ready.sort_by_key(|r| r.id);
        self.ready.extend(ready);
        self.tombstones.clear();
        self.delayed.retain(|id| keep.contains(id));
        self.in_flight.retain(|id, _| keep.contains(*id));
        self.attempts.retain(|id, _| keep.contains(*id));
        self.deferred.retain(|id, _| keep.contains(*id));
        self.alive = keep;
        Ok(gone)
    }
}
