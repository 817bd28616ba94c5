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

pub(crate) fn connect(path: &Path) -> io::Result<UnixStream> {
    via_short_path(path, |p| UnixStream::connect(p))
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
