//! Deliveries: dequeue with timeouts and leases, ack, nack, lease expiry and the dead-letter
//! rules; what is in flight lives in memory only ([`crate::store::deliveries`]).

use super::{
    raw_name, DeltaRef, Duration, Error, Inner, Instant, Logged, QueueConfig, Record, Result, Store,
};

impl Store {
    /// Takes the next record of `name` (smallest key, then lowest id), waiting up to `timeout`
    /// (`None` = forever) for one to arrive. Writes nothing: the record is in flight until
    /// acked (RemoveRecord is logged) or nacked (it goes back).
    /// Returns the record and its delivery's receipt, which `ack`/`nack` check: a receipt
    /// settles the one delivery it came with, never a later one of the same record.
    pub fn dequeue(&self, name: &[u8], timeout: Option<Duration>) -> Result<Option<(Record, u64)>> {
        self.dequeue_leased(name, timeout, None)
    }

    /// [`Store::dequeue`] with a lease: a record neither acked nor nacked within `lease` goes
    /// back by itself (counted as a failed delivery, like a nack).
    pub fn dequeue_leased(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<(Record, u64)>> {
        self.wait_for(name, timeout, |inner, now| {
            let q = inner.state.queue_mut(name)?;
            let Some(r) = q.dequeue().cloned() else {
                return Ok(None);
            };
            let receipt = inner.deliveries.deliver(name, r.id);
            if let Some(until) = lease.and_then(|l| now.checked_add(l)) {
                inner.deliveries.lease(name, r.id, until);
            }
            Ok(Some((r, receipt)))
        })
    }

    /// Waits up to `timeout` (`None` = forever) until `name` has a ready record, without
    /// taking it; true when one is ready. For waiters that take records elsewhere (asyncio):
    /// another consumer may take the record first, so the caller retries.
    pub fn wait_ready(&self, name: &[u8], timeout: Option<Duration>) -> Result<bool> {
        let ready = self.wait_for(name, timeout, |inner, _| {
            Ok(inner.state.queue_mut(name)?.peek().map(|_| ()))
        })?;
        Ok(ready.is_some())
    }

    /// The one wait loop of `dequeue` and `wait_ready`: runs `attempt` under the lock (after
    /// ending expired leases of `name`) until it gives a value, the deadline passes (`None`)
    /// or the store closes. Wakes on every change and when a lease of `name` runs out, since
    /// its record is ready then. Refuses read-only stores: a waiter there could only ever
    /// take records that no ack could settle.
    pub(super) fn wait_for<T>(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        mut attempt: impl FnMut(&mut Inner, Instant) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let forever = timeout.is_none() || deadline.is_none();
        self.refuse_readonly()?;
        let mut inner = self.inner()?;
        loop {
            let now = Instant::now();
            self.expire(&mut inner, name, now);
            if let Some(value) = attempt(&mut inner, now)? {
                return Ok(Some(value));
            }
            let mut wait = match deadline {
                _ if forever => Duration::from_secs(3600),
                Some(d) if now < d => d - now,
                _ => return Ok(None),
            };
            if let Some(next) = inner.deliveries.next_expiry(name) {
                wait = wait.min(next.saturating_duration_since(now));
            }
            inner = self.ready.wait_timeout(inner, wait);
            if inner.closed {
                return Err(Error::Closed("store"));
            }
        }
    }

    /// Ends the deliveries of `name` whose lease ran out by `now` (each counts as a failure).
    pub(super) fn expire(&self, inner: &mut Inner, name: &[u8], now: Instant) {
        let expired = inner.deliveries.expired(name, now);
        let mut back = false;
        for id in expired {
            if inner.state.queue(name).is_ok_and(|q| q.is_in_flight(id)) {
                // Nobody waits on an expiry: a dead-letter move is durable per the sync policy
                // of the next write (and a lost move only means the record is ready again).
                let _ = self.delivery_failed(inner, name, id);
                back = true;
            }
        }
        if back {
            self.ready.notify_all();
        }
    }

    /// An in-flight record's delivery failed (nack or expired lease): it goes back to its
    /// queue, or, after the queue's `DeadLetter` limit, moves to the dead-letter queue with
    /// one logged batch: AddRecord there first, then RemoveRecord here, so a crash between the
    /// two can duplicate the record but never lose it. Returns the LSN of a logged move.
    pub(super) fn delivery_failed(
        &self,
        inner: &mut Inner,
        name: &[u8],
        id: u64,
    ) -> Result<Option<i64>> {
        inner.deliveries.end(name, id);
        let failures = inner.deliveries.failed(name, id);
        let rule = std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.settings.dead_letter.get(n))
            .filter(|rule| failures >= rule.max_nacks);
        if let Some(rule) = rule {
            // The dead-letter queue may be missing, full or refuse the record, or writes may
            // have stopped: then the record stays in its queue (never lost), and the next
            // failure tries again.
            if let Ok(lsn) = self.dead_letter(inner, name, id, rule.queue.as_bytes()) {
                inner.deliveries.forget(name, id);
                return Ok(Some(lsn));
            }
        }
        inner.state.queue_mut(name)?.nack(id);
        Ok(None)
    }

