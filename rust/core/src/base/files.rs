//! The small whole files of a base directory: `data/tflux.metadata`, `data/tflux.snapshot` and
//! (through [`read_regular`]) `taskflux.settings.json`. `crate::format` turns them into bytes;
//! this module reads and writes those bytes.
//!
//! Every read goes through [`read_regular`]: the file must be a regular file (a FIFO, device,
//! socket or directory with the file's name is refused, naming the file, and a FIFO can never
//! block the open), and no read is longer than the format allows.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::format::framed::{self, Frame};
use crate::format::metadata::{self, Metadata};
use crate::format::snapshot::{self, Snapshot};
use crate::io::storage::Storage;

/// Why [`read_regular`] could not read a file.
#[derive(Debug)]
pub enum ReadError {
    /// The operating system refused (other than "not found").
    Io(io::Error),
    /// Something other than a regular file has the name; says what it is ("a FIFO").
    NotRegular(&'static str),
    /// The file is longer than the caller allows.
    TooLong { len: u64, limit: u64 },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotRegular(kind) => write!(f, "{kind}, not a regular file"),
            ReadError::TooLong { len, limit } => {
                write!(f, "file is {len} bytes long (at most {limit} allowed)")
            }
        }
    }
}

fn kind(t: fs::FileType) -> Option<&'static str> {
    if t.is_file() {
        None
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_fifo() {
        Some("a FIFO")
    } else if t.is_char_device() {
        Some("a character device")
    } else if t.is_block_device() {
        Some("a block device")
    } else if t.is_socket() {
        Some("a socket")
    } else {
        Some("a special file")
    }
}

/// Reads the regular file at `path`, at most `limit` bytes; `None` when it does not exist.
///
/// The type and length are checked before opening (so a device is never opened), the open
/// cannot block (`O_NONBLOCK`: a FIFO swapped in after the check returns at once) and the open
/// file is checked again. Symbolic links are followed: only what they lead to must be a regular
/// file. The read stops at the checked length + 1 bytes, so a file that grows meanwhile can
/// neither exhaust memory nor pass the limit.
pub fn read_regular(path: &Path, limit: u64) -> std::result::Result<Option<Vec<u8>>, ReadError> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        // A name that exists but leads nowhere is not an absent file: a cursor read as absent
        // let collection delete its receiver's unacknowledged messages.
        Err(e) if e.kind() == io::ErrorKind::NotFound && fs::symlink_metadata(path).is_ok() => {
            return Err(ReadError::NotRegular("a dangling symbolic link"))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(e)),
    };
    check(&meta, limit)?;
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReadError::Io(e)),
    };
    let len = check(&file.metadata().map_err(ReadError::Io)?, limit)?;
    read_at_most(file, len, limit)
}

/// The length of a regular file no longer than `limit`.
fn check(meta: &fs::Metadata, limit: u64) -> std::result::Result<u64, ReadError> {
    if let Some(kind) = kind(meta.file_type()) {
        return Err(ReadError::NotRegular(kind));
    }
    if meta.len() > limit {
        return Err(ReadError::TooLong {
            len: meta.len(),
            limit,
        });
    }
    Ok(meta.len())
}

fn read_at_most(
    file: File,
    len: u64,
    limit: u64,
) -> std::result::Result<Option<Vec<u8>>, ReadError> {
    // `len` <= `limit` was checked, so this allocation is bounded by the caller's limit.
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(len.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLong {
            len: bytes.len() as u64,
            limit,
        });
    }
    Ok(Some(bytes))
}

/// Reads a 20-byte framed file (metadata or receiver cursor): `None` when it is absent or
/// empty (spec section 1: an empty file is one nothing was written to yet, e.g. created before
/// a crash). Never reads (or allocates for) more than the 20 bytes the format allows; `op`
/// names the read in I/O errors.
pub fn read_framed(path: &Path, frame: &Frame, op: &'static str) -> Result<Option<Vec<u8>>> {
    let bytes = read_regular(path, framed::LEN as u64).map_err(|e| match e {
        ReadError::Io(e) => Error::io(op, path, e),
        ReadError::TooLong { len, .. } => frame.too_long_or_short(path, len),
        other => Error::corruption(path, None, other.to_string()),
    })?;
    Ok(bytes.filter(|b| !b.is_empty()))
}

/// Reads the metadata at `path`; an absent or empty file is the default (term 1, no vote).
pub fn read_metadata(path: &Path) -> Result<Metadata> {
    read_metadata_in(path, Dialect::Spec)
}

/// [`read_metadata`] of a file in `dialect` (never reads more than its length allows).
pub fn read_metadata_in(path: &Path, dialect: Dialect) -> Result<Metadata> {
    let bytes = match dialect {
        Dialect::Spec => read_framed(path, &metadata::FRAME, "read metadata")?,
        Dialect::Taskflux => read_regular(path, metadata::TASKFLUX_LEN as u64)
            .map_err(|e| match e {
                ReadError::Io(e) => Error::io("read metadata", path, e),
                ReadError::TooLong { len, .. } => Error::corruption(
                    path,
                    Some(metadata::TASKFLUX_LEN as u64),
                    format!(
                        "metadata file is {len} bytes long (expected exactly {} in the taskflux dialect)",
                        metadata::TASKFLUX_LEN
                    ),
                ),
                other => Error::corruption(path, None, other.to_string()),
            })?
            .filter(|b| !b.is_empty()),
    };
    match bytes {
        Some(b) => metadata::decode_in(&b, path, dialect),
        None => Ok(Metadata::default()),
    }
}

