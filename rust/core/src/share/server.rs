//! The owner's side: serves the store it opened to the other processes of the same user over
//! a Unix socket beside the data. One thread accepts; each connection has a thread of its own,
//! so a slow or blocked client (a dequeue waiting for records, a peer that stopped reading)
//! holds up nobody else, and concurrent enqueues share the store's group commit.

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::wire::{self, op, In, Out, Received};
use crate::channel::Channel;
use crate::error::{Error, IoContext, Result};
use crate::fork::{Birth, ParentOnly};
use crate::state::QueueConfig;
use crate::store::Store;

/// More connections than this at once are refused (each has a thread).
pub const MAX_CONNECTIONS: usize = 1024;
/// How often an idle connection's thread looks up to see whether the owner is stopping.
const TICK: Duration = Duration::from_millis(200);
/// A peer that starts a frame must finish it within this time.
const FRAME_DEADLINE: Duration = Duration::from_secs(10);
/// A reply the peer does not read within this time drops the connection.
const SEND_DEADLINE: Duration = Duration::from_secs(10);
/// The longest a single dequeue or wait request holds its thread (clients ask in slices).
const LONGEST_WAIT: Duration = Duration::from_secs(1);
/// How long a closing owner waits for its clients to settle the records they hold (acks and
/// nacks are still served, no new deliveries are made). A delivery still open after it is
/// void: the record is delivered again, as after a crash. `TFLUX_OWNER_DRAIN` (seconds, read
/// when the owner starts serving) sets another.
pub const DRAIN: Duration = Duration::from_secs(10);

