//! The core's events (`tflux_core::events`, through the `log` crate) to Python's `logging`
//! module, logger `tflux` and its children (`tflux.share`, `tflux.store`, `tflux.log`), handed
//! over by pyo3-log.
//!
//! The core reports from wherever its rule lives: a caller's thread with the GIL released, the
//! owner's server threads, a thread holding a store's lock. Taking the GIL there could wait
//! forever (a Python thread holding the GIL may wait for that very lock), so reporting never
//! touches Python: an event goes into this process's queue, and is handed to `logging` either
//! by the thread of a call into `tflux` as it returns to Python (`deliver`, from
//! `errors::py_result`: the events of a call are logged before it returns), or by a thread of
//! this module that takes the GIL holding nothing else (events of background threads). At
//! exit, what waits is handed over before `logging` shuts down. A forked child starts with a
//! queue and a thread of its own (`PerProcess`): its parent's queue is the parent's.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, Once, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use ::log::{Level, LevelFilter, Log, Metadata, Record};
use pyo3::prelude::*;
use tflux_core::fork::PerProcess;

/// One event, owned, to be handed to Python later.
struct Event {
    target: String,
    level: Level,
    message: String,
    module_path: Option<&'static str>,
    file: Option<&'static str>,
    line: Option<u32>,
}

/// This process's events not yet handed to `logging`, and its thread that hands them over.
struct Queue {
    state: Mutex<State>,
    /// `state.events.len()`, read without the lock (the check of every call's return).
    waiting: AtomicUsize,
    /// A thread is handing events over (`State::delivering` is set), read without the lock: a
    /// call whose events that thread drained waits until they are logged.
    busy: AtomicBool,
    /// An event arrived, the thread finished a hand-over, or the interpreter exits.
    changed: Condvar,
    thread: Once,
}

#[derive(Default)]
struct State {
    events: VecDeque<Event>,
    /// The thread is taking the GIL or holds it.
    handing_over: bool,
    /// The thread handing events to `logging` now. One at a time, so that they arrive in
    /// order: `logging`'s handlers may let the GIL go (Python switches threads every few ms),
    /// and a second thread draining the queue meanwhile would log its later events first.
    delivering: Option<ThreadId>,
    /// The interpreter exits: the thread no longer takes the GIL (one that does while the
    /// interpreter finalises is stopped by CPython in the middle of Rust code, and the process
    /// aborts).
    exiting: bool,
}

/// The most events that wait: should Python never take them (the GIL held for minutes), the
/// oldest are dropped rather than memory grown without bound; a line says how many.
const MOST_WAITING: usize = 10_000;

static QUEUE: PerProcess<Queue> = PerProcess::new(|| Queue {
    state: Mutex::new(State::default()),
    waiting: AtomicUsize::new(0),
    busy: AtomicBool::new(false),
    changed: Condvar::new(),
    thread: Once::new(),
});

/// pyo3-log's logger, not installed as `log`'s: it hands one event to `logging` (with the GIL).
/// No caching: levels set later (`caplog`, `dictConfig`) apply; events are few.
static PYTHON: OnceLock<pyo3_log::Logger> = OnceLock::new();

/// Events dropped for want of room since the last handed over.
static DROPPED: AtomicUsize = AtomicUsize::new(0);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `log`'s logger in this module: queues every event (see the module's note).
struct Bridge;

static BRIDGE: Bridge = Bridge;

impl Log for Bridge {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target().starts_with("tflux")
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let event = Event {
            target: record.target().to_string(),
            level: record.level(),
            message: record.args().to_string(),
            module_path: record.module_path_static(),
            file: record.file_static(),
            line: record.line(),
        };
        let queue = QUEUE.get();
        {
            let mut state = lock(&queue.state);
            if state.events.len() >= MOST_WAITING {
                state.events.pop_front();
                DROPPED.fetch_add(1, Ordering::Relaxed);
            }
            state.events.push_back(event);
            queue.waiting.store(state.events.len(), Ordering::Release);
        }
        queue.thread.call_once(|| start(queue));
        queue.changed.notify_all();
    }

    fn flush(&self) {}
}

