//! A restore on every core (each sealed segment applied while the next ones are still
//! scanned, `Log::prepare_feeding` and `Replayer`) leaves exactly the state, the count and
//! the first error (same LSN, same message) of the online apply, delta by delta: the model
//! here, over random logs with runs of one queue, queues created and deleted in the middle of
//! runs, refused and undecodable deltas, and a replay starting at any LSN (as after a
//! snapshot); and over a log large enough for a pending column to take its reservation and be
//! compacted many times. The fed segments are applied from the replay steps their scan made
//! (`tflux_core::format::steps`: AddRecord and RemoveRecord deltas of the queue the delta before
//! named, coded on the pool). `restore_on_every_core_matches_one_core.rs` compares the two restores with each
//! other; this file holds both to the online apply.

mod common;

use std::path::Path;

use common::ops::{self, add, Op};
use common::opts;
use proptest::prelude::*;
use tflux_core::format::delta::Delta;
use tflux_core::log::{Log, LogOptions};
use tflux_core::replay::Replayer;
use tflux_core::state::{QueueState, IMPL_HEAP};

/// Queue names: the default queue, short names, and one of 8 bytes and one of 11 (the name
/// compare works by words of 8 or 4 bytes).
const NAMES: [&[u8]; 5] = [b"", b"a", b"bb", b"abcdefgh", b"abcdefghijk"];

fn op() -> impl Strategy<Value = Op> {
    ops::valid(NAMES.len(), [2, 1, 20, 10], 30)
}

fn invalid() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..5usize).prop_map(Op::RemoveAbsent),
        (0..5usize).prop_map(Op::FarKey),
        (0..5usize).prop_map(Op::Undecodable),
        Just(Op::Missing),
    ]
}

fn delta(op: &Op, model: &QueueState) -> Vec<u8> {
    ops::delta(op, &NAMES, model)
}

/// The LSN of a new log's first entry.
const FIRST: i64 = 0;

fn readonly(o: LogOptions) -> LogOptions {
    LogOptions {
        readonly: true,
        ..o
    }
}

/// Writes the deltas of `ops` (a delta the model refuses is left out unless `keep_refused`
/// says it is the one invalid delta) to a log in `dir`; returns them.
fn write_log(dir: &Path, ops: &[(Op, bool)], segment: u64) -> Vec<Vec<u8>> {
    let mut model = QueueState::new();
    let mut written = Vec::new();
    for (op, keep_refused) in ops {
        let d = delta(op, &model);
        if model.apply(None, &d).is_err() && !keep_refused {
            continue;
        }
        written.push(d);
    }
    write_deltas(dir, &written, segment);
    written
}

/// Appends `deltas` to a new log in `dir` (LSNs from [`FIRST`]).
fn write_deltas(dir: &Path, deltas: &[Vec<u8>], segment: u64) {
    let mut log = Log::open(dir, opts(segment, 1 << 30, false)).unwrap();
    for (want, d) in (FIRST..).zip(deltas) {
        let lsn = log.append(1, d).unwrap();
        assert_eq!(lsn, want);
        // A segment rolls over at a commit past its soft limit.
        log.commit(lsn).unwrap();
    }
    log.close().unwrap();
}

/// The state the deltas before `start` build online, as a restore finds it: read back from
/// its snapshot (which queue a look-up found last is not kept, so a replay from `start` must
/// not take the record before it as applied).
fn restored_before(deltas: &[Vec<u8>], start: i64) -> QueueState {
    let mut state = QueueState::new();
    for (lsn, d) in (FIRST..start).zip(deltas) {
        let _ = state.apply(Some(lsn), d);
    }
    QueueState::from_snapshot(&state.to_snapshot(start, 1)).unwrap()
}

/// The online apply from `start` over a state built online from the
/// deltas before it: the state, and the count applied or the first error.
fn model(deltas: &[Vec<u8>], start: i64) -> (String, Result<u64, String>) {
    let mut state = restored_before(deltas, start);
    let mut outcome = Ok(0);
    for (lsn, d) in (FIRST..).zip(deltas).skip_while(|(lsn, _)| *lsn < start) {
        match state.apply(Some(lsn), d) {
            Ok(_) => outcome = outcome.map(|n| n + 1),
            Err(e) => {
                outcome = Err(e.to_string());
                break;
            }
        }
    }
    (format!("{:?}", state.to_snapshot(0, 0)), outcome)
}

