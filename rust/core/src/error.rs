//! Errors of the core. Each variant carries what a user needs to find the problem: the file, the
//! byte offset where the bad record or header starts, and the reason.

use std::io;
use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// "No such file or directory", built from the OS number so Python sees `errno == ENOENT`.
pub(crate) const ENOENT: i32 = 2;
/// "Not a directory".
pub(crate) const ENOTDIR: i32 = 20;

/// The errno for a directory that is not there: ENOTDIR when something else has its name.
pub(crate) fn missing_dir_errno(path: &Path) -> i32 {
    if path.exists() {
        ENOTDIR
    } else {
        ENOENT
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bytes on disk that do not follow the format (never produced by a clean torn tail).
    #[error("corrupt {}{}: {reason}", path.display(), offset.map(|o| format!(" at offset {o}")).unwrap_or_default())]
    Corruption {
        path: PathBuf,
        offset: Option<u64>,
        reason: String,
    },
    /// A directory (or file) in another dialect than the caller asked for or this version
    /// reads, or whose files disagree about their dialect (spec section 11). Nothing was
    /// written.
    #[error("{}: {reason}", path.display())]
    Dialect { path: PathBuf, reason: String },
    /// A store, log or channel used in a process forked after it was opened (`crate::fork`).
    #[error("this {what} was opened before fork() in another process; a forked child cannot use it (its writes would land where the parent's do, and it would wait on threads the child does not have): open it again in the child, or start workers with the spawn method")]
    Forked { what: &'static str },
    /// A read-only reader found that a file changed under it (a writer cut, replaced or deleted
    /// it since the reader opened the log). The log is healthy: reopen and retry.
    #[error("{} changed while it was read{}: {reason}; reopen the log and retry", path.display(), offset.map(|o| format!(" (offset {o})")).unwrap_or_default())]
    StaleRead {
        path: PathBuf,
        offset: Option<u64>,
        reason: String,
    },
    /// An operating-system error, with the operation and file it happened on.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// Another writer holds the directory lock.
    #[error("{} is locked by another writer (one writer per log directory)", path.display())]
    Locked { path: PathBuf },
    /// Another receiver (in this process or another) has this receiver name open.
    #[error("receiver {name:?} is open elsewhere ({} is locked); one owner per receiver name", path.display())]
    ReceiverLocked { name: String, path: PathBuf },
    /// A write through a read-only log.
    #[error("the log at {} was opened read-only", path.display())]
    ReadOnly { path: PathBuf },
    /// A write after an earlier write-path I/O error (fail-stop until reopened). Keeps the file
    /// and errno of the original error.
    #[error("writes are refused after an earlier I/O error ({}); reopen to continue", cause.reason)]
    Poisoned { cause: PoisonCause },
    /// A change that was written to the log and applied, but whose fsync failed: it may or may
    /// not survive a crash (and later writes are refused). Unlike every other error, the call
    /// that returns it did take effect in the running store.
    #[error("the change was written but could not be made durable ({}); it may or may not survive a crash", cause.reason)]
    NotDurable { cause: PoisonCause },
    /// A write refused because the file system is fuller than a configured used-space ratio
    /// (nothing was written; writes resume once space is freed).
    #[error("the file system of {} is {:.1}% full (writes are refused at or above {:.1}%); free some space", path.display(), used * 100.0, limit * 100.0)]
    DiskFull {
        path: PathBuf,
        used: f64,
        limit: f64,
    },
    /// A bad `taskflux.settings.json` or settings argument (names the key).
    #[error("{0}")]
    Settings(String),
    /// An argument outside its valid domain (bad term, bad limits, committed index...).
    #[error("{0}")]
    InvalidArgument(String),
    /// An index outside the entries the log holds.
    #[error("{0}")]
    OutOfRange(String),
    /// A delta that cannot be applied while rebuilding the state.
    #[error("replay failed at LSN {}: {reason}", lsn.map_or("?".to_string(), |l| l.to_string()))]
    Replay {
        lsn: Option<i64>,
        reason: String,
        #[source]
        source: Option<Box<Error>>,
    },
    /// A client request on a queue that does not exist.
    #[error("no queue named {}", display_name(name.as_bytes()))]
    NoSuchQueue { name: String },
    #[error("a queue named {} already exists", display_name(name.as_bytes()))]
    QueueExists { name: String },
    /// A client enqueue refused by one of the queue's policies; nothing was written.
    #[error("queue {}: {reason}", display_name(queue.as_bytes()))]
    Policy {
        queue: String,
        policy: &'static str,
        reason: String,
    },
    /// An operation on a store (or log) that was closed.
    #[error("operation on a closed {0}")]
    Closed(&'static str),
    /// Ack or nack of a record that is not in flight. `lease_expired`: the delivery it names is
    /// one whose lease ran out (the owner remembers the latest few thousand); otherwise the
    /// message lists what may have happened.
    #[error("record {id} of queue {} is not in flight{}", display_name(queue.as_bytes()), if *lease_expired { ": its lease expired before this ack or nack, and the record went back to its queue (a longer lease, or extending it, keeps a slow delivery)" } else { " (acked or nacked already, its lease expired, or it was delivered by an earlier open or another owner)" })]
    NotInFlight {
        queue: String,
        id: u64,
        lease_expired: bool,
    },
    /// A client of a shared base directory lost its owner (`crate::share`): the owner closed
    /// the store or its process died. The call may or may not have taken effect; the next
    /// call finds (or becomes) the new owner.
    #[error("the owner of {} went away ({reason}); {}", path.display(), if *sent { "the call may or may not have taken effect: retry it (the next call reconnects, or takes over as the owner)" } else { "the call did not reach it: retry it" })]
    OwnerLost {
        path: PathBuf,
        reason: String,
        /// Whether the request may have reached the owner (false: it surely had no effect).
        sent: bool,
    },
    /// The owner of a shared base directory is alive and does not serve this client: it did
    /// not answer in time (stopped, or flooded with connections), or refused one more
    /// connection (its limit). `errno` is `ETIMEDOUT` or `EAGAIN`. A call that timed out may
    /// or may not have taken effect.
    #[error("the owner of {} {reason}", path.display())]
    OwnerBusy {
        path: PathBuf,
        reason: String,
        errno: i32,
    },
    /// A new directory whose parent does not exist: tflux makes the directory it is given as
    /// `mkdir` does, not `mkdir -p` (a typo in a parent is an error, not a new tree), unless
    /// told to make the parents too ([`crate::io::fsutil::create_named_dir`]). Nothing was
    /// created.
    #[error("{} does not exist, so {} is not created (nothing was): a new directory is made only inside an existing one, as mkdir does; pass create=True (--create) to make the missing parents too", parent.display(), path.display())]
    MissingParent { path: PathBuf, parent: PathBuf },
    /// An error the owner of a shared base directory raised for this client's request, as
    /// the owner worded it.
    #[error("{}", .0.message)]
    Remote(Box<ErrorReport>),
}

/// Any [`Error`] as plain data: its kind and the fields a user (or the Python exception of
/// its kind) needs. What an owner sends a client for a failed request, and what the binding
/// raises for every error, local or remote, so both go through one table of kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReport {
    pub kind: ErrorKind,
    pub message: String,
    pub path: Option<String>,
    pub offset: Option<u64>,
    pub errno: Option<i32>,
    /// The queue named by a queue error.
    pub queue: String,
    /// The policy named by a policy error.
    pub policy: String,
    pub lsn: Option<i64>,
}

/// The families of [`Error`], each raised as one Python class (their numbers are wire
/// format: an owner's error reaches its clients by number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ErrorKind {
    Corruption = 1,
    Dialect = 2,
    StaleRead = 3,
    Io = 4,
    Locked = 5,
    ReadOnly = 6,
    Forked = 7,
    /// A full file system (a watermark, or an I/O error with `ENOSPC`).
    DiskFull = 8,
    Settings = 9,
    InvalidArgument = 10,
    OutOfRange = 11,
    Replay = 12,
    NoSuchQueue = 13,
    QueueExists = 14,
    Policy = 15,
    Closed = 16,
    NotInFlight = 17,
    OwnerLost = 18,
    /// An owner that does not answer in time, or refuses one more connection.
    OwnerBusy = 19,
}

/// "No space left on device".
pub const ENOSPC: i32 = 28;
/// "Resource temporarily unavailable".
pub const EAGAIN: i32 = 11;
/// "Connection timed out".
pub const ETIMEDOUT: i32 = 110;

impl ErrorKind {
    pub const ALL: [ErrorKind; 19] = {
        use ErrorKind::*;
        [
            Corruption,
            Dialect,
            StaleRead,
            Io,
            Locked,
            ReadOnly,
            Forked,
            DiskFull,
            Settings,
            InvalidArgument,
            OutOfRange,
            Replay,
            NoSuchQueue,
            QueueExists,
            Policy,
            Closed,
            NotInFlight,
            OwnerLost,
            OwnerBusy,
        ]
    };

    pub fn from_code(code: u8) -> Option<ErrorKind> {
        ErrorKind::ALL.into_iter().find(|k| *k as u8 == code)
    }
}

impl Error {
    /// This error as data (an owner's error that reached this client: as the owner made it).
    pub fn report(&self) -> ErrorReport {
        let mut r = ErrorReport {
            kind: ErrorKind::InvalidArgument,
            message: self.to_string(),
            path: None,
            offset: None,
            errno: None,
            queue: String::new(),
            policy: String::new(),
            lsn: None,
        };
        let path = |p: &Path| Some(p.display().to_string());
        let io = |errno: Option<i32>| {
            if errno == Some(ENOSPC) {
                ErrorKind::DiskFull
            } else {
                ErrorKind::Io
            }
        };
        r.kind = match self {
            Error::Corruption {
                path: p, offset, ..
            } => {
                (r.path, r.offset) = (path(p), *offset);
                ErrorKind::Corruption
            }
            Error::Dialect { path: p, .. } => {
                r.path = path(p);
                ErrorKind::Dialect
            }
            Error::Forked { .. } => ErrorKind::Forked,
            Error::StaleRead {
                path: p, offset, ..
            } => {
                (r.path, r.offset) = (path(p), *offset);
                ErrorKind::StaleRead
            }
            Error::Io {
                path: p, source, ..
            } => {
                (r.path, r.errno) = (path(p), source.raw_os_error());
                io(r.errno)
            }
            Error::Locked { path: p } | Error::ReceiverLocked { path: p, .. } => {
                r.path = path(p);
                ErrorKind::Locked
            }
            Error::ReadOnly { .. } => ErrorKind::ReadOnly,
            Error::Poisoned { cause } | Error::NotDurable { cause } => {
                (r.path, r.errno) = (cause.path.as_deref().and_then(path), cause.errno);
                io(r.errno)
            }
            Error::DiskFull { path: p, .. } => {
                (r.path, r.errno) = (path(p), Some(ENOSPC));
                ErrorKind::DiskFull
            }
            Error::Settings(_) => ErrorKind::Settings,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::OutOfRange(_) => ErrorKind::OutOfRange,
            Error::Replay { lsn, .. } => {
                r.lsn = *lsn;
                ErrorKind::Replay
            }
            Error::NoSuchQueue { name } => {
                r.queue = name.clone();
                ErrorKind::NoSuchQueue
            }
            Error::QueueExists { name } => {
                r.queue = name.clone();
                ErrorKind::QueueExists
            }
            Error::Policy { queue, policy, .. } => {
                (r.queue, r.policy) = (queue.clone(), policy.to_string());
                ErrorKind::Policy
            }
            Error::Closed(_) => ErrorKind::Closed,
            Error::NotInFlight { queue, .. } => {
                r.queue = queue.clone();
                ErrorKind::NotInFlight
            }
            Error::OwnerLost { path: p, .. } => {
                r.path = path(p);
                ErrorKind::OwnerLost
            }
            Error::OwnerBusy { path: p, errno, .. } => {
                (r.path, r.errno) = (path(p), Some(*errno));
                ErrorKind::OwnerBusy
            }
            Error::MissingParent { parent, .. } => {
                (r.path, r.errno) = (path(parent), Some(ENOENT));
                ErrorKind::Io
            }
            Error::Remote(remote) => return (**remote).clone(),
        };
        r
    }
}

/// Why a log or store stopped accepting writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoisonCause {
    pub reason: String,
    pub path: Option<PathBuf>,
    pub errno: Option<i32>,
}

