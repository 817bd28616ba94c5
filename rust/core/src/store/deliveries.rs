//! What the store knows about deliveries and the log does not record (docs/format.md,
//! "Deliveries"): the receipt of each in-flight record's delivery, the lease (visibility
//! timeout) of each leased one and how often each record was nacked. Both live in memory only: after a restart every un-acked record is
//! ready again with no lease and no nacks counted, as spec section 7 wants.

use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

/// What happened to one queue since the store opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub enqueued: u64,
    pub acked: u64,
    pub nacked: u64,
    pub expired: u64,
    pub dead_lettered: u64,
}

#[derive(Debug, Default)]
struct QueueDeliveries {
    /// Leases by expiry, then id (the earliest first).
    leases: BTreeSet<(Instant, u64)>,
    lease_of: HashMap<u64, Instant>,
    nacks: HashMap<u64, u32>,
    /// The receipt of each in-flight record's current delivery.
    receipt_of: HashMap<u64, u64>,
    /// What happened to the queue since the store opened (`Store::stats`).
    counters: Counters,
}

/// A queue's tables are kept when its last delivery ends (so that the next delivery finds
/// them, its name not copied again), unless they grew past this many entries: then they are
/// dropped, and memory follows the deliveries in flight, not the largest burst.
const KEPT_CAPACITY: usize = 1024;

impl QueueDeliveries {
    fn is_empty(&self) -> bool {
        self.lease_of.is_empty() && self.nacks.is_empty() && self.receipt_of.is_empty()
    }

    /// Releases the tables of a queue with nothing in flight that grew large (see
    /// [`KEPT_CAPACITY`]).
    fn release(&mut self) {
        if self.receipt_of.capacity() > KEPT_CAPACITY && self.is_empty() {
            let counters = self.counters;
            *self = QueueDeliveries {
                counters,
                ..QueueDeliveries::default()
            };
        }
    }

    /// The delivery of `id` ended: its receipt and lease no longer apply.
    fn end(&mut self, id: u64) {
        if !self.lease_of.is_empty() {
            if let Some(until) = self.lease_of.remove(&id) {
                self.leases.remove(&(until, id));
            }
        }
        self.receipt_of.remove(&id);
    }
}

/// Receipts, leases, nack counts and counters of every queue.
#[derive(Debug, Default)]
pub struct Deliveries {
    queues: HashMap<Vec<u8>, QueueDeliveries>,
    expired_receipts: ExpiredReceipts,
}

/// How many receipts of deliveries whose lease ran out are remembered (about 100 KiB at most).
const EXPIRED_KEPT: usize = 4096;

/// The receipts of the latest [`EXPIRED_KEPT`] deliveries whose lease ran out, so that an ack or
/// nack that came too late is told so (issue 43: it said only "not in flight"). Bounded: the
/// oldest is forgotten first, and then the error lists what may have happened.
#[derive(Debug, Default)]
struct ExpiredReceipts {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

impl ExpiredReceipts {
    fn note(&mut self, receipt: u64) {
        if self.set.insert(receipt) {
            self.order.push_back(receipt);
            if self.order.len() > EXPIRED_KEPT {
                if let Some(oldest) = self.order.pop_front() {
                    self.set.remove(&oldest);
                }
            }
        }
    }
}

impl Deliveries {
    /// The counters of `queue` (zero when nothing happened to it).
    pub fn counters(&self, queue: &[u8]) -> Counters {
        self.queues
            .get(queue)
            .map(|q| q.counters)
            .unwrap_or_default()
    }

    pub fn counters_mut(&mut self, queue: &[u8]) -> &mut Counters {
        &mut self.of_mut(queue).counters
    }

    /// Counts `n` records enqueued into `queue`: one look-up when its deliveries exist (this
    /// is on every enqueue's path; `of_mut` takes two).
    pub fn count_enqueued(&mut self, queue: &[u8], n: u64) {
        match self.queues.get_mut(queue) {
            Some(q) => q.counters.enqueued += n,
            None => self.of_mut(queue).counters.enqueued += n,
        }
    }

    /// Record `id` of `queue` was delivered: its new receipt, which settles this delivery
    /// only (a stale ack or nack of an earlier delivery of the same record is refused).
    /// Receipts are unique across processes (`state::next_incarnation`), so one names one
    /// delivery of one record of one life of a queue of one open store of one owner.
    pub fn deliver(&mut self, queue: &[u8], id: u64) -> u64 {
        let receipt = crate::state::next_incarnation();
        self.of_mut(queue).receipt_of.insert(id, receipt);
        receipt
    }

    /// The deliveries of `queue`, added when it has none (its name copied only then: this is
    /// on every delivery's path).
    fn of_mut(&mut self, queue: &[u8]) -> &mut QueueDeliveries {
        if !self.queues.contains_key(queue) {
            self.queues
                .insert(queue.to_vec(), QueueDeliveries::default());
        }
        self.queues.get_mut(queue).expect("inserted")
    }

    /// Whether `receipt` is that of the current delivery of record `id` of `queue`.
    pub fn is_current(&self, queue: &[u8], id: u64, receipt: u64) -> bool {
        self.queues
            .get(queue)
            .and_then(|q| q.receipt_of.get(&id))
            .is_some_and(|&r| r == receipt)
    }

    /// Record `id` of `queue` goes back by itself at `until` unless settled first.
    pub fn lease(&mut self, queue: &[u8], id: u64, until: Instant) {
        let q = self.of_mut(queue);
        if let Some(old) = q.lease_of.insert(id, until) {
            q.leases.remove(&(old, id));
        }
        q.leases.insert((until, id));
    }

    /// The delivery ended (ack, nack, expiry): its receipt and lease no longer apply.
    pub fn end(&mut self, queue: &[u8], id: u64) {
        if let Some(q) = self.queues.get_mut(queue) {
            q.end(id);
        }
    }

