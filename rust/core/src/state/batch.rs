//! Replay as a batch (restore): nobody dequeues while a log is replayed, so the state does not
//! need to be ready to dequeue after every delta. Added records are appended to the queue's
//! `pending` column (ids arrive in ascending order), a removal takes its record, a DeleteQueue
//! drops the column with the queue, and [`Batch`] settles every queue once at the end: one
//! O(n) heap build (or one append per FIFO) instead of a sift per delta.
//!
//! The rules (what is refused, with which message) stay in `QueueState::apply_delta_in`, shared
//! with the online apply; this module only stores records differently.

use super::{Applied, Mode, Payload, Queue, QueueState, Record};
use crate::error::Result;
use crate::format::delta::DeltaRef;
use crate::segbytes::SegmentBytes;

/// One record added during a batch; `data` is `None` once removed (its payload freed at once).
/// Its id is implied by its place (see [`Chunk`]): 24 bytes, where a slot with its id was 32
/// (a quarter fewer fresh pages for the column).
#[derive(Debug)]
struct Slot {
    key: i64,
    data: Option<Payload>,
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
    fn push(&mut self, id: u64, key: i64, data: Payload) {
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
    fn take(&mut self, id: u64) -> Option<Payload> {
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
    /// no growth slack to release later); each chunk is freed once copied.
    fn into_records(self) -> Vec<Record> {
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
                    data: s.data?,
                })
            }));
        }
        records
    }
}

impl Queue {
    /// [`Queue::add`] for a batch: appends to the pending column.
    pub(super) fn add_pending(&mut self, key: i64, data: Payload) -> Option<u64> {
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
    fn settle(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let records = std::mem::take(&mut self.pending).into_records();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_slot_is_24_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
    }
}
