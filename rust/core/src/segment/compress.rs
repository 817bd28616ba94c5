//! Replacing a sealed segment by its compressed copy `NNN.log.z` (spec section 9), crash-safe:
//! check the segment, compress into `data/temp/`, fsync, check the copy decodes to the same
//! bytes, rename it beside the original, fsync the directory, delete the original.
//!
//! A crash after any step leaves either the `.log` alone (plus at most a
//! `temp/<log dir name>-NNN.log.z.compressing` file, removed by the next writable open of that
//! log), or both files (the
//! next writable open keeps the `.z`, which decodes, and deletes the `.log`), or the `.z`
//! alone. No step loses an entry.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::format::compressed::{self, Method};
use crate::io::fsutil;
use crate::io::storage::{Open, Rename, Storage, StorageFile};
use crate::segment::Segment;

/// Steps of [`compress_segment`], in order (for crash tests: stop right after one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum CompressStep {
    /// The segment's records were re-read and checked.
    Checked,
    /// The compressed copy is written into `temp/`.
    Written,
    /// It is fsynced.
    Synced,
    /// It was read back and decodes to the original bytes.
    Verified,
    /// It is renamed to `NNN.log.z` beside the original.
    Renamed,
    /// The log directory is fsynced: the `.z` is durable.
    DirSynced,
    /// The original `.log` is deleted (and the directory fsynced).
    Deleted,
}

impl CompressStep {
    pub const ALL: [CompressStep; 7] = [
        CompressStep::Checked,
        CompressStep::Written,
        CompressStep::Synced,
        CompressStep::Verified,
        CompressStep::Renamed,
        CompressStep::DirSynced,
        CompressStep::Deleted,
    ];
}

/// Parses a method name (`"zstd"`, `"lz4"`) for the APIs, naming the choices when it is not.
pub fn parse_method(name: &str) -> Result<Method> {
    Method::parse(name).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "unknown compression method {name:?} (expected \"zstd\" or \"lz4\")"
        ))
    })
}

/// Suffix of the file a compression writes in `temp/` before renaming it into the log.
pub const TEMP_SUFFIX: &str = ".compressing";

/// Whose copies in `temp/` are log `dir`'s: `<log dir name>-`. Sibling logs share one `temp/`
/// (bare logs in `/x/a` and `/x/b` both use `/x/temp`), and their first segments have the same
/// name, so a copy's name says which log it belongs to: one log's compression or open never
/// removes, overwrites or renames another's copy (which could put the other log's records in
/// place of this one's segment).
fn temp_owner(dir: &Path) -> OsString {
    let name = dir
        .file_name()
        .map(|n| n.to_os_string())
        .or_else(|| {
            std::fs::canonicalize(dir)
                .ok()?
                .file_name()
                .map(|n| n.to_os_string())
        })
        .unwrap_or_else(|| OsString::from("log"));
    let mut owner = name;
    owner.push("-");
    owner
}

/// `<log dir name>-NNN.log.z.compressing`: log `dir`'s copy of compressed file `name`.
fn temp_name(dir: &Path, name: &str) -> OsString {
    let mut out = temp_owner(dir);
    out.push(name);
    out.push(TEMP_SUFFIX);
    out
}

/// How [`compress_segment`] runs.
#[derive(Debug, Clone, Copy)]
pub struct CompressOptions {
    pub method: Method,
    /// Fault injection: fail right after this step, leaving the files as a kill there would.
    pub stop_after: Option<CompressStep>,
}

fn stop_if(opts: &CompressOptions, step: CompressStep, path: &Path) -> Result<()> {
    if opts.stop_after == Some(step) {
        let why = std::io::Error::other(format!("stopped after {step:?} (fault injection)"));
        return Err(Error::io("compress segment", path, why));
    }
    Ok(())
}

