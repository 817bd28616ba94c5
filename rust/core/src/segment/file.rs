//! The segment file object: creating and wrapping a scanned file, its descriptor budget,
//! sealing and unsealing, appending, cutting and syncing.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::format::dialect::Dialect;
use crate::format::record::END_MARKER;
use crate::format::segment as header;
use crate::io::storage::{Open, Storage, StorageFile};

use super::index::RecordIndex;
use super::rewrite::{rewrite_prefix, RewriteOptions};
use super::{sealed_budget, Handle, Identity, Segment};

impl Segment {
    /// Wraps an already scanned file (not sealed).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn from_scan(
        storage: &Arc<dyn Storage>,
        dialect: Dialect,
        path: PathBuf,
        first_lsn: i64,
        file: Arc<dyn StorageFile>,
        writable: bool,
        index: RecordIndex,
        size: u64,
    ) -> Segment {
        Segment {
            path,
            dialect,
            first_lsn,
            index,
            size,
            file: Handle::Open(file),
            budgeted: false,
            storage: Arc::clone(storage),
            writable,
            sealed: false,
            map: None,
            compressed: None,
            every_offset: None,
            random_reads: 0,
            scratch: Vec::new(),
            checked_at_open: 0,
            steps: None,
        }
    }

    /// Creates a new, empty segment file: reserve `preallocate` bytes, write the header and the
    /// end marker, sync the file. The caller syncs the directory.
    pub fn create(
        storage: &Arc<dyn Storage>,
        dialect: Dialect,
        dir: &Path,
        first_lsn: i64,
        preallocate: u64,
    ) -> Result<Segment> {
        let path = dir.join(header::file_name(first_lsn));
        let file = storage
            .open(&path, Open::CreateNew)
            .ctx("create segment", &path)?;
        if preallocate > 0 {
            reserve(&*file, preallocate).ctx("preallocate segment", &path)?;
        }
        initialise(&*file, &path)?;
        Ok(Segment::from_scan(
            storage,
            dialect,
            path,
            first_lsn,
            file,
            true,
            RecordIndex::default(),
            header::HEADER_LEN as u64,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How its records are framed.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    pub fn first_lsn(&self) -> i64 {
        self.first_lsn
    }

    /// LSN of the last record, `first_lsn - 1` when empty.
    pub fn last_lsn(&self) -> i64 {
        self.first_lsn + self.index.len() as i64 - 1
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn sealed(&self) -> bool {
        self.sealed
    }

    pub fn file_size(&self) -> u64 {
        match &self.file {
            Handle::Open(file) => file.file_len().unwrap_or(0),
            Handle::Closed(id) => id.len,
        }
    }

    /// Runs `f` on the segment's file: the open one, or (closed) the file its name names now,
    /// opened read-only for this call and refused unless it is the same inode
    /// ([`Error::StaleRead`]: a writer replaced or removed it since).
    pub(super) fn with_file<T>(
        &self,
        f: impl FnOnce(&dyn StorageFile) -> std::io::Result<T>,
    ) -> Result<std::io::Result<T>> {
        match &self.file {
            Handle::Open(file) => Ok(f(&**file)),
            Handle::Closed(id) => {
                let file = self
                    .storage
                    .open(&self.path, Open::Read)
                    .map_err(|e| self.gone(e))?;
                match Identity::of(file.file()) {
                    Some(now) if (now.dev, now.ino) == (id.dev, id.ino) => Ok(f(&*file)),
                    _ => Err(Error::stale_read(
                        &self.path,
                        None,
                        "the segment file was replaced since the log was opened",
                    )),
                }
            }
        }
    }

    /// The error for a closed segment's file that cannot be opened again.
    pub(super) fn gone(&self, e: std::io::Error) -> Error {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::stale_read(
                &self.path,
                None,
                "the segment file was removed since the log was opened",
            )
        } else {
            Error::io("reopen segment", &self.path, e)
        }
    }

    /// A sealed segment's open file stays open while [`sealed_budget`] allows, else is closed
    /// (its bytes come from a map, or are decoded again when read). Kept open where its
    /// identity cannot be read.
    pub(super) fn settle_sealed(&mut self) {
        use std::sync::atomic::Ordering;
        let (true, false, Handle::Open(file)) = (self.sealed, self.budgeted, &self.file) else {
            return;
        };
        let budget = sealed_budget();
        if budget.fetch_sub(1, Ordering::Relaxed) > 0 {
            self.budgeted = true;
            return;
        }
        budget.fetch_add(1, Ordering::Relaxed);
        if let Some(id) = Identity::of(file.file()) {
            self.file = Handle::Closed(id);
        }
    }

    /// Gives back this segment's share of [`sealed_budget`] (unsealed, dropped).
    pub(super) fn release_budget(&mut self) {
        if std::mem::take(&mut self.budgeted) {
            sealed_budget().fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The identity of the file the segment reads, for the errors of reads that fail.
    pub(super) fn identity(&self) -> Option<Identity> {
        match &self.file {
            Handle::Open(file) => Identity::of(file.file()),
            Handle::Closed(id) => Some(*id),
        }
    }

    pub fn last_term(&self) -> Option<i32> {
        self.index.last_term()
    }

    /// Term of the record at `lsn` (must be inside this segment).
    pub fn term_at(&self, lsn: i64) -> i32 {
        self.index.term((lsn - self.first_lsn) as usize)
    }
}

impl Segment {
    /// Writes already framed records (`encoded`, followed here by the end marker) at the end
    /// of the data, then records their offsets and terms. Returns nothing until the bytes are
    /// written; syncing is the caller's decision.
    ///
    /// All or nothing for readers that follow the file while it is written (channel receivers,
    /// read-only opens): everything but the first record's marker goes behind the current end
    /// marker first, then that one aligned word replaces the end marker and makes the whole
    /// batch visible at once. A write that fails or stops short leaves the end marker in place,
    /// so no reader (and no reopen) finds part of a failed call, even when no clean-up can run.
    pub fn append_encoded(&mut self, encoded: &mut Vec<u8>, records: &[(u64, i32)]) -> Result<()> {
        debug_assert!(!self.sealed && self.writable);
        debug_assert!(encoded.len() >= END_MARKER.len());
        debug_assert!(self.dialect != Dialect::Spec || self.size.is_multiple_of(4));
        encoded.extend_from_slice(&END_MARKER);
        let head = END_MARKER.len();
        let file = self.shared_file()?;
        file.write_all_at(&encoded[head..], self.size + head as u64)
            .map_err(|e| Error::io("write segment", &self.path, e))?;
        if let Err(e) = file.write_all_at(&encoded[..head], self.size) {
            // The word may be half written: put the end marker back (best effort).
            let _ = file.write_all_at(&END_MARKER, self.size);
            return Err(Error::io("write segment", &self.path, e));
        }
        encoded.truncate(encoded.len() - END_MARKER.len());
        let base = self.size;
        for &(rel, term) in records {
            self.index.push(base + rel, term);
        }
        self.size += encoded.len() as u64;
        Ok(())
    }

    /// Discards the records from `lsn` on by copy-on-truncate ([`rewrite_prefix`]): the records
    /// kept go into a new file that replaces this one, and writing continues there. The old
    /// file is never changed, so a reader that indexed it keeps reading the entries that were
    /// at its LSNs (never a new record written where an old one was).
    pub fn cut_at(&mut self, lsn: i64, opts: &RewriteOptions) -> Result<()> {
        let keep = (lsn - self.first_lsn) as usize;
        if keep >= self.index.len() {
            return Ok(());
        }
        debug_assert!(!self.sealed, "cuts happen in the active segment");
        let cut = self.record_offset(lsn)?;
        let file = self.shared_file()?;
        self.file = Handle::Open(rewrite_prefix(
            &*self.storage,
            &*file,
            &self.path,
            cut,
            opts,
        )?);
        self.checked_at_open = 0;
        self.writable = true;
        self.index.truncate(keep);
        self.size = cut;
        Ok(())
    }

    /// The open file of the active segment (or of one just unsealed); a sealed segment's
    /// file is closed and has none to share (an error, never a panic).
    pub fn shared_file(&self) -> Result<Arc<dyn StorageFile>> {
        match &self.file {
            Handle::Open(file) => Ok(Arc::clone(file)),
            Handle::Closed(_) => Err(Error::InvalidArgument(format!(
                "{}: a sealed segment's file is not held open",
                self.path.display()
            ))),
        }
    }

    /// Drops the memory map of a sealed segment (it is made again on the next read), so a
    /// long-lived process does not keep the whole log resident after replaying it.
    pub fn unmap(&mut self) {
        self.map = None;
    }

    /// Whether the segment holds its bytes (a map, or a decompressed `.log.z`) right now.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    pub fn sync(&self) -> Result<()> {
        self.with_file(|file| file.sync_data())?
            .ctx("fsync segment", &self.path)
    }
}

pub(super) fn changed_under_reader(
    path: &Path,
    held: Option<Identity>,
    size: u64,
    offset: u64,
    lsn: i64,
) -> Error {
    unreadable(
        path,
        held,
        size,
        offset,
        format!("record {lsn} is no longer where the index says"),
    )
}

/// The error for a record that checked fine when the segment was opened and cannot be read
/// now: [`Error::StaleRead`] when the file changed under the reader (its path names another
/// file, none, or a file shorter than the records indexed: a writer cut, replaced or deleted
/// it), [`Error::Corruption`] when it is the same file, still long enough (damage in place).
pub(super) fn unreadable(
    path: &Path,
    held: Option<Identity>,
    size: u64,
    offset: u64,
    reason: String,
) -> Error {
    use std::os::unix::fs::MetadataExt;
    let now = std::fs::metadata(path).ok();
    let replaced = match (&held, &now) {
        (Some(h), Some(n)) => (h.dev, h.ino) != (n.dev(), n.ino()) || n.len() < size,
        _ => true,
    };
    let shorter = held.is_some_and(|h| h.len < size);
    if replaced || shorter {
        Error::stale_read(path, Some(offset), reason)
    } else {
        Error::corruption(path, Some(offset), reason)
    }
}

impl Segment {
    /// Writes zeros ahead of the data up to `len` bytes of file (never shrinking it): the
    /// log's preallocation in steps. Returns the file's length after.
    pub fn preallocate_to(&self, len: u64) -> Result<u64> {
        let file = self.shared_file()?;
        reserve(&*file, len).ctx("preallocate segment", &self.path)?;
        file.file_len().ctx("stat segment", &self.path)
    }
}

/// Reserves `len` bytes for the file by writing zeros (never shrinking it). Real zeros, not
/// `fallocate`'s unwritten extents: an fdatasync after writing into unwritten extents must also
/// commit the extent conversion, which made durable appends about 1.6x slower on ext4.
pub(super) fn reserve(file: &dyn StorageFile, len: u64) -> std::io::Result<()> {
    let current = file.file_len()?;
    if current >= len {
        return Ok(());
    }
    const CHUNK: u64 = 1 << 20;
    let zeros = vec![0u8; CHUNK.min(len - current) as usize];
    let mut at = current;
    while at < len {
        let n = CHUNK.min(len - at) as usize;
        file.write_all_at(&zeros[..n], at)?;
        at += n as u64;
    }
    Ok(())
}

/// Writes a fresh header and end marker at the start of `file` and syncs it.
pub fn initialise(file: &dyn StorageFile, path: &Path) -> Result<()> {
    let mut first = header::header().to_vec();
    first.extend_from_slice(&END_MARKER);
    file.write_all_at(&first, 0)
        .ctx("write segment header", path)?;
    file.sync_all().ctx("fsync segment", path)
}
