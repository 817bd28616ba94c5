//! Small file-system helpers shared by the snapshot, the metadata and the store.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};

/// Name of the directory beside a file where its replacement is written first.
pub const TEMP_DIR: &str = "temp";

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content:
/// write the whole file under `<parent of path>/temp/` (created if needed), fsync it, rename it
/// over `path`, fsync the parent directory. A failed write removes its temp file.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let temp_dir = parent.join(TEMP_DIR);
    // Only `temp/` is created: a missing parent is the caller's mistake, not ours to paper over.
    match fs::create_dir(&temp_dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
            return Err(Error::io("create temp directory", &temp_dir, e))
        }
        Err(_) => {}
        Ok(()) => sync_dir(parent)?,
    }
    let temp = temp_path(&temp_dir, path);
    let written = write_synced(&temp, bytes)
        .and_then(|()| fs::rename(&temp, path).ctx("rename temp file over", path));
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    sync_dir(parent)
}

/// Creates `dir` and any missing ancestors durably: each new directory's entry is fsynced in
/// its parent, so a power cut after the first acknowledged write cannot lose the directory.
pub fn create_dir_durable(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.as_os_str().is_empty() || d.is_dir() {
            break;
        }
        missing.push(d.to_path_buf());
        cur = d.parent();
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(dir).ctx("create directory", dir)?;
    for d in missing.iter().rev() {
        let parent = match d.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        sync_dir(parent)?;
    }
    Ok(())
}

/// Makes a directory's entries (created, renamed, removed files) durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    crate::log::sync_dir(dir)
}

fn write_synced(temp: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(temp)
        .ctx("create temp file", temp)?;
    file.write_all(bytes).ctx("write temp file", temp)?;
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
