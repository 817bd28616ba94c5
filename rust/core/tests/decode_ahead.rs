//! A replay that frames and decodes each fed segment on the pool while the calling thread
//! applies (`ReplayOptions::decode_ahead`) ends exactly as one that does everything on the
//! calling thread: the same state, the same count, the same first error (same LSN, same text),
//! over random logs with refused and undecodable deltas, plain and compressed segments, any
//! batch size, and a replay starting anywhere.

mod common;

use std::path::Path;

use common::opts;
use proptest::prelude::*;
use tflux_core::format::compressed::Method;
use tflux_core::format::delta::Delta;
use tflux_core::log::Log;
use tflux_core::replay::{ReplayOptions, Replayer};
use tflux_core::state::{QueueState, IMPL_ARRAY, IMPL_HEAP};

const NAMES: [&[u8]; 3] = [b"", b"a", b"bb"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize, bool),
    Delete(usize),
    Add(usize, i64, u8),
    Remove(usize, usize),
    /// A removal the state refuses (an id never added).
    Refused(usize),
    /// Bytes that do not decode as a delta (or decode as one with a bad field).
    Garbage(Vec<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (1..3usize, any::<bool>()).prop_map(|(q, a)| Op::Create(q, a)),
        1 => (1..3usize).prop_map(Op::Delete),
        14 => (0..3usize, -2i64..9, any::<u8>()).prop_map(|(q, k, m)| Op::Add(q, k, m)),
        7 => (0..3usize, 0..20usize).prop_map(|(q, n)| Op::Remove(q, n)),
    ]
}

/// A delta that stops the replay (one at most: the replay stops at the first).
fn bad() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize).prop_map(Op::Refused),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Op::Garbage),
    ]
}

fn delta(op: &Op, model: &QueueState) -> Vec<u8> {
    let name = |q: usize| NAMES[q].to_vec();
    match op {
        Op::Create(q, array) => Delta::CreateQueue {
            name: name(*q),
            implementation: if *array { IMPL_ARRAY } else { IMPL_HEAP },
            max_queue_size: -1,
            max_message_size: -1,
            key_range: array.then_some((0, 7)),
        }
        .encode(),
        Op::Delete(q) => Delta::DeleteQueue { name: name(*q) }.encode(),
        Op::Add(q, key, m) => Delta::AddRecord {
            name: name(*q),
            key: *key,
            message: vec![*m; (*m % 90) as usize],
        }
        .encode(),
        Op::Remove(q, n) => {
            let id = model.queue(NAMES[*q]).map_or(0, |queue| {
                let mut ids: Vec<u64> = queue.records().map(|r| r.id).collect();
                ids.sort_unstable();
                ids.get(*n % ids.len().max(1)).copied().unwrap_or(0)
            });
            Delta::RemoveRecord { name: name(*q), id }.encode()
        }
        Op::Refused(q) => Delta::RemoveRecord {
            name: name(*q),
            id: 1 << 40,
        }
        .encode(),
        Op::Garbage(bytes) => bytes.clone(),
    }
}

/// Writes the log of `ops` in small segments (sealed ones compressed when `compress`),
/// leaving out the deltas the state refuses but the bad one (the replay stops at it).
fn write_log(dir: &Path, ops: &[Op], compress: bool) {
    let mut model = QueueState::new();
    let mut log = Log::open(dir, opts(400, 1 << 20, false)).unwrap();
    for op in ops {
        let d = delta(op, &model);
        let bad = matches!(op, Op::Refused(_) | Op::Garbage(_));
        if model.apply(None, &d).is_err() && !bad {
            continue;
        }
        let lsn = log.append(1, &d).unwrap();
        log.commit(lsn).unwrap();
    }
    if compress {
        log.compress(Method::Lz4).unwrap();
    }
    log.close().unwrap();
}

/// Replays the log in `dir` from `start` (feeding the scan's sealed segments, then the rest),
/// and reports the state and the result.
fn replay(dir: &Path, start: i64, options: ReplayOptions) -> (String, Result<u64, String>) {
    let mut state = QueueState::new();
    let mut rp = Replayer::with_options(&mut state, start, options);
    let mut readonly = opts(400, 1 << 20, false);
    readonly.readonly = true;
    let pending = Log::prepare_feeding(dir, readonly, &mut |seg| rp.segment(seg)).unwrap();
    let mut log = pending.open().unwrap();
    let result = rp.finish(&mut log).map_err(|e| e.to_string());
    // `infos` counts each queue's present ids (its id bitmap), the snapshot lists its records.
    let seen = format!("{:?} {:?}", state.to_snapshot(0, 0), state.infos());
    (seen, result)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    #[test]
    fn decoding_ahead_equals_decoding_on_the_applying_thread(
        mut ops in prop::collection::vec(op(), 1..400),
        bad in prop::option::weighted(0.5, (any::<prop::sample::Index>(), bad())),
        batch in 1usize..6,
        compress in prop::bool::weighted(0.25),
        start in prop::option::weighted(0.2, 0i64..40),
    ) {
        // Decoding ahead needs a second thread in the pool.
        let _ = rayon::ThreadPoolBuilder::new().num_threads(2).build_global();
        prop_assume!(rayon::current_num_threads() > 1);
        if let Some((at, op)) = bad {
            ops.insert(at.index(ops.len() + 1), op);
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        write_log(&log, &ops, compress);
        // A later start (as after a snapshot) often stops at an early refused delta.
        let start = start.unwrap_or(0).min(ops.len() as i64);
        let here = ReplayOptions { decode_ahead: false, batch };
        let ahead = ReplayOptions { decode_ahead: true, batch };
        let (one, two) = (replay(&log, start, here), replay(&log, start, ahead));
        prop_assert_eq!(&two.1, &one.1);
        prop_assert_eq!(&two.0, &one.0);
    }
}
