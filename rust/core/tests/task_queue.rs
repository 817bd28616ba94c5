//! The task-queue layer of issue 44 at the Store level (spec 12): queue rules logged with the
//! queue and carried by replay and snapshot; delayed records that a waiting dequeue receives
//! when they come due; nack delays and the retry rule; dead-lettering after N deliveries,
//! exact across reopen and when the taker is dropped without an ack (a process killed
//! mid-record); purge, extend, stats; the checks that run before anything is written; the
//! taskflux dialect's refusals; and a queue without rules writing only the four old deltas.

use std::path::Path;
use std::time::{Duration, Instant};

use tflux_core::error::Error;
use tflux_core::format::delta::{self, DeltaRef};
use tflux_core::format::dialect::Dialect;
use tflux_core::format::rules::{QueueRules, RulesChange, BACKOFF_ONE};
use tflux_core::log::{Log, LogOptions};
use tflux_core::state::QueueConfig;
use tflux_core::store::{now_ms, Store, StoreOptions};

const SETTINGS: &str = r#"{"DiskFullRatio": 1.0, "SnapshotCreationSegmentsThreshold": 0}"#;

fn open(base: &Path) -> Store {
    Store::open(base, Some(SETTINGS), false).unwrap()
}

fn dead_letter(n: i32) -> QueueRules {
    QueueRules {
        dead_letter: Some((b"dead".to_vec(), n)),
        ..QueueRules::default()
    }
}

fn last_lsn(store: &Store) -> i64 {
    store.log_bounds().unwrap().1
}

/// The kind names of every delta in the base's log.
fn kinds(base: &Path) -> Vec<&'static str> {
    let opts = LogOptions {
        readonly: true,
        ..LogOptions::default()
    };
    let mut log = Log::open(base.join("data/log"), opts).unwrap();
    let last = log.last_index();
    let mut out = Vec::new();
    let mut at = log.start_index();
    while at <= last {
        for e in log.read(at, None).unwrap() {
            out.push(delta::decode(&e.data).unwrap().kind_name());
            at = e.lsn + 1;
        }
    }
    out
}

#[test]
fn rules_set_at_create_change_only_where_named_and_survive_replay_and_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let rules = QueueRules {
        dead_letter: Some((b"dead".to_vec(), 5)),
        retry_delay_ms: Some(1000),
        retry_backoff: Some(2 * BACKOFF_ONE),
        retry_max_delay_ms: Some(300_000),
        lease_ms: Some(30_000),
    };
    assert!(store
        .create_queue_with_rules(b"jobs", QueueConfig::default(), &rules, false)
        .unwrap());
    // The same again with exist_ok: nothing written.
    let before = last_lsn(&store);
    assert!(!store
        .create_queue_with_rules(b"jobs", QueueConfig::default(), &rules, true)
        .unwrap());
    assert_eq!(last_lsn(&store), before);
    store
        .set_queue_rules(
            b"jobs",
            &RulesChange {
                lease_ms: Some(Some(60_000)),
                dead_letter: Some(None),
                ..RulesChange::default()
            },
        )
        .unwrap();
    let want = QueueRules {
        dead_letter: None,
        lease_ms: Some(60_000),
        ..rules.clone()
    };
    assert_eq!(store.queue_rules(b"jobs").unwrap(), want);
    store.close().unwrap();
    let store = open(dir.path());
    assert_eq!(store.queue_rules(b"jobs").unwrap(), want, "replayed");
    assert!(store.snapshot().unwrap());
    store.close().unwrap();
    let store = open(dir.path());
    assert_eq!(
        store.queue_rules(b"jobs").unwrap(),
        want,
        "from the snapshot"
    );
}