/// Starts the thread that hands over events when no call returning to Python does.
fn start(queue: &'static Queue) {
    let _ = std::thread::Builder::new()
        .name("tflux-logging".into())
        .spawn(move || loop {
            {
                let mut state = lock(&queue.state);
                while state.events.is_empty() && !state.exiting {
                    state = queue.changed.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                if state.exiting {
                    return;
                }
                state.handing_over = true;
            }
            // Nothing is held while waiting for the GIL (`deliver` takes the queue's lock
            // with the GIL held).
            let attached = Python::try_attach(deliver).is_some();
            lock(&queue.state).handing_over = false;
            queue.changed.notify_all();
            if !attached {
                return;
            }
        });
}

/// How long a call returning to Python waits for another thread's hand-over to end before it
/// returns without logging its own events (that thread logs them next, in order): a handler
/// that blocks (a network handler, a full pipe) delays calls by at most this.
const WAIT_FOR_HAND_OVER: Duration = Duration::from_secs(2);

/// Hands every waiting event to `logging` (in order), with the GIL held and no lock of the
/// core: a call's own events before it returns to Python, or the thread's. One thread at a
/// time (`State::delivering`); the one that does hands over until the queue is empty, so an
/// event is never left behind by a thread that gave up its turn. An exception a handler
/// raises is reported as unraisable, never left set.
pub fn deliver(py: Python<'_>) {
    let queue = QUEUE.get();
    if queue.waiting.load(Ordering::Acquire) == 0 && !queue.busy.load(Ordering::Acquire) {
        return;
    }
    let Some(python) = PYTHON.get() else {
        return;
    };
    let me = std::thread::current().id();
    // A handler that calls into tflux comes back here on the delivering thread: its events
    // are logged when the hand-over it interrupted goes on.
    if lock(&queue.state).delivering == Some(me) {
        return;
    }
    // Waits for another thread's hand-over without the GIL, which that thread needs.
    let my_turn = py.detach(|| {
        let deadline = Instant::now() + WAIT_FOR_HAND_OVER;
        let mut state = lock(&queue.state);
        while state.delivering.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = queue
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        state.delivering = Some(me);
        queue.busy.store(true, Ordering::Release);
        true
    });
    if !my_turn {
        return;
    }
    let _turn = Turn(queue);
    let earlier = PyErr::take(py);
    loop {
        let events: Vec<Event> = {
            let mut state = lock(&queue.state);
            queue.waiting.store(0, Ordering::Release);
            state.events.drain(..).collect()
        };
        let dropped = DROPPED.swap(0, Ordering::Relaxed);
        if events.is_empty() && dropped == 0 {
            break;
        }
        if dropped > 0 {
            hand_over(
                py,
                python,
                &Event {
                    target: tflux_core::events::STORE.to_string(),
                    level: Level::Warn,
                    message: format!(
                        "{dropped} tflux log events were dropped: Python did not take them in time"
                    ),
                    module_path: None,
                    file: None,
                    line: None,
                },
            );
        }
        for event in &events {
            hand_over(py, python, event);
        }
    }
    if let Some(e) = earlier {
        e.restore(py);
    }
}

/// The turn of the thread handing events over: given up (and the waiters woken) however the
/// hand-over ends.
struct Turn(&'static Queue);

impl Drop for Turn {
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        state.delivering = None;
        self.0.busy.store(false, Ordering::Release);
        drop(state);
        self.0.changed.notify_all();
    }
}

fn hand_over(py: Python<'_>, python: &pyo3_log::Logger, event: &Event) {
    python.log(
        &Record::builder()
            .target(&event.target)
            .level(event.level)
            .args(format_args!("{}", event.message))
            .module_path_static(event.module_path)
            .file_static(event.file)
            .line(event.line)
            .build(),
    );
    if let Some(e) = PyErr::take(py) {
        e.write_unraisable(py, None);
    }
}

/// At interpreter exit (`atexit`, before `logging` shuts down): the thread stops taking the
/// GIL (waited for, without the GIL, if it is handing events over), and the summed lines still
/// waiting and every queued event go to `logging` now, from this thread.
#[pyfunction]
fn _flush_log_at_exit(py: Python<'_>) {
    let queue = QUEUE.get();
    py.detach(|| {
        let mut state = lock(&queue.state);
        state.exiting = true;
        queue.changed.notify_all();
        while state.handing_over {
            state = queue.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    });
    tflux_core::events::flush();
    deliver(py);
}

/// Installs the bridge (once per process: the module is imported once).
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    let python = pyo3_log::Logger::new(py, pyo3_log::Caching::Nothing)?.filter(LevelFilter::Trace);
    if PYTHON.set(python).is_ok() && ::log::set_logger(&BRIDGE).is_ok() {
        ::log::set_max_level(LevelFilter::Debug);
        let at_exit = wrap_pyfunction!(_flush_log_at_exit, m)?;
        py.import("atexit")?.call_method1("register", (at_exit,))?;
    }
    Ok(())
}
