//! When records arrived (`Record.enqueued_at`, `QueueStats.oldest_ready_age`; issue 44). Not
//! logged: an AddRecord holds no time, and a queue with no rules must stay byte-identical
//! (docs/format.md, "Task-queue deltas", decision "Enqueue times are not logged"). Nor 8 bytes
//! per record: the owner keeps, per queue, a sparse table of `(first id, unix ms)`, one entry
//! at most per write and per millisecond. Ids grow within a life of a queue, and so do the
//! times, so a record's time is that of the last entry at or below its id (a binary search).
//!
//! - Exact to the millisecond while the table is small; a queue whose present records span
//!   more distinct milliseconds than its budget ([`MIN_ENTRIES`], or one entry per
//!   [`RECORDS_PER_ENTRY`] present records) takes entries at most one per `grain`
//!   milliseconds, doubling `grain` until it fits: a time is then never later than the truth
//!   and less than two grains earlier, counting the largest grain since the record arrived (a
//!   dropped entry's ids take the time of the entry kept before it, less than a grain earlier,
//!   whose own error was less than two of the half grain). The grain halves again when the
//!   table has shrunk well inside its budget (for the records to come: the entries already
//!   coarsened stay so). A clock that goes back makes the records of the meantime share the
//!   last (later) time.
//! - Entries whose ids are all gone (acked, purged, dead-lettered) are dropped when the table
//!   outgrows its last size twice over: memory follows the records present, not the history.
//! - Records that were in the queue when this owner started (restored from the files, enqueued
//!   by an earlier owner) have no time (`None`): their ids lie below the table's first entry.
//!   The only bound the files give is "before this owner started", and a bound reported as a
//!   time would understate every age computed from it.

use rustc_hash::FxHashMap as HashMap;

use crate::state::Queue;

/// Entries a queue's table may hold whatever its size (4 KiB; 8 KiB between compactions).
pub const MIN_ENTRIES: usize = 256;

/// Above [`MIN_ENTRIES`], one entry per this many present records at most (16 B per entry:
/// at most 1 B per record, 2 B between two compactions).
pub const RECORDS_PER_ENTRY: u64 = 16;

/// One queue's table.
#[derive(Debug)]
struct Table {
    /// `(first id, unix ms)`, both ascending.
    entries: Vec<(u64, i64)>,
    /// The least time between two entries (ms, a power of two).
    grain: i64,
    /// Compact when the table grows past this many entries.
    cap: usize,
}

impl Default for Table {
    fn default() -> Self {
        Table {
            entries: Vec::new(),
            grain: 1,
            cap: 2 * MIN_ENTRIES,
        }
    }
}

impl Table {
    /// `queue` is looked up only when the table must be compacted (most calls add nothing).
    fn note<'q>(&mut self, id: u64, now: i64, queue: impl FnOnce() -> Option<&'q Queue>) {
        if let Some(&(last_id, at)) = self.entries.last() {
            // Same grain (or the clock went back): the last entry already covers `id`.
            if id <= last_id || now < at.saturating_add(self.grain) {
                return;
            }
        }
        self.entries.push((id, now));
        if self.entries.len() > self.cap {
            if let Some(queue) = queue() {
                self.compact(queue);
            }
        }
    }

    fn at(&self, id: u64) -> Option<i64> {
        let i = self.entries.partition_point(|&(first, _)| first <= id);
        i.checked_sub(1).map(|i| self.entries[i].1)
    }

    /// Drops entries whose ids are all gone, then coarsens until the table fits its budget.
    fn compact(&mut self, queue: &Queue) {
        let n = self.entries.len();
        let mut kept: Vec<(u64, i64)> = Vec::with_capacity(n / 2 + 1);
        for i in 0..n {
            let (first, at) = self.entries[i];
            // The last entry also covers the ids still to come.
            let end = self.entries.get(i + 1).map_or(u64::MAX, |e| e.0);
            if i + 1 == n || queue.holds_any(first, end) {
                kept.push((first, at));
            }
        }
        let budget = (MIN_ENTRIES as u64).max(queue.present_count() / RECORDS_PER_ENTRY) as usize;
        while kept.len() > budget {
            self.grain = self.grain.saturating_mul(2);
            kept = coarsen(&kept, self.grain);
        }
        if kept.len() * 4 <= budget && self.grain > 1 {
            self.grain /= 2;
        }
        self.cap = (2 * kept.len()).max(2 * MIN_ENTRIES);
        // Growth slack goes: the table then grows by doubling up to `cap`, no further.
        kept.shrink_to_fit();
        self.entries = kept;
    }
}

/// Keeps an entry only when it starts `grain` ms or more after the last one kept (the ids of
/// a dropped entry take the earlier time).
fn coarsen(entries: &[(u64, i64)], grain: i64) -> Vec<(u64, i64)> {
    let mut out: Vec<(u64, i64)> = Vec::with_capacity(entries.len() / 2 + 1);
    for &(first, at) in entries {
        match out.last() {
            Some(&(_, last)) if at < last.saturating_add(grain) => {}
            _ => out.push((first, at)),
        }
    }
    out
}

/// The tables of every queue this owner added records to.
#[derive(Debug, Default)]
pub struct Arrivals {
    queues: HashMap<Vec<u8>, Table>,
}

impl Arrivals {
    /// Record `id` of `queue` (now holding it) arrived at `now` (unix ms).
    pub fn note(&mut self, name: &[u8], id: u64, now: i64, queue: &Queue) {
        self.note_lazily(name, id, now, || Some(queue));
    }

