//! A client's side: the same calls as [`Store`](crate::store::Store), carried out by the owner.
//! Connections are pooled, so threads of one client never wait on each other's calls (a
//! dequeue waiting for records holds one connection, an enqueue takes another).

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::wire::{self, op, In, Out, Received};
use crate::base::settings::Settings;
use crate::error::{Error, RemoteError, RemoteKind, Result};
use crate::fork::{Birth, ParentOnly};
use crate::state::{QueueConfig, QueueInfo, Record};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a connection to the owner could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// No owner answers (no socket, refused, closed at once): gone or not started yet.
    Gone(io::Error),
    /// The owner answered and refused (another user, another version, its connection limit).
    Refused(Error),
    /// Something else on this side (no descriptors left, a timeout).
    Other(io::Error),
}

/// What the owner reported of itself.
#[derive(Debug, Clone)]
pub struct OwnerInfo {
    pub log_bounds: (i64, i64, i64),
    pub term: i32,
    pub settings: Settings,
}

pub struct Client {
    base: PathBuf,
    socket: PathBuf,
    session: u64,
    idle: Mutex<Vec<ParentOnly<UnixStream>>>,
    owner_pid: u32,
    dialect: String,
    lost: AtomicBool,
    born: Birth,
}

impl Client {
    /// Connects to the owner serving `socket` (the base directory `base`).
    pub fn connect(base: &Path, socket: &Path) -> std::result::Result<Client, ConnectError> {
        // Random, not the process id: clients in two PID namespaces may both be pid 1 (issue 43).
        let session = crate::fork::random_u64();
        let mut client = Client {
            base: base.to_path_buf(),
            socket: socket.to_path_buf(),
            session,
            idle: Mutex::new(Vec::new()),
            owner_pid: 0,
            dialect: String::new(),
            lost: AtomicBool::new(false),
            born: Birth::now(),
        };
        let (stream, pid, dialect) = client.open_connection()?;
        client.owner_pid = pid;
        client.dialect = dialect;
        lock(&client.idle).push(stream);
        Ok(client)
    }

    fn open_connection(
        &self,
    ) -> std::result::Result<(ParentOnly<UnixStream>, u32, String), ConnectError> {
        let gone_or = |e: io::Error| {
            if super::transient(&e) {
                ConnectError::Gone(e)
            } else {
                ConnectError::Other(e)
            }
        };
        let stream = ParentOnly::new(super::connect(&self.socket).map_err(gone_or)?);
        // A dead owner is noticed by the kernel (the connection closes); this bounds only
        // the hello, which a live owner answers at once.
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(ConnectError::Other)?;
        let mut hello = Out::new(0);
        // The magic replaces the first-byte slot `Out::new` reserves: rebuild plainly.
        hello.0.truncate(4);
        hello.0.extend_from_slice(wire::MAGIC);
        hello.u32(wire::VERSION).u64(self.session);
        let frame = hello.frame().map_err(ConnectError::Refused)?;
        wire::send(&mut &*stream, &frame).map_err(ConnectError::Gone)?;
        let body = match wire::receive(&mut &*stream, Duration::from_secs(30), || true) {
            Ok(Received::Frame(b)) => b,
            Ok(Received::Closed) => {
                return Err(ConnectError::Gone(io::ErrorKind::ConnectionReset.into()))
            }
            Err(e) => return Err(gone_or(e)),
        };
        let mut r = In::new(&body);
        let answer = (|| -> Result<(u32, String)> {
            if r.u8("status")? != wire::OK {
                return Err(decode_error(&mut r));
            }
            let _version = r.u32("version")?;
            let pid = r.u32("pid")?;
            let dialect = r.str("dialect")?.to_string();
            Ok((pid, dialect))
        })();
        // The owner answered, and refused (another user, another version, too many
        // connections): it is alive.
        let (pid, dialect) = answer.map_err(ConnectError::Refused)?;
        stream.set_read_timeout(None).map_err(ConnectError::Other)?;
        Ok((stream, pid, dialect))
    }

