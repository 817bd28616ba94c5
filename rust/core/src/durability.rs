//! When appended entries become durable, shared by the store and the channel: group commit for
//! the "always" policy (the first waiter fsyncs for everyone who appended before it started)
//! and the sleeping loop of the "interval" policy's background thread.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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

/// Wakes a background thread early when its owner closes, so close never waits out an
/// interval (however long the setting).
#[derive(Default)]
pub struct Stopper {
    stopped: Mutex<bool>,
    wake: Condvar,
}

impl Stopper {
    pub fn stop(&self) {
        *lock(&self.stopped) = true;
        self.wake.notify_all();
    }

    /// Sleeps `every`; true when stopped meanwhile (or before).
    pub fn sleep(&self, every: Duration) -> bool {
        // An interval too long to add to now (a huge setting) waits for the stop alone.
        let deadline = Instant::now().checked_add(every);
        let mut flag = lock(&self.stopped);
        while !*flag {
            let left = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left,
                    _ => return false,
                },
                None => Duration::from_secs(3600),
            };
            flag = self
                .wake
                .wait_timeout(flag, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

/// Runs `tick` every `every` on a new thread until `stopper` stops or `tick` returns false.
pub fn spawn_interval(
    stopper: Arc<Stopper>,
    every: Duration,
    tick: impl Fn() -> bool + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || loop {
        if stopper.sleep(every) || !tick() {
            return;
        }
    })
}
