//! A client's side: the same calls as [`Store`](crate::store::Store), carried out by the owner.
//! Connections are pooled, so threads of one client never wait on each other's calls (a
//! dequeue waiting for records holds one connection, an enqueue takes another).

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use super::channel::ChannelRequest;
use super::wire::{self, Received};
use crate::error::{Error, Result};
use crate::fork::{Birth, ParentOnly};
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

/// Sessions of this process are told apart by a counter; processes by their id.
static SESSIONS: AtomicU32 = AtomicU32::new(0);

impl Client {
    /// Connects to the owner serving `socket` (the base directory `base`).
    pub fn connect(base: &Path, socket: &Path) -> std::result::Result<Client, ConnectError> {
        let session = (u64::from(std::process::id()) << 32)
            | u64::from(SESSIONS.fetch_add(1, Ordering::Relaxed));
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
        let frame = wire::hello(self.session).map_err(ConnectError::Refused)?;
        wire::send(&mut &*stream, &frame).map_err(ConnectError::Gone)?;
        let body = match wire::receive(&mut &*stream, Duration::from_secs(30), || true) {
            Ok(Received::Frame(b)) => b,
            Ok(Received::Closed) => {
                return Err(ConnectError::Gone(io::ErrorKind::ConnectionReset.into()))
            }
            Err(e) => return Err(gone_or(e)),
        };
        // The owner answered, and refused (another user, another version, too many
        // connections): it is alive.
        let (pid, dialect) = wire::read_welcome(&body).map_err(ConnectError::Refused)?;
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

    /// Has the owner carry out `request`.
    pub fn execute(&self, request: &Request<'_>) -> Result<Reply> {
        self.exchange(wire::request(|out| request.encode(out))?)
    }

    /// [`Client::execute`], its reply as the type the caller expects.
    pub fn call<T: TryFrom<Reply, Error = Error>>(&self, request: &Request<'_>) -> Result<T> {
        self.execute(request)?.try_into()
    }

    /// [`Client::execute`] for a channel's owner.
    pub fn execute_channel(&self, request: &ChannelRequest<'_>) -> Result<Reply> {
        self.exchange(wire::request(|out| request.encode(out))?)
    }

    /// Sends one request frame and reads its reply.
    fn exchange(&self, frame: Vec<u8>) -> Result<Reply> {
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