    /// The owner's process id.
    pub fn owner_pid(&self) -> u32 {
        self.owner_pid
    }

    /// The dialect of the owner's base directory.
    pub fn dialect(&self) -> &str {
        &self.dialect
    }

    /// Whether this client lost its owner (every later call fails the same way).
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// Whether this process is the one that connected (not a forked child's copy).
    pub fn is_here(&self) -> bool {
        self.born.is_here()
    }

    fn lost(&self, reason: impl std::fmt::Display, sent: bool) -> Error {
        self.lost.store(true, Ordering::SeqCst);
        Error::OwnerLost {
            path: self.base.clone(),
            reason: format!("owner process {}: {reason}", self.owner_pid),
            sent,
        }
    }

    /// Sends one request and returns the body of a successful reply (after its status byte).
    fn call(&self, request: Out, parse: impl FnOnce(&mut In<'_>) -> Result<()>) -> Result<()> {
        if self.is_lost() {
            return Err(self.lost("the connection closed earlier", false));
        }
        let frame = request.frame()?;
        let pooled = lock(&self.idle).pop();
        let stream = match pooled {
            Some(s) => s,
            // Only an owner that is gone makes the client lost: a refused or failed extra
            // connection (the owner's connection limit, no descriptors left) is this call's
            // error, and the deliveries the client holds stay its own.
            None => match self.open_connection() {
                Ok((s, _, _)) => s,
                Err(ConnectError::Gone(e)) => return Err(self.lost(e, false)),
                Err(ConnectError::Refused(e)) => return Err(e),
                Err(ConnectError::Other(e)) => {
                    return Err(Error::io("connect to the owner", &self.socket, e))
                }
            },
        };
        // A Unix socket whose peer is gone refuses the write (EPIPE): then the request never
        // reached the owner.
        if let Err(e) = wire::send(&mut &*stream, &frame) {
            return Err(self.lost(e, false));
        }
        // Waits in poll, not in the read: Linux wakes a reader blocked on a Unix socket as
        // soon as the owner takes in the request (the socket became writable again), so a
        // blocked read costs the client a second, useless wake-up per call; poll wakes only
        // for the reply.
        if let Err(e) = wait_readable(&stream) {
            return Err(self.lost(e, true));
        }
        // Requests and replies alternate, so a reader for this reply reads nothing of another.
        let mut reader = std::io::BufReader::with_capacity(8 << 10, &*stream);
        let body = match wire::receive(&mut reader, Duration::MAX, || true) {
            Ok(Received::Frame(b)) => b,
            Ok(Received::Closed) => return Err(self.lost("it closed the connection", true)),
            Err(e) => return Err(self.lost(e, true)),
        };
        let mut r = In::new(&body);
        let status = r.u8("status")?;
        let result = if status == wire::OK {
            parse(&mut r).and_then(|()| r.end())
        } else {
            Err(decode_error(&mut r))
        };
        // A client closed meanwhile lets the connection go (its session then ends).
        if !self.is_lost() {
            lock(&self.idle).push(stream);
        }
        result
    }

    pub fn create_queue_as(
        &self,
        name: &[u8],
        config: QueueConfig,
        exist_ok: bool,
    ) -> Result<bool> {
        let mut out = Out::new(op::CREATE_QUEUE);
        out.bytes(name).config(&config).u8(exist_ok as u8);
        let mut created = false;
        self.call(out, |r| {
            created = r.flag("created")?;
            Ok(())
        })?;
        Ok(created)
    }

    pub fn delete_queue(&self, name: &[u8]) -> Result<()> {
        let mut out = Out::new(op::DELETE_QUEUE);
        out.bytes(name);
        self.call(out, |_| Ok(()))
    }

    pub fn enqueue_many(&self, name: &[u8], items: &[(i64, &[u8])]) -> Result<Vec<u64>> {
        let mut out = Out::new(op::ENQUEUE_MANY);
        out.bytes(name).u32(
            u32::try_from(items.len())
                .map_err(|_| Error::InvalidArgument("too many records in one call".into()))?,
        );
        for (key, payload) in items {
            out.i64(*key).bytes(payload);
        }
        let mut ids = Vec::new();
        self.call(out, |r| {
            let n = r.count(8, "ids")?;
            ids.reserve(n);
            for _ in 0..n {
                ids.push(r.u64("id")?);
            }
            Ok(())
        })?;
        Ok(ids)
    }

    pub fn enqueue(&self, name: &[u8], key: i64, message: &[u8]) -> Result<u64> {
        let ids = self.enqueue_many(name, &[(key, message)])?;
        ids.first()
            .copied()
            .ok_or_else(|| wire::malformed("no id in the reply"))
    }

    /// Waits at most about a second per call (the owner's bound): callers loop.
    pub fn dequeue_leased(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<(Record, u64)>> {
        let mut out = Out::new(op::DEQUEUE);
        out.bytes(name)
            .u64(millis(timeout))
            .opt_u64(lease.map(|l| l.as_millis().min(u64::MAX as u128) as u64));
        let mut got = None;
        self.call(out, |r| {
            if r.flag("found")? {
                got = Some(r.record()?);
            }
            Ok(())
        })?;
        Ok(got)
    }

    pub fn wait_ready(&self, name: &[u8], timeout: Option<Duration>) -> Result<bool> {
        let mut out = Out::new(op::WAIT_READY);
        out.bytes(name).u64(millis(timeout));
        let mut ready = false;
        self.call(out, |r| {
            ready = r.flag("ready")?;
            Ok(())
        })?;
        Ok(ready)
    }

    pub fn ack_many(&self, items: &[(&[u8], u64, Option<u64>)]) -> Result<()> {
        let mut out = Out::new(op::ACK_MANY);
        out.u32(items.len() as u32);
        for (queue, id, receipt) in items {
            out.bytes(queue).u64(*id).opt_u64(*receipt);
        }
        self.call(out, |_| Ok(()))
    }

    pub fn ack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        self.ack_many(&[(name, id, receipt)])
    }

    pub fn nack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        let mut out = Out::new(op::NACK);
        out.bytes(name).u64(id).opt_u64(receipt);
        self.call(out, |_| Ok(()))
    }

