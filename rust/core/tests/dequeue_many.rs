//! `Request::DequeueMany` (`Store::deliver_many_logged`): the counted deliveries of a batch on a
//! queue with a dead-letter rule are logged (a Delivered each, in one write) and handed back to
//! the caller as one `Logged` for the group commit; the owner caps `n`.

mod common;

use std::time::Duration;

use common::{create_counted, ruled_store, DURABLE};
use tflux_core::state::QueueConfig;
use tflux_core::store::{Reply, Request, Store};

fn take(store: &Store, queue: &'static [u8], n: u64) -> (Vec<(u64, u32)>, Option<i64>) {
    let request = Request::DequeueMany {
        queue,
        n,
        timeout: Some(Duration::ZERO),
        lease: None,
    };
    let (reply, logged) = store.execute_logged(&request).unwrap();
    let Reply::Tasks(got) = reply else {
        panic!("{reply:?}");
    };
    let lsn = logged.lsn();
    store.make_durable(logged).unwrap();
    (got.iter().map(|d| (d.record.id, d.attempts)).collect(), lsn)
}

#[test]
fn a_counted_batch_comes_back_with_one_write_holding_a_delivered_each() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = ruled_store(dir.path(), &[(1, b"a"), (2, b"b"), (3, b"c")]);
        let before = store.log_bounds().unwrap().1;
        let (got, lsn) = take(&store, b"jobs", 5);
        assert_eq!(got, vec![(1, 1), (2, 1), (3, 1)]);
        assert_eq!(lsn, Some(before + 3), "three Delivered, handed back");
        assert_eq!(store.log_bounds().unwrap().1, before + 3);
        assert_eq!(take(&store, b"jobs", 5), (vec![], None));
        store.close().unwrap();
    }
    // Reopened: the three deliveries were counted.
    let store = Store::open(dir.path(), Some(DURABLE), false).unwrap();
    assert_eq!(take(&store, b"jobs", 2).0, vec![(1, 2), (2, 2)]);
}

#[test]
fn a_batch_of_a_queue_without_rules_writes_nothing_and_n_is_checked_and_capped() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Some(DURABLE), false).unwrap();
    store
        .create_queue_as(b"plain", QueueConfig::default(), false)
        .unwrap();
    let items: Vec<(i64, &[u8])> = (0..1100).map(|_| (1, &b"x"[..])).collect();
    store.enqueue_many(b"plain", &items).unwrap();
    let refused = store.execute_logged(&Request::DequeueMany {
        queue: b"plain",
        n: 0,
        timeout: Some(Duration::ZERO),
        lease: None,
    });
    assert!(refused.unwrap_err().to_string().contains("n must be >= 1"));
    let (got, lsn) = take(&store, b"plain", u64::MAX);
    assert_eq!(got.len(), 1024, "capped");
    assert_eq!(lsn, None);
    assert_eq!(take(&store, b"plain", u64::MAX).0.len(), 1100 - 1024);
}

/// Review finding: the byte bound was checked before a record was taken, not with it, so a
/// batch reached 16 MiB plus its last record (two records that each fit a reply made one that
/// did not: the client got an error and the records stayed in flight for its session).
#[test]
fn a_batch_takes_no_record_that_would_carry_its_payloads_past_16_mib_unless_it_is_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Some(DURABLE), false).unwrap();
    store
        .create_queue_as(b"plain", QueueConfig::default(), false)
        .unwrap();
    create_counted(&store, b"counted");
    let six = vec![7u8; 6 << 20];
    let twenty = vec![7u8; 20 << 20];
    for queue in [&b"plain"[..], &b"counted"[..]] {
        let items: Vec<(i64, &[u8])> = vec![(1, &six[..]), (2, &six), (3, &six), (4, &twenty)];
        store.enqueue_many(queue, &items).unwrap();
    }
    for queue in [&b"plain"[..], &b"counted"[..]] {
        let ids = |got: Vec<(u64, u32)>| got.into_iter().map(|(id, _)| id).collect::<Vec<_>>();
        assert_eq!(
            ids(take(&store, queue, 10).0),
            vec![1, 2],
            "12 MiB; 18 would pass 16"
        );
        assert_eq!(
            ids(take(&store, queue, 10).0),
            vec![3],
            "6 + 20 MiB would pass 16"
        );
        assert_eq!(
            ids(take(&store, queue, 10).0),
            vec![4],
            "a larger record goes alone"
        );
    }
}
