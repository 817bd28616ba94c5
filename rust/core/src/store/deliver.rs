//! Deliveries: dequeue with timeouts and leases, ack, nack, lease expiry and the dead-letter
//! rules; what is in flight lives in memory only ([`crate::store::deliveries`]).

use std::time::{Duration, Instant};

use crate::durability::group_commit::Logged;
use crate::error::{Error, Result};
use crate::format::delta::{display_name, DeltaRef};
use crate::format::queue::QueueConfig;
use crate::state::{raw_name, Record};

use super::{Inner, Store};

/// The most records one `dequeue_many` takes, whatever `n` it is given (a client's `n` is
/// bounded by the owner here too): nothing is ever sized by `n` itself.
pub const DEQUEUE_MANY_MAX: usize = 1024;

/// A `dequeue_many` takes no record that would carry its payloads past this many bytes (it
/// always takes the first), so that its reply stays far below a frame's size limit.
pub const DEQUEUE_MANY_BYTES: usize = 16 << 20;

/// The records one delivery call takes: at most `n`, within [`DEQUEUE_MANY_BYTES`].
struct Batch {
    n: usize,
    bytes: usize,
    taken: Vec<(Record, u32)>,
}

impl Batch {
    fn new(n: usize) -> Batch {
        Batch {
            n,
            bytes: 0,
            taken: Vec::new(),
        }
    }

    fn has_room(&self) -> bool {
        has_room(self.taken.len(), self.n, self.bytes)
    }

    /// Whether the next record (`next`, peeked) joins the batch: the first always does, a
    /// later one only within [`DEQUEUE_MANY_BYTES`] (two records that each fit a reply must
    /// not make one that does not).
    fn takes(&self, next: Option<&Record>) -> bool {
        next.is_some_and(|r| self.taken.is_empty() || fits(self.bytes, r))
    }

    fn push(&mut self, record: Record, attempts: u32) {
        self.bytes = self.bytes.saturating_add(record.data.len());
        self.taken.push((record, attempts));
    }
}

/// Whether a delivery call that took `taken` records of `bytes` payload bytes takes another:
/// at most `n`, and none after [`DEQUEUE_MANY_BYTES`] (the first always).
fn has_room(taken: usize, n: usize, bytes: usize) -> bool {
    taken < n && bytes < DEQUEUE_MANY_BYTES
}

/// Whether record `next` fits a reply that already carries `bytes` payload bytes (see
/// [`Batch::takes`]).
fn fits(bytes: usize, next: &Record) -> bool {
    bytes.saturating_add(next.data.len()) <= DEQUEUE_MANY_BYTES
}

/// Where a delivery call puts what it hands out: the one delivery of a `dequeue` (no
/// allocation on that path) or the batch of a `dequeue_many`.
trait Sink {
    fn len(&self) -> usize;
    fn push(&mut self, delivery: super::Delivery);
}

impl Sink for Option<super::Delivery> {
    fn len(&self) -> usize {
        usize::from(self.is_some())
    }
    fn push(&mut self, delivery: super::Delivery) {
        debug_assert!(self.is_none(), "one delivery at most");
        *self = Some(delivery);
    }
}

impl Sink for Vec<super::Delivery> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn push(&mut self, delivery: super::Delivery) {
        Vec::push(self, delivery);
    }
}

/// Hands out a record taken from queue `name`: a new receipt, the lease until `until`, the
/// record's enqueue time (`enqueued_at`, from [`super::arrivals::Arrivals::of`]).
fn hand_out(
    deliveries: &mut super::deliveries::Deliveries,
    enqueued_at: &impl Fn(u64) -> Option<i64>,
    name: &[u8],
    until: Option<Instant>,
    (record, attempts): (Record, u32),
) -> super::Delivery {
    let id = record.id;
    let receipt = deliveries.deliver(name, id);
    if let Some(until) = until {
        deliveries.lease(name, id, until);
    }
    super::Delivery {
        record,
        receipt,
        attempts,
        enqueued_at: enqueued_at(id),
    }
}

