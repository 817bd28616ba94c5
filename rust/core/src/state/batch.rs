//! Replay as a batch (restore): nobody dequeues while a log is replayed, so the state does not
//! need to be ready to dequeue after every delta. Added records are appended to the queue's
//! `pending` column (ids arrive in ascending order), a removal takes its record, a DeleteQueue
//! drops the column with the queue, and [`Batch`] settles every queue once at the end: one
//! heap build (or one append per FIFO) instead of a sift per delta. An empty heap queue's heap
//! is built in the settle's pass over the column, each record moved up as it is written (under
//! one move per record on average with random keys; up to the heap's depth, 12 levels at 10M
//! records, when keys fall as ids rise, which measured as fast as the build it replaced); any
//! other by Floyd's O(n) build after it.
//!
//! The rules (what is refused, with which message) stay in `QueueState::apply_delta_in`, shared
//! with the online apply; this module only stores records differently.

use std::mem::ManuallyDrop;

use roaring::{RoaringBitmap, RoaringTreemap};

use crate::error::Result;
use crate::format::delta::DeltaRef;
use crate::io::bytes::SegmentBytes;
use crate::state::payload::{Lender, Lent};

use super::heap4::{sift_up_into, Heap4};
use super::{Applied, Mode, Queue, QueueState, Ready, Record};

/// One record added during a batch, laid out like a [`Record`] (32 bytes, same alignment) so
/// that the column becomes the queue's record array where it lies; `data` is `None` once
/// removed (an owned payload freed at once; a borrowed one holds no count, see [`Lent`]).
#[derive(Debug)]
struct Slot {
    id: u64,
    key: i64,
    data: Option<Lent>,
}

const _: () = assert!(
    std::mem::size_of::<Slot>() == std::mem::size_of::<Record>()
        && std::mem::align_of::<Slot>() == std::mem::align_of::<Record>()
);

/// Ids per chunk of the pending column (a power of two): the unit in which a removal finds
/// its record.
const CHUNK_BITS: u32 = 10;

/// Removed slots the column may hold before it is compacted, whatever the live count (small
/// in unit tests, so that they compact often).
const COMPACT_MIN: usize = if cfg!(test) { 8 } else { 4096 };

/// Slots a column grows to by doubling before it reserves the batch's whole bound at once.
const RESERVE_AT: usize = if cfg!(test) { 64 } else { 1 << 16 };

/// Records added during a batch: one column of slots in ascending id order (ids arrive in
/// order), which becomes the queue's record array in place when the batch settles, so the
/// settle writes no fresh pages (it used to copy every survivor into a fresh array, and the
/// kernel zeroing that array's pages was a fifth of a 64 B restore's applying thread). A
/// removal marks its slot; once the removed slots pass half the live ones (and
/// [`COMPACT_MIN`]) the column is compacted where it lies (ids stay in order), so it holds at
/// most 1.5 slots (48 B) per live record, the bound of a restore's memory per queued record
/// beyond its payload (compacting does not give written pages back, so the bound is on the
/// slots ever written), and compacting costs O(1) per removal. The ids
/// `[base + k 2^CHUNK_BITS, base + (k + 1) 2^CHUNK_BITS)` form chunk `k`; `starts[k]` is the
/// position of its first slot: a chunk nothing was compacted out of holds every id of its
/// range (found by subtraction), any other is searched (at most 2^CHUNK_BITS slots).
#[derive(Debug, Default)]
pub(super) struct Pending {
    base: u64,
    /// Ids pushed (`base..base + ids`); not "one past the last id", which overflows when the
    /// last id is 2^64 - 1 (a snapshot may carry any last id).
    ids: u64,
    col: Vec<Slot>,
    starts: Vec<usize>,
    dead: usize,
}

impl Pending {
    /// Appends record `id` (the next id); `room` bounds the records the whole batch adds (0:
    /// unknown), see [`Pending::grow`].
    #[inline(always)]
    fn push(&mut self, id: u64, key: i64, data: Lent, room: usize) {
        // `id` is the column's `ids`-th (ids are consecutive); the first sets `base`.
        let offset = self.ids;
        if offset == 0 {
            self.base = id;
        }
        debug_assert_eq!(id - self.base, offset, "ids are consecutive");
        if offset & ((1 << CHUNK_BITS) - 1) == 0 {
            self.starts.push(self.col.len());
        }
        if self.col.len() == self.col.capacity() {
            self.grow(room);
        }
        self.col.push(Slot {
            id,
            key,
            data: Some(data),
        });
        // At most one id per value of u64, so this cannot overflow.
        self.ids = offset + 1;
    }

