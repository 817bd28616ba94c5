//! The owner's side: serves the store it opened to the other processes of the same user over
//! a Unix socket beside the data.
//!
//! One thread, the loop, accepts and reads every connection (`poll`), carries out each
//! request that cannot wait, and answers a whole batch of writes after one wait for their
//! durability: with N clients enqueueing and acking, one wake-up of one thread and one group
//! commit serve all N, where a thread per connection cost each request two thread switches
//! and a wait of its own (docs/format.md, "Several processes"). A request that may wait (a
//! dequeue of an empty queue) or take long (a snapshot) goes to a thread off the loop
//! (`off_loop.rs`) with its connection, so nobody waits behind it; a peer that is slow,
//! stops reading or sends garbage only ever holds its own connection.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::connection::Connection;
use super::off_loop::{self, Job, OffLoop, Syncer};
use super::requests::{self, Outcome};
use super::serving::{lock, send, Shared};
pub use super::serving::{Served, MAX_CONNECTIONS};
use super::wire;
use crate::durability::Logged;
use crate::error::{Error, IoContext, Result};
use crate::fork::{Birth, ParentOnly};
use crate::store::Reply;

/// How often the loop looks at the deadlines of its connections when nothing happens.
const TICK: Duration = Duration::from_millis(200);
/// How long a closing owner waits for its clients to settle the records they hold (acks and
/// nacks are still served, no new deliveries are made). A delivery still open after it is
/// void: the record is delivered again, as after a crash. `TFLUX_OWNER_DRAIN` (seconds, read
/// when the owner starts serving) sets another.
pub const DRAIN: Duration = Duration::from_secs(10);
/// Refusals being sent at once (each takes a short-lived thread); a peer beyond them is
/// simply disconnected.
const MAX_REFUSING: usize = 16;
/// The most one read of one connection takes in.
const READ_CHUNK: usize = 64 << 10;
/// How long a closing server goes on answering the requests that arrived before it closed.
const CLOSE_DOWN: Duration = Duration::from_secs(5);
/// Connections accepted per turn of the loop (the rest wait in the backlog for the next).
const ACCEPTS_PER_TURN: usize = 64;

fn drain_time() -> Duration {
    std::env::var("TFLUX_OWNER_DRAIN")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(DRAIN, |s| Duration::from_secs_f64(s.min(3600.0)))
}

/// A running server; stopping (or dropping) it closes every connection, so each client sees
/// its owner go.
pub struct Server {
    shared: Arc<Shared>,
    off_loop: Arc<OffLoop>,
    syncer: Arc<Syncer>,
    looper: Option<JoinHandle<()>>,
    socket: PathBuf,
    born: Birth,
    drain: Duration,
}