    pub fn count(&self, name: &[u8]) -> Result<u64> {
        let mut out = Out::new(op::COUNT);
        out.bytes(name);
        let mut n = 0;
        self.call(out, |r| {
            n = r.u64("count")?;
            Ok(())
        })?;
        Ok(n)
    }

    pub fn peek(&self, name: &[u8]) -> Result<Option<Record>> {
        let mut out = Out::new(op::PEEK);
        out.bytes(name);
        let mut got = None;
        self.call(out, |r| {
            if r.flag("found")? {
                got = Some(r.record()?.0);
            }
            Ok(())
        })?;
        Ok(got)
    }

    pub fn peek_all(&self, name: &[u8]) -> Result<Vec<Record>> {
        let mut out = Out::new(op::PEEK_ALL);
        out.bytes(name);
        let mut all = Vec::new();
        self.call(out, |r| {
            let n = r.count(28, "records")?;
            all.reserve(n);
            for _ in 0..n {
                all.push(r.record()?.0);
            }
            Ok(())
        })?;
        Ok(all)
    }

    pub fn queues(&self) -> Result<Vec<QueueInfo>> {
        let mut all = Vec::new();
        self.call(Out::new(op::QUEUES), |r| {
            let n = r.count(30, "queues")?;
            for _ in 0..n {
                all.push(r.info()?);
            }
            Ok(())
        })?;
        Ok(all)
    }

