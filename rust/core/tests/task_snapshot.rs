//! The snapshot's task layout (spec 12, docs/format.md "Task-queue deltas": marker
//! `B6 38 0F CB`): a state's rules, delayed records and counted deliveries round-trip; a state
//! with none of them is written in the old layout, byte for byte; the checksum covers the tasks
//! bytes; a tasks entry naming a queue or record the state does not hold, bad rules, or a Bool
//! other than 0/1 is corruption at its offset; old-layout readers' `decode` reads the queues.

use std::path::Path;

use tflux_core::format::delta::Delta;
use tflux_core::format::dialect::Dialect;
use tflux_core::format::rules::{QueueRules, BACKOFF_ONE};
use tflux_core::format::snapshot::{self, QueueData, QueueTasks, Snapshot};
use tflux_core::state::QueueState;
use tflux_core::Error;

fn snap() -> Snapshot {
    Snapshot {
        last_index: 41,
        last_term: 3,
        queues: vec![
            QueueData {
                name: vec![],
                implementation: 1,
                last_id: 0,
                max_queue_size: -1,
                max_message_size: -1,
                key_range: None,
                records: vec![],
            },
            QueueData {
                name: b"jobs".to_vec(),
                implementation: 1,
                last_id: 3,
                max_queue_size: -1,
                max_message_size: -1,
                key_range: None,
                records: vec![(1, 5, b"a".to_vec()), (2, 0, b"b".to_vec()), (3, 1, vec![])],
            },
        ],
    }
}

fn tasks() -> Vec<QueueTasks> {
    vec![QueueTasks {
        name: b"jobs".to_vec(),
        rules: QueueRules {
            dead_letter: Some((b"dead".to_vec(), 3)),
            retry_delay_ms: Some(100),
            retry_backoff: Some(2 * BACKOFF_ONE),
            retry_max_delay_ms: None,
            lease_ms: Some(30_000),
        },
        delayed: vec![(2, 1_765_000_000_000)],
        attempts: vec![(1, 2), (2, 1)],
    }]
}

fn path() -> &'static Path {
    Path::new("tflux.snapshot")
}

#[test]
fn a_task_snapshot_round_trips_and_old_readers_decode_read_its_queues() {
    let bytes = snapshot::encode_with_tasks(&snap(), &tasks()).unwrap();
    assert_eq!(&bytes[..4], &snapshot::TASK_MARKER);
    let (s, t) = snapshot::decode_full(&bytes, path(), Dialect::Spec).unwrap();
    assert_eq!((s, t), (snap(), tasks()));
    assert_eq!(snapshot::decode(&bytes, path()).unwrap(), snap());
}

#[test]
fn a_state_without_task_state_is_written_in_the_old_layout_byte_for_byte() {
    assert_eq!(
        snapshot::encode_with_tasks(&snap(), &[]).unwrap(),
        snapshot::encode(&snap()).unwrap()
    );
    let state = QueueState::from_snapshot(&snap()).unwrap();
    assert!(state.to_tasks().is_empty());
}

#[test]
fn the_state_restored_from_a_task_snapshot_holds_its_rules_delays_and_attempts() {
    let mut state = QueueState::from_snapshot_with_tasks(&snap(), &tasks()).unwrap();
    assert_eq!(state.to_tasks(), tasks());
    let q = state.queue_mut(b"jobs").unwrap();
    assert_eq!((q.count(), q.delayed_count()), (2, 1));
    assert_eq!(q.attempts_of(1), 2);
    // Ready order unchanged by the delayed record (id 2, key 0): key 1 then key 5.
    assert_eq!(q.dequeue().unwrap().id, 3);
    assert_eq!(q.promote(i64::MAX), 1);
    assert_eq!(q.dequeue().unwrap().id, 2);
}

#[test]
fn every_flipped_bit_of_the_tasks_bytes_is_refused() {
    let bytes = snapshot::encode_with_tasks(&snap(), &tasks()).unwrap();
    let plain = snapshot::encode(&snap()).unwrap();
    // The tasks Buffer starts where the wide state ends (plain is narrow: 8 bytes shorter).
    let tasks_at = plain.len() - 4 + 8;
    for at in tasks_at..bytes.len() {
        let mut bad = bytes.clone();
        bad[at] ^= 0x10;
        assert!(
            matches!(
                snapshot::decode_full(&bad, path(), Dialect::Spec),
                Err(Error::Corruption { .. })
            ),
            "flip at {at}"
        );
    }
}

#[test]
fn a_tasks_entry_the_state_does_not_back_is_corruption_at_the_entry() {
    let cases: [(&str, QueueTasks); 3] = [
        (
            "not one of its records",
            QueueTasks {
                delayed: vec![(9, 0)],
                ..tasks()[0].clone()
            },
        ),
        (
            "does not hold",
            QueueTasks {
                name: b"other".to_vec(),
                rules: QueueRules::default(),
                delayed: vec![],
                attempts: vec![(1, 1)],
            },
        ),
        (
            "not strictly ascending",
            QueueTasks {
                attempts: vec![(2, 1), (1, 1)],
                ..tasks()[0].clone()
            },
        ),
    ];
    let plain = snapshot::encode(&snap()).unwrap();
    let entry_at = (plain.len() - 4 + 8) + 4 + 4;
    for (want, t) in cases {
        let bytes = snapshot::encode_with_tasks(&snap(), &[t]).unwrap();
        match snapshot::decode_full(&bytes, path(), Dialect::Spec) {
            Err(Error::Corruption { offset, reason, .. }) => {
                assert!(reason.contains(want), "{reason}");
                assert_eq!(offset, Some(entry_at as u64), "{reason}");
            }
            other => panic!("{want}: {other:?}"),
        }
    }
    // Rules the state would refuse are refused at write time.
    let mut bad = tasks();
    bad[0].rules.retry_backoff = Some(1);
    assert!(snapshot::encode_with_tasks(&snap(), &bad).is_err());
    let _ = Delta::DeleteQueue { name: vec![] };
}