impl Server {
    /// Binds `socket` (replacing a stale one: the caller holds the owner lock, so no live
    /// owner has it) and starts serving `served`.
    pub fn start(served: Served, socket: &Path) -> Result<Server> {
        match std::fs::remove_file(socket) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io("remove stale socket", socket, e)),
        }
        let listener = super::bind(socket)?;
        // Only this user; the peer's credentials are checked again on every connection.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
            .ctx("restrict socket", socket)?;
        listener
            .set_nonblocking(true)
            .ctx("make the owner's socket non-blocking", socket)?;
        let listener = ParentOnly::new(listener);
        // SAFETY: eventfd returns a new descriptor or -1.
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(Error::io(
                "make the owner's wake-up descriptor",
                socket,
                io::Error::last_os_error(),
            ));
        }
        // SAFETY: `wake` is a new descriptor nothing else owns.
        let wake = ParentOnly::new(unsafe { OwnedFd::from_raw_fd(wake) });
        let shared = Arc::new(Shared {
            served,
            stop: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            busy: AtomicUsize::new(0),
            open: AtomicUsize::new(0),
            refusing: Arc::new(AtomicUsize::new(0)),
            sessions: Mutex::new(HashMap::new()),
            returned: Mutex::new(Vec::new()),
            loop_ended: AtomicBool::new(false),
            wake,
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
        });
        let off_loop = Arc::new(OffLoop::default());
        let syncer = Arc::new(Syncer::default());
        syncer
            .start(&shared)
            .ctx("start the owner's server", socket)?;
        let looper = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("tflux-owner".into())
                .spawn({
                    let (off_loop, syncer) = (off_loop.clone(), syncer.clone());
                    move || Loop::new(shared, off_loop, syncer, listener).run()
                })
        };
        let looper = match looper {
            Ok(t) => t,
            Err(e) => {
                syncer.stop();
                return Err(Error::io("start the owner's server", socket, e));
            }
        };
        Ok(Server {
            shared,
            off_loop,
            syncer,
            looper: Some(looper),
            socket: socket.to_path_buf(),
            born: Birth::now(),
            drain: drain_time(),
        })
    }

    /// Connections open right now.
    pub fn connections(&self) -> usize {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// Stops accepting, closes every connection and waits for the threads; records in flight
    /// to clients go back to their queues. Idempotent.
    pub fn stop(&mut self) {
        if !self.born.is_here() {
            // A forked child's copy: the sockets were closed at the fork; the threads and the
            // socket file are the parent's.
            return;
        }
        if !self.shared.stop.load(Ordering::SeqCst) {
            self.drain();
        }
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake();
        if let Some(t) = self.looper.take() {
            let _ = t.join();
        }
        self.off_loop.stop(&self.shared);
        self.syncer.stop();
        let returned = std::mem::take(&mut *lock(&self.shared.returned));
        for c in returned {
            self.shared.finish(c);
        }
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Lets clients settle what they hold (a graceful close delivers nothing twice).
    fn drain(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
        let until = Instant::now() + self.drain;
        let Served::Store(store) = &self.shared.served else {
            return;
        };
        while Instant::now() < until {
            let mut open = false;
            for s in lock(&self.shared.sessions).values_mut() {
                // Deliveries settled elsewhere (a lease that ran out, a record acked through
                // another session) are nothing to wait for.
                s.in_flight
                    .retain(|(q, id, receipt)| store.is_delivery_open(q, *id, *receipt));
                open |= !s.in_flight.is_empty();
            }
            if !open && self.shared.busy.load(Ordering::SeqCst) == 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The loop's own state: what only its thread touches.
struct Loop {
    shared: Arc<Shared>,
    off_loop: Arc<OffLoop>,
    syncer: Arc<Syncer>,
    /// None once the server is closing.
    listener: Option<ParentOnly<UnixListener>>,
    connections: HashMap<u64, Connection>,
    next_id: u64,
    scratch: Vec<u8>,
    /// Out of descriptors (or another accept failure): the listener rests until then
    /// instead of waking the loop at once again.
    accept_paused_until: Option<Instant>,
    last_sweep: Instant,
}

/// What a turn of the loop decided for a connection with a request.
enum Next {
    /// A reply is queued: send it.
    Reply,
    /// Send the reply once the batch's writes are durable.
    Durable(Reply),
    /// Carried out off the loop.
    OffLoop(Vec<u8>),
    Refuse(Error),
    End,
}

impl Loop {
    fn new(
        shared: Arc<Shared>,
        off_loop: Arc<OffLoop>,
        syncer: Arc<Syncer>,
        listener: ParentOnly<UnixListener>,
    ) -> Loop {
        Loop {
            shared,
            off_loop,
            syncer,
            listener: Some(listener),
            connections: HashMap::new(),
            next_id: 0,
            scratch: vec![0; READ_CHUNK],
            accept_paused_until: None,
            last_sweep: Instant::now(),
        }
    }

    fn run(mut self) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut ids: Vec<u64> = Vec::new();
        let mut closing_until: Option<Instant> = None;
        loop {
            if closing_until.is_none() && self.shared.stop.load(Ordering::SeqCst) {
                // Closing: no new connections, and no new requests. Every connection stops
                // reading, so a client's write from now on fails at once (EPIPE: it knows the
                // request never arrived and takes it to the next owner), while each request
                // that did arrive is still carried out and answered: no client is ever left
                // not knowing whether a request it sent was carried out.
                self.listener = None;
                closing_until = Some(Instant::now() + CLOSE_DOWN);
            }
            if let Some(until) = closing_until {
                for c in self.connections.values_mut() {
                    c.stop_reading();
                }
                let away = self
                    .shared
                    .open
                    .load(Ordering::SeqCst)
                    .saturating_sub(self.connections.len());
                if (self.connections.is_empty() && away == 0) || Instant::now() >= until {
                    break;
                }
            }
            self.wait(&mut fds, &mut ids);
            self.take_back();
            let mut ended = Vec::new();
            for (i, id) in ids.iter().enumerate() {
                let revents = fds[i + 2].revents;
                if revents == 0 {
                    continue;
                }
                let Some(c) = self.connections.get_mut(id) else {
                    continue;
                };
                let alive = if c.is_replying() {
                    send(&self.shared, c)
                } else if c.wants_read() {
                    c.receive(&mut self.scratch).unwrap_or(false)
                } else {
                    true
                };
                if !alive {
                    ended.push(*id);
                }
            }
            for id in ended {
                self.end(id);
            }
            if fds[0].revents != 0 {
                self.accept();
            }
            self.serve_requests();
            self.sweep();
        }
        let returned = {
            let mut returned = lock(&self.shared.returned);
            self.shared.loop_ended.store(true, Ordering::SeqCst);
            std::mem::take(&mut *returned)
        };
        for c in returned {
            self.shared.finish(c);
        }
        for (_, c) in self.connections.drain() {
            self.shared.finish(c);
        }
    }

    /// Blocks until something happens: a connection is readable (or writable, when its
    /// reply is stalled), one is accepted, a connection comes back, the server stops, or a
    /// tick passes (for the deadlines).
    fn wait(&mut self, fds: &mut Vec<libc::pollfd>, ids: &mut Vec<u64>) {
        fds.clear();
        ids.clear();
        let now = Instant::now();
        let listening = self.accept_paused_until.is_none_or(|t| now >= t);
        let listener = self.listener.as_ref().map_or(-1, |l| l.as_raw_fd());
        let pollfd = |fd: i32, events: libc::c_short| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        fds.push(pollfd(if listening { listener } else { -1 }, libc::POLLIN));
        fds.push(pollfd(self.shared.wake.as_raw_fd(), libc::POLLIN));
        for (id, c) in &self.connections {
            let events = if c.is_replying() {
                libc::POLLOUT
            } else if c.wants_read() {
                libc::POLLIN
            } else {
                0
            };
            fds.push(pollfd(c.fd(), events));
            ids.push(*id);
        }
        let timeout = match self.accept_paused_until {
            Some(t) if t > now => TICK.min(t - now),
            _ => TICK,
        };
        // SAFETY: `fds` holds `fds.len()` initialised pollfd entries.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout.as_millis().max(1) as libc::c_int,
            )
        };
        if n < 0 {
            // EINTR (or ENOMEM): nothing happened, the next turn polls again.
            fds.iter_mut().for_each(|f| f.revents = 0);
        }
        if fds[1].revents != 0 {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a live u64 from the eventfd (resets its counter).
            unsafe {
                libc::read(
                    self.shared.wake.as_raw_fd(),
                    (&mut count as *mut u64).cast(),
                    8,
                )
            };
        }
    }

    /// Takes back the connections threads off the loop answered, and sends their replies.
    fn take_back(&mut self) {
        let back = std::mem::take(&mut *lock(&self.shared.returned));
        for mut c in back {
            if send(&self.shared, &mut c) {
                self.connections.insert(c.id, c);
            } else {
                self.shared.finish(c);
            }
        }
    }

    fn accept(&mut self) {
        for _ in 0..ACCEPTS_PER_TURN {
            let Some(listener) = &self.listener else {
                return;
            };
            let stream = match listener.accept() {
                Ok((s, _)) => ParentOnly::new(s),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // Out of descriptors (EMFILE) or another failure: rest rather than spin
                    // on a listener that stays readable.
                    let pause = if e.raw_os_error() == Some(libc::EMFILE) {
                        50
                    } else {
                        5
                    };
                    self.accept_paused_until = Some(Instant::now() + Duration::from_millis(pause));
                    return;
                }
            };
            match peer_uid(&stream) {
                Ok(uid) if uid == self.shared.uid => {}
                Ok(uid) => {
                    self.refuse(
                        stream,
                        Error::InvalidArgument(format!(
                            "user {uid} may not use the store of user {}",
                            self.shared.uid
                        )),
                    );
                    continue;
                }
                Err(_) => continue,
            }
            if self.shared.open.load(Ordering::SeqCst) >= MAX_CONNECTIONS {
                self.refuse(
                    stream,
                    Error::InvalidArgument(format!(
                        "the owner serves at most {MAX_CONNECTIONS} connections at once"
                    )),
                );
                continue;
            }
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            self.shared.open.fetch_add(1, Ordering::SeqCst);
            self.connections.insert(id, Connection::new(id, stream));
        }
    }

    /// Sends a refusal from a short-lived thread (it waits for the peer to read it).
    fn refuse(&self, stream: ParentOnly<UnixStream>, err: Error) {
        let refusing = self.shared.refusing.clone();
        if refusing.fetch_add(1, Ordering::SeqCst) >= MAX_REFUSING {
            refusing.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("tflux-owner-refuse".into())
            .stack_size(128 << 10)
            .spawn({
                let refusing = refusing.clone();
                move || {
                    if stream.set_nonblocking(false).is_ok() {
                        refuse(&stream, &err);
                    }
                    refusing.fetch_sub(1, Ordering::SeqCst);
                }
            });
        if spawned.is_err() {
            refusing.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Takes one request from every connection that has one, carries out those that cannot
    /// wait, waits once for the durability of all the writes among them, and answers them.
    fn serve_requests(&mut self) {
        let mut durable: Vec<(u64, Reply)> = Vec::new();
        let mut logged = Logged::NOTHING;
        let mut decided: Vec<(u64, Next)> = Vec::new();
        for (id, c) in self.connections.iter_mut() {
            if c.is_replying() {
                continue;
            }
            let body = match c.take_frame() {
                Ok(Some(body)) => body,
                Ok(None) => continue,
                Err(_) => {
                    decided.push((*id, Next::End));
                    continue;
                }
            };
            let next = request(&self.shared, c, body, &mut logged);
            decided.push((*id, next));
        }
        // Replies that need no fsync go out before the batch's fsync; so do the requests
        // handed off the loop.
        for (id, next) in decided {
            match next {
                Next::Reply => {
                    let gone = self
                        .connections
                        .get_mut(&id)
                        .is_some_and(|c| !send(&self.shared, c));
                    if gone {
                        self.end(id);
                    }
                }
                Next::Durable(out) => durable.push((id, out)),
                Next::OffLoop(body) => {
                    if let Some(connection) = self.connections.remove(&id) {
                        self.off_loop.submit(&self.shared, Job { connection, body });
                    }
                }
                Next::Refuse(err) => {
                    // Only a hello is refused: nothing is in progress, no session begun.
                    if let Some(c) = self.connections.remove(&id) {
                        self.shared.open.fetch_sub(1, Ordering::SeqCst);
                        self.refuse(c.stream, err);
                    }
                }
                Next::End => self.end(id),
            }
        }
        // One wait for every write of the batch, off the loop: the loop serves on (dequeues,
        // the next batch's writes) while the fsync runs.
        let replies: Vec<(Connection, Reply)> = durable
            .into_iter()
            .filter_map(|(id, out)| Some((self.connections.remove(&id)?, out)))
            .collect();
        if replies.is_empty() {
            return;
        }
        // One write alone, with nothing else to serve meanwhile (one client calling at a
        // time): the loop waits for it itself, which spares two thread switches (to the
        // syncer and back): a third less of the owner's CPU per call, and 1.2-1.4x the calls
        // per second of one client. With more, the syncer waits (measured: docs/benchmarks.md).
        let alone = replies.len() == 1 && self.syncer.is_idle() && !self.anything_ready();
        if alone {
            for c in off_loop::answer_durable(&self.shared, replies, logged) {
                self.connections.insert(c.id, c);
            }
        } else {
            self.syncer.submit(replies, logged);
        }
    }

    /// Whether a connection (or the listener) has something to read right now.
    fn anything_ready(&self) -> bool {
        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(self.connections.len() + 1);
        if let Some(l) = &self.listener {
            fds.push(libc::pollfd {
                fd: l.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
        for c in self.connections.values() {
            if c.wants_read() {
                fds.push(libc::pollfd {
                    fd: c.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        // SAFETY: `fds` holds `fds.len()` initialised pollfd entries.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) };
        n != 0
    }

    fn end(&mut self, id: u64) {
        if let Some(c) = self.connections.remove(&id) {
            self.shared.finish(c);
        }
    }

    /// Ends the connections whose peer overran a deadline (looked at a few times a second).
    fn sweep(&mut self) {
        let now = Instant::now();
        if now.saturating_duration_since(self.last_sweep) < TICK / 4 {
            return;
        }
        self.last_sweep = now;
        let late: Vec<u64> = self
            .connections
            .iter()
            .filter(|(_, c)| c.overdue(now))
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            self.end(id);
        }
    }
}

/// Carries out the request `body` of connection `c` on the loop (the hello first).
fn request(shared: &Shared, c: &mut Connection, body: Vec<u8>, logged: &mut Logged) -> Next {
    let Some(session) = c.session else {
        // The hello: magic, version, session.
        return match wire::read_hello(&body) {
            Ok(session) => match wire::welcome(shared.served.dialect()) {
                Ok(frame) => {
                    lock(&shared.sessions)
                        .entry(session)
                        .or_default()
                        .connections += 1;
                    c.session = Some(session);
                    c.reply(frame);
                    Next::Reply
                }
                Err(_) => Next::End,
            },
            Err(e) => Next::Refuse(e),
        };
    };
    // A wait that arrives while the owner drains takes nothing and need not be waited for
    // (it returns empty); every other request is, until its reply is sent.
    let counted = !(shared.draining.load(Ordering::SeqCst) && requests::waits(shared, &body));
    if counted {
        shared.busy.fetch_add(1, Ordering::SeqCst);
        c.counted = true;
    }
    match requests::handle(shared, session, &body, false) {
        Ok(Outcome::Reply(out)) => reply(c, Ok(out)),
        Ok(Outcome::Durable(out, l)) => {
            *logged = logged.and(l);
            Next::Durable(out)
        }
        Ok(Outcome::Blocking) => Next::OffLoop(body),
        // A request that cannot be decoded or is refused changed nothing: the error goes back
        // and the connection (framed by lengths, still in step) goes on.
        Err(e) => reply(c, Err(e)),
    }
}

fn reply(c: &mut Connection, result: Result<Reply>) -> Next {
    match wire::reply_frame(result) {
        Some(frame) => {
            c.reply(frame);
            Next::Reply
        }
        None => Next::End,
    }
}

/// Sends one error reply and lets the connection go.
///
/// It reads what the peer sent before it closes. Linux resets the peer of a Unix socket
/// closed with unread data (`ECONNRESET`), and a client that reads the reset instead of this
/// reply takes a live owner for gone: it drops its session (its deliveries go back) and
/// reconnects. So writing stops first, then the peer's hello (one small frame) is read and
/// dropped until the peer closes, for at most [`REFUSE_DRAIN`] and [`REFUSE_DRAIN_BYTES`].
fn refuse(stream: &UnixStream, err: &Error) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    if let Ok(frame) = wire::error_frame(err) {
        let _ = wire::send(&mut &*stream, &frame);
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
    let deadline = Instant::now() + REFUSE_DRAIN;
    let mut left = REFUSE_DRAIN_BYTES;
    let mut buf = [0u8; 4096];
    while left > 0 && Instant::now() < deadline {
        match std::io::Read::read(&mut &*stream, &mut buf) {
            Ok(0) => break,
            Ok(n) => left = left.saturating_sub(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
}

/// How long a refused connection's peer has to read the refusal and close.
const REFUSE_DRAIN: Duration = Duration::from_millis(200);
/// The most a refused peer may send before its connection is closed regardless.
const REFUSE_DRAIN_BYTES: usize = 64 << 10;

/// The peer's user id (SO_PEERCRED).
fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred.uid)
}
