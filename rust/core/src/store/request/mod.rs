//! The store's operations as data: one [`Request`] per operation and one [`Reply`] for every
//! result, carried out by [`Store::execute`]. The same values serve the owner's own calls, a
//! client's calls (encoded as they are declared here, `codec`) and the owner's server, so an
//! operation is spelled once: its variant, its arm in `execute`, its binding method and stub
//! (CONTRIBUTING.md, "Adding a store operation").

pub mod codec;

use std::time::Duration;

use self::codec::{messages, replies};
use crate::base::settings::Settings;
use crate::durability::Logged;
use crate::error::Result;
use crate::format::queue::QueueConfig;
use crate::format::rules::{QueueRules, RulesChange};
use crate::state::{QueueInfo, Record};
use crate::store::Store;
use crate::store::{Delivery, Listed, QueueStats};

messages! {
    /// One operation of the store, borrowing its arguments. The codes are wire format
    /// (bump `share::wire::VERSION` when one changes).
    #[derive(Debug, Clone, PartialEq)]
    pub enum Request<'a> {
        /// Reply: `Flag` (false: `exist_ok` and the same queue existed; nothing written).
        1 => CreateQueue { queue: &'a [u8], config: QueueConfig, exist_ok: bool },
        2 => DeleteQueue { queue: &'a [u8] },
        /// `(key, payload)` records, all or none. Reply: `Ids`.
        3 => Enqueue { queue: &'a [u8], items: Vec<(i64, &'a [u8])> },
        /// Waits up to `timeout` (None: forever) for a record; the delivery's lease. Reply:
        /// `Delivery` (the record and its receipt).
        4 => Dequeue { queue: &'a [u8], timeout: Option<Duration>, lease: Option<Duration> },
        /// Waits up to `timeout` until a record is ready, without taking it. Reply: `Flag`.
        5 => WaitReady { queue: &'a [u8], timeout: Option<Duration> },
        /// `(queue, id, receipt)` deliveries settled with one write, all or none. A receipt is
        /// unique to the process that made the delivery (`state::next_incarnation`, seeded
        /// from the clock), so a next owner refuses a gone owner's receipt with `NotInFlight`:
        /// that delivery was void, the record is delivered again.
        6 => Ack { items: Vec<(&'a [u8], u64, Option<u64>)> },
        7 => Nack { queue: &'a [u8], id: u64, receipt: Option<u64> },
        /// Reply: `Count` (ready records).
        8 => Count { queue: &'a [u8] },
        /// Reply: `Record` (what a dequeue would take next).
        9 => Peek { queue: &'a [u8] },
        /// Reply: `Records` (the ready ones, in dequeue order).
        10 => PeekAll { queue: &'a [u8] },
        /// Reply: `Queues`.
        11 => Queues {},
        /// Reply: `Flag` (false: nothing changed since the last snapshot).
        12 => Snapshot {},
        /// Reply: `Info`.
        13 => Info {},
        // Task-queue operations (spec 12; issue 44).
        14 => CreateQueueRules { queue: &'a [u8], config: QueueConfig, rules: QueueRules, exist_ok: bool },
        15 => SetQueueRules { queue: &'a [u8], change: RulesChange<&'a [u8]> },
        16 => QueueRulesOf { queue: &'a [u8] },
        17 => EnqueueAt { queue: &'a [u8], items: Vec<(i64, &'a [u8])>, not_before: i64 },
        18 => Deliver { queue: &'a [u8], timeout: Option<Duration>, lease: Option<Duration> },
        19 => NackDelayed { queue: &'a [u8], id: u64, receipt: Option<u64>, delay_ms: Option<i64> },
        20 => Extend { queue: &'a [u8], id: u64, receipt: Option<u64>, lease: Duration },
        21 => Purge { queue: &'a [u8] },
        22 => Stats { queue: &'a [u8] },
        /// Waits like `Deliver` for the first record, then takes up to `n - 1` more ready
        /// ones without waiting (`n` capped by the store: `Store::deliver_many`). Reply:
        /// `Tasks` (empty: nothing came in time).
        23 => DequeueMany { queue: &'a [u8], n: u64, timeout: Option<Duration>, lease: Option<Duration> },
    }
}

replies! {
    /// What a [`Request`] gave: each variant carries one type of result.
    #[derive(Debug, Clone, PartialEq)]
    pub enum Reply {
        0 => Done(()),
        1 => Flag(bool),
        2 => Count(u64),
        3 => Lsn(i64),
        4 => Ids(Vec<u64>),
        5 => Delivery(Option<(Record, u64)>),
        /// With attempts and enqueue time (`Peek`, `PeekAll`).
        6 => Record(Option<Listed>),
        7 => Records(Vec<Listed>),
        8 => Queues(Vec<QueueInfo>),
        9 => Info(StoreInfo),
        /// A delivery with its record's attempts and enqueue time (`Deliver`).
        10 => Task(Option<Delivery>),
        11 => Rules(QueueRules),
        12 => Stats(QueueStats),
        /// Several deliveries (`DequeueMany`).
        13 => Tasks(Vec<Delivery>),
    }
}

/// What the store reports of itself (a client learns the owner's settings from it).
#[derive(Debug, Clone, PartialEq)]
pub struct StoreInfo {
    /// `(start, last, snapshot index)` of the log.
    pub log_bounds: (i64, i64, i64),
    pub term: i32,
    pub settings: Settings,
}

/// What becomes of a request whose owner went away before it answered (`share::role`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resend {
    /// A change: sent to the next owner only if it surely never reached the lost one;
    /// otherwise the caller is told (`OwnerLost`: it may have happened).
    IfUnsent,
    /// Harmless to repeat (a read; a dequeue, since a lost owner's deliveries are void):
    /// sent to the next owner whatever became of it.
    Again,
    /// Tied to the owner that made a delivery (an ack, a nack): never sent to another one.
    Never,
}

/// How long a request may take in the owner, which decides where its server carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// At once, between the others (a write's fsync is shared by the batch).
    Quick,
    /// Waits up to its timeout for records: tried at once, then where waiting holds up
    /// nobody else.
    Waits,
    /// Takes long (a snapshot, a write that waits for its own fsync, a long copy).
    Long,
}

impl Request<'_> {
    pub fn resend(&self) -> Resend {
        use Request::*;
        match self {
            CreateQueue { .. }
            | DeleteQueue { .. }
            | Enqueue { .. }
            | Snapshot {}
            | CreateQueueRules { .. }
            | SetQueueRules { .. }
            | EnqueueAt { .. }
            | Purge { .. } => Resend::IfUnsent,
            Dequeue { .. }
            | WaitReady { .. }
            | Count { .. }
            | Peek { .. }
            | PeekAll { .. }
            | Queues {}
            | Info {}
            | QueueRulesOf { .. }
            | Deliver { .. }
            | DequeueMany { .. }
            | Stats { .. } => Resend::Again,
            Ack { .. } | Nack { .. } | NackDelayed { .. } | Extend { .. } => Resend::Never,
        }
    }

    pub fn pace(&self) -> Pace {
        use Request::*;
        match self {
            Enqueue { .. }
            | Ack { .. }
            | Nack { .. }
            | Count { .. }
            | Peek { .. }
            | Queues {}
            | Info {}
            | QueueRulesOf { .. }
            | EnqueueAt { .. }
            | NackDelayed { .. }
            | Extend { .. }
            | Stats { .. } => Pace::Quick,
            // A delivery under a dead-letter rule logs its count: its reply waits for the
            // batch's group commit (`Store::deliver_logged`), not for an fsync of its own.
            Dequeue { .. } | WaitReady { .. } | Deliver { .. } | DequeueMany { .. } => Pace::Waits,
            CreateQueue { .. }
            | DeleteQueue { .. }
            | PeekAll { .. }
            | Snapshot {}
            | CreateQueueRules { .. }
            | SetQueueRules { .. }
            | Purge { .. } => Pace::Long,
        }
    }

    /// A waiting request's timeout (`None`: forever); `None` for the others.
    pub fn timeout(&self) -> Option<Option<Duration>> {
        match self {
            Request::Dequeue { timeout, .. }
            | Request::WaitReady { timeout, .. }
            | Request::Deliver { timeout, .. }
            | Request::DequeueMany { timeout, .. } => Some(*timeout),
            _ => None,
        }
    }

    /// The same request waiting at most `timeout` (a request that does not wait is unchanged).
    pub fn waiting(&self, timeout: Duration) -> Self {
        let mut r = self.clone();
        if let Request::Dequeue { timeout: t, .. }
        | Request::WaitReady { timeout: t, .. }
        | Request::Deliver { timeout: t, .. }
        | Request::DequeueMany { timeout: t, .. } = &mut r
        {
            *t = Some(t.map_or(timeout, |t| t.min(timeout)));
        }
        r
    }

    /// What a waiting request answers when nothing came in time.
    pub fn nothing(&self) -> Reply {
        match self {
            Request::Dequeue { .. } => Reply::Delivery(None),
            Request::Deliver { .. } => Reply::Task(None),
            Request::DequeueMany { .. } => Reply::Tasks(Vec::new()),
            _ => Reply::Flag(false),
        }
    }
}

impl Reply {
    /// Whether a waiting request's reply says that nothing came.
    pub fn is_nothing(&self) -> bool {
        matches!(
            self,
            Reply::Delivery(None) | Reply::Task(None) | Reply::Flag(false)
        ) || matches!(self, Reply::Tasks(got) if got.is_empty())
    }
}

impl Store {
    /// Carries out one request and waits until what it wrote is durable per the sync policy:
    /// the one way every operation runs, in the owner's own process and for its clients.
    pub fn execute(&self, request: &Request<'_>) -> Result<Reply> {
        let (reply, logged) = self.execute_logged(request)?;
        self.make_durable(logged)?;
        Ok(reply)
    }

    /// [`Store::execute`] without the wait for durability of a write that can share its
    /// fsync ([`Store::make_durable`], for one or a whole batch of requests: the owner's
    /// server answers a batch of clients after one group commit).
    pub fn execute_logged(&self, request: &Request<'_>) -> Result<(Reply, Logged)> {
        use Request::*;
        let reply = match *request {
            CreateQueue {
                queue,
                config,
                exist_ok,
            } => Reply::Flag(self.create_queue_as(queue, config, exist_ok)?),
            DeleteQueue { queue } => Reply::Done(self.delete_queue(queue)?),
            Enqueue { queue, ref items } => {
                let (ids, logged) = self.enqueue_many_logged(queue, items)?;
                return Ok((Reply::Ids(ids), logged));
            }
            Dequeue {
                queue,
                timeout,
                lease,
            } => {
                let (delivery, logged) = self.deliver_logged(queue, timeout, lease)?;
                let reply = Reply::Delivery(delivery.map(|d| (d.record, d.receipt)));
                return Ok((reply, logged));
            }
            WaitReady { queue, timeout } => Reply::Flag(self.wait_ready(queue, timeout)?),
            Ack { ref items } => return Ok((Reply::Done(()), self.ack_many_logged(items)?)),
            Nack { queue, id, receipt } => {
                return Ok((Reply::Done(()), self.nack_logged(queue, id, receipt)?))
            }
            Count { queue } => Reply::Count(self.count(queue)?),
            Peek { queue } => Reply::Record(self.peek_listed(queue)?),
            PeekAll { queue } => Reply::Records(self.peek_all_listed(queue)?),
            Queues {} => Reply::Queues(self.queues()?),
            Snapshot {} => Reply::Flag(self.snapshot()?),
            Info {} => Reply::Info(StoreInfo {
                log_bounds: self.log_bounds()?,
                term: self.metadata()?.term,
                settings: self.settings().clone(),
            }),
            CreateQueueRules {
                queue,
                config,
                ref rules,
                exist_ok,
            } => Reply::Flag(self.create_queue_with_rules(queue, config, rules, exist_ok)?),
            SetQueueRules { queue, ref change } => {
                Reply::Done(self.set_queue_rules(queue, change)?)
            }
            QueueRulesOf { queue } => Reply::Rules(self.queue_rules(queue)?),
            EnqueueAt {
                queue,
                ref items,
                not_before,
            } => {
                let (ids, logged) = self.enqueue_many_at_logged(queue, items, not_before)?;
                return Ok((Reply::Ids(ids), logged));
            }
            Deliver {
                queue,
                timeout,
                lease,
            } => {
                let (delivery, logged) = self.deliver_logged(queue, timeout, lease)?;
                return Ok((Reply::Task(delivery), logged));
            }
            NackDelayed {
                queue,
                id,
                receipt,
                delay_ms,
            } => {
                let logged = self.nack_delayed_logged(queue, id, receipt, delay_ms)?;
                return Ok((Reply::Done(()), logged));
            }
            Extend {
                queue,
                id,
                receipt,
                lease,
            } => Reply::Done(self.extend(queue, id, receipt, lease)?),
            Purge { queue } => Reply::Count(self.purge(queue)?),
            Stats { queue } => Reply::Stats(self.stats(queue)?),
            DequeueMany {
                queue,
                n,
                timeout,
                lease,
            } => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                let (got, logged) = self.deliver_many_logged(queue, n, timeout, lease)?;
                return Ok((Reply::Tasks(got), logged));
            }
        };
        Ok((reply, Logged::NOTHING))
    }
}

#[cfg(test)]
mod tests {
    use super::codec::Out;
    use super::*;

    fn round_trip(request: &Request<'_>) {
        let mut out = Out::new();
        request.encode(&mut out);
        let decoded = Request::decode(&out.0[4..]).unwrap();
        assert_eq!(&decoded, request);
    }

    /// `reply` encoded and decoded again (the whole message read): it comes back equal.
    fn reply_round_trip(reply: &Reply) -> Reply {
        let mut out = Out::new();
        reply.encode(&mut out);
        let mut r = codec::In::new(&out.0[4..]);
        let back = Reply::decode(&mut r).unwrap();
        r.end().unwrap();
        assert_eq!(&back, reply);
        back
    }

    #[test]
    fn every_request_round_trips() {
        let config = QueueConfig {
            key_range: Some((-3, 9)),
            max_queue_size: Some(10),
            ..QueueConfig::default()
        };
        let second = Some(Duration::from_secs(1));
        for r in [
            Request::CreateQueue {
                queue: b"q",
                config,
                exist_ok: true,
            },
            Request::DeleteQueue { queue: b"q" },
            Request::Enqueue {
                queue: b"q",
                items: vec![(1, b"a"), (-2, b"")],
            },
            Request::Dequeue {
                queue: b"q",
                timeout: None,
                lease: second,
            },
            Request::WaitReady {
                queue: b"q",
                timeout: second,
            },
            Request::Ack {
                items: vec![(b"q", 1, None), (b"r", 2, Some(7))],
            },
            Request::Nack {
                queue: b"q",
                id: 1,
                receipt: Some(u64::MAX),
            },
            Request::Count { queue: b"q" },
            Request::Peek { queue: b"q" },
            Request::PeekAll { queue: b"q" },
            Request::Queues {},
            Request::Snapshot {},
            Request::Info {},
            Request::CreateQueueRules {
                queue: b"q",
                config,
                rules: QueueRules {
                    dead_letter: Some((b"d".to_vec(), 3)),
                    retry_backoff: Some(1_500_000),
                    ..QueueRules::default()
                },
                exist_ok: false,
            },
            Request::SetQueueRules {
                queue: b"q",
                change: RulesChange {
                    dead_letter: Some(None),
                    lease_ms: Some(Some(9)),
                    ..RulesChange::default()
                },
            },
            Request::QueueRulesOf { queue: b"q" },
            Request::EnqueueAt {
                queue: b"q",
                items: vec![(1, b"a")],
                not_before: 1_765_000_000_000,
            },
            Request::Deliver {
                queue: b"q",
                timeout: second,
                lease: None,
            },
            Request::NackDelayed {
                queue: b"q",
                id: 3,
                receipt: Some(4),
                delay_ms: Some(0),
            },
            Request::Extend {
                queue: b"q",
                id: 3,
                receipt: None,
                lease: Duration::from_secs(30),
            },
            Request::Purge { queue: b"q" },
            Request::Stats { queue: b"q" },
            Request::DequeueMany {
                queue: b"q",
                n: 16,
                timeout: second,
                lease: None,
            },
        ] {
            round_trip(&r);
        }
    }

    #[test]
    fn a_reply_round_trips_and_converts_only_to_its_own_type() {
        let record = Record {
            id: 4,
            key: -1,
            data: b"x".to_vec().into(),
        };
        let back = reply_round_trip(&Reply::Delivery(Some((record.clone(), 9))));
        let got: Option<(Record, u64)> = back.clone().try_into().unwrap();
        assert_eq!(got, Some((record, 9)));
        let err = u64::try_from(back).unwrap_err();
        assert!(err.to_string().contains("Delivery"), "{err}");
    }

    #[test]
    fn a_listing_carries_each_records_attempts_and_enqueue_time() {
        let listed = |id: u64, attempts: u32, enqueued_at: Option<i64>| Listed {
            record: Record {
                id,
                key: 2,
                data: b"p".to_vec().into(),
            },
            attempts,
            enqueued_at,
        };
        reply_round_trip(&Reply::Records(vec![
            listed(1, 0, None),
            listed(2, 3, Some(1_700_000)),
        ]));
    }

    #[test]
    fn a_task_and_a_batch_of_tasks_round_trip_with_their_counts_and_times() {
        let delivery = |id: u64, attempts: u32, enqueued_at: Option<i64>| Delivery {
            record: Record {
                id,
                key: -2,
                data: b"t".to_vec().into(),
            },
            receipt: id + 100,
            attempts,
            enqueued_at,
        };
        reply_round_trip(&Reply::Task(Some(delivery(1, 2, Some(1_700_000)))));
        reply_round_trip(&Reply::Task(None));
        reply_round_trip(&Reply::Tasks(vec![
            delivery(1, 1, None),
            delivery(2, 7, Some(5)),
        ]));
        reply_round_trip(&Reply::Tasks(Vec::new()));
    }

    #[test]
    fn an_unknown_code_and_bytes_after_the_last_field_are_refused() {
        assert!(Request::decode(&[0xee]).is_err());
        assert!(Request::decode(&[11, 0]).is_err());
        Request::decode(&[11]).unwrap();
    }

    #[test]
    fn a_waiting_request_is_bounded_and_others_are_left_alone() {
        let forever = Request::Dequeue {
            queue: b"q",
            timeout: None,
            lease: None,
        };
        assert_eq!(
            forever.waiting(Duration::from_secs(1)).timeout(),
            Some(Some(Duration::from_secs(1)))
        );
        let count = Request::Count { queue: b"q" };
        assert_eq!(count.waiting(Duration::ZERO), count);
        assert_eq!(count.timeout(), None);
    }
}
