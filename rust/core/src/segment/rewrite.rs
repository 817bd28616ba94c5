//! Copy-on-truncate: a segment cut short is rewritten as a copy under a `.cut` name and renamed
//! over the original, so a crash leaves the old file or the new one, never neither.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::format::record::END_MARKER;
use crate::format::segment as header;
use crate::io::storage::{Open, Rename, Storage, StorageFile};

// Through the parent: rewrite -> file would close a circle (file takes rewrite_prefix).
use super::reserve;

/// Steps of [`rewrite_prefix`], in order. A crash after any of them leaves, under the
/// segment's name, either the old file or the new one (never neither), and at most a leftover
/// `.cut` file that the next writable open removes ([`remove_cut_leftovers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RewriteStep {
    /// The `.cut` file exists, reserved and zero-filled.
    Created,
    /// The kept bytes and the end marker are written into it.
    Written,
    /// It is fsynced.
    Synced,
    /// It is renamed over the segment.
    Renamed,
    /// The directory is fsynced: the cut is durable.
    DirSynced,
}

/// How [`rewrite_prefix`] makes the new file.
#[derive(Debug, Clone, Default)]
pub struct RewriteOptions {
    /// Bytes reserved (written as zeros) in the new file, as for a new segment; 0 = none.
    pub preallocate: u64,
    /// Fault injection for crash tests: fail right after this step, leaving the files exactly
    /// as a kill there would.
    pub stop_after: Option<RewriteStep>,
}

/// Suffix of the file a cut writes before renaming it over the segment (`<segment name>.cut`,
/// in the log directory: never taken for a segment, and renamed within one directory).
pub const CUT_SUFFIX: &str = ".cut";

/// Replaces the segment file at `path` by a new file holding its bytes `[0, end)` (the header
/// and the records kept; `end` must be a record boundary) followed by an end marker and zeros:
/// copy-on-truncate. The new file is written beside it as `<name>.cut`, reserved like a new
/// segment, fsynced, renamed over `path`, and the directory fsynced. `source` (the open old
/// file) is only read: a reader that holds it keeps seeing the records it indexed. Returns
/// the new file, open for reading and writing. The one way to cut a segment: `truncate_after`,
/// `insert_range` and repair all use it.
pub fn rewrite_prefix(
    storage: &dyn Storage,
    source: &dyn StorageFile,
    path: &Path,
    end: u64,
    opts: &RewriteOptions,
) -> Result<Arc<dyn StorageFile>> {
    let temp = cut_temp_path(path);
    match storage.remove_file(&temp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("remove leftover cut file", &temp, e))
        }
        _ => {}
    }
    let file = match write_prefix_copy(storage, source, path, &temp, end, opts) {
        Ok(file) => file,
        Err(e) => {
            // Keep a stopped (simulated crash) rewrite's file for the crash test to find.
            if opts.stop_after.is_none() {
                let _ = storage.remove_file(&temp);
            }
            return Err(e);
        }
    };
    storage
        .rename(&temp, path, Rename::Replace)
        .ctx("rename cut segment over", path)?;
    stop_if(opts, RewriteStep::Renamed, path)?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    crate::io::fsutil::sync_dir(storage, dir)?;
    stop_if(opts, RewriteStep::DirSynced, path)?;
    Ok(file)
}

/// Steps up to the fsync of [`rewrite_prefix`]: the new file, complete and durable.
fn write_prefix_copy(
    storage: &dyn Storage,
    source: &dyn StorageFile,
    path: &Path,
    temp: &Path,
    end: u64,
    opts: &RewriteOptions,
) -> Result<Arc<dyn StorageFile>> {
    let file = storage
        .open(temp, Open::CreateNew)
        .ctx("create cut segment", temp)?;
    reserve(&*file, opts.preallocate).ctx("preallocate cut segment", temp)?;
    stop_if(opts, RewriteStep::Created, temp)?;
    const CHUNK: u64 = 1 << 20;
    let mut buf = vec![0u8; CHUNK.min(end) as usize];
    let mut at = 0;
    while at < end {
        let n = CHUNK.min(end - at) as usize;
        source
            .read_exact_at(&mut buf[..n], at)
            .ctx("read segment", path)?;
        file.write_all_at(&buf[..n], at)
            .ctx("write cut segment", temp)?;
        at += n as u64;
    }
    file.write_all_at(&END_MARKER, end)
        .ctx("write cut segment", temp)?;
    stop_if(opts, RewriteStep::Written, temp)?;
    file.sync_all().ctx("fsync cut segment", temp)?;
    stop_if(opts, RewriteStep::Synced, temp)?;
    Ok(file)
}

fn stop_if(opts: &RewriteOptions, step: RewriteStep, path: &Path) -> Result<()> {
    if opts.stop_after == Some(step) {
        let why = std::io::Error::other(format!("stopped after {step:?} (fault injection)"));
        return Err(Error::io("cut segment", path, why));
    }
    Ok(())
}

/// `<segment>.cut` beside the segment.
pub fn cut_temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(CUT_SUFFIX);
    path.with_file_name(name)
}

/// Removes the `<segment name>.cut` files a crash in [`rewrite_prefix`] left in `dir` (the
/// segment itself is intact: the name only exists before the rename). Returns how many.
pub fn remove_cut_leftovers(storage: &dyn Storage, dir: &Path) -> Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir).ctx("list log directory", dir)? {
        let entry = entry.ctx("list log directory", dir)?;
        let name = entry.file_name();
        let is_leftover = name
            .to_str()
            .and_then(|n| n.strip_suffix(CUT_SUFFIX))
            .and_then(header::parse_file_name)
            .is_some();
        if is_leftover {
            let path = entry.path();
            storage
                .remove_file(&path)
                .ctx("remove leftover cut file", &path)?;
            removed += 1;
        }
    }
    if removed > 0 {
        crate::io::fsutil::sync_dir(storage, dir)?;
    }
    Ok(removed)
}

/// Overwrites `[start, end)` with zeros, in bounded chunks.
pub fn zero_range(file: &dyn StorageFile, path: &Path, start: u64, end: u64) -> Result<()> {
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(end.saturating_sub(start)) as usize];
    let mut at = start;
    while at < end {
        let n = CHUNK.min(end - at) as usize;
        file.write_all_at(&zeros[..n], at)
            .ctx("zero discarded records", path)?;
        at += n as u64;
    }
    Ok(())
}
