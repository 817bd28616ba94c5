//! The queue state machine against a sorted-list model: smallest key first, FIFO among equal
//! keys, ids never reused, removal by id anywhere in the queue, nack restoring the position.

use proptest::prelude::*;
use tflux_core::format::delta::DeltaRef;
use tflux_core::state::{QueueConfig, QueueState, IMPL_ARRAY, IMPL_HEAP};
use tflux_core::Error;

fn create(state: &mut QueueState, name: &[u8], implementation: i32, range: Option<(i64, i64)>) {
    let d = DeltaRef::CreateQueue {
        name,
        implementation,
        max_queue_size: -1,
        max_message_size: -1,
        key_range: range,
    };
    state.apply_delta(Some(0), &d).unwrap();
}

#[derive(Debug, Clone)]
enum Op {
    Add(i64),
    /// Remove the n-th present record (modulo).
    Remove(usize),
    Dequeue,
    /// Nack the n-th in-flight record.
    Nack(usize),
}

fn ops(keys: std::ops::Range<i64>) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            4 => keys.prop_map(Op::Add),
            2 => any::<usize>().prop_map(Op::Remove),
            2 => Just(Op::Dequeue),
            1 => any::<usize>().prop_map(Op::Nack),
        ],
        1..120,
    )
}

fn run_model(
    implementation: i32,
    range: Option<(i64, i64)>,
    scale: i64,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let mut state = QueueState::new();
    create(&mut state, b"q", implementation, range);
    // Model: ready records as (key, id), in-flight ids, next id.
    let mut ready: Vec<(i64, u64)> = Vec::new();
    let mut flight: Vec<(i64, u64)> = Vec::new();
    let mut next_id = 1u64;
    for op in ops {
        match op {
            Op::Add(k) => {
                let key = k * scale;
                let msg = key.to_be_bytes();
                state
                    .apply_delta(
                        None,
                        &DeltaRef::AddRecord {
                            name: b"q",
                            key,
                            message: &msg,
                        },
                    )
                    .unwrap();
                ready.push((key, next_id));
                next_id += 1;
            }
            Op::Remove(n) => {
                let all: Vec<(i64, u64)> = ready.iter().chain(flight.iter()).copied().collect();
                if all.is_empty() {
                    let r = state.apply_delta(
                        Some(9),
                        &DeltaRef::RemoveRecord {
                            name: b"q",
                            id: next_id,
                        },
                    );
                    let is_replay_9 = matches!(r, Err(Error::Replay { lsn: Some(9), .. }));
                    prop_assert!(is_replay_9);
                    continue;
                }
                let (_, id) = all[n % all.len()];
                state
                    .apply_delta(None, &DeltaRef::RemoveRecord { name: b"q", id })
                    .unwrap();
                ready.retain(|r| r.1 != id);
                flight.retain(|r| r.1 != id);
                // Removing it twice is a replay error.
                let again = state.apply_delta(Some(3), &DeltaRef::RemoveRecord { name: b"q", id });
                prop_assert!(again.is_err());
            }
            Op::Dequeue => {
                ready.sort();
                let got = state
                    .queue_mut(b"q")
                    .unwrap()
                    .dequeue()
                    .map(|r| (r.key, r.id, r.data.to_vec()));
                if ready.is_empty() {
                    prop_assert!(got.is_none());
                } else {
                    let want = ready.remove(0);
                    let (key, id, data) = got.unwrap();
                    prop_assert_eq!((key, id), want);
                    prop_assert_eq!(data, key.to_be_bytes().to_vec());
                    flight.push(want);
                }
            }
            Op::Nack(n) => {
                if flight.is_empty() {
                    continue;
                }
                let r = flight.remove(n % flight.len());
                prop_assert!(state.queue_mut(b"q").unwrap().nack(r.1));
                ready.push(r);
            }
        }
        let q = state.queue(b"q").unwrap();
        prop_assert_eq!(q.count(), ready.len() as u64);
        prop_assert_eq!(q.in_flight_count(), flight.len() as u64);
        prop_assert_eq!(q.last_id(), next_id - 1);
        let mut want = ready.clone();
        want.sort();
        let got: Vec<(i64, u64)> = q.ready_in_order().iter().map(|r| (r.key, r.id)).collect();
        prop_assert_eq!(got, want);
    }
    // A snapshot round trip keeps everything, in-flight records becoming ready.
    let snap = state.to_snapshot(10, 1);
    let restored = QueueState::from_snapshot(&snap).unwrap();
    let q = restored.queue(b"q").unwrap();
    let mut want: Vec<(i64, u64)> = ready.iter().chain(flight.iter()).copied().collect();
    want.sort();
    let got: Vec<(i64, u64)> = q.ready_in_order().iter().map(|r| (r.key, r.id)).collect();
    prop_assert_eq!(got, want);
    prop_assert_eq!(q.last_id(), next_id - 1);
    Ok(())
}

