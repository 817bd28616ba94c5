//! Receiver cursor files on disk (spec section 10; the bytes are `format::receiver`): read,
//! atomic replace, listing, and the per-name lock that keeps two processes from owning the
//! same receiver.

use std::fs::File;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::base::files::read_framed;
use crate::error::{Error, IoContext, Result};
use crate::format::receiver;
use crate::io::fsutil;
use crate::io::storage::{Open, Storage};

/// Where a channel keeps the lock files of its receivers (inside `data/cursors/`; not a
/// cursor name, since it has no `.cursor` suffix).
pub const LOCKS_DIR: &str = "locks";

pub fn cursor_path(cursors: &Path, name: &str) -> PathBuf {
    cursors.join(format!("{name}{}", receiver::SUFFIX))
}

/// The next LSN stored in a cursor file; `None` when it does not exist.
pub fn read(path: &Path) -> Result<Option<i64>> {
    read_framed(path, &receiver::FRAME, "read cursor")?
        .map(|b| receiver::decode(&b, path))
        .transpose()
}

/// Replaces the cursor file atomically (as the metadata file: temp, fsync, rename, dir fsync).
pub fn write(storage: &dyn Storage, path: &Path, next: i64) -> Result<()> {
    fsutil::atomic_write(storage, path, &receiver::encode(next))
}

/// Every receiver of a cursors directory, sorted by name, with its stored next LSN or the error
/// that says why its cursor cannot be read (damaged, a dangling symlink, not a regular file):
/// such a receiver exists, at a position nobody knows.
pub fn list(cursors: &Path) -> Result<Vec<(String, Result<i64>)>> {
    let entries = match std::fs::read_dir(cursors) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list cursors", cursors, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.ctx("list cursors", cursors)?;
        let file_name = entry.file_name();
        let Some(name) = file_name.to_str().and_then(receiver::parse_file_name) else {
            continue;
        };
        // Dropped between the listing and the read: not a receiver any more.
        match read(&entry.path()) {
            Ok(None) => {}
            Ok(Some(next)) => out.push((name.to_string(), Ok(next))),
            Err(e) => out.push((name.to_string(), Err(e))),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// Holds the lock of one receiver name until dropped (an `flock`, released by the kernel when
/// the process dies).
#[derive(Debug)]
pub struct NameLock {
    _file: File,
    pub path: PathBuf,
}

/// Takes the lock of receiver `name`: `Error::ReceiverLocked` when another owner has it.
pub fn lock(storage: &dyn Storage, cursors: &Path, name: &str) -> Result<NameLock> {
    let dir = cursors.join(LOCKS_DIR);
    fsutil::create_dir_durable(storage, &dir)?;
    let path = dir.join(name);
    loop {
        match storage.open(&path, Open::CreateNew) {
            Ok(_) => fsutil::sync_dir(storage, &dir)?,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io("create receiver lock", &path, e)),
        }
        let file = match storage.lock_dir(&path) {
            Ok(Some(f)) => f,
            Ok(None) => {
                return Err(Error::ReceiverLocked {
                    name: name.to_string(),
                    path,
                })
            }
            // Removed by drop_receiver between our create and open: make it again.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("lock receiver", &path, e)),
        };
        // The lock is ours only if the file still has this name (a dropper may have removed
        // it after we opened it).
        let same = match std::fs::metadata(&path) {
            Ok(m) => file
                .metadata()
                .is_ok_and(|f| f.ino() == m.ino() && f.dev() == m.dev()),
            Err(_) => false,
        };
        if same {
            return Ok(NameLock { _file: file, path });
        }
    }
}
