//! Task-queue operations (spec section 12; issue 44): queue rules, delayed records, counted
//! deliveries, lease extension, purge and live statistics. Every rule is logged (the deltas of
//! `format::delta`, applied by `state::tasks`), so every process and a restart obey the same
//! ones. The taskflux dialect holds none of it: every call here that would write a task-queue
//! delta there is refused before anything is written.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::durability::group_commit::Logged;
use crate::error::{Error, Result};
use crate::format::delta::DeltaRef;
use crate::format::dialect::Dialect;
use crate::format::queue::QueueConfig;
use crate::format::rules::{QueueRules, RulesChange};
use crate::state::Applied;

use super::Store;

/// The clock delays are measured against: unix time in milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A delay in seconds (from a caller) as milliseconds: refused when negative or not a number.
pub fn delay_ms(seconds: f64, what: &str) -> Result<i64> {
    if seconds.is_nan() || seconds < 0.0 {
        return Err(Error::InvalidArgument(format!(
            "{what} must be a number of seconds >= 0, not {seconds}"
        )));
    }
    // `as` saturates: an infinite delay is the largest time there is.
    Ok((seconds * 1000.0).round() as i64)
}

/// A queue's live figures (`Store::stats`): what it holds now, and what happened to it since
/// this store opened (in memory, not logged).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub ready: u64,
    pub delayed: u64,
    pub in_flight: u64,
    pub dead_lettered: u64,
    /// How long the oldest ready record has waited (ms); `None`: no ready record, or the
    /// oldest was restored from the files (`store::arrivals`).
    pub oldest_ready_age_ms: Option<u64>,
    pub enqueued: u64,
    pub acked: u64,
    pub nacked: u64,
    pub expired: u64,
}

/// A dead-letter rule: the queue and the deliveries N.
type DeadLetterRule = (Vec<u8>, i32);

/// One delivery handed out by [`Store::deliver`].
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub record: crate::state::Record,
    /// Settles this delivery only (see [`Store::dequeue`]).
    pub receipt: u64,
    /// Deliveries of the record so far, this one included.
    pub attempts: u32,
    /// When the record was enqueued (unix ms); `None` when it was before this owner started
    /// (`store::arrivals`).
    pub enqueued_at: Option<i64>,
}

impl Store {
    /// Refuses, before anything is written, a task-queue argument on a base whose dialect
    /// cannot hold it (spec 12: TaskFlux has four deltas).
    pub(super) fn refuse_task_dialect(&self, what: &str) -> Result<()> {
        match self.layout.dialect {
            Dialect::Spec => Ok(()),
            other => Err(Error::InvalidArgument(format!(
                "the {} dialect cannot hold {what} (task-queue rules, delays and delivery \
                 counts are spec-dialect deltas, spec 12); nothing was written",
                other.name()
            ))),
        }
    }

    /// The `DeadLetter` setting's rule for queue `name` as a logged rule would hold it, when
    /// the dialect can log it (spec only): the setting is a way to set the queue's rule.
    pub(super) fn dead_letter_setting(&self, name: &[u8]) -> Option<(Vec<u8>, i32)> {
        if self.layout.dialect != Dialect::Spec {
            return None;
        }
        let rule = self
            .settings
            .dead_letter
            .get(std::str::from_utf8(name).ok()?)?;
        let n = i32::try_from(rule.max_nacks).ok()?;
        Some((rule.queue.as_bytes().to_vec(), n))
    }

    /// Sets the logged dead-letter rule of every existing queue that a `DeadLetter` setting
    /// names, where it differs (one write); queues created later take theirs at create.
    pub(super) fn route_dead_letter_settings(&self) -> Result<()> {
        if self.settings.dead_letter.is_empty() || self.layout.dialect != Dialect::Spec {
            return Ok(());
        }
        let lsn = {
            let mut inner = self.writable()?;
            let routed: Vec<(Vec<u8>, DeadLetterRule)> = self
                .settings
                .dead_letter
                .keys()
                .filter_map(|from| {
                    let rule = self.dead_letter_setting(from.as_bytes())?;
                    let q = inner.state.queue(from.as_bytes()).ok()?;
                    let changed = q.rules().dead_letter.as_ref() != Some(&rule);
                    changed.then(|| (from.as_bytes().to_vec(), rule))
                })
                .collect();
            if routed.is_empty() {
                return Ok(());
            }
            let deltas: Vec<DeltaRef<'_>> = routed
                .iter()
                .map(|(name, (to, n))| DeltaRef::QueueRules {
                    name,
                    change: RulesChange {
                        dead_letter: Some(Some((to.as_slice(), *n))),
                        ..RulesChange::default()
                    },
                })
                .collect();
            self.log_and_apply(&mut inner, &deltas)?.1
        };
        self.after_write(lsn)
    }

