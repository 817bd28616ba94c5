//! Batch replay (restore) against the online apply as its model: for random delta sequences,
//! valid and invalid, on a fresh state, on a state with ready, removed and in-flight records,
//! and on a state restored from a snapshot, a batch must end in the same state (every queue,
//! every record, the order of dequeue) and stop at the same delta with the same error. The
//! task-queue deltas of spec 12 (rules, delayed adds, counted deliveries, failures with a due
//! time, purges) are among them, with promotions of due records in the prefix; the state then
//! includes each queue's rules, delayed records and (under a dead-letter rule) attempts.

use proptest::prelude::*;
use tflux_core::format::delta::Delta;
use tflux_core::format::rules::{QueueRules, RulesChange};
use tflux_core::state::{Applied, QueueInfo, QueueState, IMPL_ARRAY, IMPL_HEAP};

const NAMES: [&[u8]; 3] = [b"", b"a", b"b"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize, bool),
    Delete(usize),
    Add(usize, i64, u8),
    /// Remove the n-th present record of the queue (the next id when none is present).
    Remove(usize, usize),
    /// Remove an arbitrary (usually absent) id.
    RemoveId(usize, u64),
    Garbage(Vec<u8>),
    /// An Add (`true`) or a Remove of the queue's first present record, bent: cut short by
    /// `-change` bytes, lengthened by `change` bytes of `byte`, or (0) with byte `at` set to
    /// `byte` (a name, key, length or id field off by a little).
    Bent(usize, bool, usize, u8, i8),
    /// Online only (the prefix): dequeue from / nack the n-th in-flight record of a queue.
    Dequeue(usize),
    Nack(usize, usize),
    /// Sets (with a dead-letter rule to queue `b`, or `a` when the queue is `b`) or clears
    /// the queue's rules.
    Rules(usize, bool),
    /// An AddLater due at this time.
    AddLater(usize, i64, u8, i64),
    /// A Delivered of the n-th present record.
    Deliver(usize, usize),
    /// A Failed of the n-th present record, due at this time.
    Fail(usize, usize, i64),
    /// A Purge keeping the n-th present record (none when `false`).
    Purge(usize, usize, bool),
    /// Online only (the prefix): promotes the queue's records due by this time.
    Promote(usize, i64),
}

fn body_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        // Mostly valid (long runs before the first error), each invalid kind reachable: a key
        // outside an array queue's range, a removal of an absent id, garbage, create/delete.
        2 => (0..3usize, any::<bool>()).prop_map(|(q, a)| Op::Create(q, a)),
        1 => (0..3usize).prop_map(Op::Delete),
        30 => (0..3usize, prop_oneof![20 => 0i64..8, 1 => -3i64..12], any::<u8>())
            .prop_map(|(q, k, m)| Op::Add(q, k, m)),
        20 => (0..3usize, 0..40usize).prop_map(|(q, n)| Op::Remove(q, n)),
        1 => (0..3usize, prop_oneof![Just(0u64), 0..60u64, Just(u64::MAX)])
            .prop_map(|(q, id)| Op::RemoveId(q, id)),
        1 => prop::collection::vec(any::<u8>(), 0..6).prop_map(Op::Garbage),
        2 => (0..3usize, any::<bool>(), 0..24usize, any::<u8>(), -2i8..3)
            .prop_map(|(q, add, at, byte, change)| Op::Bent(q, add, at, byte, change)),
        2 => (0..3usize, any::<bool>()).prop_map(|(q, d)| Op::Rules(q, d)),
        6 => (0..3usize, 0i64..8, any::<u8>(), 0i64..50)
            .prop_map(|(q, k, m, due)| Op::AddLater(q, k, m, due)),
        6 => (0..3usize, 0..40usize).prop_map(|(q, n)| Op::Deliver(q, n)),
        5 => (0..3usize, 0..40usize, 0i64..50).prop_map(|(q, n, due)| Op::Fail(q, n, due)),
        1 => (0..3usize, 0..40usize, any::<bool>()).prop_map(|(q, n, k)| Op::Purge(q, n, k)),
    ]
}

