//! Replay steps: what the scan at open already knows of each record of a sealed segment, kept
//! for the restore that applies the segment next (`Replayer::segment`), so that the applying
//! thread neither walks the segment's framing again nor decodes the deltas that make up most
//! logs (AddRecord and RemoveRecord of the queue the delta before named).
//!
//! The scan runs on the pool with the record's bytes in cache; writing a step there costs a few
//! instructions, and the applying thread (one core, the restore's critical path) reads 16
//! bytes per record instead of framing and decoding it. Steps decide nothing: a step names a
//! record that [`fields::code_in_queue`] accepts against the name of the record before it, and
//! the applying thread uses it only when it applied that record before it (so the name is one
//! `decode` accepted, and the queue it named is the state's last-found queue); it applies it
//! through the same short path as a delta it decoded itself, and anything that path refuses
//! goes the general way with the record's bytes (same state, same error at the same LSN).

use crate::format::delta::fields;

/// One record of a sealed segment: where its data lies in the segment's bytes, and for a step
/// of the queue the record before named, its kind and its key or id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// AddRecord: the key (as bits); RemoveRecord: the id; else 0.
    word: u64,
    /// Offset of the record's data in the segment's bytes (any offset: taskflux records are
    /// not aligned).
    at: u32,
    /// The record's data length (below [`MAX_LEN`]), with the kind in its top two bits:
    /// [`GENERAL`], [`ADD`] or [`REMOVE`].
    len_kind: u32,
}

/// Where the kind sits in [`Step`]'s length word, and the lengths below it.
const KIND_SHIFT: u32 = 30;
const MAX_LEN: u32 = (1 << KIND_SHIFT) - 1;

/// A record the applying thread decodes itself.
pub const GENERAL: u8 = 0;
/// An AddRecord of the queue the record before named (`code_in_queue`'s code 2).
pub const ADD: u8 = 2;
/// A RemoveRecord of the queue the record before named (`code_in_queue`'s code 3).
pub const REMOVE: u8 = 3;

impl Step {
    /// The step's kind: [`GENERAL`], [`ADD`] or [`REMOVE`].
    #[inline(always)]
    pub fn kind(&self) -> u8 {
        (self.len_kind >> KIND_SHIFT) as u8
    }

    /// AddRecord: the key; RemoveRecord: the id (as bits).
    #[inline(always)]
    pub fn word(&self) -> u64 {
        self.word
    }

    /// The record's data in the segment's bytes the step was made from.
    #[inline(always)]
    pub fn range(&self) -> std::ops::Range<usize> {
        let at = self.at as usize;
        at..at + (self.len_kind & MAX_LEN) as usize
    }
}

/// Records whose average length decides whether a segment gets steps
/// ([`crate::segment::scan_file_stepping`]).
pub const PROBE: usize = 64;

/// The average record length (header, data and padding, over the segment's first [`PROBE`]
/// records) from which a segment gets steps. Steps pay where records are large: at 1 KiB
/// the applying thread no longer walks a cache line and a page-table entry per record of the
/// map (restore 1.6x less CPU, 1.2-1.7x less wall in session 11's A/B); at 64 B the pool's
/// cost of writing them (about 68 instructions and 16 bytes of fresh memory per record)
/// outweighed what the applying thread saved (0.86-0.94x the CPU). The crossover between the
/// two was not measured (docs/internals/benchmark-notes.md, session 11).
pub const MIN_AVERAGE: usize = 512;

/// The steps of one sealed segment, in record order, as its scan makes them.
#[derive(Debug, Default)]
pub struct Steps {
    list: Vec<Step>,
    /// Whether every record the scan accepted has its step (false when an offset did not fit
    /// a step: the segment is then replayed the general way).
    whole: bool,
}

/// Builds the steps of a segment during its scan ([`crate::segment`]'s walk hands it every
/// accepted record).
pub struct StepWriter<'a> {
    steps: Steps,
    /// The queue name of the record before, when it has the shape of an AddRecord or a
    /// RemoveRecord (its bytes; whether `decode` accepts it is for the applying thread).
    previous: Option<&'a [u8]>,
}

impl<'a> StepWriter<'a> {
    /// A writer filling `list` (emptied; its pages are reused: the buffers go round a pool),
    /// for a segment of `len` bytes.
    pub fn new(mut list: Vec<Step>, len: u64) -> StepWriter<'a> {
        list.clear();
        // Room for the records of a segment of this size at the average that gave it steps
        // (more grow the list). A reservation the process cannot make (a limited address
        // space) means no steps, not an abort: the segment is replayed the general way. It
        // once reserved a step per 16 bytes of file, as much memory as the segment.
        let records = usize::try_from(len / MIN_AVERAGE as u64).unwrap_or(usize::MAX);
        let whole = len <= u64::from(u32::MAX) && list.try_reserve(records).is_ok();
        StepWriter {
            steps: Steps { list, whole },
            previous: None,
        }
    }

    /// The record whose data `data` starts at offset `at` of the segment's bytes.
    #[inline(always)]
    pub fn note(&mut self, at: usize, data: &'a [u8]) {
        if !self.steps.whole {
            return;
        }
        let (kind, word) = match self.previous.and_then(|n| fields::code_in_queue(data, n)) {
            Some(2) => (ADD, fields::add_key(data) as u64),
            Some(3) => (REMOVE, fields::remove_id(data)),
            _ => {
                self.previous = shaped_name(data);
                (GENERAL, 0)
            }
        };
        let list = &mut self.steps.list;
        // A record of 1 GiB or more has no room for its kind: the segment goes the general way.
        let room = list.len() < list.capacity() || list.try_reserve(1).is_ok();
        if !room || data.len() > MAX_LEN as usize {
            self.steps.whole = false;
            return;
        }
        self.steps.list.push(Step {
            word,
            at: at as u32,
            len_kind: data.len() as u32 | u32::from(kind) << KIND_SHIFT,
        });
    }

    /// The steps, once every record was noted.
    pub fn finish(self) -> Steps {
        self.steps
    }
}

