//! The pool the scans and bulk reads run on: rayon's global pool in the process that started
//! it, and in a forked child (which has the global pool's bookkeeping but none of its threads:
//! a job handed to it would wait forever) a pool of the child's own, made on first use, so an
//! open in a forked child uses every core as in a fresh process (issue 29).

use std::sync::{Arc, Mutex};

use crate::fork::Birth;

/// Whether rayon's global pool runs in this process, starting it on the first call. Starting
/// it can fail: a process whose address space or thread count was limited after it loaded
/// tflux cannot spawn the pool's threads, and rayon then panics on every later use of the pool
/// (it tries to start it once). A pool already started (by rayon's own first use, or by the
/// program embedding tflux) runs; one whose start failed before tflux first asked cannot be
/// told apart from it.
fn global_runs_here() -> bool {
    static STARTED: std::sync::OnceLock<Option<Birth>> = std::sync::OnceLock::new();
    let started = STARTED.get_or_init(|| {
        let runs = match rayon::ThreadPoolBuilder::new().build_global() {
            Ok(()) => true,
            // "Already started" has no source; a failed start has its I/O error.
            Err(e) => std::error::Error::source(&e).is_none(),
        };
        runs.then(Birth::now)
    });
    started.is_some_and(|born| born.is_here())
}

/// The pool to use: `None` for the global one; a forked child's own otherwise (`Err` when it
/// cannot be made: then nothing runs in parallel).
fn pool() -> Result<Option<Arc<rayon::ThreadPool>>, ()> {
    if global_runs_here() {
        return Ok(None);
    }
    static CHILD: Mutex<Option<(Birth, Option<Arc<rayon::ThreadPool>>)>> = Mutex::new(None);
    let mut child = CHILD.lock().unwrap_or_else(|e| e.into_inner());
    match &*child {
        Some((born, pool)) if born.is_here() => return pool.clone().map(Some).ok_or(()),
        Some(_) => {
            // A forked parent's pool (this is a grandchild): its threads are not here either.
            std::mem::forget(child.take());
        }
        None => {}
    }
    let made = rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("tflux-child-{i}"))
        .build()
        .ok()
        .map(Arc::new);
    *child = Some((Birth::now(), made.clone()));
    made.map(Some).ok_or(())
}

/// Whether work can run on more than the calling thread here.
pub fn available() -> bool {
    pool().is_ok()
}

/// Runs `job` on the pool, in the background.
pub fn spawn(job: impl FnOnce() + Send + 'static) {
    match pool() {
        Ok(Some(pool)) => pool.spawn(job),
        Ok(None) => rayon::spawn(job),
        // Callers check `available` first; should one not, the job runs here.
        Err(()) => job(),
    }
}

/// Runs `f` where rayon's parallel iterators use the pool (the calling thread waits).
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    match pool() {
        Ok(Some(pool)) => pool.install(f),
        _ => f(),
    }
}

/// Threads of the pool.
pub fn threads() -> usize {
    match pool() {
        Ok(Some(pool)) => pool.current_num_threads(),
        Ok(None) => rayon::current_num_threads(),
        Err(()) => 1,
    }
}