impl PoisonCause {
    pub fn from_error(e: &Error) -> PoisonCause {
        let (path, errno) = match e {
            Error::Io { path, source, .. } => (Some(path.clone()), source.raw_os_error()),
            Error::Poisoned { cause } | Error::NotDurable { cause } => {
                (cause.path.clone(), cause.errno)
            }
            _ => (None, None),
        };
        PoisonCause {
            reason: e.to_string(),
            path,
            errno,
        }
    }

    pub fn because(reason: impl Into<String>) -> PoisonCause {
        PoisonCause {
            reason: reason.into(),
            path: None,
            errno: None,
        }
    }
}

impl Error {
    pub fn corruption(path: &Path, offset: Option<u64>, reason: impl Into<String>) -> Self {
        Error::Corruption {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }

    pub fn stale_read(path: &Path, offset: Option<u64>, reason: impl Into<String>) -> Self {
        Error::StaleRead {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }

    pub fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        Error::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Attaches an operation and a path to an `io::Result`.
pub trait IoContext<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}

/// How a queue name is shown in messages (errors, replay failures): quoted, or "(default)".
pub fn display_name(name: &[u8]) -> String {
    if name.is_empty() {
        "(default)".to_string()
    } else {
        format!("{:?}", String::from_utf8_lossy(name))
    }
}
