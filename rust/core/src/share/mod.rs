//! Several processes, one base directory (issue 29; docs/format.md, "Several processes").
//!
//! The first process to open a base directory for writing becomes its **owner**: it takes an
//! owner lock (an `flock` on the base directory), opens the [`Store`](crate::store::Store)
//! (which takes the log's writer lock) and serves it to the other processes of the same user over a Unix socket beside the data
//! (`data/tflux.sock`). Every later writable open of that directory, in any process, becomes
//! a **client** of the owner with the same calls; durability and delivery stay the owner's.
//!
//! When the owner goes (it closed the store, or its process died), a client's call in flight
//! fails with [`Error::OwnerLost`], and the client's next call finds the new owner, or takes
//! the owner lock itself and restores the store from disk: the user never reopens. A forked
//! child's copy of an owner's store becomes a client of the parent the same way.

pub mod channel;
pub mod client;
mod connection;
mod off_loop;
mod requests;
mod role;
pub mod server;
mod serving;
pub mod store;
pub mod wire;

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use channel::ChannelRequest;
pub use client::{Client, ConnectError};
pub use server::{Served, Server};
pub use store::{ShareOptions, SharedStore};

use crate::error::{Error, IoContext, Result};
use crate::fork::ParentOnly;

/// The owner's socket, in the base directory's `data/`.
pub const SOCKET: &str = "tflux.sock";
/// How long a client waits for an owner that holds the owner lock but does not answer yet
/// (it is restoring the store) before giving up, unless `lock_timeout` is longer.
pub const OWNER_WAIT: Duration = Duration::from_secs(60);

/// Socket paths longer than `sun_path` holds are reached through the directory's descriptor.
const SUN_PATH: usize = 107;

fn via_short_path<T>(path: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    use std::os::unix::ffi::OsStrExt;
    if path.as_os_str().as_bytes().len() <= SUN_PATH {
        return f(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return f(path);
    };
    let dir = File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    f(&short)
}

pub(crate) fn bind(path: &Path) -> Result<UnixListener> {
    via_short_path(path, |p| UnixListener::bind(p)).ctx("listen on", path)
}

pub(crate) fn connect(path: &Path) -> io::Result<UnixStream> {
    via_short_path(path, |p| UnixStream::connect(p))
}

/// The owner lock (an `flock` on the base directory itself: nothing is created for it, so an
/// open that fails changes nothing), or `None` while another process holds it.
fn try_owner_lock(base: &Path) -> Result<Option<ParentOnly<File>>> {
    let dir = File::open(base).ctx("open base directory", base)?;
    match dir.try_lock() {
        Ok(()) => Ok(Some(ParentOnly::new(dir))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", base, e)),
    }
}

/// What [`find_owner`] found.
pub(crate) enum Found<T> {
    /// This process is the owner now: what `become_owner` made, and the owner lock.
    Owner(T, ParentOnly<File>),
    Client(Client),
}

/// Finds the owner of the directory `base` and connects to it, or becomes the owner: with the
/// owner lock held, `become_owner` opens the data (taking its writer lock) and starts serving
/// on the socket it is given. The one place the rules of ownership live, for stores and
/// channels: a live owner that does not answer yet is waited for (up to [`OWNER_WAIT`], or
/// `lock_wait` when longer), never taken over; a writer lock held by something that is not an
/// owner (a `Log`, `tflux repair`, an unshared open) is `Locked` at once or after `lock_wait`.
pub(crate) fn find_owner<T>(
    base: &Path,
    storage: &dyn crate::io::storage::Storage,
    lock_wait: Option<Duration>,
    mut become_owner: impl FnMut(&Path) -> Result<T>,
) -> Result<Found<T>> {
    if !base.is_dir() {
        // A new directory: made first, as the store or channel would make it.
        crate::io::fsutil::create_dir_durable(storage, base)?;
    }
    let socket = base.join("data").join(SOCKET);
    let started = Instant::now();
    let owner_wait = lock_wait.map_or(OWNER_WAIT, |t| t.max(OWNER_WAIT));
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(owner_lock) = try_owner_lock(base)? {
            match become_owner(&socket) {
                Ok(made) => return Ok(Found::Owner(made, owner_lock)),
                Err(Error::Locked { path }) => {
                    drop(owner_lock);
                    if lock_wait.is_none_or(|t| started.elapsed() >= t) {
                        return Err(Error::Locked { path });
                    }
                }
                Err(e) => return Err(e),
            }
        } else {
            match Client::connect(base, &socket) {
                Ok(client) => return Ok(Found::Client(client)),
                Err(ConnectError::Gone(_)) if started.elapsed() < owner_wait => {}
                Err(ConnectError::Gone(e)) => {
                    return Err(Error::OwnerLost {
                        sent: false,
                        path: base.to_path_buf(),
                        reason: format!(
                            "another process holds the owner lock of {} but did not answer \
                             on {} within {:.0} s ({e})",
                            base.display(),
                            socket.display(),
                            owner_wait.as_secs_f64()
                        ),
                    })
                }
                Err(ConnectError::Refused(e)) => return Err(e),
                Err(ConnectError::Other(e)) => {
                    return Err(Error::io("connect to the owner", &socket, e))
                }
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Errors of a connection attempt that mean "no owner answers yet".
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}