fn prefix_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => body_op(),
        4 => (0..3usize).prop_map(Op::Dequeue),
        2 => (0..3usize, 0..8usize).prop_map(|(q, n)| Op::Nack(q, n)),
        1 => (0..3usize, 0..3usize).prop_map(|(q, n)| Op::Remove(q, n)),
        2 => (0..3usize, 0i64..50).prop_map(|(q, t)| Op::Promote(q, t)),
    ]
}

/// The delta an op stands for, given the online state (which decides the ids it names).
fn delta_bytes(op: &Op, model: &QueueState) -> Option<Vec<u8>> {
    let name = |q: usize| NAMES[q].to_vec();
    let delta = match op {
        Op::Create(q, array) => Delta::CreateQueue {
            name: name(*q),
            implementation: if *array { IMPL_ARRAY } else { IMPL_HEAP },
            max_queue_size: -1,
            max_message_size: -1,
            key_range: array.then_some((0, 7)),
        },
        Op::Delete(q) => Delta::DeleteQueue { name: name(*q) },
        Op::Add(q, key, m) => Delta::AddRecord {
            name: name(*q),
            key: *key,
            message: vec![*m; (*m % 5) as usize],
        },
        Op::Remove(q, n) => {
            let id = match model.queue(NAMES[*q]) {
                Ok(queue) => {
                    let mut ids: Vec<u64> = queue.records().map(|r| r.id).collect();
                    ids.sort_unstable();
                    ids.get(*n % ids.len().max(1))
                        .copied()
                        .unwrap_or(queue.last_id() + 1)
                }
                Err(_) => *n as u64,
            };
            Delta::RemoveRecord { name: name(*q), id }
        }
        Op::RemoveId(q, id) => Delta::RemoveRecord {
            name: name(*q),
            id: *id,
        },
        Op::Garbage(bytes) => return Some(bytes.clone()),
        Op::Bent(q, add, at, byte, change) => {
            let straight = if *add {
                Op::Add(*q, 3, *byte)
            } else {
                Op::Remove(*q, 0)
            };
            let mut bytes = delta_bytes(&straight, model)?;
            match *change {
                0 => {
                    let at = at % bytes.len();
                    bytes[at] = *byte;
                }
                c if c < 0 => bytes.truncate(bytes.len().saturating_sub(c.unsigned_abs() as usize)),
                c => bytes.extend(std::iter::repeat_n(*byte, c as usize)),
            }
            return Some(bytes);
        }
        Op::Rules(q, dead) => Delta::QueueRules {
            name: name(*q),
            change: if *dead {
                RulesChange {
                    dead_letter: Some(Some((name(if *q == 2 { 1 } else { 2 }), 2))),
                    retry_delay_ms: Some(Some(10)),
                    ..RulesChange::default()
                }
            } else {
                RulesChange {
                    dead_letter: Some(None),
                    lease_ms: Some(Some(5)),
                    ..RulesChange::default()
                }
            },
        },
        Op::AddLater(q, key, m, due) => Delta::AddLater {
            name: name(*q),
            key: *key,
            not_before: *due,
            message: vec![*m; (*m % 5) as usize],
        },
        Op::Deliver(q, n) => Delta::Delivered {
            name: name(*q),
            id: nth_id(model, *q, *n),
        },
        Op::Fail(q, n, due) => Delta::Failed {
            name: name(*q),
            id: nth_id(model, *q, *n),
            due: *due,
        },
        Op::Purge(q, n, keep) => Delta::Purge {
            name: name(*q),
            kept: if *keep {
                vec![nth_id(model, *q, *n)]
            } else {
                vec![]
            },
        },
        Op::Dequeue(_) | Op::Nack(..) | Op::Promote(..) => return None,
    };
    Some(delta.encode())
}