/// Replaces the sealed segment `seg` (of the log directory `dir`) by a `.log.z`, and switches
/// `seg` to read from it. Returns the new file's path.
pub fn compress_segment(
    storage: &Arc<dyn Storage>,
    dir: &Path,
    seg: &mut Segment,
    opts: &CompressOptions,
) -> Result<PathBuf> {
    let fs = &**storage;
    let plain = seg.path().to_path_buf();
    let original = seg.original_bytes()?;
    stop_if(opts, CompressStep::Checked, &plain)?;
    let file = compressed::encode(opts.method, seg.first_lsn(), seg.last_lsn(), &original);
    let name = compressed::file_name(seg.first_lsn());
    let temp_dir = fsutil::temp_dir_beside(fs, dir, crate::format::dialect::Dialect::Spec)?;
    let temp = temp_dir.join(temp_name(dir, &name));
    match fs.remove_file(&temp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::io("remove leftover compressed copy", &temp, e))
        }
        _ => {}
    }
    let written = write_and_check(fs, &temp, &file, &original, opts);
    if let Err(e) = written {
        if opts.stop_after.is_none() {
            let _ = fs.remove_file(&temp);
        }
        return Err(e);
    }
    let target = dir.join(&name);
    if let Err(e) = fs.rename(&temp, &target, Rename::NoReplace) {
        let _ = fs.remove_file(&temp);
        return Err(Error::io("rename compressed segment into", &target, e));
    }
    stop_if(opts, CompressStep::Renamed, &target)?;
    fsutil::sync_dir(fs, dir)?;
    stop_if(opts, CompressStep::DirSynced, &target)?;
    let handle = storage
        .open(&target, Open::Read)
        .ctx("open compressed segment", &target)?;
    let header = compressed::decode_header(&file).expect("encoded just now");
    fs.remove_file(&plain)
        .ctx("delete segment replaced by its .z", &plain)?;
    fsutil::sync_dir(fs, dir)?;
    seg.adopt_compressed(target.clone(), handle, header);
    stop_if(opts, CompressStep::Deleted, &target)?;
    Ok(target)
}

/// Steps Written to Verified: the copy in `temp/`, durable and read back.
fn write_and_check(
    fs: &dyn Storage,
    temp: &Path,
    file: &[u8],
    original: &[u8],
    opts: &CompressOptions,
) -> Result<Arc<dyn StorageFile>> {
    let out = fs
        .open(temp, Open::CreateNew)
        .ctx("create compressed copy", temp)?;
    out.write_all_at(file, 0)
        .ctx("write compressed copy", temp)?;
    stop_if(opts, CompressStep::Written, temp)?;
    out.sync_all().ctx("fsync compressed copy", temp)?;
    stop_if(opts, CompressStep::Synced, temp)?;
    let mut back = vec![0u8; file.len()];
    out.read_exact_at(&mut back, 0)
        .ctx("read back compressed copy", temp)?;
    match compressed::decode(&back) {
        Ok((_, decoded)) if decoded == original => {}
        Ok(_) => {
            let why = "the compressed copy decodes to other bytes than the segment";
            return Err(Error::corruption(temp, None, why));
        }
        Err(why) => return Err(crate::segment::bytes::bad_compressed(temp, &why)),
    }
    stop_if(opts, CompressStep::Verified, temp)?;
    Ok(out)
}

/// Removes the `temp/<log dir name>-NNN.log.z.compressing` files a stopped compression of the
/// log `dir` left beside it (the segment itself is intact), and no other log's. Returns how
/// many.
pub fn remove_leftovers(fs: &dyn Storage, dir: &Path) -> Result<usize> {
    let temp = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.join(fsutil::TEMP_DIR),
        _ => PathBuf::from(fsutil::TEMP_DIR),
    };
    let Ok(entries) = std::fs::read_dir(&temp) else {
        return Ok(0);
    };
    let owner = temp_owner(dir);
    let mut removed = 0;
    for entry in entries {
        let entry = entry.ctx("list temp directory", &temp)?;
        let name = entry.file_name();
        let leftover = name
            .as_encoded_bytes()
            .strip_prefix(owner.as_encoded_bytes())
            .and_then(|rest| std::str::from_utf8(rest).ok())
            .and_then(|n| n.strip_suffix(TEMP_SUFFIX))
            .and_then(compressed::parse_file_name)
            .is_some();
        if leftover {
            let path = entry.path();
            fs.remove_file(&path)
                .ctx("remove leftover compressed copy", &path)?;
            removed += 1;
        }
    }
    if removed > 0 {
        fsutil::sync_dir(fs, &temp)?;
    }
    Ok(removed)
}