    /// Makes room for one more slot. A column past [`RESERVE_AT`] slots reserves `room` at
    /// once: address space, not memory (only the slots written take pages), where growing by
    /// doubling copies the column into fresh pages again and again. When that reservation
    /// fails, or `room` is already passed, the column grows as a vector does.
    #[cold]
    #[inline(never)]
    fn grow(&mut self, room: usize) {
        let len = self.col.len();
        if len >= RESERVE_AT && room > len && self.col.try_reserve_exact(room - len).is_ok() {
            return;
        }
        self.col.reserve(1);
    }

    /// Takes the payload of pending record `id` (at or above `base`); `None` when it is not
    /// present (never added, or removed).
    #[inline]
    fn take(&mut self, id: u64) -> Option<Lent> {
        let offset = id.checked_sub(self.base)?;
        if offset >= self.ids {
            return None;
        }
        let k = (offset >> CHUNK_BITS) as usize;
        let start = *self.starts.get(k)?;
        let stop = self.starts.get(k + 1).copied().unwrap_or(self.col.len());
        let first = (k as u64) << CHUNK_BITS;
        let ids = (self.ids - first).min(1 << CHUNK_BITS);
        let at = if (stop - start) as u64 == ids {
            start + (offset - first) as usize
        } else {
            start
                + self.col[start..stop]
                    .binary_search_by_key(&id, |s| s.id)
                    .ok()?
        };
        let data = self.col.get_mut(at)?.data.take()?;
        self.dead += 1;
        // Removed slots at most half the live ones: 1.5 slots (48 B) per queued record.
        if self.dead >= COMPACT_MIN && self.dead * 2 > self.col.len() - self.dead {
            self.compact();
        }
        Some(data)
    }

    /// Drops the removed slots, keeping the others in order, where they lie: each live slot
    /// is moved down over the removed ones (a swap wrote both).
    #[cold]
    #[inline(never)]
    fn compact(&mut self) {
        let len = self.col.len();
        let mut kept = 0;
        let col = self.col.as_mut_ptr();
        for k in 0..self.starts.len() {
            let (start, stop) = (
                self.starts[k],
                self.starts.get(k + 1).copied().unwrap_or(len),
            );
            self.starts[k] = kept;
            for at in start..stop {
                // SAFETY: `kept <= at < len`; a live slot is moved (bitwise) down to `kept`,
                // over a removed slot (nothing to drop) or itself; the copy left at `at` is
                // never dropped (see below).
                unsafe {
                    if (*col.add(at)).data.is_some() {
                        if kept != at {
                            std::ptr::copy_nonoverlapping(col.add(at), col.add(kept), 1);
                        }
                        kept += 1;
                    }
                }
            }
        }
        // SAFETY: slots past `kept` are removed ones (their data `None`) or the copies left
        // behind by the moves: forgotten, not dropped (a dropped copy would free an owned
        // payload that a kept slot still holds).
        unsafe { self.col.set_len(kept) };
        self.dead = 0;
    }

    fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The live records in id order, in the column's own allocation: each slot is rewritten
    /// as a [`Record`] where it lies, survivors moved down over removed ones. Each borrowed
    /// payload takes its own count of its source here.
    ///
    /// # Safety
    /// Every [`SegmentBytes`] a pending record borrows from must be alive (see [`Batch`]).
    unsafe fn into_records(self) -> Vec<Record> {
        // SAFETY: the caller's promise.
        unsafe { self.into_records_noting(&mut |_| {}, false) }
    }