/// The n-th present record's id of queue `q` (the next id when none is present).
fn nth_id(model: &QueueState, q: usize, n: usize) -> u64 {
    match model.queue(NAMES[q]) {
        Ok(queue) => {
            let mut ids: Vec<u64> = queue.records().map(|r| r.id).collect();
            ids.sort_unstable();
            ids.get(n % ids.len().max(1))
                .copied()
                .unwrap_or(queue.last_id() + 1)
        }
        Err(_) => n as u64,
    }
}

/// Applies the prefix online (dequeues and nacks included); errors are skipped.
fn build(prefix: &[Op]) -> QueueState {
    let mut s = QueueState::new();
    for (i, op) in prefix.iter().enumerate() {
        match op {
            Op::Dequeue(q) => {
                if let Ok(queue) = s.queue_mut(NAMES[*q]) {
                    queue.dequeue();
                }
            }
            Op::Promote(q, t) => {
                if let Ok(queue) = s.queue_mut(NAMES[*q]) {
                    queue.promote(*t);
                }
            }
            Op::Nack(q, n) => {
                if let Ok(queue) = s.queue_mut(NAMES[*q]) {
                    let mut flying: Vec<u64> = queue
                        .records()
                        .map(|r| r.id)
                        .filter(|id| queue.is_in_flight(*id))
                        .collect();
                    flying.sort_unstable();
                    if let Some(id) = flying.get(*n % flying.len().max(1)) {
                        assert!(queue.nack(*id));
                    }
                }
            }
            op => {
                let bytes = delta_bytes(op, &s).expect("a delta");
                let _ = s.apply(Some(i as i64), &bytes);
            }
        }
    }
    s
}

/// Nacks every in-flight record (what a snapshot restores them as).
fn nack_all(s: &mut QueueState) {
    for info in s.infos() {
        let q = s.queue_mut(info.name.as_bytes()).unwrap();
        let flying: Vec<u64> = q
            .records()
            .map(|r| r.id)
            .filter(|id| q.is_in_flight(*id))
            .collect();
        for id in flying {
            assert!(q.nack(id));
        }
    }
}

type Tasks = (QueueRules, Vec<(u64, i64)>, Vec<(u64, u32)>);
type Seen = Vec<(QueueInfo, Vec<u64>, Tasks, Vec<(u64, i64, Vec<u8>)>)>;

/// Everything observable: each queue's summary, its in-flight ids, then every ready record
/// in the order dequeue hands them out (consumes the state's ready records).
fn observe(s: &mut QueueState) -> Seen {
    let mut out = Vec::new();
    for info in s.infos() {
        let q = s.queue_mut(info.name.as_bytes()).unwrap();
        let mut flying: Vec<u64> = q
            .records()
            .map(|r| r.id)
            .filter(|id| q.is_in_flight(*id))
            .collect();
        flying.sort_unstable();
        // Attempts are carried (by a snapshot) only under a dead-letter rule.
        let attempts = if q.rules().dead_letter.is_some() {
            q.attempts_list()
        } else {
            Vec::new()
        };
        let tasks = (q.rules().clone(), q.delayed_dues(), attempts);
        let mut order = Vec::new();
        while let Some(r) = q.dequeue() {
            order.push((r.id, r.key, r.data.to_vec()));
        }
        out.push((info, flying, tasks, order));
    }
    out
}