#[test]
fn bad_rules_and_delays_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_queue(b"jobs", QueueConfig::default()).unwrap();
    let before = last_lsn(&store);
    let bad = |queue: &[u8]| {
        [
            QueueRules {
                retry_delay_ms: Some(-1),
                ..QueueRules::default()
            },
            QueueRules {
                retry_backoff: Some(BACKOFF_ONE / 2),
                ..QueueRules::default()
            },
            dead_letter(0),
            QueueRules {
                dead_letter: Some((queue.to_vec(), 3)),
                ..QueueRules::default()
            },
        ]
    };
    for rules in &bad(b"q") {
        let e = store
            .create_queue_with_rules(b"q", QueueConfig::default(), rules, false)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }
    for rules in &bad(b"jobs") {
        let e = store
            .set_queue_rules(b"jobs", &rules.as_change())
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }
    store.enqueue(b"jobs", 1, b"x").unwrap();
    let (r, receipt) = store
        .dequeue(b"jobs", Some(Duration::ZERO))
        .unwrap()
        .unwrap();
    let before_nack = last_lsn(&store);
    assert!(matches!(
        store.nack_delayed(b"jobs", r.id, Some(receipt), Some(-5)),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(last_lsn(&store), before_nack);
    assert!(store.queue_rules(b"q").is_err());
    assert_eq!(before + 1, before_nack);
}

#[test]
fn a_delayed_record_is_not_delivered_early_and_a_waiting_dequeue_wakes_when_it_is_due() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.enqueue(b"", 5, b"ready").unwrap();
    let due = now_ms() + 300;
    store.enqueue_many_at(b"", &[(0, b"later")], due).unwrap();
    // Order among ready records unchanged: the ready one (key 5) first, though key 0 is smaller.
    let (r, receipt) = store.dequeue(b"", Some(Duration::ZERO)).unwrap().unwrap();
    assert_eq!(&*r.data, b"ready");
    store.ack(b"", r.id, Some(receipt)).unwrap();
    assert!(store.dequeue(b"", Some(Duration::ZERO)).unwrap().is_none());
    assert_eq!(store.stats(b"").unwrap().delayed, 1);
    let t = Instant::now();
    let d = store
        .deliver(b"", Some(Duration::from_secs(5)), None)
        .unwrap()
        .unwrap();
    assert!(now_ms() >= due, "delivered before its time");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(&*d.record.data, b"later");
    assert_eq!(d.attempts, 1);
}

#[test]
fn a_delayed_record_stays_delayed_across_a_reopen_and_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .enqueue_many_at(b"", &[(1, b"a"), (2, b"b")], now_ms() + 60_000)
        .unwrap();
    store.enqueue(b"", 9, b"now").unwrap();
    store.close().unwrap();
    for snapshot in [false, true] {
        let store = open(dir.path());
        if snapshot {
            assert!(store.snapshot().unwrap());
        }
        let s = store.stats(b"").unwrap();
        assert_eq!((s.ready, s.delayed), (1, 2), "snapshot {snapshot}");
        store.close().unwrap();
    }
}

#[test]
fn a_nack_with_a_delay_or_the_retry_rule_makes_the_record_ready_later() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let rules = QueueRules {
        retry_delay_ms: Some(200),
        retry_backoff: Some(2 * BACKOFF_ONE),
        ..QueueRules::default()
    };
    store
        .create_queue_with_rules(b"jobs", QueueConfig::default(), &rules, false)
        .unwrap();
    store.enqueue(b"jobs", 1, b"x").unwrap();
    let d = store
        .deliver(b"jobs", Some(Duration::ZERO), None)
        .unwrap()
        .unwrap();
    let t = now_ms();
    store.nack(b"jobs", d.record.id, Some(d.receipt)).unwrap();
    assert!(store
        .dequeue(b"jobs", Some(Duration::ZERO))
        .unwrap()
        .is_none());
    let d = store
        .deliver(b"jobs", Some(Duration::from_secs(5)), None)
        .unwrap()
        .unwrap();
    assert!(now_ms() - t >= 200);
    assert_eq!(d.attempts, 2);
    // The second failure waits 200 x 2 ms; an explicit 0 is ready at once.
    store
        .nack_delayed(b"jobs", d.record.id, Some(d.receipt), Some(0))
        .unwrap();
    let d = store
        .deliver(b"jobs", Some(Duration::ZERO), None)
        .unwrap()
        .unwrap();
    assert_eq!(d.attempts, 3);
}

