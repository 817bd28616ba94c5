//! Regressions found by the reliability campaign (docs/reliability.md): fuzzing
//! (`rust/core/fuzz/`) and hostile input. Scenario: a snapshot may carry any UInt64 last id
//! (spec 4), and replay hands out `last id + 1` (spec 7), so a queue whose last id is
//! 2^64 - 1 must refuse the next AddRecord instead of wrapping to id 0.
//! Found by the `replay_model` fuzz target (reproducer kept in
//! `rust/core/fuzz/artifacts/replay_model/`): `Queue::add` incremented `last_id` unchecked, so it
//! panicked in debug builds and wrapped to id 0 in release builds. Fixed in 6f252f8.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tflux_core::format::delta::DeltaRef;
use tflux_core::format::snapshot::{QueueData, Snapshot};
use tflux_core::state::{Applied, QueueState};

fn state_with_last_id(last_id: u64) -> QueueState {
    let snapshot = Snapshot {
        last_index: 0,
        last_term: 1,
        queues: vec![QueueData {
            name: Vec::new(),
            implementation: 1,
            last_id,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
            records: vec![(last_id, 0, b"newest".to_vec())],
        }],
    };
    QueueState::from_snapshot(&snapshot).expect("a valid snapshot")
}

const ADD: DeltaRef<'static> = DeltaRef::AddRecord {
    name: b"",
    key: 0,
    message: b"x",
};

#[test]
fn add_record_below_the_largest_id_gets_the_next_id() {
    let mut state = state_with_last_id(u64::MAX - 1);
    let applied = state.apply_delta(Some(1), &ADD).unwrap();
    assert_eq!(applied, Applied::Added(u64::MAX));
}

#[test]
fn add_record_after_the_largest_id_is_a_replay_error_not_a_wrapped_id() {
    let mut state = state_with_last_id(u64::MAX);
    let outcome = catch_unwind(AssertUnwindSafe(|| state.apply_delta(Some(1), &ADD)));
    match outcome {
        Ok(Err(_)) => {}
        Ok(Ok(applied)) => panic!("AddRecord after id 2^64-1 was applied as {applied:?}"),
        Err(_) => panic!("AddRecord after id 2^64-1 panicked (overflow)"),
    }
}

/// A restore (a batch) from a snapshot whose last id is 2^64 - 2: the next AddRecord gets id
/// 2^64 - 1 and a RemoveRecord of that id removes it, exactly as the online apply (the
/// model) does. The pending column once kept "one past the last id" in a u64, which
/// overflowed for id 2^64 - 1: a panic in debug builds, and in release builds a column that
/// found none of its records, so the removal failed as a ReplayError the online apply never
/// raises.
#[test]
fn a_batch_adds_and_removes_the_largest_id_as_the_online_apply_does() {
    let remove = DeltaRef::RemoveRecord {
        name: b"",
        id: u64::MAX,
    };
    let mut online = state_with_last_id(u64::MAX - 1);
    assert_eq!(
        online.apply_delta(Some(1), &ADD).unwrap(),
        Applied::Added(u64::MAX)
    );
    assert_eq!(
        online.apply_delta(Some(2), &remove).unwrap(),
        Applied::Removed
    );
    let mut state = state_with_last_id(u64::MAX - 1);
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut batch = state.batch();
        let added = batch.apply_delta(Some(1), &ADD);
        let removed = batch.apply_delta(Some(2), &remove);
        (
            added.map_err(|e| e.to_string()),
            removed.map_err(|e| e.to_string()),
        )
    }));
    let (added, removed) = outcome.expect("the batch panicked (overflow)");
    assert_eq!(added, Ok(Applied::Added(u64::MAX)));
    assert_eq!(removed, Ok(Applied::Removed));
    let ids = |s: &QueueState| {
        let mut ids: Vec<u64> = s.queue(b"").unwrap().records().map(|r| r.id).collect();
        ids.sort_unstable();
        ids
    };
    assert_eq!(ids(&state), ids(&online));
    assert_eq!(ids(&state), vec![u64::MAX - 1]);
}