/// The restore's replay on every core: segments fed while the log is scanned (from their
/// replay steps), the rest after the open. Returns what [`model`] returns, and how many
/// segments were fed with steps for all their records.
fn restore(
    dir: &Path,
    deltas: &[Vec<u8>],
    start: i64,
    segment: u64,
) -> (String, Result<u64, String>, usize) {
    let mut state = restored_before(deltas, start);
    let mut fed = 0;
    let result = {
        let mut replayer = Replayer::new(&mut state, start);
        replayer.expect_adds(tflux_core::replay::adds_bound_of_dir(dir));
        let pending =
            Log::prepare_feeding(dir, readonly(opts(segment, 1 << 30, false)), &mut |s| {
                if s.replay_steps(s.first_lsn(), s.last_lsn()).is_some() {
                    fed += 1;
                }
                replayer.segment(s)
            })
            .unwrap();
        let mut log = pending.open().unwrap();
        replayer.finish(&mut log).map_err(|e| e.to_string())
    };
    (format!("{:?}", state.to_snapshot(0, 0)), result, fed)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    #[test]
    fn a_restore_on_every_core_equals_the_online_apply(
        ops in prop::collection::vec(op(), 1..300),
        bad in prop::option::weighted(0.5, (any::<prop::sample::Index>(), invalid())),
        start in any::<prop::sample::Index>(),
        segment in prop_oneof![Just(300u64), Just(2000u64)],
    ) {
        // Array queues 1 and 3, heap queues 2 and 4, then the random run.
        let mut ops: Vec<(Op, bool)> = [(1, true), (2, false), (3, true), (4, false)]
            .into_iter()
            .map(|(q, array)| (Op::Create(q, array), false))
            .chain(ops.into_iter().map(|o| (o, false)))
            .collect();
        if let Some((at, op)) = bad {
            // After an Add to the same queue: the refused delta then meets the short way
            // for the queue the delta before named, when that queue exists.
            let at = at.index(ops.len() + 1);
            let q = match op {
                Op::RemoveAbsent(q) | Op::FarKey(q) | Op::Undecodable(q) => q,
                _ => 0,
            };
            ops.splice(at..at, [(Op::Add(q, 1, 7), false), (op, true)]);
        }
        let dir = tempfile::tempdir().unwrap();
        let deltas = write_log(dir.path(), &ops, segment);
        let start = FIRST + start.index(deltas.len() + 1) as i64;
        let (want_state, want) = model(&deltas, start);
        let (state, got, _) = restore(dir.path(), &deltas, start, segment);
        prop_assert_eq!(got, want);
        prop_assert_eq!(state, want_state);
    }
}

/// A restore on every core large enough for its pending column to take its reservation and be
/// compacted many times, its sealed segments applied from their steps, ends as the online
/// apply does: a run of one queue with removals of
/// scattered present ids, then a removal of an absent id that stops it at its LSN.
#[test]
fn a_large_restore_on_every_core_equals_the_online_apply() {
    let dir = tempfile::tempdir().unwrap();
    let name = NAMES[3];
    let mut deltas = vec![Delta::CreateQueue {
        name: name.to_vec(),
        implementation: IMPL_HEAP,
        max_queue_size: -1,
        max_message_size: -1,
        key_range: None,
    }
    .encode()];
    // Messages long enough for the sealed segments to get replay steps (`steps::MIN_AVERAGE`):
    // 66k adds fill the column past its reservation, then adds and scattered removals
    // alternate, compacting it.
    let (mut next, mut present) = (1u64, Vec::new());
    for i in 0..66_000u64 {
        deltas.push(add(
            name,
            (i % 8) as i64,
            vec![i as u8; 600 + (i % 70) as usize],
        ));
        present.push(next);
        next += 1;
    }
    for i in 0..72_000u64 {
        if i % 2 == 1 {
            let at = i.wrapping_mul(2_654_435_761) as usize % present.len();
            let id = present.swap_remove(at);
            deltas.push(
                Delta::RemoveRecord {
                    name: name.to_vec(),
                    id,
                }
                .encode(),
            );
        } else {
            deltas.push(add(name, (i % 8) as i64, vec![i as u8; 1100]));
            present.push(next);
            next += 1;
        }
    }
    deltas.push(
        Delta::RemoveRecord {
            name: name.to_vec(),
            id: 1 << 40,
        }
        .encode(),
    );
    deltas.push(add(name, 1, b"after".to_vec()));
    let segment = 1 << 20;
    write_deltas(dir.path(), &deltas, segment);
    let (want_state, want) = model(&deltas, FIRST);
    assert!(
        want.is_err(),
        "the removal of an absent id stops the replay"
    );
    let (state, got, fed) = restore(dir.path(), &deltas, FIRST, segment);
    assert!(
        fed >= 3,
        "{fed} segments fed with their steps during the scan"
    );
    assert_eq!(got, want);
    assert!(state == want_state, "the states differ");
}