#[test]
fn a_poison_record_reaches_the_dead_letter_queue_after_n_nacked_deliveries() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .create_queue_with_rules(b"jobs", QueueConfig::default(), &dead_letter(3), false)
        .unwrap();
    store.enqueue(b"jobs", 1, b"poison").unwrap();
    for n in 1..=3 {
        let d = store
            .deliver(b"jobs", Some(Duration::ZERO), None)
            .unwrap()
            .unwrap();
        assert_eq!(d.attempts, n);
        store.nack(b"jobs", d.record.id, Some(d.receipt)).unwrap();
    }
    assert!(store
        .dequeue(b"jobs", Some(Duration::ZERO))
        .unwrap()
        .is_none());
    let (r, _) = store
        .dequeue(b"dead", Some(Duration::ZERO))
        .unwrap()
        .unwrap();
    assert_eq!(&*r.data, b"poison");
    assert_eq!(store.stats(b"jobs").unwrap().dead_lettered, 1);
}

#[test]
fn a_taker_dropped_without_an_ack_counts_and_the_record_dead_letters_after_n_with_exact_attempts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store
            .create_queue_with_rules(b"jobs", QueueConfig::default(), &dead_letter(3), false)
            .unwrap();
        store.enqueue(b"jobs", 1, b"kills its taker").unwrap();
    }
    for n in 1..=3 {
        // The taker takes the record and dies: nothing settles the delivery.
        let store = open(dir.path());
        let d = store
            .deliver(b"jobs", Some(Duration::ZERO), None)
            .unwrap()
            .unwrap();
        assert_eq!(d.attempts, n, "attempts are exact across the reopen");
        drop(store);
    }
    let store = open(dir.path());
    assert!(store
        .dequeue(b"jobs", Some(Duration::ZERO))
        .unwrap()
        .is_none());
    let (r, _) = store
        .dequeue(b"dead", Some(Duration::ZERO))
        .unwrap()
        .unwrap();
    assert_eq!(&*r.data, b"kills its taker");
}

#[test]
fn purge_removes_ready_and_delayed_records_and_keeps_those_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store
        .enqueue_many(b"", &[(1, b"a"), (2, b"b"), (3, b"c")])
        .unwrap();
    store
        .enqueue_many_at(b"", &[(0, b"later")], now_ms() + 60_000)
        .unwrap();
    let (r, receipt) = store.dequeue(b"", Some(Duration::ZERO)).unwrap().unwrap();
    assert_eq!(store.purge(b"").unwrap(), 3);
    assert_eq!(store.purge(b"").unwrap(), 0);
    let s = store.stats(b"").unwrap();
    assert_eq!((s.ready, s.delayed, s.in_flight), (0, 0, 1));
    store.ack(b"", r.id, Some(receipt)).unwrap();
    store.close().unwrap();
    let store = open(dir.path());
    assert_eq!(store.stats(b"").unwrap().ready, 0, "replayed");
}

#[test]
fn extend_moves_a_lease_and_refuses_a_delivery_that_is_over() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.enqueue(b"", 1, b"long job").unwrap();
    let (r, receipt) = store
        .dequeue_leased(b"", Some(Duration::ZERO), Some(Duration::from_millis(100)))
        .unwrap()
        .unwrap();
    store
        .extend(b"", r.id, Some(receipt), Duration::from_secs(30))
        .unwrap();
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(
        store.stats(b"").unwrap().in_flight,
        1,
        "the lease was extended"
    );
    store.ack(b"", r.id, Some(receipt)).unwrap();
    assert!(matches!(
        store.extend(b"", r.id, Some(receipt), Duration::from_secs(1)),
        Err(Error::NotInFlight { .. })
    ));
    let s = store.stats(b"").unwrap();
    assert_eq!((s.enqueued, s.acked, s.expired), (1, 1, 0));
}