    /// [`Pending::into_records`], handing each kept id (ascending) to `kept_id` on the way, so
    /// that the settle builds the id bitmap in the same pass over the records; with `heap`,
    /// the records are left as a heap ([`Heap4`]'s order) instead of in id order, each moved
    /// up past larger parents as it is written ([`sift_up_into`]): the heap is built in the
    /// same pass, while the records are in cache, where a build after it read and wrote the
    /// whole array again (with random keys, two thirds of a 64 B restore's settle).
    ///
    /// # Safety
    /// As [`Pending::into_records`].
    unsafe fn into_records_noting(self, kept_id: &mut impl FnMut(u64), heap: bool) -> Vec<Record> {
        let mut col = std::mem::ManuallyDrop::new(self.col);
        let (ptr, len, cap) = (col.as_mut_ptr(), col.len(), col.capacity());
        let mut kept = 0;
        let records = ptr.cast::<Record>();
        for at in 0..len {
            // SAFETY: slot `at` is initialised and read once; `kept <= at`, so the record is
            // written over a slot already read (or this one), never over one still to read;
            // positions `0..kept` hold records (a heap, with `heap`), which is what
            // `sift_up_into` asks for. `Slot` and `Record` have the same size and alignment
            // (asserted above).
            unsafe {
                let Slot { id, key, data } = std::ptr::read(ptr.add(at));
                if let Some(data) = data {
                    kept_id(id);
                    // SAFETY: the caller's promise: the source is alive.
                    let record = Record {
                        id,
                        key,
                        data: data.into_payload(),
                    };
                    if heap {
                        sift_up_into(records, kept, record);
                    } else {
                        std::ptr::write(records.add(kept), record);
                    }
                    kept += 1;
                }
            }
        }
        // SAFETY: the allocation of `cap` slots, now holding `kept` records from its start;
        // a `Record` has the size and alignment of a `Slot`, so its layout is the one it was
        // allocated with.
        unsafe { Vec::from_raw_parts(records, kept, cap) }
    }
}

impl Queue {
    /// [`Queue::add`] for a batch: appends to the pending column.
    /// `room` bounds the records the whole batch adds (0: unknown).
    #[inline(always)]
    pub(super) fn add_pending(&mut self, key: i64, data: Lent, room: usize) -> Option<u64> {
        self.last_id = self.last_id.checked_add(1)?;
        let id = self.last_id;
        self.pending.push(id, key, data, room);
        Some(id)
    }

    /// [`Queue::remove`] for a batch: ids from the pending column's first on are pending (every
    /// present record below them is in `ready` or in flight, and goes the online way).
    #[inline]
    pub(super) fn remove_pending(&mut self, id: u64) -> std::result::Result<(), String> {
        if self.pending.is_empty() || id < self.pending.base {
            return self.remove(id);
        }
        match self.pending.take(id) {
            Some(_) => Ok(()),
            None => Err(self.not_present(id)),
        }
    }

    /// Moves the pending column into `ready` and `alive`.
    ///
    /// # Safety
    /// As [`Pending::into_records`]: every source a pending record borrows from is alive.
    pub(super) unsafe fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        // Pending ids are above every present id, so the bitmap is appended to in the pass
        // that settles the records (no second pass over them).
        if self.alive.max().is_none_or(|m| m < pending.base) {
            let mut ids = AscendingIds::default();
            // An empty heap queue (a restore without a snapshot, or whose snapshot left it
            // empty) takes the records as the heap the settle builds.
            let heap = matches!(&self.ready, Ready::Heap(h) if h.is_empty());
            // SAFETY: the caller's promise.
            let records = unsafe { pending.into_records_noting(&mut |id| ids.push(id), heap) };
            ids.append_to(&mut self.alive);
            if heap {
                self.ready = Ready::Heap(Heap4::from_heap(records));
            } else {
                self.ready.extend(records);
            }
        } else {
            // SAFETY: the caller's promise.
            let records = unsafe { pending.into_records() };
            self.extend_ready(records);
        }
    }

    /// Adds records (ascending ids, all above every present id) to `ready` in one build.
    pub(super) fn extend_ready(&mut self, records: Vec<Record>) {
        let above = self
            .alive
            .max()
            .is_none_or(|m| records.first().is_none_or(|r| r.id > m));
        if above && records.is_sorted_by_key(|r| r.id) {
            append_ascending(&mut self.alive, records.iter().map(|r| r.id));
        } else {
            records.iter().for_each(|r| {
                self.alive.insert(r.id);
            });
        }
        self.ready.extend(records);
    }
}

/// Ids a bitmap of [`append_ascending`] spans at most (bits, 1 MiB).
const APPEND_RUN: u64 = if cfg!(test) { 1 << 17 } else { 1 << 23 };

