//! The one background fsync thread of the "interval" policy (store, channel and `Log.open`
//! alike): it sleeps an interval, runs its tick, and wakes early when its owner closes.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
