//! Replay: the deltas of a log applied to a queue state (restore = snapshot + replay). It sits
//! above both the state machine and the log, so neither knows the other; the base-directory
//! checks and the store call it.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::format::delta::{self, DeltaRef};
use crate::log::Log;
use crate::segbytes::SegmentBytes;
use crate::segment::Segment;
use crate::state::{Batch, QueueState, SlotArrays};

/// Applies every entry of `log` from `start` (default: the log's start) to its end to `state`,
/// without copying entries, as one [`crate::state::Batch`] (the state is built once at the
/// end). Messages read from sealed plain segments are borrowed from their maps, not copied
/// ([`crate::payload::Payload`]). Returns the number of deltas applied; the first delta that cannot be applied stops it
/// with its [`crate::Error::Replay`], leaving the state as the deltas before it built it.
pub fn replay(state: &mut QueueState, log: &mut Log, start: Option<i64>) -> Result<u64> {
    let start = start.unwrap_or(log.start_index());
    Replayer::new(state, start).finish(log)
}

/// How a [`Replayer`] applies the sealed segments it is fed ([`Replayer::segment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Frame and decode a fed segment on the pool while the calling thread applies what was
    /// decoded before it (a restore's apply thread is its critical path; framing and decoding
    /// were a fifth of it). Off, or on one of the pool's own threads, or with a pool of one
    /// thread: frame, decode and apply on the calling thread. Same state, same count, same
    /// first error either way.
    pub decode_ahead: bool,
    /// Deltas per decoded batch handed from the pool to the applying thread (at least 1).
    pub batch: usize,
}

impl Default for ReplayOptions {
    fn default() -> Self {
        ReplayOptions {
            decode_ahead: true,
            batch: 1024,
        }
    }
}

/// A replay in two parts: segments fed while the log is still being scanned
/// ([`Log::prepare_feeding`]: each is applied on the calling thread while the pool checks the
/// next ones), then the rest of the opened log ([`Replayer::finish`]). The deltas are applied
/// in LSN order through the same [`Batch`] and [`Log::replay_segment`] as [`replay`], so the
/// state, the count and the first error (at the same LSN) are those of [`replay`] over the
/// opened log, provided the open accepts the scan (else the caller drops the state).
pub struct Replayer<'s> {
    batch: Batch<'s>,
    /// The next LSN to apply.
    next: i64,
    applied: u64,
    /// The first delta (or read) that failed: nothing is applied after it.
    failure: Option<Error>,
    options: ReplayOptions,
    /// Emptied decoded batches kept for the next ones (their pages are already touched).
    spare: Mutex<Vec<Decoded>>,
}

impl<'s> Replayer<'s> {
    /// A replay into `state` of the entries from `start` on.
    pub fn new(state: &'s mut QueueState, start: i64) -> Self {
        Replayer::with_options(state, start, ReplayOptions::default())
    }

    /// [`Replayer::new`] with `options`.
    pub fn with_options(state: &'s mut QueueState, start: i64, options: ReplayOptions) -> Self {
        Replayer {
            batch: state.batch(),
            next: start,
            applied: 0,
            failure: None,
            options,
            spare: Mutex::new(Vec::new()),
        }
    }

    /// Applies the entries of `seg` from the next LSN on (a segment wholly before it is
    /// skipped). Segments must come in LSN order, as the scan feeds them.
    pub fn segment(&mut self, seg: &mut Segment) {
        let (from, to) = (self.next.max(seg.first_lsn()), seg.last_lsn());
        if self.failure.is_some() || from > to {
            return;
        }
        // A blocking wait on one of the pool's own threads could hold up the decode it waits
        // for; a pool of one thread has no other core to decode on.
        let ahead = self.options.decode_ahead
            && rayon::current_thread_index().is_none()
            && rayon::current_num_threads() > 1;
        if ahead {
            self.segment_decoded_ahead(seg, from, to);
        } else {
            let read = Log::replay_segment(seg, from, to, &mut |lsn, _term, data, source| {
                self.step(lsn, data, source)
            });
            if let Err(e) = read {
                self.failure.get_or_insert(e);
            }
        }
        if self.failure.is_none() {
            self.next = to + 1;
        }
    }