/// Writes the metadata atomically (temp file under `<parent>/temp/`, fsync, rename, fsync parent).
pub fn write_metadata(storage: &dyn Storage, path: &Path, m: &Metadata) -> Result<()> {
    write_metadata_in(storage, path, m, Dialect::Spec)
}

/// [`write_metadata`] in `dialect` (its bytes and its temp directory).
pub fn write_metadata_in(
    storage: &dyn Storage,
    path: &Path,
    m: &Metadata,
    dialect: Dialect,
) -> Result<()> {
    m.validate()?;
    crate::io::fsutil::atomic_write_in(storage, path, &metadata::encode_in(m, dialect), dialect)
}

/// Reads the snapshot at `path`: `None` when the file is absent or empty (nothing written yet).
/// Never reads more than [`snapshot::MAX_FILE_LEN`] (the longest file the format allows).
pub fn read_snapshot(path: &Path) -> Result<Option<Snapshot>> {
    read_snapshot_in(path, Dialect::Spec)
}

/// [`read_snapshot`] of a file in `dialect`.
pub fn read_snapshot_in(path: &Path, dialect: Dialect) -> Result<Option<Snapshot>> {
    let bytes = read_regular(path, snapshot::MAX_FILE_LEN).map_err(|e| match e {
        ReadError::Io(e) => Error::io("read snapshot", path, e),
        other => Error::corruption(path, None, other.to_string()),
    })?;
    match bytes {
        Some(b) if !b.is_empty() => snapshot::decode_in(&b, path, dialect).map(Some),
        _ => Ok(None),
    }
}

/// [`read_snapshot_in`] with the queues' task-queue state of a task-layout snapshot (spec
/// 12; empty for the other layouts).
pub fn read_snapshot_full(
    path: &Path,
    dialect: Dialect,
) -> Result<Option<(Snapshot, Vec<snapshot::QueueTasks>)>> {
    let bytes = read_regular(path, snapshot::MAX_FILE_LEN).map_err(|e| match e {
        ReadError::Io(e) => Error::io("read snapshot", path, e),
        other => Error::corruption(path, None, other.to_string()),
    })?;
    match bytes {
        Some(b) if !b.is_empty() => snapshot::decode_full(&b, path, dialect).map(Some),
        _ => Ok(None),
    }
}

/// [`write_snapshot_in`] with the queues' task-queue state: the old layouts when `tasks` is
/// empty (byte-identical to before), the task layout otherwise (spec dialect only).
pub fn write_snapshot_full(
    storage: &dyn Storage,
    path: &Path,
    s: &Snapshot,
    tasks: &[snapshot::QueueTasks],
    dialect: Dialect,
) -> Result<()> {
    if tasks.is_empty() {
        return write_snapshot_in(storage, path, s, dialect);
    }
    if dialect != Dialect::Spec {
        return Err(Error::InvalidArgument(format!(
            "the {} dialect cannot hold task-queue rules, delays or delivery counts (spec 12)",
            dialect.name()
        )));
    }
    let bytes = snapshot::encode_with_tasks(s, tasks)?;
    crate::io::fsutil::atomic_write_in(storage, path, &bytes, dialect)
}

/// Writes the snapshot atomically (temp file under `<parent>/temp/`, fsync, rename, fsync
/// parent); refuses what [`snapshot::encode`] refuses, leaving the old file alone.
pub fn write_snapshot(storage: &dyn Storage, path: &Path, s: &Snapshot) -> Result<()> {
    write_snapshot_in(storage, path, s, Dialect::Spec)
}

/// [`write_snapshot`] in `dialect` (its bytes and its temp directory).
pub fn write_snapshot_in(
    storage: &dyn Storage,
    path: &Path,
    s: &Snapshot,
    dialect: Dialect,
) -> Result<()> {
    let bytes = snapshot::encode_in(s, dialect)?;
    crate::io::fsutil::atomic_write_in(storage, path, &bytes, dialect)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::receiver;

    #[test]
    fn an_empty_framed_file_is_an_absent_one_and_a_short_one_is_corrupt() {
        // Spec section 1: a file that exists is valid or empty, and empty is "nothing yet".
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.cursor");
        assert!(read_framed(&path, &receiver::FRAME, "read")
            .unwrap()
            .is_none());
        fs::write(&path, b"").unwrap();
        assert!(read_framed(&path, &receiver::FRAME, "read")
            .unwrap()
            .is_none());
        fs::write(&path, [0u8; 3]).unwrap();
        let bytes = read_framed(&path, &receiver::FRAME, "read")
            .unwrap()
            .unwrap();
        assert!(receiver::decode(&bytes, &path).is_err());
        fs::write(&path, receiver::encode(7)).unwrap();
        let bytes = read_framed(&path, &receiver::FRAME, "read")
            .unwrap()
            .unwrap();
        assert_eq!(receiver::decode(&bytes, &path).unwrap(), 7);
    }
}
