//! Who owns a base directory: the owner lock, and finding the owner (or becoming it).

use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

use super::client::{Client, ConnectError};
use crate::error::{Error, IoContext, Result};
use crate::fork::ParentOnly;

/// The owner's socket, in the base directory's `data/`.
pub const SOCKET: &str = "tflux.sock";
/// How long a client waits for an owner that holds the owner lock but does not answer yet
/// (it is restoring the store) before giving up, unless `lock_timeout` is longer.
pub const OWNER_WAIT: Duration = Duration::from_secs(60);

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

/// Whether a process (this one included) owns the directory `base` now: the rule
/// `find_owner` applies, for those that only look (`tflux stats`). A probe of the owner
/// lock, released at once: it creates nothing, and an owner-to-be that meets it retries as it
/// does for any owner. A directory that does not exist has no owner.
pub fn owner_holds(base: &Path) -> Result<bool> {
    if !base.exists() {
        return Ok(false);
    }
    Ok(try_owner_lock(base)?.is_none())
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
            // With the owner lock held no live owner serves the socket: one still there was
            // left by an owner that died without closing (a clean close removes it first).
            let left_behind = socket.exists();
            match become_owner(&socket) {
                Ok(made) => {
                    let pid = std::process::id();
                    if left_behind {
                        ::log::info!(
                            target: crate::events::SHARE,
                            "process {pid} took over {} as its owner: the previous owner died \
                             without closing (it left {} behind)",
                            base.display(),
                            socket.display()
                        );
                    } else {
                        ::log::info!(
                            target: crate::events::SHARE,
                            "process {pid} is the owner of {}",
                            base.display()
                        );
                    }
                    return Ok(Found::Owner(made, owner_lock));
                }
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
                Ok(client) => {
                    ::log::debug!(
                        target: crate::events::SHARE,
                        "process {} is a client of the owner of {}, process {}",
                        std::process::id(),
                        base.display(),
                        client.owner_pid()
                    );
                    return Ok(Found::Client(client));
                }
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
