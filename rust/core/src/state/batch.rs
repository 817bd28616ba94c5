//! Replay as a batch (restore): nobody dequeues while a log is replayed, so the state does not
//! need to be ready to dequeue after every delta. Added records are appended to the queue's
//! `pending` column (ids arrive in ascending order), a removal takes its record, a DeleteQueue
//! drops the column with the queue, and [`Batch`] settles every queue once at the end: one
//! O(n) heap build (or one append per FIFO) instead of a sift per delta.
//!
//! The rules (what is refused, with which message) stay in `QueueState::apply_delta_in`, shared
//! with the online apply; this module only stores records differently.

use std::mem::ManuallyDrop;

use super::{Applied, Mode, Queue, QueueState, Record};
use crate::error::Result;
use crate::format::delta::DeltaRef;
use crate::payload::Lent;
use crate::segbytes::SegmentBytes;

/// One record added during a batch; `data` is `None` once removed (an owned payload freed at
/// once; a borrowed one holds no count, see [`Lent`]).
/// Its id is implied by its place (see [`Chunk`]): 24 bytes, where a slot with its id was 32
/// (a quarter fewer fresh pages for the column).
#[derive(Debug)]
struct Slot {
    key: i64,
    data: Option<Lent>,
}

/// Ids per chunk of the pending column (a power of two; 24 KiB of slots).
const CHUNK_BITS: u32 = 10;
const CHUNK: u64 = 1 << CHUNK_BITS;

/// The slots of the ids `[base + k * CHUNK, base + (k + 1) * CHUNK)`: dense (slot `i` is id
/// `base + k * CHUNK + i`, found by subtraction; `ids` empty) until half of it is removed, then
/// compacted to its live slots, whose ids `ids` then holds (found by a binary search).
#[derive(Debug, Default)]
struct Chunk {
    slots: Vec<Slot>,
    ids: Vec<u64>,
    dense: bool,
    dead: usize,
}

impl Chunk {
    /// The id of slot `i`; `first` is the chunk's first id.
    fn id(&self, first: u64, i: usize) -> u64 {
        if self.dense {
            first + i as u64
        } else {
            self.ids[i]
        }
    }

    /// The chunk reduced to its live slots (ids kept beside them).
    fn compacted(&mut self, first: u64) -> Chunk {
        let live = self.slots.len() - self.dead;
        let mut ids = Vec::with_capacity(live);
        let mut slots = Vec::with_capacity(live);
        for (i, slot) in self.slots.drain(..).enumerate() {
            if slot.data.is_some() {
                ids.push(if self.dense {
                    first + i as u64
                } else {
                    self.ids[i]
                });
                slots.push(slot);
            }
        }
        Chunk {
            slots,
            ids,
            dense: false,
            dead: 0,
        }
    }
}

/// Records added during a batch, ascending consecutive ids from `base`, in chunks of
/// [`CHUNK`] ids: an id's chunk is found by arithmetic, the column never moves (no doubling
/// copies, and only the pages of slots actually written are ever touched), and a removal
/// costs O(1) however scattered the removed ids are (an ack removes the queue's front by
/// priority, not by id). A chunk whose records are all removed is freed, one half removed is
/// compacted, so the column holds at most twice the live records plus the chunk being filled.
#[derive(Debug, Default)]
pub(super) struct Pending {
    base: u64,
    chunks: Vec<Chunk>,
    live: usize,
    /// Emptied full-size slot arrays kept for the next chunks: their pages are already
    /// touched, where a freed array's pages go back to the allocator, which returns them to
    /// the kernel, and the next chunk is zeroed afresh (a third of a 64 B restore was the
    /// kernel zeroing pages). At most [`SPARE`] of them.
    spare: Vec<Vec<Slot>>,
}

/// Emptied slot arrays kept for reuse (1.5 MiB).
const SPARE: usize = 64;

