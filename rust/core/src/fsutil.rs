//! Small file-system helpers shared by the log, the snapshot, the metadata and the store. Every
//! change goes through a [`Storage`] (the real one in production, a fault-injecting one in tests).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};
use crate::storage::{Open, Rename, Storage};

/// Name of the directory beside a file where its replacement is written first.
pub const TEMP_DIR: &str = "temp";

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content:
/// write the whole file under `<parent of path>/temp/` (created if needed), fsync it, rename it
/// over `path`, fsync the parent directory. A failed write removes its temp file.
pub fn atomic_write(storage: &dyn Storage, path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = parent_of(path);
    let temp_dir = parent.join(TEMP_DIR);
    // Only `temp/` is created: a missing parent is the caller's mistake, not ours to paper over.
    match storage.create_dir(&temp_dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(Error::io("create temp directory", &temp_dir, e))
        }
        Err(_) => {}
        Ok(()) => sync_dir(storage, parent)?,
    }
    let temp = temp_path(&temp_dir, path);
    let written = write_synced(storage, &temp, bytes).and_then(|()| {
        storage
            .rename(&temp, path, Rename::Replace)
            .ctx("rename temp file over", path)
    });
    if let Err(e) = written {
        let _ = storage.remove_file(&temp);
        return Err(e);
    }
    sync_dir(storage, parent)
}

/// Creates `dir` and any missing ancestors durably: each new directory's entry is fsynced in
/// its parent, so a power cut after the first acknowledged write cannot lose the directory.
pub fn create_dir_durable(storage: &dyn Storage, dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d);
        cur = d.parent();
    }
    for d in missing.iter().rev() {
        match storage.create_dir(d) {
            // Another process may have created it meanwhile; a file of that name is an error.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && d.is_dir() => {}
            other => other.ctx("create directory", d)?,
        }
        sync_dir(storage, parent_of(d))?;
    }
    Ok(())
}

/// Makes a directory's entries (created, renamed, removed files) durable.
pub fn sync_dir(storage: &dyn Storage, dir: &Path) -> Result<()> {
    storage.sync_dir(dir).ctx("fsync directory", dir)
}

/// Takes the exclusive writer lock of `dir`: an `flock` on the directory itself, released by the
/// kernel when the process dies (no stale lock files).
pub fn lock_dir(storage: &dyn Storage, dir: &Path) -> Result<File> {
    match storage.lock_dir(dir) {
        Ok(Some(handle)) => Ok(handle),
        Ok(None) => Err(Error::Locked {
            path: dir.to_path_buf(),
        }),
        Err(e) => Err(Error::io("lock log directory", dir, e)),
    }
}

fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

fn write_synced(storage: &dyn Storage, temp: &Path, bytes: &[u8]) -> Result<()> {
    let file = storage
        .open(temp, Open::CreateNew)
        .ctx("create temp file", temp)?;
    file.write_all_at(bytes, 0).ctx("write temp file", temp)?;
    file.sync_all().ctx("fsync temp file", temp)?;
    Ok(())
}

/// A name no other writer in this process or another one uses at the same time.
fn temp_path(temp_dir: &Path, target: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let stem = target
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let seq = SEQ.fetch_add(1, Ordering::Relaxed);
    temp_dir.join(format!("{stem}.{}.{seq}.tmp", std::process::id()))
}