    pub(super) fn dead_letter(
        &self,
        inner: &mut Inner,
        name: &[u8],
        id: u64,
        to: &[u8],
    ) -> Result<i64> {
        if let Some(cause) = self.stopped(inner) {
            return Err(Error::Poisoned { cause });
        }
        let record = inner
            .state
            .queue(name)?
            .in_flight_record(id)
            .cloned()
            .ok_or_else(|| not_in_flight(inner, name, id, None))?;
        // A dead-letter queue that does not exist is created (a heap, no limits) in the same
        // batch as the move: a rule naming a missing queue left a poison record cycling
        // forever (docs/format.md, queue store decision "Dead-letter").
        let missing = matches!(inner.state.queue(to), Err(Error::NoSuchQueue { .. }));
        let dead_letter_queue = QueueConfig::default();
        if missing {
            inner.state.check_create(to, &dead_letter_queue)?;
        } else {
            inner
                .state
                .check_enqueue(to, record.key, record.data.len())?;
        }
        let create = DeltaRef::CreateQueue {
            name: to,
            implementation: dead_letter_queue.implementation,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
        };
        let moves = [
            DeltaRef::AddRecord {
                name: to,
                key: record.key,
                message: &record.data,
            },
            DeltaRef::RemoveRecord { name, id },
        ];
        let deltas: Vec<DeltaRef<'_>> =
            missing.then_some(create).into_iter().chain(moves).collect();
        Ok(self.log_and_apply(inner, &deltas)?.1)
    }

    /// Acknowledges an in-flight record: logs RemoveRecord and makes it durable. With
    /// `receipt` (from `dequeue`), only that delivery is settled: after its lease ran out and
    /// the record was delivered again, or after its queue was deleted, it is refused.
    pub fn ack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        let lsn = {
            let mut inner = self.writable()?;
            self.expire(&mut inner, name, Instant::now());
            if !in_flight(&inner, name, id, receipt)? {
                return Err(not_in_flight(&inner, name, id, receipt));
            }
            let lsn = self
                .log_and_apply(&mut inner, &[DeltaRef::RemoveRecord { name, id }])?
                .1;
            inner.deliveries.forget(name, id);
            lsn
        };
        self.after_write(lsn)
    }

    /// Acknowledges several in-flight records with one log write and one fsync: either all
    /// are acknowledged or, when one is not in flight (or named twice), none is.
    pub fn ack_many(&self, items: &[(&[u8], u64, Option<u64>)]) -> Result<()> {
        let logged = self.ack_many_logged(items)?;
        self.make_durable(logged)
    }

    /// [`Store::ack_many`] without the wait for durability ([`Store::make_durable`]).
    pub fn ack_many_logged(&self, items: &[(&[u8], u64, Option<u64>)]) -> Result<Logged> {
        if items.is_empty() {
            return Ok(Logged::NOTHING);
        }
        let lsn = {
            let mut inner = self.writable()?;
            let now = Instant::now();
            for &(name, _, _) in items {
                self.expire(&mut inner, name, now);
            }
            let mut seen = std::collections::HashSet::new();
            for &(name, id, receipt) in items {
                if !in_flight(&inner, name, id, receipt)? || !seen.insert((name, id)) {
                    return Err(not_in_flight(&inner, name, id, receipt));
                }
            }
            let deltas: Vec<DeltaRef<'_>> = items
                .iter()
                .map(|&(name, id, _)| DeltaRef::RemoveRecord { name, id })
                .collect();
            let lsn = self.log_and_apply(&mut inner, &deltas)?.1;
            for &(name, id, _) in items {
                inner.deliveries.forget(name, id);
            }
            lsn
        };
        Ok(Logged::at(lsn))
    }

    /// Puts an in-flight record back with its id (so before later records of the same key);
    /// `receipt` as in [`Store::ack`].
    pub fn nack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        let logged = self.nack_logged(name, id, receipt)?;
        self.make_durable(logged)
    }

    /// [`Store::nack`] without the wait for durability of a dead-letter move
    /// ([`Store::make_durable`]); a record that simply goes back writes nothing.
    pub fn nack_logged(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<Logged> {
        self.refuse_readonly()?;
        let moved = {
            let mut inner = self.inner()?;
            self.expire(&mut inner, name, Instant::now());
            if !in_flight(&inner, name, id, receipt)? {
                return Err(not_in_flight(&inner, name, id, receipt));
            }
            self.delivery_failed(&mut inner, name, id)?
        };
        self.ready.notify_all();
        Ok(moved.map_or(Logged::NOTHING, Logged::at))
    }

    /// Whether the delivery `receipt` of record `id` of `name` is still open (neither acked,
    /// nacked nor expired): what a closing owner waits for its clients to settle.
    pub fn is_delivery_open(&self, name: &[u8], id: u64, receipt: u64) -> bool {
        let Ok(mut inner) = self.inner() else {
            return false;
        };
        self.expire(&mut inner, name, Instant::now());
        in_flight(&inner, name, id, Some(receipt)).unwrap_or(false)
    }
}

/// Whether record `id` of queue `name` is in flight (and, when given, in the delivery of
/// `receipt`; receipts are unique across processes, so one of an earlier life of the queue, an
/// earlier open of the store or another owner never matches either).
pub(super) fn in_flight(inner: &Inner, name: &[u8], id: u64, receipt: Option<u64>) -> Result<bool> {
    let q = inner.state.queue(name)?;
    Ok(q.is_in_flight(id) && receipt.is_none_or(|r| inner.deliveries.is_current(name, id, r)))
}

/// The error of an ack or nack (with `receipt`, when given) of a record not in flight: it says
/// whether that delivery's lease ran out (`Deliveries::lease_expired`).
fn not_in_flight(inner: &Inner, name: &[u8], id: u64, receipt: Option<u64>) -> Error {
    Error::NotInFlight {
        queue: raw_name(name),
        id,
        lease_expired: receipt.is_some_and(|r| inner.deliveries.lease_expired(r)),
    }
}
