//! What the owner's threads share: what is served, the client sessions and their deliveries,
//! the connections coming back from threads off the loop, and the rules for a connection's end
//! (below the loop in `server.rs` and the threads in `off_loop.rs`, which both use them).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::connection::Connection;
use crate::channel::Channel;
use crate::durability::Logged;
use crate::error::Result;
use crate::fork::ParentOnly;
use crate::store::Store;

/// More connections than this at once are refused.
pub const MAX_CONNECTIONS: usize = 1024;

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One client process's deliveries: the records it holds in flight over all of its
/// connections. When its last connection goes, they go back to their queues.
#[derive(Default)]
pub(super) struct Session {
    pub connections: usize,
    pub in_flight: HashSet<(Vec<u8>, u64, u64)>,
}

impl Session {
    /// A record acked or nacked over this session (by its receipt, or by id: every delivery
    /// of it) is no longer the session's to give back.
    pub fn settle(&mut self, queue: &[u8], id: u64, receipt: Option<u64>) {
        match receipt {
            Some(receipt) => {
                self.in_flight.remove(&(queue.to_vec(), id, receipt));
            }
            None => self.in_flight.retain(|(q, i, _)| !(q == queue && *i == id)),
        }
    }
}

/// What an owner serves.
#[derive(Clone)]
pub enum Served {
    Store(Arc<Store>),
    /// A channel's senders (receivers read the files themselves, in any process).
    Channel(Channel),
}

impl Served {
    /// The dialect a client is welcomed with.
    pub(super) fn dialect(&self) -> &'static str {
        match self {
            Served::Store(store) => store.layout().dialect.name(),
            Served::Channel(_) => "spec",
        }
    }

    /// Waits until `logged` is durable per the sync policy of what is served.
    pub(super) fn make_durable(&self, logged: Logged) -> Result<()> {
        match self {
            Served::Store(store) => store.make_durable(logged),
            Served::Channel(channel) => channel.make_durable(logged),
        }
    }
}

pub(super) struct Shared {
    pub served: Served,
    pub stop: AtomicBool,
    /// Closing: no new deliveries to clients while they settle the ones they hold.
    pub draining: AtomicBool,
    /// Requests in progress (received, reply not yet sent): a drain waits for them too, so
    /// an ack it saw settle gets its reply, and a dequeue's record is recorded for its session.
    pub busy: AtomicUsize,
    /// Connections open (on the loop, off it, being refused not counted).
    pub open: AtomicUsize,
    pub refusing: Arc<AtomicUsize>,
    pub sessions: Mutex<HashMap<u64, Session>>,
    /// Connections that threads off the loop answered, for the loop to take back.
    pub returned: Mutex<Vec<Connection>>,
    /// Set (under the `returned` lock) when the loop ends: nothing is given back after.
    pub loop_ended: AtomicBool,
    /// Wakes the loop (an eventfd): a connection came back, or the server stops.
    pub wake: ParentOnly<OwnedFd>,
    pub uid: u32,
}

impl Shared {
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to the eventfd this struct owns. A full
        // counter (EAGAIN) still leaves the loop woken.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// A connection a thread off the loop answered: the loop sends its reply and reads on.
    pub fn give_back(&self, connection: Connection) {
        self.give_back_all(vec![connection]);
    }

    /// Several connections at once (one wake-up of the loop). Once the loop has ended they
    /// end here.
    pub fn give_back_all(&self, connections: Vec<Connection>) {
        if connections.is_empty() {
            return;
        }
        let mut returned = lock(&self.returned);
        if self.loop_ended.load(Ordering::SeqCst) {
            drop(returned);
            return connections.into_iter().for_each(|c| self.finish(c));
        }
        returned.extend(connections);
        drop(returned);
        self.wake();
    }

    /// A connection ends: its request no longer counts as in progress, and the last
    /// connection of a session gives back what the session held.
    pub fn finish(&self, connection: Connection) {
        if connection.counted {
            self.busy.fetch_sub(1, Ordering::SeqCst);
        }
        self.open.fetch_sub(1, Ordering::SeqCst);
        if let Some(session) = connection.session {
            end_session(self, session);
        }
    }
}

/// Sends what the socket takes of a queued reply (a request whose reply is all sent is no
/// longer in progress): false when the peer is gone.
pub(super) fn send(shared: &Shared, c: &mut Connection) -> bool {
    match c.flush() {
        Ok(true) => {
            if std::mem::take(&mut c.counted) {
                shared.busy.fetch_sub(1, Ordering::SeqCst);
            }
            true
        }
        Ok(false) => true,
        Err(_) => false,
    }
}

/// Sends `frame` as the reply of a connection off the loop (a request whose reply could not
/// be built ends it); the connection, while it is still open.
pub(super) fn answer(
    shared: &Shared,
    mut c: Connection,
    frame: Option<Vec<u8>>,
) -> Option<Connection> {
    if let Some(frame) = frame {
        c.reply(frame);
        if send(shared, &mut c) {
            return Some(c);
        }
    }
    shared.finish(c);
    None
}

/// The last connection of a client process is gone: what it held in flight goes back.
pub(super) fn end_session(shared: &Shared, session: u64) {
    let returned = {
        let mut sessions = lock(&shared.sessions);
        let Some(s) = sessions.get_mut(&session) else {
            return;
        };
        s.connections -= 1;
        if s.connections > 0 {
            return;
        }
        sessions.remove(&session).map(|s| s.in_flight)
    };
    let Served::Store(store) = &shared.served else {
        return;
    };
    for (queue, id, receipt) in returned.into_iter().flatten() {
        // A record settled meanwhile (ack over another path, lease expiry) is not in
        // flight under this receipt any more: nothing to return.
        let _ = store.execute(&crate::store::Request::Nack {
            queue: &queue,
            id,
            receipt: Some(receipt),
        });
    }
}