    /// [`Arrivals::note`] with the queue looked up only if its table must be compacted: on
    /// every enqueue's path, where most calls add no entry.
    pub fn note_lazily<'q>(
        &mut self,
        name: &[u8],
        id: u64,
        now: i64,
        queue: impl FnOnce() -> Option<&'q Queue>,
    ) {
        match self.queues.get_mut(name) {
            Some(t) => t.note(id, now, queue),
            None => {
                let mut t = Table::default();
                t.note(id, now, queue);
                self.queues.insert(name.to_vec(), t);
            }
        }
    }

    /// When record `id` of `queue` arrived (unix ms), if this owner saw it arrive.
    pub fn at(&self, name: &[u8], id: u64) -> Option<i64> {
        self.queues.get(name)?.at(id)
    }

    /// [`Arrivals::at`] for many records of one queue (a listing): the table is found once.
    pub fn of(&self, name: &[u8]) -> impl Fn(u64) -> Option<i64> + '_ {
        let table = self.queues.get(name);
        move |id| table.and_then(|t| t.at(id))
    }

    /// The queue was created or deleted: its ids start again.
    pub fn forget(&mut self, name: &[u8]) {
        self.queues.remove(name);
    }

    /// Entries and grain of `queue`'s table (for tests and benchmarks).
    pub fn table_size(&self, name: &[u8]) -> (usize, i64) {
        self.queues
            .get(name)
            .map_or((0, 1), |t| (t.entries.len(), t.grain))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::delta::DeltaRef;
    use crate::state::QueueState;

    fn add(s: &mut QueueState, n: u64) {
        for _ in 0..n {
            let add = DeltaRef::AddRecord {
                name: b"q",
                key: 0,
                message: b"",
            };
            s.apply_delta(None, &add).unwrap();
        }
    }

    fn queue_of(n: u64) -> QueueState {
        let mut s = QueueState::new();
        let create = super::super::queues::create_delta(b"q", Default::default());
        s.apply_delta(None, &create).unwrap();
        add(&mut s, n);
        s
    }

    #[test]
    fn a_time_is_that_of_the_last_entry_at_or_below_the_id_and_none_below_the_first() {
        let s = queue_of(10);
        let q = s.queue(b"q").unwrap();
        let mut a = Arrivals::default();
        a.note(b"q", 3, 1000, q);
        a.note(b"q", 5, 1000, q); // the same millisecond: the entry of id 3 covers it
        a.note(b"q", 6, 1002, q);
        a.note(b"q", 8, 1001, q); // the clock went back: covered by the last entry
        assert_eq!(a.at(b"q", 2), None, "before this owner saw the queue grow");
        assert_eq!(a.at(b"q", 3), Some(1000));
        assert_eq!(a.at(b"q", 5), Some(1000));
        assert_eq!(a.at(b"q", 6), Some(1002));
        assert_eq!(a.at(b"q", 9), Some(1002));
        assert_eq!(a.table_size(b"q"), (2, 1));
        assert_eq!(a.at(b"other", 3), None);
        a.forget(b"q");
        assert_eq!(a.at(b"q", 9), None, "a re-created queue's ids start again");
    }

    #[test]
    fn entries_of_records_that_left_are_dropped_and_the_rest_stay_exact() {
        // One write of 100 records per millisecond: one entry per write, well inside the
        // budget (one entry per 16 records), so nothing is coarsened.
        let mut s = queue_of(100_000);
        let mut a = Arrivals::default();
        let write = |a: &mut Arrivals, s: &QueueState, first: u64| {
            a.note(b"q", first, first as i64, s.queue(b"q").unwrap());
        };
        for first in (1..=100_000).step_by(100) {
            write(&mut a, &s, first);
        }
        for id in 1..=90_000 {
            s.apply_delta(None, &DeltaRef::RemoveRecord { name: b"q", id })
                .unwrap();
        }
        add(&mut s, 100_000);
        for first in (100_001..=200_000).step_by(100) {
            write(&mut a, &s, first);
        }
        let (entries, grain) = a.table_size(b"q");
        assert_eq!(grain, 1);
        assert!(
            entries <= 1_100,
            "{entries} entries: those of acked records stayed"
        );
        let q = s.queue(b"q").unwrap();
        for id in (90_001..=200_000).filter(|&id| q.holds_any(id, id + 1)) {
            assert_eq!(
                a.at(b"q", id),
                Some(1 + (id as i64 - 1) / 100 * 100),
                "id {id}"
            );
        }
    }

    #[test]
    fn a_long_backlog_coarsens_the_table_to_its_budget_and_times_stay_within_two_grains() {
        let n = 100_000u64;
        let s = queue_of(n);
        let q = s.queue(b"q").unwrap();
        let mut a = Arrivals::default();
        for id in 1..=n {
            a.note(b"q", id, 7 * id as i64, q);
        }
        let (entries, grain) = a.table_size(b"q");
        let budget = (n / RECORDS_PER_ENTRY) as usize;
        assert!(entries <= 2 * budget, "{entries} entries, budget {budget}");
        assert!(grain > 1);
        for id in 1..=n {
            let truth = 7 * id as i64;
            let t = a.at(b"q", id).unwrap();
            assert!(
                t <= truth && truth - t < 2 * grain,
                "id {id}: {t} for {truth}"
            );
        }
    }
}