    /// [`Replayer::segment`] with the framing and decoding on the pool: a task walks the
    /// segment ([`Log::replay_segment`], the one walk) and hands batches of decoded deltas
    /// over in order; this thread applies them, then takes the walk's own error, if any. A
    /// delta that fails stops the apply and (by closing the channel) the walk.
    fn segment_decoded_ahead(&mut self, seg: &mut Segment, from: i64, to: i64) {
        let (sender, received) = sync_channel::<Fed>(2);
        let options = self.options;
        let kept = std::mem::take(&mut self.spare);
        let spare = &kept;
        rayon::in_place_scope(|scope| {
            scope.spawn(move |_| decode_segment(seg, from, to, options.batch, &sender, spare));
            while let Ok(fed) = received.recv() {
                match fed {
                    Fed::Deltas(mut decoded) => {
                        let ok = self.apply_decoded(&mut decoded);
                        decoded.clear();
                        spare.lock().expect("not poisoned").push(decoded);
                        if !ok {
                            break;
                        }
                    }
                    Fed::End(Err(e)) => {
                        self.failure.get_or_insert(e);
                    }
                    Fed::End(Ok(())) => {}
                }
            }
            // Closing the channel stops a walk still under way (its next hand-over fails).
            drop(received);
        });
        self.spare = kept;
    }

    /// Applies a decoded batch in order; false at the first delta that fails (recorded).
    fn apply_decoded(&mut self, decoded: &mut Decoded) -> bool {
        self.batch.stock(&mut decoded.arrays);
        let source = decoded.source.as_ref();
        let bytes: &[u8] = source.map_or(&decoded.owned, |s| s);
        for d in &decoded.deltas {
            let data = &bytes[d.at..d.at + d.len];
            let lsn = Some(d.lsn);
            let applied = match d.what {
                What::Add { key, name, message } => {
                    let delta = DeltaRef::AddRecord {
                        name: name.of(data),
                        key,
                        message: message.of(data),
                    };
                    self.batch.apply_delta_in_source(lsn, &delta, source)
                }
                What::Remove { id, name } => {
                    let delta = DeltaRef::RemoveRecord {
                        name: name.of(data),
                        id,
                    };
                    self.batch.apply_delta_in_source(lsn, &delta, source)
                }
                What::Raw => self.batch.apply_in_source(lsn, data, source),
            };
            match applied {
                Ok(_) => self.applied += 1,
                Err(e) => {
                    self.failure = Some(e);
                    return false;
                }
            }
        }
        true
    }

    /// Applies the rest of `log` (from the next LSN to its end), settles the state, and
    /// returns the number of deltas applied or the first failure.
    pub fn finish(mut self, log: &mut Log) -> Result<u64> {
        let end = log.last_index() + 1;
        if self.failure.is_none() && self.next < end {
            let start = self.next;
            let read = log.scan_checked_at_open(start, end, |lsn, _term, data, source| {
                self.step(lsn, data, source)
            });
            if let Err(e) = read {
                self.failure.get_or_insert(e);
            }
        }
        let Replayer {
            batch,
            applied,
            failure,
            ..
        } = self;
        batch.finish();
        match failure {
            Some(e) => Err(e),
            None => Ok(applied),
        }
    }

    /// Applies one delta, or records its error; returns whether to go on.
    fn step(&mut self, lsn: i64, data: &[u8], source: Option<&SegmentBytes>) -> bool {
        match self.batch.apply_in_source(Some(lsn), data, source) {
            Ok(_) => {
                self.applied += 1;
                true
            }
            Err(e) => {
                self.failure = Some(e);
                false
            }
        }
    }
}

/// What the decoding task hands the applying thread, in order: batches, then the walk's end.
enum Fed {
    Deltas(Decoded),
    End(Result<()>),
}

/// Deltas of one segment framed and decoded ahead of their apply: positions in the segment's
/// bytes (`source`, the map the messages borrow from) or, where the walk lends none (a
/// decompressed `.log.z`), in a copy of the deltas (`owned`); and slot arrays made for the
/// records they add ([`SlotArrays`]; those the state did not take come back for reuse).
#[derive(Default)]
struct Decoded {
    source: Option<SegmentBytes>,
    owned: Vec<u8>,
    deltas: Vec<DecodedDelta>,
    arrays: SlotArrays,
}