    pub fn snapshot(&self) -> Result<bool> {
        let mut wrote = false;
        self.call(Out::new(op::SNAPSHOT), |r| {
            wrote = r.flag("written")?;
            Ok(())
        })?;
        Ok(wrote)
    }

    pub fn info(&self) -> Result<OwnerInfo> {
        let mut info = None;
        self.call(Out::new(op::INFO), |r| {
            let bounds = (r.i64("start")?, r.i64("last")?, r.i64("snapshot")?);
            let term = r.i64("term")? as i32;
            let settings = Settings::from_json(r.str("settings")?)?;
            info = Some(OwnerInfo {
                log_bounds: bounds,
                term,
                settings,
            });
            Ok(())
        })?;
        info.ok_or_else(|| wire::malformed("no owner info"))
    }

    /// Sends channel messages through the owner; the first one's LSN.
    pub fn send_many<D: AsRef<[u8]>>(&self, items: &[D]) -> Result<i64> {
        let mut out = Out::new(op::SEND_MANY);
        out.u32(
            u32::try_from(items.len())
                .map_err(|_| Error::InvalidArgument("too many messages in one call".into()))?,
        );
        for m in items {
            out.bytes(m.as_ref());
        }
        let mut first = 0;
        self.call(out, |r| {
            first = r.i64("lsn")?;
            Ok(())
        })?;
        Ok(first)
    }

    pub fn channel_sync(&self) -> Result<()> {
        self.call(Out::new(op::CHANNEL_SYNC), |_| Ok(()))
    }

    pub fn drop_receiver(&self, name: &str) -> Result<bool> {
        let mut out = Out::new(op::DROP_RECEIVER);
        out.bytes(name.as_bytes());
        let mut dropped = false;
        self.call(out, |r| {
            dropped = r.flag("dropped")?;
            Ok(())
        })?;
        Ok(dropped)
    }

    pub fn collect(&self) -> Result<usize> {
        let mut n = 0;
        self.call(Out::new(op::COLLECT), |r| {
            n = r.u64("collected")? as usize;
            Ok(())
        })?;
        Ok(n)
    }

    pub fn disk_full(&self) -> Result<bool> {
        let mut full = false;
        self.call(Out::new(op::DISK_FULL), |r| {
            full = r.flag("full")?;
            Ok(())
        })?;
        Ok(full)
    }

    /// Closes every pooled connection: what this client holds in flight goes back to the
    /// queues once its last connection is gone.
    pub fn close(&self) {
        lock(&self.idle).clear();
        self.lost.store(true, Ordering::SeqCst);
    }
}

/// Blocks until `stream` has something to read (a reply, or the owner's end).
fn wait_readable(stream: &UnixStream) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one initialised pollfd.
        let n = unsafe { libc::poll(&mut fd, 1, -1) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

fn millis(timeout: Option<Duration>) -> u64 {
    timeout.map_or(u64::MAX, |t| t.as_millis().min(u64::MAX as u128) as u64)
}

fn decode_error(r: &mut In<'_>) -> Error {
    let decoded = (|| -> Result<RemoteError> {
        let code = r.u8("error kind")?;
        let kind = RemoteKind::from_code(code)
            .ok_or_else(|| wire::malformed(format!("error kind {code}")))?;
        let message = r.str("message")?.to_string();
        let has_path = r.flag("path")?;
        let path = r.str("path")?.to_string();
        let offset = r.opt_u64("offset")?;
        let errno = r.opt_i64("errno")?.map(|e| e as i32);
        let queue = r.str("queue")?.to_string();
        let policy = r.str("policy")?.to_string();
        let lsn = r.opt_i64("lsn")?;
        Ok(RemoteError {
            kind,
            message,
            path: has_path.then_some(path),
            offset,
            errno,
            queue,
            policy,
            lsn,
        })
    })();
    match decoded {
        Ok(r) => Error::Remote(Box::new(r)),
        Err(e) => e,
    }
}