    /// The record left its queue (acked, dead-lettered): forget it entirely.
    pub fn forget(&mut self, queue: &[u8], id: u64) {
        if let Some(q) = self.queues.get_mut(queue) {
            q.end(id);
            if !q.nacks.is_empty() {
                q.nacks.remove(&id);
            }
            q.release();
        }
    }

    /// Record `id` of `queue` was acknowledged: [`Deliveries::forget`] it and count the ack,
    /// with one look-up of the queue.
    pub fn acked(&mut self, queue: &[u8], id: u64) {
        match self.queues.get_mut(queue) {
            Some(q) => {
                q.counters.acked += 1;
                q.end(id);
                if !q.nacks.is_empty() {
                    q.nacks.remove(&id);
                }
                q.release();
            }
            None => self.counters_mut(queue).acked += 1,
        }
    }

    /// Counts one failed delivery (a nack or an expired lease) of `id`; returns the total.
    pub fn failed(&mut self, queue: &[u8], id: u64) -> u32 {
        let q = self.of_mut(queue);
        let n = q.nacks.entry(id).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Ids of `queue` whose lease ran out by `now` (their leases are dropped).
    pub fn expired(&mut self, queue: &[u8], now: Instant) -> Vec<u64> {
        let Some(q) = self.queues.get_mut(queue) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while let Some(&(until, id)) = q.leases.first() {
            if until > now {
                break;
            }
            q.leases.pop_first();
            q.lease_of.remove(&id);
            if let Some(&receipt) = q.receipt_of.get(&id) {
                self.expired_receipts.note(receipt);
            }
            out.push(id);
        }
        out
    }

    /// Whether `receipt` names a delivery whose lease ran out (one of the latest
    /// `EXPIRED_KEPT`).
    pub fn lease_expired(&self, receipt: u64) -> bool {
        self.expired_receipts.set.contains(&receipt)
    }

    /// When the next lease of `queue` runs out.
    pub fn next_expiry(&self, queue: &[u8]) -> Option<Instant> {
        self.queues
            .get(queue)
            .and_then(|q| q.leases.first().map(|(until, _)| *until))
    }

    /// The queue was deleted.
    pub fn drop_queue(&mut self, queue: &[u8]) {
        self.queues.remove(queue);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn leases_expire_in_order_and_end_when_settled() {
        let mut d = Deliveries::default();
        let t0 = Instant::now();
        d.lease(b"q", 1, t0 + Duration::from_secs(2));
        d.lease(b"q", 2, t0 + Duration::from_secs(1));
        d.lease(b"q", 3, t0 + Duration::from_secs(3));
        d.end(b"q", 3);
        assert_eq!(d.next_expiry(b"q"), Some(t0 + Duration::from_secs(1)));
        assert_eq!(d.expired(b"q", t0), Vec::<u64>::new());
        assert_eq!(d.expired(b"q", t0 + Duration::from_secs(5)), vec![2, 1]);
        assert_eq!(d.next_expiry(b"q"), None);
        // A renewed lease replaces the old one.
        d.lease(b"q", 4, t0 + Duration::from_secs(1));
        d.lease(b"q", 4, t0 + Duration::from_secs(9));
        assert_eq!(
            d.expired(b"q", t0 + Duration::from_secs(5)),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn failures_count_until_the_record_is_forgotten() {
        let mut d = Deliveries::default();
        assert_eq!(d.failed(b"q", 7), 1);
        assert_eq!(d.failed(b"q", 7), 2);
        assert_eq!(d.failed(b"r", 7), 1);
        d.forget(b"q", 7);
        assert_eq!(d.failed(b"q", 7), 1);
        d.drop_queue(b"q");
        assert_eq!(d.failed(b"q", 7), 1);
    }

    #[test]
    fn a_queues_tables_stay_between_deliveries_unless_they_grew_large() {
        let mut d = Deliveries::default();
        d.deliver(b"q", 1);
        d.acked(b"q", 1);
        assert!(
            d.queues.contains_key(b"q".as_slice()),
            "kept for the next delivery"
        );
        assert_eq!(d.counters(b"q").acked, 1);
        for id in 0..=KEPT_CAPACITY as u64 {
            d.deliver(b"q", id);
        }
        for id in 0..=KEPT_CAPACITY as u64 {
            d.acked(b"q", id);
        }
        let q = &d.queues[b"q".as_slice()];
        assert_eq!(q.receipt_of.capacity(), 0, "a burst's table is dropped");
        assert_eq!(
            q.counters.acked,
            2 + KEPT_CAPACITY as u64,
            "the counters stay"
        );
        d.drop_queue(b"q");
        assert_eq!(d.counters(b"q").acked, 0);
    }

    #[test]
    fn expired_receipts_are_remembered_and_bounded() {
        let mut d = Deliveries::default();
        let t0 = Instant::now();
        let first = d.deliver(b"q", 1);
        d.lease(b"q", 1, t0);
        let settled = d.deliver(b"q", 2);
        assert_eq!(d.expired(b"q", t0), vec![1]);
        assert!(d.lease_expired(first));
        assert!(!d.lease_expired(settled), "never leased out");
        for id in 10..10 + EXPIRED_KEPT as u64 {
            d.deliver(b"q", id);
            d.lease(b"q", id, t0);
        }
        assert_eq!(d.expired(b"q", t0).len(), EXPIRED_KEPT);
        assert!(!d.lease_expired(first), "the oldest is forgotten first");
        assert_eq!(d.expired_receipts.set.len(), EXPIRED_KEPT);
        assert_eq!(d.expired_receipts.order.len(), EXPIRED_KEPT);
    }
}
