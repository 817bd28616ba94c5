//! Fork safety (issue 29): an object of the core belongs to the process that made it.
//!
//! After `fork()` the child has a copy of the parent's memory but none of its threads (the
//! group commit, the interval fsync, rayon's pool), and shares its open files: a child that
//! appended through its copy of a log would write at the same offsets as the parent, and one
//! that waited on a thread of the parent would wait forever. So the child's copy refuses every
//! use with [`Error::Forked`], and its close or drop lets go of it without writing.
//!
//! A process-wide counter bumped by a `pthread_atfork` child handler tells the copies apart with
//! one atomic load, not a `getpid` system call on every call. The same handler draws the
//! child's own [`process_key`]: what a process hands out as unique (receipts) must differ
//! from what its parent and its siblings, which start from the same copied memory, hand out.

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, Ordering};
use std::sync::Once;

use crate::error::{Error, Result};

/// How many forks lie between the first process that loaded tflux and this one.
static FORKS: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

/// Descriptors a forked child must not keep: the directory locks and the owner's sockets
/// (`crate::share`). A child's copy would keep a dead parent's lock held, its listening socket
/// accepting into a backlog nobody reads, and its clients' connections open (so they never see
/// the owner go). -1 marks a free slot.
const CHILD_CLOSES: usize = 4096;
static CLOSE_IN_CHILD: [AtomicI32; CHILD_CLOSES] = [const { AtomicI32::new(-1) }; CHILD_CLOSES];

/// This process's random key (see [`process_key`]); 0 until drawn.
static KEY: AtomicU64 = AtomicU64::new(0);

/// Runs in the child right after `fork()`, while it has one thread.
extern "C" fn in_child() {
    FORKS.fetch_add(1, Ordering::Relaxed);
    // getrandom is a plain system call (no lock, no allocation): safe here.
    KEY.store(random_u64(), Ordering::Relaxed);
    for slot in &CLOSE_IN_CHILD {
        let fd = slot.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            // SAFETY: close is async-signal-safe; the descriptor is the child's copy of one
            // registered by `ParentOnly`, whose drop in this child will not close it again.
            unsafe { libc::close(fd) };
        }
    }
}

