//! Threads for the requests the owner's loop must not carry out itself: those that may wait
//! (a dequeue of an empty queue holds its connection up to a second) or take long (a snapshot).
//! A thread takes the connection with its request, answers it and gives the connection back
//! to the loop. Threads are made when none is idle and end after [`IDLE`] without work, so an
//! owner whose consumers all wait has one thread per waiting connection, and one that is busy
//! only with enqueues and acks has none.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::connection::Connection;
use super::requests::{self, Outcome};
use super::serving::{answer, lock, Shared, MAX_CONNECTIONS};
use super::wire;
use crate::durability::Logged;
use crate::store::Reply;

/// How long a thread without work stays.
const IDLE: Duration = Duration::from_secs(10);

/// A request taken off the loop, with its connection.
pub(super) struct Job {
    pub connection: Connection,
    pub body: Vec<u8>,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    idle: usize,
    stop: bool,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Default)]
pub(super) struct OffLoop {
    state: Mutex<State>,
    work: Condvar,
}

impl OffLoop {
    /// Hands a request to a thread (a new one when none is idle). A thread that cannot be
    /// made leaves the job queued for the next one that frees up.
    pub fn submit(self: &Arc<Self>, shared: &Arc<Shared>, job: Job) {
        let mut st = lock(&self.state);
        st.jobs.push_back(job);
        if st.idle >= st.jobs.len() {
            self.work.notify_one();
            return;
        }
        st.threads.retain(|t| !t.is_finished());
        if st.threads.len() >= MAX_CONNECTIONS {
            return;
        }
        let (shared, pool) = (shared.clone(), self.clone());
        let made = std::thread::Builder::new()
            .name("tflux-owner-wait".into())
            .stack_size(256 << 10)
            .spawn(move || work(&shared, &pool));
        if let Ok(t) = made {
            st.threads.push(t);
        }
    }

    /// Ends every thread once its request is answered (a wait lasts at most a second).
    pub fn stop(&self, shared: &Shared) {
        let threads = {
            let mut st = lock(&self.state);
            st.stop = true;
            self.work.notify_all();
            std::mem::take(&mut st.threads)
        };
        for t in threads {
            let _ = t.join();
        }
        // Jobs no thread took (none could be made): their connections end here.
        let left: Vec<Job> = lock(&self.state).jobs.drain(..).collect();
        for job in left {
            shared.finish(job.connection);
        }
    }

    fn next(&self) -> Option<Job> {
        let mut st = lock(&self.state);
        loop {
            if let Some(job) = st.jobs.pop_front() {
                return Some(job);
            }
            if st.stop {
                return None;
            }
            st.idle += 1;
            let (back, timeout) = self
                .work
                .wait_timeout(st, IDLE)
                .unwrap_or_else(|e| e.into_inner());
            st = back;
            st.idle -= 1;
            if timeout.timed_out() && st.jobs.is_empty() {
                return None;
            }
        }
    }
}

fn work(shared: &Arc<Shared>, pool: &OffLoop) {
    while let Some(Job { connection, body }) = pool.next() {
        let session = connection.session.unwrap_or_default();
        let result = requests::handle(shared, session, &body, true).and_then(|outcome| {
            match outcome {
                Outcome::Reply(out) => Ok(out),
                Outcome::Durable(out, logged) => shared.served.make_durable(logged).map(|()| out),
                // Not given when blocking is allowed; answered as a failure, never a panic.
                Outcome::Blocking => Err(crate::error::Error::InvalidArgument(
                    "the owner could not carry out the request".into(),
                )),
            }
        });
        if let Some(c) = answer(shared, connection, wire::reply_frame(result)) {
            shared.give_back(c);
        }
    }
}

/// The replies that wait for durability, and the thread that waits for them: the loop hands
/// over each batch of writes with their connections and goes on serving (dequeues, and the
/// next batch's writes) while this thread's group commit fsyncs. Batches handed over during
/// an fsync are covered by the next one, together.
#[derive(Default)]
pub(super) struct Syncer {
    state: Mutex<Waiting>,
    work: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Default)]
struct Waiting {
    replies: Vec<(Connection, Reply)>,
    logged: Logged,
    /// Answering a batch (its fsync may be running).
    busy: bool,
    stop: bool,
}

impl Syncer {
    pub fn start(self: &Arc<Self>, shared: &Arc<Shared>) -> std::io::Result<()> {
        let (shared, syncer) = (shared.clone(), self.clone());
        let t = std::thread::Builder::new()
            .name("tflux-owner-sync".into())
            .spawn(move || sync_loop(&shared, &syncer))?;
        *lock(&self.thread) = Some(t);
        Ok(())
    }

    /// Hands over connections whose replies may leave once `logged` is durable.
    pub fn submit(&self, replies: Vec<(Connection, Reply)>, logged: Logged) {
        let mut st = lock(&self.state);
        st.replies.extend(replies);
        st.logged = st.logged.and(logged);
        self.work.notify_one();
    }

    /// Whether nothing is handed over and no batch is being answered.
    pub fn is_idle(&self) -> bool {
        let st = lock(&self.state);
        st.replies.is_empty() && !st.busy
    }

    /// Answers what is handed over already, then ends the thread.
    pub fn stop(&self) {
        lock(&self.state).stop = true;
        self.work.notify_all();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

fn sync_loop(shared: &Arc<Shared>, syncer: &Syncer) {
    loop {
        let (replies, logged) = {
            let mut st = lock(&syncer.state);
            st.busy = false;
            while st.replies.is_empty() && !st.stop {
                st = syncer.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            if st.replies.is_empty() {
                return;
            }
            st.busy = true;
            (
                std::mem::take(&mut st.replies),
                std::mem::take(&mut st.logged),
            )
        };
        let back = answer_durable(shared, replies, logged);
        shared.give_back_all(back);
    }
}

/// Waits once for every write of `replies` (one group commit, shared with the owner's own
/// callers, for all of their clients), then sends each reply, or the failure to each, from
/// this thread (the reply does not wait for another thread to wake up); the connections
/// still open.
pub(super) fn answer_durable(
    shared: &Shared,
    replies: Vec<(Connection, Reply)>,
    logged: Logged,
) -> Vec<Connection> {
    let synced = shared.served.make_durable(logged);
    let failed = synced
        .as_ref()
        .err()
        .and_then(|e| wire::error_frame(e).ok());
    replies
        .into_iter()
        .filter_map(|(c, out)| {
            let frame = match &failed {
                Some(f) => Some(f.clone()),
                None => wire::reply_frame(Ok(out)),
            };
            answer(shared, c, frame)
        })
        .collect()
}