/// The queue name of `data` when it has the shape of an AddRecord or a RemoveRecord.
#[inline(always)]
fn shaped_name(data: &[u8]) -> Option<&[u8]> {
    use crate::format::delta::{ADD_RECORD, REMOVE_RECORD};
    let kind = *data.first()?;
    if kind != ADD_RECORD && kind != REMOVE_RECORD {
        return None;
    }
    fields::name_checked(data)
}

impl Steps {
    /// The steps of the records `from..to` (positions in the segment), when every record has
    /// one.
    pub fn get(&self, from: usize, to: usize) -> Option<&[Step]> {
        self.whole.then(|| self.list.get(from..to)).flatten()
    }

    /// How many records have steps.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The buffer, for the next segment's steps.
    pub fn into_buffer(self) -> Vec<Step> {
        self.list
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::delta::Delta;
    use crate::state::{QueueState, IMPL_HEAP};

    fn add(key: i64) -> Vec<u8> {
        Delta::AddRecord {
            name: b"q".to_vec(),
            key,
            message: b"message".to_vec(),
        }
        .encode()
    }

    /// Two AddRecords of queue `q` laid out as a segment's data (the second 4-byte aligned),
    /// the state after the first (applied the general way), and the second's step.
    fn two_adds() -> (Vec<u8>, QueueState, Step) {
        let (first, second) = (add(1), add(2));
        let at = first.len().next_multiple_of(4);
        let mut bytes = first.clone();
        bytes.resize(at, 0);
        bytes.extend_from_slice(&second);
        let mut writer = StepWriter::new(Vec::new(), bytes.len() as u64);
        writer.note(0, &bytes[..first.len()]);
        writer.note(at, &bytes[at..]);
        let step = writer
            .finish()
            .get(1, 2)
            .expect("every record has its step")[0];
        assert_eq!(step.kind(), ADD);
        let create = Delta::CreateQueue {
            name: b"q".to_vec(),
            implementation: IMPL_HEAP,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
        }
        .encode();
        let mut state = QueueState::new();
        let mut batch = state.batch();
        batch.apply(Some(1), &create).unwrap();
        batch.apply(Some(2), &first).unwrap();
        drop(batch);
        (bytes, state, step)
    }

    /// The messages of `q` after the step was applied over `bytes`, in id order.
    fn messages_after(state: &mut QueueState, step: &Step, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
        let mut batch = state.batch();
        batch.apply_step(step, bytes)?;
        drop(batch);
        let mut records: Vec<_> = state.queue(b"q").unwrap().records().collect();
        records.sort_by_key(|r| r.id);
        Some(records.iter().map(|r| r.data.as_ref().to_vec()).collect())
    }

    /// A step's AddRecord finds its message from the step and the queue's name, not from the
    /// record's header: the applying thread reads no byte of the map (a cache miss per record
    /// at 1 KiB). Bytes changed since the scan (another program rewrote the name's length) do
    /// not move the message, and never panic: the message used to be found by reading the
    /// name's length, and sliced unchecked before that.
    #[test]
    fn a_step_finds_its_message_without_reading_the_record() {
        let (bytes, mut state, step) = two_adds();
        let mut changed = bytes.clone();
        changed[step.range().start + 1] = 255; // the second record's name length
        let expected = vec![b"message".to_vec(), b"message".to_vec()];
        assert_eq!(messages_after(&mut state, &step, &changed), Some(expected));
    }

    /// A step that points past the bytes it is applied to goes the general way (`None`, the
    /// state unchanged), never a panic.
    #[test]
    fn a_step_past_the_bytes_goes_the_general_way() {
        let (bytes, mut state, step) = two_adds();
        let short = &bytes[..bytes.len() - 1];
        assert_eq!(messages_after(&mut state, &step, short), None);
        assert_eq!(state.queue(b"q").unwrap().count(), 1);
        assert!(messages_after(&mut state, &step, &bytes).is_some());
        assert_eq!(state.queue(b"q").unwrap().count(), 2);
    }

    /// The steps' reservation is a small part of the segment (address space a limited process
    /// may not have; it was a step per 16 bytes, as much as the segment itself).
    #[test]
    fn the_reservation_is_a_small_part_of_the_segment() {
        let len = 1u64 << 28;
        let steps = StepWriter::new(Vec::new(), len).finish();
        let reserved = steps.into_buffer().capacity() * std::mem::size_of::<Step>();
        assert!(
            reserved as u64 <= len / 16,
            "{reserved} B reserved for {len} B"
        );
    }
}