fn generation() -> u64 {
    REGISTER.call_once(|| {
        KEY.store(random_u64(), Ordering::Relaxed);
        // SAFETY: registers a handler that only bumps an atomic (async-signal-safe). It can
        // fail only for lack of memory; the generation then never changes (as without fork
        // safety), which the process survives.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    FORKS.load(Ordering::Relaxed)
}

/// 64 bits from the kernel's random source (`getrandom`, never blocking); should it fail
/// (no such system call), the clock, the process id and a counter mixed, which still differ
/// between processes and calls.
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: writes at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), libc::GRND_NONBLOCK) };
    if n == buf.len() as isize {
        return u64::from_ne_bytes(buf);
    }
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mixed = nanos
        ^ (u64::from(std::process::id()) << 40)
        ^ CALLS.fetch_add(1, Ordering::Relaxed).rotate_left(24);
    // splitmix64's finaliser: nearby inputs give unrelated outputs.
    let mut z = mixed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random 64-bit key of this process, drawn anew in every forked child (before any of its
/// code runs): numbers this process hands out from a counter copied by `fork()` are made
/// unique across processes by adding it (`state::next_incarnation`).
pub fn process_key() -> u64 {
    generation();
    KEY.load(Ordering::Relaxed)
}

/// The process an object was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Birth(u64);

impl Birth {
    /// This process (registering the fork handler on first use, before any fork can matter).
    pub fn now() -> Birth {
        Birth(generation())
    }

    /// Whether this is still the process the object was made in.
    pub fn is_here(self) -> bool {
        generation() == self.0
    }

    /// [`Error::Forked`] for the `what` (a store, a log, a channel) made before a fork.
    pub fn check(self, what: &'static str) -> Result<()> {
        if self.is_here() {
            Ok(())
        } else {
            Err(Error::Forked { what })
        }
    }
}

/// A descriptor closed in every process forked from this one, right at the fork (before any
/// code of the child runs), so that a lock or socket never outlives its owner through a child.
/// In the process that made it, it is an ordinary owned descriptor.
#[derive(Debug)]
pub struct ParentOnly<F: AsRawFd> {
    file: std::mem::ManuallyDrop<F>,
    slot: Option<usize>,
    born: Birth,
}

impl<F: AsRawFd> ParentOnly<F> {
    pub fn new(file: F) -> ParentOnly<F> {
        let born = Birth::now();
        let fd = file.as_raw_fd();
        // With every slot taken (thousands of locks and sockets) the descriptor is simply not
        // closed in children: the behaviour without this guard, never worse.
        let slot = CLOSE_IN_CHILD.iter().position(|s| {
            s.compare_exchange(-1, fd, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        });
        ParentOnly {
            file: std::mem::ManuallyDrop::new(file),
            slot,
            born,
        }
    }
}

impl<F: AsRawFd> std::ops::Deref for ParentOnly<F> {
    type Target = F;
    fn deref(&self) -> &F {
        &self.file
    }
}

impl<F: AsRawFd> Drop for ParentOnly<F> {
    fn drop(&mut self) {
        if !self.born.is_here() && self.slot.is_some() {
            // The fork handler closed this process's copy; its number may be reused by now.
            return;
        }
        if let Some(slot) = self.slot {
            CLOSE_IN_CHILD[slot].store(-1, Ordering::Relaxed);
        }
        // SAFETY: dropped once, here.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.file) };
    }
}

/// A value of this process, made on first use and made anew in a forked child: the child
/// never touches its parent's copy, whose locks may be held by threads the child does not
/// have (and whose threads the child does not run). The parent's copy is let go of, never
/// freed. For process-wide state with a lock or a thread of its own (the event tallies of
/// [`crate::events`], the Python module's log bridge).
pub struct PerProcess<T: Send + Sync + 'static> {
    current: AtomicPtr<(Birth, T)>,
    make: fn() -> T,
}

impl<T: Send + Sync + 'static> PerProcess<T> {
    pub const fn new(make: fn() -> T) -> PerProcess<T> {
        PerProcess {
            current: AtomicPtr::new(std::ptr::null_mut()),
            make,
        }
    }

    /// This process's value.
    pub fn get(&self) -> &'static T {
        loop {
            let seen = self.current.load(Ordering::Acquire);
            // SAFETY: every pointer stored comes from `Box::leak` below and is never freed.
            if let Some((born, value)) = unsafe { seen.as_ref() } {
                if born.is_here() {
                    return value;
                }
            }
            let fresh: *mut (Birth, T) = Box::leak(Box::new((Birth::now(), (self.make)())));
            match self
                .current
                .compare_exchange(seen, fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                // SAFETY: leaked just above, never freed.
                Ok(_) => return unsafe { &(*fresh).1 },
                // Another thread made this process's first: ours was never shared.
                // SAFETY: `fresh` came from `Box::leak` above and nothing else saw it.
                Err(_) => drop(unsafe { Box::from_raw(fresh) }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_birth_is_here_until_a_fork_and_refused_in_the_child() {
        let born = Birth::now();
        assert!(born.is_here());
        assert!(born.check("log").is_ok());
        // SAFETY: the child only runs code that neither allocates nor locks before `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = match (born.is_here(), Birth::now().is_here()) {
                (false, true) => 0,
                _ => 1,
            };
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert!(born.is_here(), "the parent's objects stay its own");
    }

    #[test]
    fn a_per_process_value_is_made_once_and_anew_in_a_forked_child() {
        static VALUE: PerProcess<std::sync::Mutex<u32>> =
            PerProcess::new(|| std::sync::Mutex::new(0));
        *VALUE.get().lock().unwrap() += 1;
        assert_eq!(*VALUE.get().lock().unwrap(), 1, "one value per process");
        // Held across the fork: the child's copy of this lock stays locked for good.
        let held = VALUE.get().lock().unwrap();
        // SAFETY: the child allocates its fresh value (glibc's malloc takes its own locks
        // across fork) and takes only that value's lock before `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = match VALUE.get().try_lock() {
                Ok(v) if *v == 0 => 0,
                _ => 1,
            };
            unsafe { libc::_exit(code) };
        }
        drop(held);
        let mut status = 0;
        // SAFETY: waits for the child just made.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(*VALUE.get().lock().unwrap(), 1, "the parent keeps its own");
    }

    #[test]
    fn a_forked_child_draws_a_process_key_of_its_own() {
        let parent = process_key();
        assert_eq!(process_key(), parent, "the key stays in one process");
        // SAFETY: the child only reads an atomic before `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = i32::from(KEY.load(Ordering::Relaxed) == parent);
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just made.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(process_key(), parent);
    }
}