/// Delayed records of `q` that came due are ready: before a delivery takes one, and before a
/// waiter (`wait_ready`) looks for one, so both see the same ready records.
fn promote_due(q: &mut crate::state::Queue) {
    if q.delayed_count() != 0 {
        q.promote(super::now_ms());
    }
}

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
        Ok(self
            .deliver(name, timeout, lease)?
            .map(|d| (d.record, d.receipt)))
    }

    /// [`Store::dequeue_leased`] with the delivery's count (spec 12). Delayed records that came
    /// due are ready first. On a queue with a dead-letter rule the delivery is logged
    /// (Delivered) and durable before the record is handed out, and a ready record whose
    /// counted deliveries already reached the rule's N (its takers died) moves to the
    /// dead-letter queue instead of being delivered again. Without `lease`, the queue's lease
    /// rule applies.
    pub fn deliver(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<super::Delivery>> {
        let (delivery, logged) = self.deliver_logged(name, timeout, lease)?;
        if let Some(lsn) = logged.lsn() {
            // The counted delivery (and any dead-letter move) is durable before the record
            // is handed out; concurrent writers share the fsync.
            self.after_write(lsn)?;
        }
        Ok(delivery)
    }

    /// [`Store::deliver`] without its wait for durability: what it logged (a Delivered, a
    /// dead-letter move) is in the log and applied, and the record must not leave before
    /// `Logged` is durable. The owner's loop serves a client's dequeue this way, so that the
    /// deliveries of a batch of requests share one group commit instead of an fsync each on
    /// the loop.
    pub fn deliver_logged(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<(Option<super::Delivery>, Logged)> {
        let mut got = None;
        let logged = self.deliver_into(name, 1, timeout, lease, &mut got)?;
        Ok((got, logged))
    }

    /// Several deliveries of `name` in one call: waits like [`Store::deliver`] (`timeout`,
    /// `lease`, wake-ups on due times) for the first record, then takes up to `n - 1` more
    /// ready ones without waiting; empty when none came in time. `n` is capped at
    /// `DEQUEUE_MANY_MAX` records, and no record is taken after the batch's payloads reach
    /// `DEQUEUE_MANY_BYTES`. On a queue with a dead-letter rule the deliveries are counted
    /// with one logged write (a Delivered each) that is durable before they are handed out.
    pub fn deliver_many(
        &self,
        name: &[u8],
        n: usize,
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Vec<super::Delivery>> {
        let (got, logged) = self.deliver_many_logged(name, n, timeout, lease)?;
        // The counted deliveries (and any dead-letter move) are durable before the records
        // are handed out; concurrent writers share the fsync.
        self.make_durable(logged)?;
        Ok(got)
    }

    /// [`Store::deliver_many`] without its wait for durability ([`Store::deliver_logged`]).
    pub fn deliver_many_logged(
        &self,
        name: &[u8],
        n: usize,
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<(Vec<super::Delivery>, Logged)> {
        if n == 0 {
            return Err(Error::InvalidArgument(
                "dequeue_many takes at least one record: n must be >= 1, not 0".into(),
            ));
        }
        let mut got = Vec::new();
        let logged = self.deliver_into(name, n.min(DEQUEUE_MANY_MAX), timeout, lease, &mut got)?;
        Ok((got, logged))
    }

    /// The one delivery path of `dequeue`, `deliver` and `dequeue_many`: up to `n` (>= 1)
    /// deliveries of `name` into `out`, waiting for the first as [`Store::deliver_many`] says.
    /// A queue without a dead-letter rule pays for nothing of that rule: its records go from
    /// ready to `out` one by one (their deliveries counted in memory, in the in-flight entry).
    fn deliver_into(
        &self,
        name: &[u8],
        n: usize,
        timeout: Option<Duration>,
        lease: Option<Duration>,
        out: &mut impl Sink,
    ) -> Result<Logged> {
        let mut logged = None;
        self.wait_for(name, timeout, |inner, now| {
            let Inner {
                state,
                deliveries,
                arrivals,
                ..
            } = &mut *inner;
            let q = state.queue_mut(name)?;
            promote_due(q);
            let rules = q.rules();
            let until = lease
                .or_else(|| rules.lease_ms.map(|ms| Duration::from_millis(ms as u64)))
                .and_then(|l| now.checked_add(l));
            // Copied only when there is one: the counted path needs `inner` whole.
            let rule = rules.dead_letter.as_ref().map(|(to, n)| (to.clone(), *n));
            match rule {
                None => {
                    let enqueued_at = arrivals.of(name);
                    let mut bytes = 0usize;
                    // The first record always goes (no peek on `dequeue`'s path), a later one
                    // only when it fits (`Batch::takes`).
                    while has_room(out.len(), n, bytes)
                        && (out.len() == 0 || q.peek().is_some_and(|r| fits(bytes, r)))
                    {
                        let Some((r, attempts)) = q.deliver_next(true) else {
                            break;
                        };
                        let taken = (r.clone(), attempts);
                        bytes = bytes.saturating_add(taken.0.data.len());
                        out.push(hand_out(deliveries, &enqueued_at, name, until, taken));
                    }
                }
                Some((to, limit)) => {
                    // The records it moves to the dead-letter queue on the way make one line.
                    let one_line = crate::events::gather();
                    let counted = self.deliver_counted(inner, name, &to, limit, n, &mut logged);
                    drop(one_line);
                    let enqueued_at = inner.arrivals.of(name);
                    for taken in counted? {
                        let d = hand_out(&mut inner.deliveries, &enqueued_at, name, until, taken);
                        out.push(d);
                    }
                }
            }
            Ok((out.len() != 0).then_some(()))
        })?;
        Ok(logged.map_or(Logged::NOTHING, Logged::at))
    }

    /// The next records (up to `n`, within [`Batch`]'s bounds) of a queue with a dead-letter
    /// rule to `to` after `limit` deliveries: ready records already delivered `limit` times
    /// move there (logged, as a failed delivery's move), the others go in flight and their
    /// deliveries are counted with ONE logged write (a Delivered each), so a batch costs one
    /// group commit. `logged` is raised to the last LSN written. When that write fails the
    /// records are ready again, their counts unchanged, and nothing is delivered.
    fn deliver_counted(
        &self,
        inner: &mut Inner,
        name: &[u8],
        to: &[u8],
        limit: i32,
        n: usize,
        logged: &mut Option<i64>,
    ) -> Result<Vec<(Record, u32)>> {
        let mut batch = Batch::new(n);
        while batch.has_room() {
            let q = inner.state.queue_mut(name)?;
            let Some(id) = q.peek().map(|r| r.id) else {
                break;
            };
            if !batch.takes(q.peek()) {
                break;
            }
            if q.attempts_of(id) >= limit as u32 {
                // Every one of its `limit` deliveries failed (its takers died: nothing settled
                // them): it goes to the dead-letter queue, not out again.
                q.deliver_next(false);
                match self.dead_letter(inner, name, id, to) {
                    Ok(lsn) => {
                        *logged = Some(lsn);
                        inner.deliveries.forget(name, id);
                        inner.deliveries.counters_mut(name).dead_lettered += 1;
                        continue;
                    }
                    Err(_) => {
                        // The dead-letter queue refuses it (full, too small) or writes
                        // stopped: never lost, never stuck: back, and delivered once more.
                        inner.state.queue_mut(name)?.nack(id);
                    }
                }
            }
            // In flight now (the record peeked above: nothing ran between), its delivery not
            // counted yet: the Delivered below counts it.
            let q = inner.state.queue_mut(name)?;
            let Some((r, attempts)) = q.deliver_next(false) else {
                break;
            };
            batch.push(r.clone(), attempts);
        }
        if batch.taken.is_empty() {
            return Ok(Vec::new());
        }
        let deltas: Vec<DeltaRef<'_>> = batch
            .taken
            .iter()
            .map(|(r, _)| DeltaRef::Delivered { name, id: r.id })
            .collect();
        match self.log_and_apply(inner, &deltas) {
            Ok((_, lsn)) => *logged = Some(lsn),
            Err(e) => {
                // Not logged, so not delivered: ready again as they were (never lost).
                let q = inner.state.queue_mut(name)?;
                for (r, _) in &batch.taken {
                    q.nack(r.id);
                }
                return Err(e);
            }
        }
        // Each Delivered just applied counted one more delivery of its record.
        Ok(batch
            .taken
            .into_iter()
            .map(|(r, a)| (r, a.saturating_add(1)))
            .collect())
    }

    /// Waits up to `timeout` (`None` = forever) until `name` has a ready record, without
    /// taking it; true when one is ready. For waiters that take records elsewhere (asyncio):
    /// another consumer may take the record first, so the caller retries.
    pub fn wait_ready(&self, name: &[u8], timeout: Option<Duration>) -> Result<bool> {
        let ready = self.wait_for(name, timeout, |inner, _| {
            let q = inner.state.queue_mut(name)?;
            promote_due(q);
            Ok(q.peek().map(|_| ()))
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
            // A delayed record wakes the waiter when it comes due (no polling loop).
            if let Some(due) = inner.state.queue(name).ok().and_then(|q| q.next_due()) {
                let ms = due.saturating_sub(super::now_ms()).max(0) as u64;
                wait = wait.min(Duration::from_millis(ms));
            }
            inner = self.ready.wait_timeout(inner, wait);
            if inner.closed {
                return Err(Error::Closed("store"));
            }
        }
    }

    /// Brings `name` up to now before a read of its ready records (count, peek, listings,
    /// stats): ends expired leases and, in a writable store, makes the delayed records that are
    /// due ready, as the next dequeue would, so a read shows what a dequeue would take. A
    /// read-only store shows the delays of the files as they stand.
    pub(super) fn bring_due(&self, inner: &mut Inner, name: &[u8]) {
        self.expire(inner, name, Instant::now());
        if !self.readonly {
            if let Ok(q) = inner.state.queue_mut(name) {
                promote_due(q);
            }
        }
    }

    /// Ends the deliveries of `name` whose lease ran out by `now` (each counts as a failure).
    /// One line reports a sweep's expiries (and one its dead-letter moves), never one per
    /// record (`crate::events`).
    pub(super) fn expire(&self, inner: &mut Inner, name: &[u8], now: Instant) {
        let expired = inner.deliveries.expired(name, now);
        if expired.is_empty() {
            return;
        }
        let mut back = false;
        let _one_line = crate::events::gather();
        for id in expired {
            if inner.state.queue(name).is_ok_and(|q| q.is_in_flight(id)) {
                self.report_expiry(name, id);
                // Nobody waits on an expiry: a dead-letter move is durable per the sync policy
                // of the next write (and a lost move only means the record is ready again).
                let _ = self.delivery_failed(inner, name, id, None);
                inner.deliveries.counters_mut(name).expired += 1;
                back = true;
            }
        }
        if back {
            self.ready.notify_all();
        }
    }

    fn report_expiry(&self, name: &[u8], id: u64) {
        let (queue, base) = (display_name(name), self.layout.base.display().to_string());
        crate::events::tally(
            crate::events::Tally {
                target: crate::events::STORE,
                level: ::log::Level::Warn,
                key: format!("expired\0{base}\0{queue}"),
                say: Box::new(move |sum| {
                    format!(
                        "lease expired on {} record(s) of queue {queue} in {base} ({}): \
                         each counts as a failed delivery",
                        sum.count,
                        sum.ids_text()
                    )
                }),
            },
            id,
            0,
        );
    }

    fn report_dead_letter(&self, name: &[u8], id: u64, to: &[u8], attempts: u32) {
        let (queue, to, base) = (
            display_name(name),
            display_name(to),
            self.layout.base.display().to_string(),
        );
        crate::events::tally(
            crate::events::Tally {
                target: crate::events::STORE,
                level: ::log::Level::Warn,
                key: format!("dead-lettered\0{base}\0{queue}\0{to}"),
                say: Box::new(move |sum| {
                    format!(
                        "dead-lettered {} record(s) of queue {queue} to {to} in {base} \
                         after {} deliveries ({})",
                        sum.count,
                        sum.values_text(),
                        sum.ids_text()
                    )
                }),
            },
            id,
            u64::from(attempts),
        );
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
        delay: Option<i64>,
    ) -> Result<Option<i64>> {
        inner.deliveries.end(name, id);
        let nacks = inner.deliveries.failed(name, id);
        let q = inner.state.queue(name)?;
        let rules = q.rules().clone();
        // Under a logged dead-letter rule every delivery is counted in the log (spec 12); a
        // per-open `DeadLetter` setting for a queue without one counts failures in memory.
        let rule = match &rules.dead_letter {
            Some((to, n)) => Some((to.clone(), q.attempts_of(id), *n as u32)),
            None => std::str::from_utf8(name)
                .ok()
                .and_then(|n| self.settings.dead_letter.get(n))
                .map(|r| (r.queue.as_bytes().to_vec(), nacks, r.max_nacks)),
        };
        if let Some((to, _, _)) = rule.filter(|(_, failures, n)| failures >= n) {
            // The dead-letter queue may be missing, full or refuse the record, or writes may
            // have stopped: then the record stays in its queue (never lost), and the next
            // failure tries again.
            if let Ok(lsn) = self.dead_letter(inner, name, id, &to) {
                inner.deliveries.forget(name, id);
                inner.deliveries.counters_mut(name).dead_lettered += 1;
                return Ok(Some(lsn));
            }
        }
        let failures = inner.state.queue(name)?.attempts_of(id).max(1);
        let delay = delay.unwrap_or_else(|| rules.retry_delay_after(failures));
        if delay > 0
            && self.layout.dialect == crate::format::dialect::Dialect::Spec
            && self.stopped(inner).is_none()
        {
            // A failed write leaves the record ready at once (never lost).
            let due = super::now_ms().saturating_add(delay);
            if let Ok((_, lsn)) = self.log_and_apply(inner, &[DeltaRef::Failed { name, id, due }]) {
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
        let create = super::queues::create_delta(to, dead_letter_queue);
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
        let attempts = inner.state.queue(name)?.attempts_of(id);
        let lsn = self.log_and_apply(inner, &deltas)?.1;
        self.report_dead_letter(name, id, to, attempts);
        Ok(lsn)
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
            inner.deliveries.acked(name, id);
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
            let mut seen =
                rustc_hash::FxHashSet::with_capacity_and_hasher(items.len(), Default::default());
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
                inner.deliveries.acked(name, id);
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
        self.nack_delayed_logged(name, id, receipt, None)
    }

    /// [`Store::nack`] with a retry delay (spec 12): `None` follows the queue's retry rule
    /// (delay x backoff^(failures-1), capped; ready at once without one), `Some(0)` makes the
    /// record ready at once, `Some(ms)` ready `ms` from now (a logged Failed).
    pub fn nack_delayed(
        &self,
        name: &[u8],
        id: u64,
        receipt: Option<u64>,
        delay_ms: Option<i64>,
    ) -> Result<()> {
        let logged = self.nack_delayed_logged(name, id, receipt, delay_ms)?;
        self.make_durable(logged)
    }

    /// [`Store::nack_delayed`] without the wait for durability.
    pub fn nack_delayed_logged(
        &self,
        name: &[u8],
        id: u64,
        receipt: Option<u64>,
        delay_ms: Option<i64>,
    ) -> Result<Logged> {
        self.refuse_readonly()?;
        if let Some(ms) = delay_ms {
            if ms < 0 {
                return Err(Error::InvalidArgument(format!(
                    "a nack's delay must be >= 0, not {ms} ms"
                )));
            }
            if ms > 0 {
                self.refuse_task_dialect("a nack with a delay")?;
            }
        }
        let moved = {
            let mut inner = self.inner()?;
            self.expire(&mut inner, name, Instant::now());
            if !in_flight(&inner, name, id, receipt)? {
                return Err(not_in_flight(&inner, name, id, receipt));
            }
            inner.deliveries.counters_mut(name).nacked += 1;
            self.delivery_failed(&mut inner, name, id, delay_ms)?
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
pub(super) fn not_in_flight(inner: &Inner, name: &[u8], id: u64, receipt: Option<u64>) -> Error {
    Error::NotInFlight {
        queue: raw_name(name),
        id,
        lease_expired: receipt.is_some_and(|r| inner.deliveries.lease_expired(r)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::rules::QueueRules;

    const SETTINGS: &str = r#"{"DiskFullRatio": 1.0, "SnapshotCreationSegmentsThreshold": 0}"#;

    fn open(base: &std::path::Path) -> Store {
        Store::open(base, Some(SETTINGS), false).unwrap()
    }

    #[test]
    fn a_queue_without_rules_counts_deliveries_in_memory_on_the_single_and_the_batch_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let before = super::super::now_ms();
        let ids = store
            .enqueue_many(b"", &[(1, b"a".as_slice()), (2, b"b")])
            .unwrap();
        let first = store.deliver(b"", Some(Duration::ZERO), None).unwrap();
        let first = first.expect("a ready record");
        assert_eq!((first.record.id, first.attempts), (ids[0], 1));
        assert!(first.enqueued_at.is_some_and(|t| t >= before));
        store.nack(b"", ids[0], Some(first.receipt)).unwrap();
        let both = store
            .deliver_many(b"", 5, Some(Duration::ZERO), None)
            .unwrap();
        let got: Vec<(u64, u32)> = both.iter().map(|d| (d.record.id, d.attempts)).collect();
        assert_eq!(got, vec![(ids[0], 2), (ids[1], 1)]);
        assert_ne!(
            both[0].receipt, first.receipt,
            "a new delivery, a new receipt"
        );
        assert!(
            matches!(
                store.ack(b"", ids[0], Some(first.receipt)),
                Err(Error::NotInFlight { .. })
            ),
            "the earlier delivery's receipt settles nothing"
        );
        let none = store.deliver(b"", Some(Duration::ZERO), None).unwrap();
        assert!(none.is_none(), "both in flight");
    }

    #[test]
    fn a_lease_rule_without_a_dead_letter_rule_leases_each_delivery() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        let rules = QueueRules {
            lease_ms: Some(50),
            ..QueueRules::default()
        };
        store
            .create_queue_with_rules(b"q", Default::default(), &rules, false)
            .unwrap();
        let id = store.enqueue(b"q", 0, b"job").unwrap();
        let first = store.deliver(b"q", Some(Duration::ZERO), None).unwrap();
        assert_eq!(first.map(|d| d.attempts), Some(1));
        // The lease runs out: the record is ready again, and its next delivery is the second.
        let again = store.deliver(b"q", Some(Duration::from_secs(5)), None);
        let again = again.unwrap().expect("back after its lease");
        assert_eq!((again.record.id, again.attempts), (id, 2));
        assert_eq!(store.stats(b"q").unwrap().expired, 1);
    }

    #[test]
    fn an_ack_many_over_several_queues_counts_each_queues_acks() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        store.create_queue(b"a", Default::default()).unwrap();
        store.create_queue(b"b", Default::default()).unwrap();
        for q in [b"a", b"b"] {
            let items = [(0, b"1".as_slice()), (0, b"2"), (0, b"3")];
            store.enqueue_many(q, &items).unwrap();
        }
        let take = |q: &'static [u8]| {
            let d = store
                .deliver(q, Some(Duration::ZERO), None)
                .unwrap()
                .unwrap();
            (q, d.record.id, Some(d.receipt))
        };
        // Interleaved: a, a, b, a (two runs of `a`, one of two records), then b alone.
        let items = [take(b"a"), take(b"a"), take(b"b"), take(b"a")];
        store.ack_many(&items).unwrap();
        store.ack_many(&[take(b"b")]).unwrap();
        let acked = |q: &[u8]| store.stats(q).unwrap().acked;
        assert_eq!((acked(b"a"), acked(b"b")), (3, 2));
    }
}