fn run(prefix: Vec<Op>, body: Vec<Op>, snapshot: bool) -> Result<(), TestCaseError> {
    let mut online = build(&prefix);
    let mut batched = build(&prefix);
    if snapshot {
        let snap = batched.to_snapshot(7, 1);
        let tasks = batched.to_tasks();
        batched = QueueState::from_snapshot_with_tasks(&snap, &tasks).unwrap();
        nack_all(&mut online);
    }
    {
        let mut batch = batched.batch();
        for (i, op) in body.iter().enumerate() {
            let Some(bytes) = delta_bytes(op, &online) else {
                continue;
            };
            let lsn = Some(1000 + i as i64);
            let a = online.apply(lsn, &bytes);
            let b = batch.apply(lsn, &bytes);
            match (&a, &b) {
                (Ok(x), Ok(y)) => prop_assert_eq!(x, y),
                (Err(x), Err(y)) => {
                    prop_assert_eq!(x.to_string(), y.to_string());
                    prop_assert_eq!(format!("{x:?}"), format!("{y:?}"));
                    break;
                }
                _ => prop_assert!(false, "online {a:?} but batch {b:?} at {op:?}"),
            }
        }
    }
    prop_assert_eq!(observe(&mut online), observe(&mut batched));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, .. ProptestConfig::default() })]

    #[test]
    fn batch_replay_matches_online_apply(
        prefix in prop::collection::vec(prefix_op(), 0..40),
        body in prop::collection::vec(body_op(), 0..200),
        snapshot in any::<bool>(),
    ) {
        run(prefix, body, snapshot)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Long runs of adds and removes of random present records: exercises the compaction of
    /// removed records and the look-up after it.
    #[test]
    fn batch_replay_matches_online_apply_with_many_removals(
        body in prop::collection::vec(
            prop_oneof![
                5 => (-2i64..3, any::<u8>()).prop_map(|(k, m)| Op::Add(0, k, m)),
                3 => (0..4000usize).prop_map(|n| Op::Remove(0, n)),
                1 => Just(Op::Remove(0, 0)),
            ],
            0..2000,
        ),
    ) {
        run(Vec::new(), body, false)?;
    }
}