fn drain_time() -> Duration {
    std::env::var("TFLUX_OWNER_DRAIN")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map_or(DRAIN, |s| Duration::from_secs_f64(s.min(3600.0)))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One client process's deliveries: the records it holds in flight over all of its
/// connections. When its last connection goes, they go back to their queues.
#[derive(Default)]
struct Session {
    connections: usize,
    in_flight: HashSet<(Vec<u8>, u64, u64)>,
}

/// A live connection: its raw descriptor (to shut it down at stop) and its thread.
type Connection = (i32, Option<JoinHandle<()>>);

/// What an owner serves.
#[derive(Clone)]
pub enum Served {
    Store(Arc<Store>),
    /// A channel's senders (receivers read the files themselves, in any process).
    Channel(Channel),
}

struct Shared {
    served: Served,
    stop: AtomicBool,
    /// Closing: no new deliveries to clients while they settle the ones they hold.
    draining: AtomicBool,
    /// Requests in progress (received, reply not yet sent): a drain waits for them too, so
    /// an ack it saw settle gets its reply, and a dequeue's record is recorded for its session.
    busy: std::sync::atomic::AtomicUsize,
    /// Raw descriptors of the live connections (for `shutdown` at stop) and their threads.
    connections: Mutex<HashMap<u64, Connection>>,
    sessions: Mutex<HashMap<u64, Session>>,
    next: AtomicU64,
    uid: u32,
}

/// A running server; stopping (or dropping) it closes every connection, so each client sees
/// its owner go.
pub struct Server {
    shared: Arc<Shared>,
    listener: Arc<ParentOnly<UnixListener>>,
    acceptor: Option<JoinHandle<()>>,
    socket: PathBuf,
    born: Birth,
    drain: Duration,
}

impl Server {
    /// Binds `socket` (replacing a stale one: the caller holds the owner lock, so no live
    /// owner has it) and starts serving `store`.
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
        let listener = Arc::new(ParentOnly::new(listener));
        let shared = Arc::new(Shared {
            served,
            stop: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            busy: std::sync::atomic::AtomicUsize::new(0),
            connections: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            // SAFETY: geteuid cannot fail.
            uid: unsafe { libc::geteuid() },
        });
        let acceptor = {
            let (shared, listener) = (shared.clone(), listener.clone());
            std::thread::Builder::new()
                .name("tflux-owner".into())
                .spawn(move || accept_loop(&shared, &listener))
                .ctx("start the owner's server", socket)?
        };
        Ok(Server {
            shared,
            listener,
            acceptor: Some(acceptor),
            socket: socket.to_path_buf(),
            born: Birth::now(),
            drain: drain_time(),
        })
    }

    /// Connections open right now.
    pub fn connections(&self) -> usize {
        lock(&self.shared.connections).len()
    }

    /// Stops accepting, closes every connection (waking their threads) and waits for them;
    /// records in flight to clients go back to their queues. Idempotent.
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
        // Wakes the blocked accept (Linux returns EINVAL from accept after shutdown).
        // SAFETY: the listener's descriptor is open for as long as `self.listener` lives.
        unsafe { libc::shutdown(self.listener.as_raw_fd(), libc::SHUT_RDWR) };
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
        let threads: Vec<JoinHandle<()>> = {
            let mut conns = lock(&self.shared.connections);
            conns
                .values_mut()
                .filter_map(|(fd, t)| {
                    // SAFETY: a connection's thread removes its entry (under this lock)
                    // before its stream closes, so `fd` is still that stream's descriptor.
                    unsafe { libc::shutdown(*fd, libc::SHUT_RDWR) };
                    t.take()
                })
                .collect()
        };
        for t in threads {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Server {
    /// Lets clients settle what they hold (a graceful close delivers nothing twice).
    fn drain(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
        let until = std::time::Instant::now() + self.drain;
        let Served::Store(store) = &self.shared.served else {
            return;
        };
        while std::time::Instant::now() < until {
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

fn accept_loop(shared: &Arc<Shared>, listener: &UnixListener) {
    loop {
        let accepted = listener.accept();
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let stream = match accepted {
            Ok((s, _)) => ParentOnly::new(s),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) => {
                // Out of descriptors: wait for some to be released rather than spin.
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let mut conns = lock(&shared.connections);
        if conns.len() >= MAX_CONNECTIONS {
            drop(conns);
            refuse(
                &stream,
                &Error::InvalidArgument(format!(
                    "the owner serves at most {MAX_CONNECTIONS} connections at once"
                )),
            );
            continue;
        }
        let id = shared.next.fetch_add(1, Ordering::Relaxed);
        let fd = stream.as_raw_fd();
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("tflux-client".into())
                .stack_size(256 << 10)
                .spawn(move || {
                    serve(&shared, &stream);
                    // Out of the table before the stream closes (`Server::stop`).
                    lock(&shared.connections).remove(&id);
                    drop(stream);
                })
        };
        match thread {
            Ok(t) => {
                conns.insert(id, (fd, Some(t)));
            }
            Err(_) => {
                // The thread never ran: nothing else holds the stream, which closed with it.
            }
        }
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
    if let Ok(frame) = error_reply(err) {
        let _ = wire::send(&mut &*stream, &frame);
    }
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(20)));
    let deadline = std::time::Instant::now() + REFUSE_DRAIN;
    let mut left = REFUSE_DRAIN_BYTES;
    let mut buf = [0u8; 4096];
    while left > 0 && std::time::Instant::now() < deadline {
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

pub(super) fn error_reply(err: &Error) -> Result<Vec<u8>> {
    let r = err.to_remote();
    let mut out = Out::new(wire::FAILED);
    out.u8(r.kind as u8)
        .bytes(r.message.as_bytes())
        .u8(r.path.is_some() as u8)
        .bytes(r.path.as_deref().unwrap_or("").as_bytes())
        .opt_u64(r.offset)
        .opt_i64(r.errno.map(i64::from))
        .bytes(r.queue.as_bytes())
        .bytes(r.policy.as_bytes())
        .opt_i64(r.lsn);
    out.frame()
}

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

fn serve(shared: &Shared, stream: &UnixStream) {
    match peer_uid(stream) {
        Ok(uid) if uid == shared.uid => {}
        Ok(uid) => {
            refuse(
                stream,
                &Error::InvalidArgument(format!(
                    "user {uid} may not use the store of user {}",
                    shared.uid
                )),
            );
            return;
        }
        Err(_) => return,
    }
    if stream.set_read_timeout(Some(TICK)).is_err()
        || stream.set_write_timeout(Some(SEND_DEADLINE)).is_err()
    {
        return;
    }
    let idle = || !shared.stop.load(Ordering::SeqCst);
    // The hello: magic, version, session.
    // One read usually brings a whole frame (its length and body).
    let mut reader = std::io::BufReader::with_capacity(64 << 10, stream);
    let session = match wire::receive(&mut reader, FRAME_DEADLINE, idle) {
        Ok(Received::Frame(body)) => match hello(&body) {
            Ok(s) => s,
            Err(e) => return refuse(stream, &e),
        },
        _ => return,
    };
    let mut reply = Out::new(wire::OK);
    reply
        .u32(wire::VERSION)
        .u32(std::process::id())
        .bytes(match &shared.served {
            Served::Store(store) => store.layout().dialect.name().as_bytes(),
            Served::Channel(_) => b"spec",
        });
    let Ok(reply) = reply.frame() else { return };
    if wire::send(&mut &*stream, &reply).is_err() {
        return;
    }
    lock(&shared.sessions)
        .entry(session)
        .or_default()
        .connections += 1;
    // Closed, stopped, a half frame or an oversized one: the connection ends.
    while let Ok(Received::Frame(body)) = wire::receive(&mut reader, FRAME_DEADLINE, idle) {
        // A wait that arrives while the owner drains takes nothing and need not be waited
        // for (it returns empty); every other request is, until its reply is sent.
        let waits = matches!(body.first().copied(), Some(op::DEQUEUE | op::WAIT_READY));
        let counted = !(waits && shared.draining.load(Ordering::SeqCst));
        if counted {
            shared.busy.fetch_add(1, Ordering::SeqCst);
        }
        let sent = answer(shared, session, stream, &body);
        if counted {
            shared.busy.fetch_sub(1, Ordering::SeqCst);
        }
        if !sent {
            break;
        }
    }
    end_session(shared, session);
}

/// Carries out one request and sends its reply; false when the reply could not be sent.
fn answer(shared: &Shared, session: u64, stream: &UnixStream, body: &[u8]) -> bool {
    // A request that cannot be decoded changed nothing: the error goes back and the
    // connection (framed by lengths, still in step) goes on.
    let reply = match handle(shared, session, body) {
        Ok(out) => out.frame(),
        Err(e) => error_reply(&e),
    };
    match reply {
        Ok(frame) => wire::send(&mut &*stream, &frame).is_ok(),
        Err(e) => error_reply(&e)
            .map(|f| wire::send(&mut &*stream, &f).is_ok())
            .unwrap_or(false),
    }
}

fn hello(body: &[u8]) -> Result<u64> {
    let mut r = In::new(body);
    let magic = r.u32("magic")?.to_le_bytes();
    if &magic != wire::MAGIC {
        return Err(wire::malformed("not a tflux client"));
    }
    let version = r.u32("version")?;
    if version != wire::VERSION {
        return Err(Error::InvalidArgument(format!(
            "the owner speaks version {} of the protocol, the client {version}: use the same \
             tflux in every process that shares a base directory",
            wire::VERSION
        )));
    }
    let session = r.u64("session")?;
    r.end()?;
    Ok(session)
}

/// The last connection of a client process is gone: what it held in flight goes back.
fn end_session(shared: &Shared, session: u64) {
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
        let _ = store.nack(&queue, id, Some(receipt));
    }
}

fn wait_arg(ms: u64) -> Option<Duration> {
    Some(Duration::from_millis(ms).min(LONGEST_WAIT))
}

/// Carries out one request; the reply to send.
fn handle(shared: &Shared, session: u64, body: &[u8]) -> Result<Out> {
    let mut r = In::new(body);
    let code = r.u8("op")?;
    let mut out = Out::new(wire::OK);
    let store = match &shared.served {
        Served::Store(store) => &**store,
        Served::Channel(channel) => {
            handle_channel(channel, code, &mut r, &mut out)?;
            return Ok(out);
        }
    };
    match code {
        op::CREATE_QUEUE => {
            let name = r.bytes("queue")?;
            let config: QueueConfig = r.config()?;
            let exist_ok = r.flag("exist_ok")?;
            r.end()?;
            let created = store.create_queue_as(name, config, exist_ok)?;
            out.u8(created as u8);
        }
        op::DELETE_QUEUE => {
            let name = r.bytes("queue")?;
            r.end()?;
            store.delete_queue(name)?;
        }
        op::ENQUEUE_MANY => {
            let name = r.bytes("queue")?;
            let n = r.count(12, "records")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push((r.i64("key")?, r.bytes("payload")?));
            }
            r.end()?;
            let ids = store.enqueue_many(name, &items)?;
            out.u32(ids.len() as u32);
            for id in ids {
                out.u64(id);
            }
        }
        op::DEQUEUE => {
            let name = r.bytes("queue")?;
            let wait = wait_arg(r.u64("timeout")?);
            let lease = r.opt_u64("lease")?.map(Duration::from_millis);
            r.end()?;
            // Counted as busy (by `serve`) before the drain flag is read, so a drain that saw
            // no request in progress and no delivery open cannot miss this one.
            let got = if shared.draining.load(Ordering::SeqCst) {
                Ok(None)
            } else {
                store.dequeue_leased(name, wait, lease)
            };
            if let Ok(Some((record, receipt))) = &got {
                // Held for the session before the reply leaves: a client that dies before
                // reading it still gives the record back.
                let mut sessions = lock(&shared.sessions);
                let held = &mut sessions.entry(session).or_default().in_flight;
                held.insert((name.to_vec(), record.id, *receipt));
            }
            match got? {
                None => {
                    if shared.draining.load(Ordering::SeqCst) {
                        std::thread::sleep(wait.unwrap_or(LONGEST_WAIT).min(TICK));
                    }
                    out.u8(0);
                }
                Some((record, receipt)) => {
                    out.u8(1).record(&record, receipt);
                }
            }
        }
        op::WAIT_READY => {
            let name = r.bytes("queue")?;
            let wait = wait_arg(r.u64("timeout")?);
            r.end()?;
            let ready = if shared.draining.load(Ordering::SeqCst) {
                std::thread::sleep(wait.unwrap_or(LONGEST_WAIT).min(TICK));
                false
            } else {
                store.wait_ready(name, wait)?
            };
            out.u8(ready as u8);
        }
        op::ACK_MANY => {
            // The smallest item: an empty queue name, an id, no receipt.
            let n = r.count(13, "records")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let queue = r.bytes("queue")?;
                let id = r.u64("id")?;
                let receipt = r.opt_u64("receipt")?;
                items.push((queue, id, receipt));
            }
            r.end()?;
            store.ack_many(&items)?;
            settle(
                shared,
                session,
                items.iter().map(|(q, id, rc)| (*q, *id, *rc)),
            );
        }
        op::NACK => {
            let queue = r.bytes("queue")?;
            let id = r.u64("id")?;
            let receipt = r.opt_u64("receipt")?;
            r.end()?;
            store.nack(queue, id, receipt)?;
            settle(shared, session, [(queue, id, receipt)].into_iter());
        }
        op::COUNT => {
            let name = r.bytes("queue")?;
            r.end()?;
            out.u64(store.count(name)?);
        }
        op::PEEK => {
            let name = r.bytes("queue")?;
            r.end()?;
            match store.peek(name)? {
                None => out.u8(0),
                Some(rec) => out.u8(1).record(&rec, 0),
            };
        }
        op::PEEK_ALL => {
            let name = r.bytes("queue")?;
            r.end()?;
            let records = store.peek_all(name)?;
            out.u32(records.len() as u32);
            for rec in &records {
                out.record(rec, 0);
            }
        }
        op::QUEUES => {
            r.end()?;
            let queues = store.queues()?;
            out.u32(queues.len() as u32);
            for q in &queues {
                out.info(q);
            }
        }
        op::SNAPSHOT => {
            r.end()?;
            out.u8(store.snapshot()? as u8);
        }
        op::INFO => {
            r.end()?;
            let (start, last, snap) = store.log_bounds()?;
            let term = store.metadata()?.term;
            out.i64(start)
                .i64(last)
                .i64(snap)
                .i64(i64::from(term))
                .bytes(store.settings().to_json().as_bytes());
        }
        other => return Err(wire::malformed(format!("unknown request {other}"))),
    }
    Ok(out)
}

/// A channel's requests: what a sender in another process needs of the owner.
fn handle_channel(channel: &Channel, code: u8, r: &mut In<'_>, out: &mut Out) -> Result<()> {
    match code {
        op::SEND_MANY => {
            let n = r.count(4, "messages")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(r.bytes("message")?);
            }
            r.end()?;
            out.i64(channel.send_many(&items)?);
        }
        op::CHANNEL_SYNC => {
            r.end()?;
            channel.sync()?;
        }
        op::DROP_RECEIVER => {
            let name = r.str("receiver")?;
            r.end()?;
            out.u8(channel.drop_receiver(name)? as u8);
        }
        op::COLLECT => {
            r.end()?;
            out.u64(channel.collect()? as u64);
        }
        op::DISK_FULL => {
            r.end()?;
            out.u8(channel.disk_full() as u8);
        }
        other => return Err(wire::malformed(format!("unknown channel request {other}"))),
    }
    Ok(())
}

/// Records acked or nacked over this session are no longer its to return.
fn settle<'a>(
    shared: &Shared,
    session: u64,
    items: impl Iterator<Item = (&'a [u8], u64, Option<u64>)>,
) {
    let mut sessions = lock(&shared.sessions);
    let Some(s) = sessions.get_mut(&session) else {
        return;
    };
    for (queue, id, receipt) in items {
        match receipt {
            Some(receipt) => {
                s.in_flight.remove(&(queue.to_vec(), id, receipt));
            }
            None => s.in_flight.retain(|(q, i, _)| !(q == queue && *i == id)),
        }
    }
}
