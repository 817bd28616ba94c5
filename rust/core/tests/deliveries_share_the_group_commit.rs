//! A client's dequeue of a queue with a dead-letter rule logs its delivery (Delivered). The
//! owner's loop serves it through `Store::execute_logged`, which must hand that write back
//! (`Logged`) instead of waiting for its fsync itself: the loop then answers a whole batch of
//! clients after one group commit. Waiting inside made the loop fsync once per delivery and
//! serve no one meanwhile (4+4 processes with the rule ran at 0.3x the shape without it).

mod common;

use std::time::Duration;

use common::ruled_store;
use tflux_core::state::QueueConfig;
use tflux_core::store::{Reply, Request, Store};

#[test]
fn a_counted_delivery_comes_back_with_its_write_for_the_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = ruled_store(dir.path(), &[(1, b"a"), (2, b"b")]);
    let before = store.log_bounds().unwrap().1;
    for request in [
        Request::Dequeue {
            queue: b"jobs",
            timeout: Some(Duration::ZERO),
            lease: None,
        },
        Request::Deliver {
            queue: b"jobs",
            timeout: Some(Duration::ZERO),
            lease: None,
        },
    ] {
        let (reply, logged) = store.execute_logged(&request).unwrap();
        assert!(
            matches!(reply, Reply::Delivery(Some(_)) | Reply::Task(Some(_))),
            "{reply:?}"
        );
        let lsn = logged.lsn().expect("the Delivered write is handed back");
        assert!(lsn > before);
        store.make_durable(logged).unwrap();
    }
}

#[test]
fn a_delivery_of_a_queue_without_rules_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Some(r#"{"DiskFullRatio": 1.0}"#), false).unwrap();
    store
        .create_queue_as(b"plain", QueueConfig::default(), false)
        .unwrap();
    store.enqueue_many(b"plain", &[(1, b"a")]).unwrap();
    let (reply, logged) = store
        .execute_logged(&Request::Dequeue {
            queue: b"plain",
            timeout: Some(Duration::ZERO),
            lease: None,
        })
        .unwrap();
    assert!(matches!(reply, Reply::Delivery(Some(_))), "{reply:?}");
    assert_eq!(logged.lsn(), None);
}
