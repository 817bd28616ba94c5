//! A client's side: the same calls as [`Store`](crate::store::Store), carried out by the owner.
//! Connections are pooled, so threads of one client never wait on each other's calls (a
//! dequeue waiting for records holds one connection, an enqueue takes another).

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::channel_request::ChannelRequest;
use super::wire::{self, Received};
use crate::error::{Error, Result, ETIMEDOUT};
use crate::fork::{Birth, ParentOnly};
use crate::store::request::Pace;
use crate::store::{Reply, Request};

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
            if super::socket::transient(&e) {
                ConnectError::Gone(e)
            } else {
                ConnectError::Other(e)
            }
        };
        let connected = super::socket::connect(&self.socket, HELLO_DEADLINE);
        let stream = match connected {
            Ok(stream) => ParentOnly::new(stream),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(ConnectError::Refused(self.busy(format!(
                    "did not take this client's connection within {} s (its backlog of \
                     connections stayed full: it is stopped, or flooded with connections)",
                    HELLO_DEADLINE.as_secs()
                ))))
            }
            Err(e) => return Err(gone_or(e)),
        };
        // The socket took the connection, so an owner is alive: it welcomes at once, unless
        // it is stopped or cannot take the connection (out of descriptors in a flood of
        // them, when the connection waits in its backlog). The hello has a deadline.
        stream
            .set_read_timeout(Some(HELLO_DEADLINE))
            .map_err(ConnectError::Other)?;
        let frame = wire::hello(self.session).map_err(ConnectError::Refused)?;
        wire::send(&mut &*stream, &frame).map_err(ConnectError::Gone)?;
        let late = std::cell::Cell::new(false);
        let received = wire::receive(&mut &*stream, HELLO_DEADLINE, || {
            late.set(true);
            false
        });
        let body = match received {
            Ok(Received::Frame(b)) => b,
            Ok(Received::Closed) => {
                return Err(ConnectError::Gone(io::ErrorKind::ConnectionReset.into()))
            }
            Err(e) if late.get() || e.kind() == io::ErrorKind::TimedOut => {
                return Err(ConnectError::Refused(self.busy(format!(
                    "did not welcome this client within {} s (it is stopped, or out of \
                     descriptors in a flood of connections)",
                    HELLO_DEADLINE.as_secs()
                ))))
            }
            Err(e) => return Err(gone_or(e)),
        };
        // The owner answered, and refused (another user, another version, too many
        // connections): it is alive.
        let (pid, dialect) = wire::read_welcome(&body).map_err(ConnectError::Refused)?;
        stream.set_read_timeout(None).map_err(ConnectError::Other)?;
        Ok((stream, pid, dialect))
    }

    /// The base directory of the owner.
    pub fn base(&self) -> &Path {
        &self.base
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

    fn busy(&self, reason: String) -> Error {
        Error::OwnerBusy {
            path: self.base.clone(),
            reason,
            errno: ETIMEDOUT,
        }
    }

    fn lost(&self, reason: impl std::fmt::Display, sent: bool) -> Error {
        self.lost.store(true, Ordering::SeqCst);
        Error::OwnerLost {
            path: self.base.clone(),
            reason: format!("owner process {}: {reason}", self.owner_pid),
            sent,
        }
    }

    /// Has the owner carry out `request`.
    pub fn execute(&self, request: &Request<'_>) -> Result<Reply> {
        let deadline = reply_deadline(request.pace(), request.timeout());
        self.exchange(wire::request(|out| request.encode(out))?, deadline)
    }

    /// [`Client::execute`], its reply as the type the caller expects.
    pub fn call<T: TryFrom<Reply, Error = Error>>(&self, request: &Request<'_>) -> Result<T> {
        self.execute(request)?.try_into()
    }

    /// [`Client::execute`] for a channel's owner.
    pub fn execute_channel(&self, request: &ChannelRequest<'_>) -> Result<Reply> {
        let deadline = reply_deadline(request.pace(), None);
        self.exchange(wire::request(|out| request.encode(out))?, deadline)
    }

    /// Sends one request frame and reads its reply, waiting at most `deadline` for it.
    fn exchange(&self, frame: Vec<u8>, deadline: Duration) -> Result<Reply> {
        if self.is_lost() {
            return Err(self.lost("the connection closed earlier", false));
        }
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
        match wait_readable(&stream, deadline) {
            Ok(true) => {}
            // Stopped or overloaded: this connection is let go (a late reply must not be taken
            // for the next call's); the next call takes another, or finds the owner gone.
            Ok(false) => {
                return Err(self.busy(format!(
                    "(process {}) did not answer within {:.1} s (it is stopped or overloaded); \
                     the call may or may not have taken effect",
                    self.owner_pid,
                    deadline.as_secs_f64()
                )))
            }
            Err(e) => return Err(self.lost(e, true)),
        }
        // Requests and replies alternate, so a reader for this reply reads nothing of another.
        let mut reader = std::io::BufReader::with_capacity(8 << 10, &*stream);
        let body = match wire::receive(&mut reader, Duration::MAX, || true) {
            Ok(Received::Frame(b)) => b,
            Ok(Received::Closed) => return Err(self.lost("it closed the connection", true)),
            Err(e) => return Err(self.lost(e, true)),
        };
        let result = wire::read_reply(&body);
        // A client closed meanwhile lets the connection go (its session then ends).
        if !self.is_lost() {
            lock(&self.idle).push(stream);
        }
        result
    }

    /// Closes every pooled connection: what this client holds in flight goes back to the
    /// queues once its last connection is gone.
    pub fn close(&self) {
        lock(&self.idle).clear();
        self.lost.store(true, Ordering::SeqCst);
    }
}

/// How long an owner whose socket took a connection has to welcome it.
pub const HELLO_DEADLINE: Duration = Duration::from_secs(10);
/// How long past a request's own wait its client waits for the reply (a live owner answers at
/// once; this covers a loaded machine and the group commit's fsync).
pub const REPLY_GRACE: Duration = Duration::from_secs(10);
/// How long a client waits for the reply to a request that takes long (a snapshot, a queue
/// made or deleted with an fsync of its own, a copy of a large queue).
pub const LONG_REPLY: Duration = Duration::from_secs(120);

/// The most a client waits for the reply to a request: derived from the request's own wait
/// (which the owner bounds by [`wire::LONGEST_WAIT`]).
pub fn reply_deadline(pace: Pace, wait: Option<Option<Duration>>) -> Duration {
    match pace {
        Pace::Long => LONG_REPLY,
        Pace::Quick | Pace::Waits => {
            let wait = wait
                .flatten()
                .map_or(wire::LONGEST_WAIT, |w| w.min(wire::LONGEST_WAIT));
            wait + REPLY_GRACE
        }
    }
}

/// Blocks until `stream` has something to read (a reply, or the owner's end): false when
/// `deadline` passed first.
fn wait_readable(stream: &UnixStream, deadline: Duration) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let until = std::time::Instant::now() + deadline;
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: one initialised pollfd.
        let n = unsafe { libc::poll(&mut fd, 1, ms) };
        if n > 0 {
            return Ok(true);
        }
        if n == 0 {
            if left.is_zero() || std::time::Instant::now() >= until {
                return Ok(false);
            }
            continue;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