#[test]
fn the_taskflux_dialect_refuses_every_task_queue_argument_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let opts = StoreOptions {
        dialect: Some(Dialect::Taskflux),
        ..StoreOptions::default()
    };
    let store = Store::open_with(dir.path(), Some(SETTINGS), opts).unwrap();
    store.create_queue(b"jobs", QueueConfig::default()).unwrap();
    store.enqueue(b"jobs", 1, b"x").unwrap();
    let before = last_lsn(&store);
    let refused = |r: Result<(), Error>| match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("taskflux"), "{m}"),
        other => panic!("{other:?}"),
    };
    refused(
        store
            .create_queue_with_rules(b"q", QueueConfig::default(), &dead_letter(2), false)
            .map(|_| ()),
    );
    refused(store.set_queue_rules(b"jobs", &dead_letter(2).as_change()));
    refused(
        store
            .enqueue_many_at(b"jobs", &[(1, b"y")], now_ms() + 60_000)
            .map(|_| ()),
    );
    refused(store.purge(b"jobs").map(|_| ()));
    let (r, receipt) = store
        .dequeue(b"jobs", Some(Duration::ZERO))
        .unwrap()
        .unwrap();
    refused(store.nack_delayed(b"jobs", r.id, Some(receipt), Some(1000)));
    assert_eq!(last_lsn(&store), before);
}

#[test]
fn a_queue_without_rules_writes_only_the_four_old_deltas_and_the_old_snapshot_layout() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.create_queue(b"jobs", QueueConfig::default()).unwrap();
    store
        .enqueue_many(b"jobs", &[(1, b"a"), (2, b"b")])
        .unwrap();
    for _ in 0..3 {
        let d = store
            .deliver(b"jobs", Some(Duration::ZERO), None)
            .unwrap()
            .unwrap();
        store.nack(b"jobs", d.record.id, Some(d.receipt)).unwrap();
    }
    let d = store
        .deliver(b"jobs", Some(Duration::ZERO), None)
        .unwrap()
        .unwrap();
    assert_eq!(d.attempts, 4, "counted in memory");
    store.ack(b"jobs", d.record.id, Some(d.receipt)).unwrap();
    let k = kinds(dir.path());
    assert!(
        k.iter()
            .all(|k| ["CreateQueue", "AddRecord", "RemoveRecord"].contains(k)),
        "{k:?}"
    );
    assert!(store.snapshot().unwrap());
    let bytes = std::fs::read(dir.path().join("data/tflux.snapshot")).unwrap();
    let state = store
        .with_state(|s| (s.to_snapshot(0, 0), s.to_tasks()))
        .unwrap();
    assert!(state.1.is_empty());
    assert_eq!(&bytes[..4], &tflux_core::format::snapshot::MARKER);
    let _ = DeltaRef::DeleteQueue { name: b"" };
}

#[test]
fn the_dead_letter_setting_becomes_the_queues_logged_rule_at_create_and_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let with_rule = r#"{"DiskFullRatio": 1.0, "DeadLetter": {"jobs": {"Queue": "dlq", "MaxNacks": 2}, "old": {"Queue": "dlq", "MaxNacks": 4}}}"#;
    {
        let store = open(dir.path());
        store.create_queue(b"old", QueueConfig::default()).unwrap();
    }
    let store = Store::open(dir.path(), Some(with_rule), false).unwrap();
    store.create_queue(b"jobs", QueueConfig::default()).unwrap();
    assert_eq!(store.queue_rules(b"jobs").unwrap(), {
        let mut r = dead_letter(2);
        r.dead_letter = Some((b"dlq".to_vec(), 2));
        r
    });
    assert_eq!(
        store.queue_rules(b"old").unwrap().dead_letter,
        Some((b"dlq".to_vec(), 4))
    );
    store.close().unwrap();
    // Logged: every later open obeys it, with or without the setting.
    let store = open(dir.path());
    assert_eq!(
        store.queue_rules(b"jobs").unwrap().dead_letter,
        Some((b"dlq".to_vec(), 2))
    );
    store.enqueue(b"jobs", 1, b"poison").unwrap();
    for _ in 0..2 {
        let d = store
            .deliver(b"jobs", Some(Duration::ZERO), None)
            .unwrap()
            .unwrap();
        store.nack(b"jobs", d.record.id, Some(d.receipt)).unwrap();
    }
    assert_eq!(store.stats(b"dlq").unwrap().ready, 1);
}
