//! Replay: the deltas of a log applied to a queue state (restore = snapshot + replay). It sits
//! above both the state machine and the log, so neither knows the other; the base-directory
//! checks and the store call it.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::delta::Delta;
use crate::format::record;
use crate::format::steps::Step;
use crate::log::Log;
use crate::segment::bytes::SegmentBytes;
use crate::segment::Segment;
use crate::state::{Batch, QueueState};

/// Applies every entry of `log` from `start` (default: the log's start) to its end to `state`,
/// without copying entries, as one [`crate::state::Batch`] (the state is built once at the
/// end). Messages read from sealed plain segments are borrowed from their maps, not copied
/// ([`crate::state::payload::Payload`]). Returns the number of deltas applied; the first delta that cannot be applied stops it
/// with its [`crate::Error::Replay`], leaving the state as the deltas before it built it.
pub fn replay(state: &mut QueueState, log: &mut Log, start: Option<i64>) -> Result<u64> {
    let start = start.unwrap_or(log.start_index());
    let mut replayer = Replayer::new(state, start);
    // Every delta from `start` on is at most one added record.
    replayer.expect_adds(usize::try_from(log.last_index() + 1 - start).unwrap_or(0));
    replayer.finish(log)
}

/// A bound on the records the log in `dir` can add (its segment files' bytes over the
/// smallest framed AddRecord), for [`Replayer::expect_adds`] before the log is scanned; 0 when
/// the directory cannot be listed. Compressed segments hold more than their size says: the
/// bound is then low, which costs only speed.
pub fn adds_bound_of_dir(dir: &Path) -> usize {
    let Ok((segments, _)) = crate::io::fsutil::list_segments(&crate::io::storage::RealStorage, dir)
    else {
        return 0;
    };
    let bytes: u64 = segments
        .iter()
        .filter_map(|s| std::fs::metadata(&s.path).ok())
        .map(|m| m.len())
        .sum();
    let smallest = Delta::AddRecord {
        name: Vec::new(),
        key: 0,
        message: Vec::new(),
    }
    .encode()
    .len();
    usize::try_from(bytes / record::record_len(smallest) as u64).unwrap_or(usize::MAX)
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
}

impl<'s> Replayer<'s> {
    /// A replay into `state` of the entries from `start` on.
    pub fn new(state: &'s mut QueueState, start: i64) -> Self {
        Replayer {
            batch: state.batch(),
            next: start,
            applied: 0,
            failure: None,
        }
    }

    /// See [`Batch::expect_adds`].
    pub fn expect_adds(&mut self, adds: usize) {
        self.batch.expect_adds(adds);
    }

    /// Applies the entries of `seg` from the next LSN on (a segment wholly before it is
    /// skipped). Segments must come in LSN order, as the scan feeds them.
    pub fn segment(&mut self, seg: &mut Segment) {
        let (from, to) = (self.next.max(seg.first_lsn()), seg.last_lsn());
        if self.failure.is_some() || from > to {
            return;
        }
        if !Log::replay_rechecks_crc() {
            if let Some((steps, bytes)) = seg.replay_steps(from, to) {
                let bytes = bytes.clone();
                self.steps(seg, from, steps, &bytes);
                if self.failure.is_none() {
                    self.next = to + 1;
                }
                seg.unmap();
                return;
            }
        }
        let read = Log::replay_segment(seg, from, to, &mut |lsn, _term, data, source| {
            self.step(lsn, data, source)
        });
        if let Err(e) = read {
            self.failure.get_or_insert(e);
        }
        if self.failure.is_none() {
            self.next = to + 1;
        }
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

    /// Applies the records `from..` of `seg` whose replay steps its scan made
    /// ([`crate::format::steps`]), in `source` (the segment's map), in LSN order: a step of the queue
    /// the record before named goes the short way ([`Batch::apply_step`]) once the record
    /// before it was applied here; every other record, and one the short way does not take,
    /// is applied from its bytes as [`Replayer::segment`]'s walk would apply it.
    fn steps(&mut self, seg: &Segment, from: i64, steps: &[Step], source: &SegmentBytes) {
        self.batch.lend_from(source);
        // The record before the first was not applied here: the first goes the general way.
        let mut after_applied = false;
        for (lsn, step) in (from..).zip(steps) {
            if after_applied && self.batch.apply_step(step, source).is_some() {
                self.applied += 1;
                continue;
            }
            let range = step.range();
            let Some(data) = source.get(range.clone()) else {
                let why = "a replay step points outside the segment".to_string();
                self.failure = Some(seg.unreadable_at(range.start as u64, why));
                return;
            };
            if !self.step(lsn, data, Some(source)) {
                return;
            }
            after_applied = true;
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
