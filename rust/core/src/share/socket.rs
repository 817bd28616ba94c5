//! The owner's socket: binding and connecting (through the directory's descriptor when the
//! path is longer than `sun_path` holds), and which connection errors mean "no owner answers".

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use crate::error::{IoContext, Result};

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

/// Connects to the owner's socket, waiting at most `deadline` while the owner's listen backlog
/// is full (a stopped owner, or one flooded with connections): a blocking `connect` on a Unix
/// socket otherwise waits for room in the backlog forever. The wait ends with `WouldBlock`.
pub(crate) fn connect(path: &Path, deadline: std::time::Duration) -> io::Result<UnixStream> {
    via_short_path(path, |p| connect_within(p, deadline))
}

fn connect_within(path: &Path, deadline: std::time::Duration) -> io::Result<UnixStream> {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: an all-zero `sockaddr_un` is a valid value of the plain C struct.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long or holding a NUL byte",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
        *to = *from as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: plain system call; the result is checked before it is used as a descriptor.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor that nothing else owns.
    let stream = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    // SO_SNDTIMEO bounds the kernel's wait for room in the listener's backlog (Linux applies
    // the send timeout to a Unix stream connect).
    stream.set_write_timeout(Some(deadline.max(std::time::Duration::from_millis(1))))?;
    loop {
        // SAFETY: `addr` is an initialised sockaddr_un and `len` covers the path and its NUL.
        let done = unsafe {
            libc::connect(
                stream.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast::<libc::sockaddr>(),
                len as libc::socklen_t,
            )
        };
        if done == 0 {
            break;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    stream.set_write_timeout(None)?;
    Ok(stream)
}

/// Errors of a connection attempt that mean "no owner answers yet".
pub(crate) fn transient(e: &io::Error) -> bool {
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
