//! Clearing a queue's dead-letter rule forgets the counted deliveries, as setting one forgets
//! the counts kept in memory: the count is then in memory since that moment, and a restore
//! from the log and one from a snapshot agree on it. (The log's restore counted the Delivered
//! entries written while the rule held, the snapshot's did not: two restores of one base
//! disagreed on `attempts`.)

use std::path::Path;
use std::time::Duration;

use tflux_core::format::rules::{QueueRules, RulesChange};
use tflux_core::state::QueueConfig;
use tflux_core::store::Store;

const SETTINGS: &str = r#"{"DiskFullRatio": 1.0, "SnapshotCreationSegmentsThreshold": 0}"#;

fn open(base: &Path) -> Store {
    Store::open(base, Some(SETTINGS), false).unwrap()
}

/// Attempts of the next delivery of `jobs`, nacked at once so it stays for the next one.
fn next_attempts(store: &Store) -> u32 {
    let d = store
        .deliver(b"jobs", Some(Duration::ZERO), None)
        .unwrap()
        .unwrap();
    store.nack(b"jobs", d.record.id, Some(d.receipt)).unwrap();
    d.attempts
}

/// A base whose record was delivered twice under a dead-letter rule, which was then cleared.
fn base_with_a_cleared_rule(dir: &Path) {
    let store = open(dir);
    let rules = QueueRules {
        dead_letter: Some((b"dead".to_vec(), 5)),
        ..QueueRules::default()
    };
    store
        .create_queue_with_rules(b"jobs", QueueConfig::default(), &rules, false)
        .unwrap();
    store.enqueue_many(b"jobs", &[(1, b"a")]).unwrap();
    assert_eq!(next_attempts(&store), 1);
    assert_eq!(next_attempts(&store), 2);
    let clear = RulesChange {
        dead_letter: Some(None),
        ..RulesChange::default()
    };
    store.set_queue_rules(b"jobs", &clear).unwrap();
    // Counted in memory from here on.
    assert_eq!(next_attempts(&store), 1);
}

#[test]
fn a_restore_from_the_log_forgets_the_counts_of_a_cleared_rule() {
    let dir = tempfile::tempdir().unwrap();
    base_with_a_cleared_rule(dir.path());
    let store = open(dir.path());
    assert_eq!(next_attempts(&store), 1);
}

#[test]
fn a_restore_from_a_snapshot_and_one_from_the_log_agree() {
    let from_log = tempfile::tempdir().unwrap();
    base_with_a_cleared_rule(from_log.path());
    let from_snapshot = tempfile::tempdir().unwrap();
    base_with_a_cleared_rule(from_snapshot.path());
    assert!(open(from_snapshot.path()).snapshot().unwrap());
    let a = next_attempts(&open(from_log.path()));
    let b = next_attempts(&open(from_snapshot.path()));
    assert_eq!(a, b);
}