#[test]
fn a_failed_batch_leaves_the_state_the_deltas_before_built() {
    let mut s = QueueState::new();
    let add = |k| {
        Delta::AddRecord {
            name: vec![],
            key: k,
            message: vec![1],
        }
        .encode()
    };
    let mut batch = s.batch();
    assert_eq!(batch.apply(Some(1), &add(5)).unwrap(), Applied::Added(1));
    assert_eq!(batch.apply(Some(2), &add(2)).unwrap(), Applied::Added(2));
    let gone = Delta::RemoveRecord {
        name: vec![],
        id: 9,
    }
    .encode();
    let err = batch.apply(Some(3), &gone).unwrap_err();
    drop(batch);
    assert!(
        err.to_string().contains("record id 9 is not in queue"),
        "{err}"
    );
    let q = s.queue_mut(b"").unwrap();
    assert_eq!(q.count(), 2);
    assert_eq!(q.dequeue().unwrap().id, 2);
    assert_eq!(q.dequeue().unwrap().id, 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Enough adds to fill several chunks of the pending column, with removals scattered over
    /// all of them (whole chunks removed, half-removed chunks compacted, looked up after).
    #[test]
    fn batch_replay_matches_online_apply_across_chunks(
        body in prop::collection::vec(
            prop_oneof![
                6 => (-2i64..3, any::<u8>()).prop_map(|(k, m)| Op::Add(0, k, m)),
                4 => (0..6000usize).prop_map(|n| Op::Remove(0, n)),
                1 => Just(Op::Remove(0, 0)),
            ],
            3000..9000,
        ),
    ) {
        run(Vec::new(), body, false)?;
    }
}

/// Runs of deltas of one array queue, as most of a real log is (each delta names the queue the
/// one before named, so the batch takes its short way, `QueueState::apply_in_last_queue`): keys
/// in and out of the queue's range, removals of present and absent ids, bent deltas.
fn one_queue_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        20 => (-3i64..12, any::<u8>()).prop_map(|(k, m)| Op::Add(1, k, m)),
        10 => (0..40usize).prop_map(|n| Op::Remove(1, n)),
        1 => prop_oneof![Just(0u64), 0..60u64, Just(u64::MAX)].prop_map(|id| Op::RemoveId(1, id)),
        2 => (any::<bool>(), 0..24usize, any::<u8>(), -2i8..3)
            .prop_map(|(add, at, byte, change)| Op::Bent(1, add, at, byte, change)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn batch_replay_matches_online_apply_in_runs_of_one_queue(
        array in any::<bool>(),
        body in prop::collection::vec(one_queue_op(), 0..60),
        snapshot in any::<bool>(),
    ) {
        run(vec![Op::Create(1, array), Op::Add(1, 1, 1)], body, snapshot)?;
    }
}

/// A small deterministic generator (xorshift64*), so that the long test below is the same run
/// every time without a proptest case that would take seconds to shrink.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The unit tests of `state::batch` run its thresholds at small `cfg(test)` values; this one
/// runs the library as built for users (compaction after 4,096 removed slots, a column that
/// reserves the batch's bound once past 65,536 slots): 200,000 deltas of one queue, removals
/// both of the oldest record and of random ones, with a bound that is exact, too small and
/// unknown, in heap and array queues. Every delta's outcome and the final state must be the online apply's.
#[test]
fn batch_replay_matches_online_apply_at_the_production_thresholds() {
    const DELTAS: usize = 200_000;
    for (array, room) in [(false, DELTAS), (true, 70_000), (false, 0)] {
        {
            let create = Delta::CreateQueue {
                name: b"q".to_vec(),
                implementation: if array { IMPL_ARRAY } else { IMPL_HEAP },
                max_queue_size: -1,
                max_message_size: -1,
                key_range: array.then_some((0, 1023)),
            }
            .encode();
            let mut online = QueueState::new();
            let mut batched = QueueState::new();
            online.apply(Some(0), &create).unwrap();
            batched.apply(Some(0), &create).unwrap();
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ room as u64 ^ u64::from(array));
            // Present ids, oldest first from `front` on; random removals swap within the tail.
            let mut present: Vec<u64> = Vec::new();
            let mut front = 0usize;
            let mut removals = 0usize;
            {
                let mut batch = batched.batch();
                batch.expect_adds(room);
                for lsn in 1..=DELTAS as i64 {
                    let roll = rng.below(10);
                    let bytes = if roll < 7 || front == present.len() {
                        Delta::AddRecord {
                            name: b"q".to_vec(),
                            key: rng.below(1024) as i64,
                            message: vec![lsn as u8; rng.below(4)],
                        }
                        .encode()
                    } else {
                        let at = if roll < 9 {
                            front
                        } else {
                            front + rng.below(present.len() - front)
                        };
                        present.swap(front, at);
                        let id = present[front];
                        front += 1;
                        removals += 1;
                        Delta::RemoveRecord {
                            name: b"q".to_vec(),
                            id,
                        }
                        .encode()
                    };
                    let a = online.apply(Some(lsn), &bytes).unwrap();
                    let b = batch.apply(Some(lsn), &bytes).unwrap();
                    assert_eq!(a, b, "delta {lsn} (array {array}, room {room})");
                    if let Applied::Added(id) = a {
                        present.push(id);
                    }
                }
                // Did the run reach both thresholds? Past 65,536 live records (so the column
                // passed 65,536 slots) and many times 4,096 removals.
                assert!(present.len() - front > 1 << 16 && removals > 4 * 4096);
                // An id that is gone must be refused the same way after all the compactions.
                let gone = Delta::RemoveRecord {
                    name: b"q".to_vec(),
                    id: present[front / 2],
                }
                .encode();
                let lsn = Some(DELTAS as i64 + 1);
                let (a, b) = (online.apply(lsn, &gone), batch.apply(lsn, &gone));
                assert_eq!(format!("{a:?}"), format!("{b:?}"));
                assert!(a.is_err());
            }
            assert_eq!(
                observe(&mut online),
                observe(&mut batched),
                "array {array}, room {room}"
            );
        }
    }
}