proptest! {
    #[test]
    fn heap_queue_matches_a_sorted_list(ops in ops(-5..5)) {
        run_model(IMPL_HEAP, None, 1, ops)?;
    }

    #[test]
    fn array_queue_matches_a_sorted_list(ops in ops(-5..5)) {
        run_model(IMPL_ARRAY, Some((-5, 5)), 1, ops)?;
    }

    #[test]
    fn array_queue_over_a_huge_sparse_range_matches(ops in ops(-5..5)) {
        run_model(IMPL_ARRAY, Some((-(1 << 62), 1 << 62)), 1 << 59, ops)?;
    }
}

#[test]
fn replay_rules_name_the_lsn() {
    let mut s = QueueState::new();
    create(&mut s, b"jobs", IMPL_HEAP, None);
    let cases: Vec<DeltaRef<'_>> = vec![
        DeltaRef::CreateQueue {
            name: b"jobs",
            implementation: 1,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
        },
        DeltaRef::CreateQueue {
            name: b"x",
            implementation: 3,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
        },
        DeltaRef::CreateQueue {
            name: b"x",
            implementation: 2,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
        },
        DeltaRef::CreateQueue {
            name: b"x",
            implementation: 2,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: Some((5, 1)),
        },
        DeltaRef::DeleteQueue { name: b"" },
        DeltaRef::DeleteQueue { name: b"nope" },
        DeltaRef::AddRecord {
            name: b"nope",
            key: 1,
            message: b"",
        },
        DeltaRef::RemoveRecord {
            name: b"jobs",
            id: 1,
        },
    ];
    for (i, d) in cases.iter().enumerate() {
        match s.apply_delta(Some(100 + i as i64), d) {
            Err(Error::Replay { lsn, .. }) => assert_eq!(lsn, Some(100 + i as i64), "{d:?}"),
            other => panic!("{d:?}: expected a replay error, got {other:?}"),
        }
    }
    create(&mut s, b"arr", IMPL_ARRAY, Some((0, 9)));
    let outside = DeltaRef::AddRecord {
        name: b"arr",
        key: 10,
        message: b"",
    };
    assert!(matches!(
        s.apply_delta(Some(7), &outside),
        Err(Error::Replay { lsn: Some(7), .. })
    ));
    // Nothing above changed the state.
    assert_eq!(s.len(), 3);
}

#[test]
fn policies_are_checked_for_clients_only() {
    let mut s = QueueState::new();
    let d = DeltaRef::CreateQueue {
        name: b"q",
        implementation: 2,
        max_queue_size: 1,
        max_message_size: 3,
        key_range: Some((0, 9)),
    };
    s.apply_delta(None, &d).unwrap();
    assert!(s.check_enqueue(b"q", 0, 3).is_ok());
    assert!(matches!(
        s.check_enqueue(b"q", 0, 4),
        Err(Error::Policy {
            policy: "max_message_size",
            ..
        })
    ));
    assert!(matches!(
        s.check_enqueue(b"q", 10, 1),
        Err(Error::Policy {
            policy: "key_range",
            ..
        })
    ));
    s.apply_delta(
        None,
        &DeltaRef::AddRecord {
            name: b"q",
            key: 0,
            message: b"abcd",
        },
    )
    .unwrap();
    assert!(matches!(
        s.check_enqueue(b"q", 0, 1),
        Err(Error::Policy {
            policy: "max_queue_size",
            ..
        })
    ));
    // In-flight records do not count against max queue size.
    s.queue_mut(b"q").unwrap().dequeue().unwrap();
    assert!(s.check_enqueue(b"q", 0, 1).is_ok());
    assert!(matches!(
        s.check_enqueue(b"nope", 0, 1),
        Err(Error::NoSuchQueue { .. })
    ));
    let cfg = QueueConfig {
        implementation: IMPL_ARRAY,
        key_range: None,
        ..QueueConfig::default()
    };
    assert!(s.check_create(b"z", &cfg).is_err());
    assert!(matches!(
        s.check_create(b"q", &QueueConfig::default()),
        Err(Error::QueueExists { .. })
    ));
    assert!(s
        .check_create(b"bad name", &QueueConfig::default())
        .is_err());
}

#[test]
fn ids_never_wrap_around() {
    use tflux_core::format::snapshot::{QueueData, Snapshot};
    let snap = Snapshot {
        last_index: 0,
        last_term: 1,
        queues: vec![QueueData {
            name: vec![],
            implementation: IMPL_HEAP,
            last_id: u64::MAX,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
            records: vec![(u64::MAX, 0, b"last".to_vec())],
        }],
    };
    let mut s = QueueState::from_snapshot(&snap).unwrap();
    assert!(matches!(
        s.check_enqueue(b"", 0, 1),
        Err(Error::Policy { policy: "ids", .. })
    ));
    let add = DeltaRef::AddRecord {
        name: b"",
        key: 0,
        message: b"",
    };
    assert!(matches!(
        s.apply_delta(Some(5), &add),
        Err(Error::Replay { lsn: Some(5), .. })
    ));
    assert_eq!(s.queue(b"").unwrap().last_id(), u64::MAX);
    assert_eq!(s.queue(b"").unwrap().count(), 1);
}
