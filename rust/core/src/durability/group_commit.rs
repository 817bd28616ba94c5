//! Group commit for the "always" policy, shared by the store and the channel: the first waiter
//! fsyncs for everyone who appended before it started.

use std::sync::{Condvar, Mutex, MutexGuard};

use crate::error::{Error, PoisonCause, Result};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Default)]
struct SyncState {
    synced: i64,
    syncing: bool,
    error: Option<PoisonCause>,
    stop: bool,
}

/// A change that is in the log and applied, whose durability nobody has waited for yet: the
/// owner's server answers a batch of requests from several clients with one wait (one group
/// commit for all of them) instead of a wait per request. [`Logged::NOTHING`] wrote nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use = "a logged change is durable only once it is waited for"]
pub struct Logged(Option<i64>);

impl Logged {
    pub const NOTHING: Logged = Logged(None);

    pub fn at(lsn: i64) -> Logged {
        Logged(Some(lsn))
    }

    /// The last LSN to wait for, if anything was written.
    pub fn lsn(self) -> Option<i64> {
        self.0
    }

    /// What covers both: waiting for it makes both durable.
    pub fn and(self, other: Logged) -> Logged {
        Logged(self.0.max(other.0))
    }
}

/// Group commit: waiters for durability share one fsync.
#[derive(Default)]
pub struct GroupCommit {
    state: Mutex<SyncState>,
    changed: Condvar,
}

impl GroupCommit {
    /// Everything up to `synced` is durable already.
    pub fn new(synced: i64) -> GroupCommit {
        GroupCommit {
            state: Mutex::new(SyncState {
                synced,
                ..SyncState::default()
            }),
            changed: Condvar::new(),
        }
    }

    /// Why an fsync failed, if one did (after which no durability is ever claimed again).
    pub fn error(&self) -> Option<PoisonCause> {
        lock(&self.state).error.clone()
    }

    /// Marks the owner as closing (the interval thread stops at its next wake-up).
    pub fn stop(&self) {
        lock(&self.state).stop = true;
    }

    pub fn stopped(&self) -> bool {
        lock(&self.state).stop
    }

    /// Records an fsync made by someone else (close) that covers everything up to `last`.
    pub fn mark_synced(&self, last: i64) {
        let mut st = lock(&self.state);
        st.synced = st.synced.max(last);
        self.changed.notify_all();
    }

    /// Waits until `lsn` is durable. The first waiter to arrive calls `sync` (outside every
    /// lock of this struct), which fsyncs and returns the last LSN its fsync covered; later
    /// appends wait for the next one.
    pub fn wait(&self, lsn: i64, sync: impl Fn() -> Result<i64>) -> Result<()> {
        let mut st = lock(&self.state);
        loop {
            if st.synced >= lsn {
                return Ok(());
            }
            if let Some(cause) = &st.error {
                return Err(Error::Poisoned {
                    cause: cause.clone(),
                });
            }
            if st.syncing {
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            st.syncing = true;
            drop(st);
            let outcome = sync();
            st = lock(&self.state);
            st.syncing = false;
            match outcome {
                Ok(last) => st.synced = st.synced.max(last),
                Err(e) => st.error = Some(PoisonCause::from_error(&e)),
            }
            self.changed.notify_all();
        }
    }
}