    /// [`Store::create_queue_as`] with rules (logged with the CreateQueue in one write). With
    /// `exist_ok`, a queue with the same settings and rules is not an error (nothing written).
    pub fn create_queue_with_rules(
        &self,
        name: &[u8],
        config: QueueConfig,
        rules: &QueueRules,
        exist_ok: bool,
    ) -> Result<bool> {
        if rules.is_empty() {
            return self.create_queue_as(name, config, exist_ok);
        }
        self.refuse_task_dialect("queue rules")?;
        rules.check(name).map_err(Error::InvalidArgument)?;
        let lsn = {
            let mut inner = self.writable()?;
            if exist_ok
                && inner
                    .state
                    .queue(name)
                    .is_ok_and(|q| q.config() == config && q.rules() == rules)
            {
                return Ok(false);
            }
            inner.state.check_create(name, &config)?;
            let create = super::queues::create_delta(name, config);
            let set = DeltaRef::QueueRules {
                name,
                change: rules.as_change(),
            };
            self.log_and_apply(&mut inner, &[create, set])?.1
        };
        self.after_write(lsn).map(|()| true)
    }

    /// Changes the rules `change` names (logged); the others stay. Checked before anything
    /// is written; a change that changes nothing writes nothing.
    pub fn set_queue_rules(&self, name: &[u8], change: &RulesChange<&[u8]>) -> Result<()> {
        self.refuse_task_dialect("queue rules")?;
        let lsn = {
            let mut inner = self.writable()?;
            let q = inner.state.queue(name)?;
            let rules = q.rules().changed(change);
            rules.check(name).map_err(Error::InvalidArgument)?;
            if &rules == q.rules() {
                return Ok(());
            }
            let delta = DeltaRef::QueueRules {
                name,
                change: change.clone(),
            };
            self.log_and_apply(&mut inner, &[delta])?.1
        };
        self.after_write(lsn)
    }

    /// The rules of queue `name`.
    pub fn queue_rules(&self, name: &[u8]) -> Result<QueueRules> {
        Ok(self.inner()?.state.queue(name)?.rules().clone())
    }

    /// [`Store::enqueue_many`] of records not delivered before `not_before` (unix ms): a time
    /// already past writes plain AddRecords (the records are ready at once).
    pub fn enqueue_many_at(
        &self,
        name: &[u8],
        items: &[(i64, &[u8])],
        not_before: i64,
    ) -> Result<Vec<u64>> {
        let (ids, logged) = self.enqueue_many_at_logged(name, items, not_before)?;
        self.make_durable(logged)?;
        Ok(ids)
    }

    /// [`Store::enqueue_many_at`] without the wait for durability.
    pub fn enqueue_many_at_logged(
        &self,
        name: &[u8],
        items: &[(i64, &[u8])],
        not_before: i64,
    ) -> Result<(Vec<u64>, Logged)> {
        if not_before <= now_ms() {
            return self.enqueue_many_logged(name, items);
        }
        self.refuse_task_dialect("a delayed record")?;
        self.enqueue_many_in(name, items, Some(not_before))
    }

    /// Extends the lease of an in-flight delivery: it now ends `lease` from now.
    /// `NotInFlight` when the delivery is over (acked, nacked, expired).
    pub fn extend(
        &self,
        name: &[u8],
        id: u64,
        receipt: Option<u64>,
        lease: Duration,
    ) -> Result<()> {
        let mut inner = self.inner()?;
        let now = Instant::now();
        self.expire(&mut inner, name, now);
        if !super::deliver::in_flight(&inner, name, id, receipt)? {
            return Err(super::deliver::not_in_flight(&inner, name, id, receipt));
        }
        let until = now
            .checked_add(lease)
            .ok_or_else(|| Error::InvalidArgument(format!("lease of {lease:?} is too long")))?;
        inner.deliveries.lease(name, id, until);
        drop(inner);
        // A waiter may be sleeping until the old expiry: it recomputes its wait.
        self.ready.notify_all();
        Ok(())
    }

    /// Removes every ready and delayed record of `name` (one logged write); records in flight
    /// stay, for their takers to settle. Returns how many went.
    pub fn purge(&self, name: &[u8]) -> Result<u64> {
        let (gone, lsn) = {
            let mut inner = self.writable()?;
            self.expire(&mut inner, name, Instant::now());
            let q = inner.state.queue(name)?;
            if q.count() + q.delayed_count() == 0 {
                return Ok(0);
            }
            self.refuse_task_dialect("a purge")?;
            let kept = q.in_flight_ids();
            let delta = DeltaRef::Purge {
                name,
                kept: crate::format::delta::Ids::List(&kept),
            };
            let (applied, lsn) = self.log_and_apply(&mut inner, &[delta])?;
            let gone = match applied.first() {
                Some(Applied::Purged(n)) => *n,
                _ => 0,
            };
            (gone, lsn)
        };
        self.after_write(lsn)?;
        Ok(gone)
    }

    /// The live figures of queue `name`.
    pub fn stats(&self, name: &[u8]) -> Result<QueueStats> {
        let mut inner = self.inner()?;
        self.bring_due(&mut inner, name);
        let q = inner.state.queue(name)?;
        let c = inner.deliveries.counters(name);
        let oldest = q
            .oldest_ready_id()
            .and_then(|id| inner.arrivals.at(name, id));
        Ok(QueueStats {
            ready: q.count(),
            delayed: q.delayed_count(),
            in_flight: q.in_flight_count(),
            dead_lettered: c.dead_lettered,
            oldest_ready_age_ms: oldest.map(|at| now_ms().saturating_sub(at).max(0) as u64),
            enqueued: c.enqueued,
            acked: c.acked,
            nacked: c.nacked,
            expired: c.expired,
        })
    }
}