impl Pending {
    fn push(&mut self, id: u64, key: i64, data: Lent) {
        if self.chunks.is_empty() {
            self.base = id;
        }
        let k = ((id - self.base) >> CHUNK_BITS) as usize;
        if k == self.chunks.len() {
            let slots = self
                .spare
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(CHUNK as usize));
            self.chunks.push(Chunk {
                slots,
                ids: Vec::new(),
                dense: true,
                dead: 0,
            });
        }
        debug_assert_eq!(k + 1, self.chunks.len(), "ids are consecutive");
        let first = self.first_of(k);
        let chunk = &mut self.chunks[k];
        // The chunk being filled stays dense (only earlier chunks are compacted).
        debug_assert_eq!(chunk.id(first, chunk.slots.len()), id);
        chunk.slots.push(Slot {
            key,
            data: Some(data),
        });
        self.live += 1;
    }

    /// The first id of chunk `k`.
    fn first_of(&self, k: usize) -> u64 {
        self.base + ((k as u64) << CHUNK_BITS)
    }

    /// Takes the payload of pending record `id` (at or above `base`); `None` when it is not
    /// present (never added, or removed).
    fn take(&mut self, id: u64) -> Option<Lent> {
        let k = usize::try_from((id - self.base) >> CHUNK_BITS).ok()?;
        let last = self.chunks.len().checked_sub(1)?;
        let first = self.first_of(k);
        let chunk = self.chunks.get_mut(k)?;
        let at = if chunk.dense {
            (id - first) as usize
        } else {
            chunk.ids.binary_search(&id).ok()?
        };
        let data = chunk.slots.get_mut(at)?.data.take()?;
        chunk.dead += 1;
        self.live -= 1;
        // The chunk being filled is left alone (its slots are found by position).
        if k < last {
            if chunk.dead == chunk.slots.len() {
                let old = std::mem::take(chunk);
                self.recycle(old.slots);
            } else if chunk.dead * 2 > chunk.slots.len() && chunk.slots.len() >= 16 {
                let kept = chunk.compacted(first);
                let old = std::mem::replace(chunk, kept);
                self.recycle(old.slots);
            }
        }
        Some(data)
    }

    /// Keeps an emptied full-size slot array for a later chunk (see `spare`).
    fn recycle(&mut self, mut slots: Vec<Slot>) {
        if slots.capacity() == CHUNK as usize && self.spare.len() < SPARE {
            slots.clear();
            self.spare.push(slots);
        }
    }

    fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// The live records in id order, in one allocation of their own size (what the heap keeps:
    /// no growth slack to release later); each chunk is freed once copied. Each borrowed
    /// payload takes its own count of its source here.
    ///
    /// # Safety
    /// Every [`SegmentBytes`] a pending record borrows from must be alive (see [`Batch`]).
    unsafe fn into_records(self) -> Vec<Record> {
        let Pending {
            base,
            chunks,
            live,
            spare,
        } = self;
        drop(spare);
        let mut records = Vec::with_capacity(live);
        for (k, chunk) in chunks.into_iter().enumerate() {
            let first = base + ((k as u64) << CHUNK_BITS);
            let Chunk {
                slots, ids, dense, ..
            } = chunk;
            records.extend(slots.into_iter().enumerate().filter_map(|(i, s)| {
                Some(Record {
                    id: if dense { first + i as u64 } else { ids[i] },
                    key: s.key,
                    // SAFETY: the caller's promise: the source is alive.
                    data: unsafe { s.data?.into_payload() },
                })
            }));
        }
        records
    }
}

impl Queue {
    /// [`Queue::add`] for a batch: appends to the pending column.
    pub(super) fn add_pending(&mut self, key: i64, data: Lent) -> Option<u64> {
        self.last_id = self.last_id.checked_add(1)?;
        let id = self.last_id;
        self.pending.push(id, key, data);
        Some(id)
    }

    /// [`Queue::remove`] for a batch: ids from the pending column's first on are pending (every
    /// present record below them is in `ready` or in flight, and goes the online way).
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
    unsafe fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        // SAFETY: the caller's promise.
        let records = unsafe { std::mem::take(&mut self.pending).into_records() };
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
}

impl QueueState {
    /// Starts a batch (restore); see [`Batch`].
    pub fn batch(&mut self) -> Batch<'_> {
        Batch {
            state: self,
            sources: ManuallyDrop::new(Vec::new()),
        }
    }
}

impl Batch<'_> {
    /// [`QueueState::apply`] in the batch: same rules, same errors.
    pub fn apply(&mut self, lsn: Option<i64>, data: &[u8]) -> Result<Applied> {
        self.state.apply_in(Mode::Batch(None), lsn, data)
    }

    /// [`Batch::apply`] of a delta that lies inside `source` (a sealed segment's bytes): the
    /// messages it adds borrow their bytes from there instead of being copied
    /// ([`crate::payload::Payload::borrowed`]). Same rules, same errors, same state.
    #[inline]
    pub fn apply_in_source(
        &mut self,
        lsn: Option<i64>,
        data: &[u8],
        source: Option<&SegmentBytes>,
    ) -> Result<Applied> {
        if let Some(s) = source {
            // Deltas come segment by segment: one count per run of the same source.
            if !self.sources.last().is_some_and(|held| held.same_as(s)) {
                self.hold(s);
            }
        }
        self.state.apply_in(Mode::Batch(source), lsn, data)
    }

    /// Takes a count of `source` for the pending records that will borrow from it.
    #[cold]
    #[inline(never)]
    fn hold(&mut self, source: &SegmentBytes) {
        self.sources.push(source.clone());
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

    #[test]
    fn a_pending_slot_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
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
