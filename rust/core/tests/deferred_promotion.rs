//! A replayed Failed of a ready record that is not at the front of its heap leaves it deferred
//! (`state/tasks.rs`): a worker pool that nacks records with a delay out of key order, then a
//! restart, leaves as many deferred records as were waiting for their retry. Scenario (review
//! finding): every promotion scanned all of them, and a store promotes before every delivery
//! and, since `bring_due`, before every count, peek and stats: 100,000 deferred records made a
//! `count()` about 70x slower than 1,000 did (3.8 ms against 53 us a call, dev build), until
//! they came due. A promotion now scans them only when one may be due.

use tflux_core::format::delta::DeltaRef;
use tflux_core::state::QueueState;

const N: u64 = 200_000;
const LATER: i64 = 4_000_000_000_000; // unix ms, in 2096

fn replayed_with_deferred() -> QueueState {
    let mut s = QueueState::new();
    let mut lsn = 0;
    let mut apply = |s: &mut QueueState, d: DeltaRef<'_>| {
        lsn += 1;
        s.apply_delta(Some(lsn), &d).unwrap();
    };
    for _ in 0..=N {
        let add = DeltaRef::AddRecord {
            name: b"",
            key: 1,
            message: b"x",
        };
        apply(&mut s, add);
    }
    // Every record but the first fails, the newest first: none is at the front when it fails.
    for id in (2..=N + 1).rev() {
        let due = LATER + id as i64;
        apply(&mut s, DeltaRef::Failed { name: b"", id, due });
    }
    s
}

#[test]
fn a_promotion_does_not_scan_deferred_records_none_of_which_is_due() {
    let mut s = replayed_with_deferred();
    let q = s.queue_mut(b"").unwrap();
    assert_eq!(q.delayed_count(), N);
    assert_eq!(q.next_due(), Some(LATER + 2));
    for _ in 0..2_000 {
        assert_eq!(q.promote(LATER), 0);
    }
    // Before the bound, each of these scanned all 200,000 entries (seconds in all).
    assert_eq!(q.deferred_scans(), 0, "no promotion below the bound scans");
    assert_eq!(q.promote(LATER + 2), 1, "id 2 is due");
    assert_eq!(q.deferred_scans(), 1);
    assert_eq!(q.next_due(), Some(LATER + 3));
    assert_eq!(q.promote(LATER + 2), 0);
    assert_eq!(
        q.deferred_scans(),
        1,
        "the bound moved past the record promoted"
    );
}

#[test]
fn deferred_records_come_due_in_order_and_the_next_due_time_follows() {
    let mut s = replayed_with_deferred();
    let q = s.queue_mut(b"").unwrap();
    assert_eq!(q.promote(LATER + 11), 10, "ids 2..=11 are due");
    assert_eq!(q.next_due(), Some(LATER + 12));
    assert_eq!(q.count(), 11);
    let order: Vec<u64> = (0..11).map(|_| q.dequeue().unwrap().id).collect();
    assert_eq!(order, (1..=11).collect::<Vec<_>>());
    assert!(q.dequeue().is_none(), "the others are still deferred");
    assert_eq!(q.promote(i64::MAX), N - 10);
    assert_eq!(q.next_due(), None);
}