/// Adds `ids` (strictly ascending, all above every id in `set`) to `set`, set bit by bit in a
/// plain bitmap of up to [`APPEND_RUN`] ids, each handed to roaring whole
/// (`from_lsb0_bytes`): `RoaringTreemap::append` pushed id by id, about 100 instructions per
/// restored record.
fn append_ascending(set: &mut RoaringTreemap, ids: impl Iterator<Item = u64>) {
    let mut built = AscendingIds::default();
    ids.for_each(|id| built.push(id));
    built.append_to(set);
}

/// Strictly ascending ids collected for [`append_ascending`].
#[derive(Default)]
struct AscendingIds {
    /// The current run's bits, from `start` (a multiple of 2^16: whole roaring containers).
    bits: Vec<u8>,
    start: u64,
    built: Vec<(u32, RoaringBitmap)>,
}

impl AscendingIds {
    #[inline]
    fn push(&mut self, id: u64) {
        // A run stays inside one 2^32 range (roaring's `high`) and spans at most APPEND_RUN.
        if self.bits.is_empty() || (id ^ self.start) >> 32 != 0 || id - self.start >= APPEND_RUN {
            self.flush();
            self.start = id & !0xffff;
        }
        let at = (id - self.start) as usize;
        if at >> 3 >= self.bits.len() {
            self.bits.resize((at >> 3) + 1, 0);
        }
        self.bits[at >> 3] |= 1 << (at & 7);
    }

    fn flush(&mut self) {
        if self.bits.is_empty() {
            return;
        }
        let part = RoaringBitmap::from_lsb0_bytes(self.start as u32, &self.bits);
        self.bits.clear();
        let high = (self.start >> 32) as u32;
        match self.built.last_mut() {
            Some((h, b)) if *h == high => *b |= part,
            _ => self.built.push((high, part)),
        }
    }

    /// Adds the ids to `set` (every id in it below them).
    fn append_to(mut self, set: &mut RoaringTreemap) {
        self.flush();
        if self.built.is_empty() {
            return;
        }
        let add = RoaringTreemap::from_bitmaps(self.built);
        if set.is_empty() {
            *set = add;
        } else {
            *set |= add;
        }
    }
}

/// Applies deltas to a state as one batch; the state is settled (ready to dequeue, exactly
/// what [`QueueState::apply`] would have built) when the batch is dropped, error or not.
///
/// Borrowed payloads of pending records hold no count of their own (`payload::Lent`): the batch holds
/// one count of every source it was given (`sources`, taken before the delta that borrows from
/// it is applied) and gives them back only after every queue is settled, by which time each
/// surviving record has taken its own count and every other pending record is gone. So a
/// pending record never outlives its bytes: a queue deleted in the batch drops its records
/// without touching their sources; a batch that is forgotten, or whose settle panics, never
/// gives its counts back (the sources leak, and a later batch may still settle what is left).
#[derive(Debug)]
pub struct Batch<'s> {
    state: &'s mut QueueState,
    sources: ManuallyDrop<Vec<SegmentBytes>>,
    /// At most this many records are added in the batch (0: unknown); see [`Batch::expect_adds`].
    room: usize,
    /// The last of `sources`, as its pending records borrow it.
    lender: Option<Lender>,
}

impl QueueState {
    /// Starts a batch (restore); see [`Batch`].
    pub fn batch(&mut self) -> Batch<'_> {
        Batch {
            state: self,
            sources: ManuallyDrop::new(Vec::new()),
            room: 0,
            lender: None,
        }
    }
}