impl Decoded {
    /// Empties it for the next batch (its slot arrays stay).
    fn clear(&mut self) {
        self.source = None;
        self.owned.clear();
        self.deltas.clear();
    }
}

/// One delta: its bytes are `[at, at + len)`.
#[derive(Debug, Clone, Copy)]
struct DecodedDelta {
    lsn: i64,
    at: usize,
    len: usize,
    what: What,
}

/// A decoded delta, its names and messages as spans of its bytes. Only the two deltas of the
/// hot path are kept decoded; any other (and one that does not decode) is applied from its
/// bytes, so every refusal and error is the one [`QueueState::apply`] makes.
#[derive(Debug, Clone, Copy)]
enum What {
    Add { key: i64, name: Span, message: Span },
    Remove { id: u64, name: Span },
    Raw,
}

/// `[at, at + len)` of a delta's bytes.
#[derive(Debug, Clone, Copy)]
struct Span {
    at: u32,
    len: u32,
}

impl Span {
    /// The span of `part`, a slice of `data`; `None` past 4 GiB.
    fn within(data: &[u8], part: &[u8]) -> Option<Span> {
        let at = part.as_ptr() as usize - data.as_ptr() as usize;
        Some(Span {
            at: u32::try_from(at).ok()?,
            len: u32::try_from(part.len()).ok()?,
        })
    }

    fn of(self, data: &[u8]) -> &[u8] {
        &data[self.at as usize..self.at as usize + self.len as usize]
    }
}

/// How a delta is kept: decoded when it is an Add or a Remove, else as bytes.
fn what(data: &[u8]) -> What {
    let decoded = match delta::decode(data) {
        Ok(DeltaRef::AddRecord { name, key, message }) => Span::within(data, name)
            .zip(Span::within(data, message))
            .map(|(name, message)| What::Add { key, name, message }),
        Ok(DeltaRef::RemoveRecord { name, id }) => {
            Span::within(data, name).map(|name| What::Remove { id, name })
        }
        _ => None,
    };
    decoded.unwrap_or(What::Raw)
}

/// The decoding task of [`Replayer::segment_decoded_ahead`]: walks `seg`'s entries
/// `from..=to`, hands them over decoded in batches of `batch`, then the walk's result.
fn decode_segment(
    seg: &mut Segment,
    from: i64,
    to: i64,
    batch: usize,
    sender: &SyncSender<Fed>,
    spare: &Mutex<Vec<Decoded>>,
) {
    let take = || {
        spare
            .lock()
            .expect("not poisoned")
            .pop()
            .unwrap_or_default()
    };
    let mut current = take();
    let mut open = true;
    // Adds in `current`, for its slot arrays.
    let mut adds = 0;
    let hand_over = |full: Decoded, adds: &mut usize| {
        let mut full = full;
        full.arrays.top_up_for(std::mem::take(adds));
        sender.send(Fed::Deltas(full)).is_ok()
    };
    let read = Log::replay_segment(seg, from, to, &mut |lsn, _term, data, source| {
        // One batch, one owner of its bytes (a walk lends the same bytes throughout).
        let lent = |s: Option<&SegmentBytes>| s.map(|s| s.as_ptr());
        if !current.deltas.is_empty() && lent(source) != lent(current.source.as_ref()) {
            let full = std::mem::replace(&mut current, take());
            open = hand_over(full, &mut adds);
            if !open {
                return false;
            }
        }
        if current.deltas.is_empty() {
            current.source = source.cloned();
        }
        let (at, what) = match source {
            Some(s) => (data.as_ptr() as usize - s.as_ptr() as usize, what(data)),
            None => {
                current.owned.extend_from_slice(data);
                (current.owned.len() - data.len(), What::Raw)
            }
        };
        adds += usize::from(matches!(what, What::Add { .. }));
        current.deltas.push(DecodedDelta {
            lsn,
            at,
            len: data.len(),
            what,
        });
        if current.deltas.len() >= batch.max(1) {
            let full = std::mem::replace(&mut current, take());
            open = hand_over(full, &mut adds);
        }
        open
    });
    if open && !current.deltas.is_empty() {
        open = hand_over(current, &mut adds);
    }
    if open {
        let _ = sender.send(Fed::End(read.map(drop)));
    }
}
