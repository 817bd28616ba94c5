//! Reads of the store's state: counts, peeks, the queues, the log's bounds and the metadata.

use std::sync::Arc;

use crate::base;
use crate::error::{Error, Result};
use crate::format::metadata::Metadata;
use crate::log::Log;
use crate::state::{QueueInfo, QueueState, Record};

use super::open::log_options;
use super::{lock, Store, StoreOptions};

/// A ready record as a listing (`peek`, `records`) shows it: its deliveries so far (failed
/// ones: it is ready again) and when it arrived, as [`Delivery`](super::Delivery) has them.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub record: Record,
    /// Deliveries of the record so far (exact under a dead-letter rule; otherwise counted
    /// since the owner started).
    pub attempts: u32,
    /// When the record was enqueued (unix ms), if this owner saw it (`store::arrivals`).
    pub enqueued_at: Option<i64>,
}

impl Listed {
    /// The record's copy, a probe of the queue's in-flight and failed deliveries (maps that
    /// hold only those records) and a binary search of the queue's arrival table (at most one
    /// entry per 16 records, `store::arrivals`): a listing stays a copy of the records.
    fn of(record: &Record, queue: &crate::state::Queue, at: impl Fn(u64) -> Option<i64>) -> Self {
        Listed {
            attempts: queue.attempts_of(record.id),
            enqueued_at: at(record.id),
            record: record.clone(),
        }
    }
}

impl Store {
    /// Ready records of `name` (in-flight ones are not counted).
    pub fn count(&self, name: &[u8]) -> Result<u64> {
        let mut inner = self.inner()?;
        self.bring_due(&mut inner, name);
        Ok(inner.state.queue(name)?.count())
    }

    /// The record `dequeue` would take next, without taking it.
    pub fn peek(&self, name: &[u8]) -> Result<Option<Record>> {
        let mut inner = self.inner()?;
        self.bring_due(&mut inner, name);
        Ok(inner.state.queue_mut(name)?.peek().cloned())
    }

    /// [`Store::peek`] with the record's attempts and enqueue time (`Request::Peek`).
    pub fn peek_listed(&self, name: &[u8]) -> Result<Option<Listed>> {
        let mut inner = self.inner()?;
        self.bring_due(&mut inner, name);
        let inner = &mut *inner;
        let q = inner.state.queue_mut(name)?;
        let Some(r) = q.peek().cloned() else {
            return Ok(None);
        };
        Ok(Some(Listed::of(&r, q, inner.arrivals.of(name))))
    }

    /// Read-only stores: catches up with the writer's log, applying the records it appended
    /// since the open (or the last refresh). Reopens from the snapshot instead when the writer
    /// compacted away records this store has not seen. Returns the deltas applied.
    pub fn refresh(&self) -> Result<u64> {
        if !self.readonly {
            return Err(Error::InvalidArgument(
                "refresh() is for read-only stores (a writable store is always current)".into(),
            ));
        }
        let mut inner = self.inner()?;
        let seen = inner.log.last_index().max(inner.snapshot_index);
        if !inner.stale {
            let opts = log_options(&self.settings, true, &self.storage, self.layout.dialect);
            let mut log = Log::prepare(&self.layout.log, opts)?.open()?;
            // The log still holds everything after what this store applied: replay the rest.
            if log.start_index() <= seen + 1 && log.last_index() >= seen {
                // A failure leaves a state that only a full reopen can repair.
                inner.stale = true;
                let applied = base::replay(&mut inner.state, &mut log, seen)?;
                log.unmap_sealed();
                inner.log = log;
                inner.stale = false;
                return Ok(applied);
            }
        }
        let opts = StoreOptions {
            readonly: true,
            storage: Arc::clone(&self.storage),
            ..StoreOptions::default()
        };
        let fresh = Store::open_with(&self.layout.base, self.overrides.as_deref(), opts)?;
        std::mem::swap(&mut *inner, &mut *lock(&fresh.inner));
        drop(inner);
        // `fresh` now holds the old state and log: closing it releases them.
        let applied = fresh.report.replayed;
        drop(fresh);
        Ok(applied)
    }

    /// Every queue with its ready and in-flight counts, each queue brought up to now first as
    /// a read of that one queue is ([`Store::count`]): a delayed record that came due counts as
    /// ready, as the next dequeue would take it.
    pub fn queues(&self) -> Result<Vec<QueueInfo>> {
        let mut inner = self.inner()?;
        let names: Vec<String> = inner.state.infos().into_iter().map(|q| q.name).collect();
        for name in names {
            self.bring_due(&mut inner, name.as_bytes());
        }
        Ok(inner.state.infos())
    }

    /// Ready records of a queue in dequeue order: `(id, key, data)`.
    pub fn peek_all(&self, name: &[u8]) -> Result<Vec<Record>> {
        let mut inner = self.inner()?;
        self.bring_due(&mut inner, name);
        let q = inner.state.queue(name)?;
        Ok(q.ready_in_order().into_iter().cloned().collect())
    }

    /// [`Store::peek_all`] with each record's attempts and enqueue time (`Request::PeekAll`).
    pub fn peek_all_listed(&self, name: &[u8]) -> Result<Vec<Listed>> {
        let mut inner = self.inner()?;
        self.bring_due(&mut inner, name);
        let q = inner.state.queue(name)?;
        let at = inner.arrivals.of(name);
        Ok(q.ready_in_order()
            .into_iter()
            .map(|r| Listed::of(r, q, &at))
            .collect())
    }

    /// Runs `f` on the state under the lock (inspection, snapshot export).
    pub fn with_state<T>(&self, f: impl FnOnce(&QueueState) -> T) -> Result<T> {
        Ok(f(&self.inner()?.state))
    }

    /// `(start, last, snapshot index)` of the log.
    pub fn log_bounds(&self) -> Result<(i64, i64, i64)> {
        let inner = self.inner()?;
        Ok((
            inner.log.start_index(),
            inner.log.last_index(),
            inner.snapshot_index,
        ))
    }

    pub fn metadata(&self) -> Result<Metadata> {
        Ok(self.inner()?.metadata)
    }
}