impl Batch<'_> {
    /// Tells the batch that at most `adds` records will be added in it (e.g. a bound from the
    /// size of the log to replay): a queue whose pending column grows large then reserves
    /// that much address space at once instead of growing by copies. Only speed depends on
    /// it: a wrong bound gives the same state.
    pub fn expect_adds(&mut self, adds: usize) {
        self.room = adds;
    }

    /// [`QueueState::apply`] in the batch: same rules, same errors.
    pub fn apply(&mut self, lsn: Option<i64>, data: &[u8]) -> Result<Applied> {
        if let Some(applied) = self.state.apply_in_last_queue(None, self.room, data) {
            return Ok(applied);
        }
        self.state.apply_in(Mode::Batch(None, self.room), lsn, data)
    }

    /// [`Batch::apply`] of a delta that lies inside `source` (a sealed segment's bytes): the
    /// messages it adds borrow their bytes from there instead of being copied
    /// ([`crate::state::payload::Payload::borrowed`]). Same rules, same errors, same state.
    #[inline]
    pub fn apply_in_source(
        &mut self,
        lsn: Option<i64>,
        data: &[u8],
        source: Option<&SegmentBytes>,
    ) -> Result<Applied> {
        let lender = match source {
            // Deltas come segment by segment: one count per run of the same source.
            Some(s) => {
                if !self.sources.last().is_some_and(|held| held.same_as(s)) {
                    self.hold(s);
                }
                self.lender.as_ref()
            }
            None => None,
        };
        if let Some(applied) = self.state.apply_in_last_queue(lender, self.room, data) {
            return Ok(applied);
        }
        Batch::apply_in_general(self.state, Mode::Batch(lender, self.room), lsn, data)
    }

    /// Lends the messages of the records applied next from `source` (a sealed segment's
    /// bytes), taking the batch's count of it when it is new; see [`Batch::apply_step`].
    #[inline]
    pub fn lend_from(&mut self, source: &SegmentBytes) {
        if !self.sources.last().is_some_and(|held| held.same_as(source)) {
            self.hold(source);
        }
    }

    /// Applies a replay step ([`crate::format::steps`]) of the source last given to
    /// [`Batch::lend_from`] (`bytes` are that source's bytes) by the short way, when the
    /// delta applied just before (successfully, in this batch) was the record before the
    /// step's. `None`, with nothing changed, when the short way does not take it: the caller
    /// then applies the record's bytes with [`Batch::apply_in_source`] (same rules, same
    /// errors, same state).
    #[inline(always)]
    pub fn apply_step(
        &mut self,
        step: &crate::format::steps::Step,
        bytes: &[u8],
    ) -> Option<Applied> {
        self.state
            .apply_step_in_last_queue(self.lender.as_ref(), self.room, step, bytes)
    }

    /// Any delta [`QueueState::apply_in_last_queue`] left.
    #[inline(never)]
    fn apply_in_general(
        state: &mut QueueState,
        mode: Mode<'_>,
        lsn: Option<i64>,
        data: &[u8],
    ) -> Result<Applied> {
        state.apply_in(mode, lsn, data)
    }

    /// Takes a count of `source` for the pending records that will borrow from it.
    #[cold]
    #[inline(never)]
    fn hold(&mut self, source: &SegmentBytes) {
        self.sources.push(source.clone());
        self.lender = Some(Lender::of(source));
    }

    /// [`QueueState::apply_delta`] in the batch: same rules, same errors.
    pub fn apply_delta(&mut self, lsn: Option<i64>, delta: &DeltaRef<'_>) -> Result<Applied> {
        self.state
            .apply_delta_in(Mode::Batch(None, self.room), lsn, delta)
    }

    /// Settles every queue (dropping the batch does the same).
    pub fn finish(self) {}
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for q in self.state.queues.values_mut() {
            // SAFETY: every pending record was made by this batch, which holds a count of its
            // source (`apply_in_source`), or by one that leaked its counts (see [`Batch`]).
            unsafe { q.settle() };
        }
        // Every pending record is settled: the sources' counts can go.
        drop(std::mem::take(&mut *self.sources));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pending column against a map from id to key, through pushes, removals of present,
    /// removed and never-added ids (compactions included: `COMPACT_MIN` is small in tests),
    /// then the settle: same answers, and the records in id order with their own bytes.
    #[test]
    fn the_pending_column_agrees_with_a_map() {
        use proptest::prelude::*;
        use std::collections::BTreeMap;
        // Op 2 removes any id, op 3 one of the last 40 added (as a priority queue's front
        // often is: compactions then move most slots).
        let ops = prop::collection::vec((0u8..4, 0u64..600, any::<i64>()), 0..1500);
        proptest!(ProptestConfig::with_cases(64), |(ops in ops, room in 0usize..400)| {
            let mut pending = Pending::default();
            let mut model = BTreeMap::new();
            let (base, mut next) = (7u64, 7u64);
            for (op, pick, key) in ops {
                if op < 2 {
                    let bytes = next.to_le_bytes();
                    pending.push(next, key, Lent::lent_or_copied(None, &bytes), room);
                    model.insert(next, key);
                    next += 1;
                } else {
                    let id = match op {
                        2 => base + pick % (next - base + 3),
                        _ => next.saturating_sub(1 + pick % 40).max(base),
                    };
                    let took = pending.take(id);
                    prop_assert_eq!(took.is_some(), model.remove(&id).is_some(), "id {}", id);
                }
            }
            // SAFETY: every payload is owned (no source).
            let records = unsafe { pending.into_records() };
            let seen: Vec<(u64, i64)> = records.iter().map(|r| (r.id, r.key)).collect();
            let want: Vec<(u64, i64)> = model.into_iter().collect();
            prop_assert_eq!(seen, want);
            for r in &records {
                prop_assert_eq!(&r.data[..], &r.id.to_le_bytes()[..]);
            }
        });
    }

    /// `append_ascending` against inserting id by id: dense and sparse runs, runs longer than
    /// a bitmap's span, ids crossing 2^32 boundaries and reaching 2^64 - 1, onto empty and
    /// non-empty sets.
    #[test]
    fn appending_ascending_ids_agrees_with_inserting_them() {
        use proptest::prelude::*;
        let gap = prop_oneof![
            4 => 1u64..4,
            2 => 1u64..70_000,
            1 => 1u64..(1 << 33),
        ];
        let starts = prop_oneof![
            Just(1u64),
            Just((1u64 << 32) - 300),
            Just(u64::MAX - 200_000),
            any::<u64>(),
        ];
        let below = prop::collection::vec(0u64..1000, 0..5);
        proptest!(ProptestConfig::with_cases(128), |(
            first in starts,
            gaps in prop::collection::vec(gap, 0..3000),
            below in below,
        )| {
            let mut ids = vec![first];
            for g in gaps {
                match ids.last().unwrap().checked_add(g) {
                    Some(id) => ids.push(id),
                    None => break,
                }
            }
            let mut want = RoaringTreemap::new();
            for &b in below.iter().filter(|&&b| b < first) {
                want.insert(b);
            }
            let mut got = want.clone();
            ids.iter().for_each(|&id| {
                want.insert(id);
            });
            append_ascending(&mut got, ids.iter().copied());
            prop_assert_eq!(got.len(), want.len());
            prop_assert!(got == want);
        });
        // A dense run longer than one bitmap's span, then a gap of whole containers.
        let ids: Vec<u64> = (5..3 * APPEND_RUN)
            .chain(10 * APPEND_RUN..11 * APPEND_RUN)
            .collect();
        let mut got = RoaringTreemap::new();
        append_ascending(&mut got, ids.iter().copied());
        assert!(got == ids.iter().copied().collect::<RoaringTreemap>());
    }

    /// The pending column's written slots (its resident pages: compacting does not give them
    /// back) stay within the 48 B per queued record that a restore may spend beyond the
    /// payload (issue 11), for the benchmark's add, add, remove-the-front pattern (removed ids
    /// the oldest) and for removals scattered over the column. The column used to be
    /// compacted only once removed slots outnumbered live ones: two slots, 64 B, per record.
    #[test]
    fn the_pending_column_stays_within_48_bytes_per_queued_record() {
        for scattered in [false, true] {
            let mut pending = Pending::default();
            // Live ids; the front is the oldest, a scattered removal takes one at a
            // pseudo-random place.
            let (mut next, mut live) = (1u64, std::collections::VecDeque::new());
            let mut written = 0usize;
            for step in 0..30_000u64 {
                for _ in 0..2 {
                    pending.push(next, 0, Lent::lent_or_copied(None, b"m"), 0);
                    live.push_back(next);
                    next += 1;
                }
                let id = if scattered {
                    let at = step.wrapping_mul(2_654_435_761) % live.len() as u64;
                    live.swap_remove_back(at as usize)
                } else {
                    live.pop_front()
                }
                .unwrap();
                assert!(pending.take(id).is_some());
                written = written.max(pending.col.len());
                let bytes = written * std::mem::size_of::<Slot>();
                assert!(
                    bytes <= 48 * live.len() + COMPACT_MIN * std::mem::size_of::<Slot>(),
                    "{} B for {} queued records (scattered: {scattered})",
                    bytes,
                    live.len()
                );
            }
        }
    }

    /// The settled records are the pending column itself: no second array (whose fresh pages
    /// the kernel would zero) is made.
    #[test]
    fn settled_records_lie_where_the_pending_column_was() {
        let mut pending = Pending::default();
        for id in 1..=5000u64 {
            pending.push(id, 0, Lent::lent_or_copied(None, b"m"), 0);
            if id % 3 == 0 {
                assert!(pending.take(id - 1).is_some());
            }
        }
        let column = pending.col.as_ptr() as usize;
        // SAFETY: every payload is owned.
        let records = unsafe { pending.into_records() };
        assert_eq!(records.as_ptr() as usize, column);
        assert_eq!(records.len(), 5000 - 1666);
    }

    use crate::format::delta::Delta;

    fn create(name: &[u8]) -> Vec<u8> {
        Delta::CreateQueue {
            name: name.to_vec(),
            implementation: super::super::IMPL_HEAP,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
        }
        .encode()
    }

    fn add(name: &[u8], message: &[u8]) -> Vec<u8> {
        Delta::AddRecord {
            name: name.to_vec(),
            key: 0,
            message: message.to_vec(),
        }
        .encode()
    }

    fn remove(name: &[u8], id: u64) -> Vec<u8> {
        Delta::RemoveRecord {
            name: name.to_vec(),
            id,
        }
        .encode()
    }

    /// `deltas` laid end to end in one segment's bytes, and where each lies.
    fn source_of(deltas: &[Vec<u8>]) -> (SegmentBytes, Vec<std::ops::Range<usize>>) {
        let (mut bytes, mut at) = (Vec::new(), Vec::new());
        for d in deltas {
            at.push(bytes.len()..bytes.len() + d.len());
            bytes.extend_from_slice(d);
        }
        (SegmentBytes::owned(bytes), at)
    }

    /// Pending records hold no count of the segment they borrow from, the batch holds one while
    /// it runs, and each survivor takes its own when the batch settles: after it, the count is
    /// exactly one per surviving record (none leaked by removed records nor by a deleted
    /// queue's), and the survivors read their bytes after every other holder let go.
    #[test]
    fn survivors_of_a_batch_hold_their_segment_and_nothing_else_does() {
        let mut deltas = vec![create(b"a"), create(b"b")];
        for i in 0..3000u32 {
            deltas.push(add(b"a", &i.to_le_bytes()));
            deltas.push(add(b"b", &i.to_le_bytes()));
            if i % 3 == 2 {
                deltas.push(remove(b"a", u64::from(i)));
            }
        }
        deltas.push(
            Delta::DeleteQueue {
                name: b"b".to_vec(),
            }
            .encode(),
        );
        let (first, at_first) = source_of(&deltas[..deltas.len() / 2]);
        let (second, at_second) = source_of(&deltas[deltas.len() / 2..]);
        let mut state = QueueState::new();
        let mut batch = state.batch();
        for (source, at) in [(&first, &at_first), (&second, &at_second)] {
            for r in at {
                batch
                    .apply_in_source(None, &source[r.clone()], Some(source))
                    .unwrap();
                assert_eq!(source.holders(), 2, "the caller's and the batch's");
            }
        }
        drop(batch);
        let q = state.queue(b"a").unwrap();
        let borrowed_from = |s: &SegmentBytes| {
            q.records()
                .filter(|r| {
                    let p = r.data.as_ptr() as usize;
                    (s.as_ptr() as usize..s.as_ptr() as usize + s.len()).contains(&p)
                })
                .count()
        };
        let (in_first, in_second) = (borrowed_from(&first), borrowed_from(&second));
        assert_eq!(in_first + in_second, 2000);
        assert!(in_first > 0 && in_second > 0);
        assert_eq!(first.holders(), 1 + in_first);
        assert_eq!(second.holders(), 1 + in_second);
        drop((first, second));
        let q = state.queue_mut(b"a").unwrap();
        let mut seen = Vec::new();
        while let Some(r) = q.dequeue() {
            seen.push(u32::from_le_bytes(r.data[..].try_into().unwrap()));
        }
        // Remove of id i (i % 3 == 2) took message i - 1 (ids count from 1).
        let kept: Vec<u32> = (0..3000).filter(|i| i % 3 != 1).collect();
        assert!(seen == kept, "{} dequeued", seen.len());
    }

    /// A heap queue settled from the pending column: the records are left as a heap built in
    /// the settle's pass (random, descending, equal and extreme keys, removals anywhere), its
    /// array a heap in `(key, id)` order, and dequeue hands out exactly the survivors sorted
    /// by `(key, id)`; a queue that already held records (a snapshot's) settles the same way.
    #[test]
    fn a_settled_heap_queue_dequeues_its_survivors_in_key_and_id_order() {
        use proptest::prelude::*;
        let keys = prop_oneof![
            prop::collection::vec(any::<i64>(), 0..400),
            prop::collection::vec(-3i64..3, 0..400),
            (0usize..400).prop_map(|n| (0..n as i64).rev().collect()),
            (0usize..400).prop_map(|n| vec![i64::MIN; n]),
        ];
        proptest!(ProptestConfig::with_cases(96), |(
            keys in keys,
            removed in prop::collection::vec(any::<prop::sample::Index>(), 0..200),
            snapshot_keys in prop::collection::vec(any::<i64>(), 0..3),
        )| {
            let mut state = QueueState::new();
            state.apply(None, &create(b"q")).unwrap();
            for &k in &snapshot_keys {
                state.apply(None, &add_key(b"q", k)).unwrap();
            }
            let mut live: std::collections::BTreeMap<u64, i64> = snapshot_keys
                .iter()
                .enumerate()
                .map(|(i, &k)| (i as u64 + 1, k))
                .collect();
            let mut batch = state.batch();
            let first = live.len() as u64 + 1;
            for (i, &k) in keys.iter().enumerate() {
                batch.apply(None, &add_key(b"q", k)).unwrap();
                live.insert(first + i as u64, k);
            }
            for pick in &removed {
                if keys.is_empty() {
                    break;
                }
                let id = first + pick.index(keys.len()) as u64;
                let present = live.remove(&id).is_some();
                prop_assert_eq!(batch.apply(None, &remove(b"q", id)).is_ok(), present);
            }
            drop(batch);
            let q = state.queue_mut(b"q").unwrap();
            let array: Vec<(i64, u64)> = q.ready.iter().map(|r| (r.key, r.id)).collect();
            for i in 1..array.len() {
                prop_assert!(array[(i - 1) / 4] < array[i], "not a heap at {}", i);
            }
            let mut want: Vec<(i64, u64)> = live.iter().map(|(&id, &k)| (k, id)).collect();
            want.sort_unstable();
            let mut got = Vec::new();
            while let Some(r) = q.dequeue() {
                prop_assert_eq!(&r.data[..], &r.key.to_le_bytes()[..]);
                got.push((r.key, r.id));
            }
            prop_assert_eq!(got, want);
        });
    }

    fn add_key(name: &[u8], key: i64) -> Vec<u8> {
        Delta::AddRecord {
            name: name.to_vec(),
            key,
            message: key.to_le_bytes().to_vec(),
        }
        .encode()
    }

    /// A batch whose deltas are not all in one source, and one stopped by an error, settles what
    /// it applied with the same counts: one per surviving borrowed record.
    #[test]
    fn a_failed_batch_settles_with_one_count_per_survivor() {
        let deltas = vec![
            create(b"q"),
            add(b"q", b"one"),
            add(b"q", b"two"),
            remove(b"q", 1),
            remove(b"q", 1),
            add(b"q", b"three"),
        ];
        let (source, at) = source_of(&deltas);
        let mut state = QueueState::new();
        let mut batch = state.batch();
        let mut failed = None;
        for (lsn, r) in at.iter().enumerate() {
            if let Err(e) =
                batch.apply_in_source(Some(lsn as i64), &source[r.clone()], Some(&source))
            {
                failed = Some((lsn, e));
                break;
            }
        }
        assert_eq!(failed.map(|(lsn, _)| lsn), Some(4));
        batch.finish();
        assert_eq!(source.holders(), 2, "the caller's and record 2's");
        drop(source);
        let r = state.queue_mut(b"q").unwrap().dequeue().unwrap();
        assert_eq!((r.id, &r.data[..]), (2, &b"two"[..]));
    }
}
