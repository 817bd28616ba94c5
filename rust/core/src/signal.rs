//! A condition variable whose notify costs nothing when nobody waits.
//!
//! `std::sync::Condvar::notify_all` makes a `futex` system call every time, waiters or not;
//! the store notifies on every enqueue, and an owner serving other processes enqueues tens of
//! thousands of times a second with, most of the time, no consumer waiting in this process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, MutexGuard};
use std::time::Duration;

#[derive(Default)]
pub struct Signal {
    changed: Condvar,
    /// Threads inside `wait_timeout`. Counted while the waiter still holds the mutex, so a
    /// notifier that changed the state under that mutex afterwards sees the count.
    waiters: AtomicUsize,
}

impl Signal {
    pub fn new() -> Signal {
        Signal::default()
    }

    /// Wakes every waiter (call after changing, under the waiters' mutex, what they wait for).
    pub fn notify_all(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.changed.notify_all();
        }
    }

    /// Waits for a notify or `timeout`, as `Condvar::wait_timeout` (a poisoned mutex is
    /// taken over: the state it guards is checked by the caller anyway).
    pub fn wait_timeout<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> MutexGuard<'a, T> {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let guard = self
            .changed
            .wait_timeout(guard, timeout)
            .unwrap_or_else(|e| e.into_inner())
            .0;
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[test]
    fn a_waiter_counted_before_it_waits_is_woken_by_a_later_notify() {
        let pair = Arc::new((Mutex::new(false), Signal::new()));
        let waiter = {
            let pair = pair.clone();
            std::thread::spawn(move || {
                let (m, s) = &*pair;
                let mut ready = m.lock().unwrap();
                let started = std::time::Instant::now();
                while !*ready {
                    ready = s.wait_timeout(ready, Duration::from_secs(30));
                }
                started.elapsed()
            })
        };
        while pair.1.waiters.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        *pair.0.lock().unwrap() = true;
        pair.1.notify_all();
        assert!(
            waiter.join().unwrap() < Duration::from_secs(10),
            "woken by the notify"
        );
        assert_eq!(pair.1.waiters.load(Ordering::SeqCst), 0);
    }
}
