//! The write path: appends, commit, truncation, compaction, fsync and what a failed write
//! leaves behind.

use std::sync::Arc;

use crate::durability::policy::SyncPolicy;
use crate::error::{Error, IoContext, PoisonCause, Result};
use crate::format::record::{self, with_framing};
use crate::io::fsutil::sync_dir;
use crate::io::storage::StorageFile;
use crate::segment::{self, Segment};

use super::Log;

impl Log {
    /// A handle on the active segment and the last LSN written to it, so that a caller can
    /// fsync outside any lock it holds around the log (group commit).
    /// Refused after a failed fsync (see `sync_failed`).
    pub fn sync_handle(&self) -> Result<(Arc<dyn StorageFile>, i64)> {
        if let Some(cause) = &self.sync_failed {
            return Err(Error::Poisoned {
                cause: cause.clone(),
            });
        }
        let active = self.segments.last().ok_or_else(|| {
            if self.opts.readonly {
                Error::ReadOnly {
                    path: self.dir.clone(),
                }
            } else {
                Error::Closed("log")
            }
        })?;
        Ok((active.shared_file()?, self.last_index()))
    }

    /// Drops the memory maps of sealed segments (remade on demand).
    pub fn unmap_sealed(&mut self) {
        for seg in &mut self.segments {
            seg.unmap();
        }
    }

    // ----- writes -----

    pub(super) fn check_writable(&self) -> Result<()> {
        if self.opts.readonly {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
            });
        }
        if let Some(cause) = &self.poisoned {
            return Err(Error::Poisoned {
                cause: cause.clone(),
            });
        }
        Ok(())
    }

    /// Runs a write operation; an I/O error poisons the log (fail-stop until reopened).
    pub(super) fn write_op<T>(&mut self, op: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.check_writable()?;
        let result = op(self);
        // A write refused for want of room (`ensure_room`) changed nothing: it does not stop
        // later writes.
        let refused_for_room = std::mem::take(&mut self.refused_for_room);
        if let Err(Error::Io { .. }) = &result {
            if let Err(e) = &result {
                if !refused_for_room {
                    ::log::error!(
                        target: crate::events::LOG,
                        "writes to {} stop until it is reopened: {e}",
                        self.dir.display()
                    );
                    self.poisoned = Some(PoisonCause::from_error(e));
                }
            }
        }
        result
    }

    /// Appends one entry; returns its LSN.
    pub fn append(&mut self, term: i32, data: &[u8]) -> Result<i64> {
        self.append_many(term, &[data])
    }

    /// Appends entries of one term with one write (and one sync); returns the first LSN.
    pub fn append_many<D: AsRef<[u8]>>(&mut self, term: i32, items: &[D]) -> Result<i64> {
        self.write_op(|log| {
            let first = log.next_index();
            let entries = items.iter().map(|d| (term, d.as_ref()));
            log.append_entries(entries, Commit::Leave)?;
            Ok(first)
        })
    }

    /// [`Log::append_many`] that also commits the entries in the same step (a writer that is
    /// its own quorum, as the store): once the entries are written the call succeeds, and a
    /// failed roll-over only stops later writes. Appending and committing as two calls would
    /// let the roll-over fail the commit of entries that are already in the log.
    pub fn append_many_committed<D: AsRef<[u8]>>(&mut self, term: i32, items: &[D]) -> Result<i64> {
        self.write_op(|log| {
            let first = log.next_index();
            let entries = items.iter().map(|d| (term, d.as_ref()));
            log.append_entries(entries, Commit::Through)?;
            Ok(first)
        })
    }

    /// The LSN the next appended entry gets.
    pub(super) fn next_index(&self) -> i64 {
        // Never overflows: no entry is ever placed past MAX_ENTRY_LSN.
        self.last_index() + 1
    }

    /// Validates terms and sizes, then writes the entries into the active segment.
    fn append_entries<'a>(
        &mut self,
        entries: impl Iterator<Item = (i32, &'a [u8])> + Clone,
        commit: Commit,
    ) -> Result<()> {
        let mut previous = self.last_term_or_zero();
        let mut bytes = 0usize;
        check_lsn_room(self.next_index(), entries.clone().count())?;
        for (term, data) in entries.clone() {
            check_term(term, previous)?;
            if data.is_empty() && !self.opts.empty_entries {
                return Err(Error::InvalidArgument(
                    "empty entries are disabled for this log (empty_entries=False)".into(),
                ));
            }
            if data.len() > i32::MAX as usize {
                return Err(Error::InvalidArgument(format!(
                    "entry of {} bytes exceeds the format's limit of {} bytes",
                    data.len(),
                    i32::MAX
                )));
            }
            previous = term;
            bytes += with_framing!(self.dialect, F => F::record_len(data.len()));
        }
        if bytes == 0 {
            return Ok(());
        }
        self.ensure_room()?;
        self.grow_preallocation(bytes as u64);
        let mut encoded = Vec::with_capacity(bytes + record::END_MARKER.len());
        let mut placed = Vec::new();
        for (term, data) in entries {
            placed.push((encoded.len() as u64, term));
            with_framing!(self.dialect, F => F::encode(&mut encoded, term, data));
        }
        let active = self.active();
        active.append_encoded(&mut encoded, &placed)?;
        if commit == Commit::Through {
            self.commit_index = self.last_index();
        }
        if self.opts.sync == SyncPolicy::Always {
            self.sync_active()?;
        }
        // The entries are written (and synced per policy): a failed roll-over must not report
        // them as failed, or the caller's view would diverge from the log. It stops further
        // writes instead (fail-stop), and the next open finds a consistent log.
        if let Err(e) = self.maybe_roll() {
            self.poisoned = Some(PoisonCause::from_error(&e));
        }
        Ok(())
    }

    pub(super) fn active(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a writable log always has an active segment")
    }

    /// Follower path: entries replace the log from `start` on; a gap restarts the log at `start`.
    pub fn insert_range<D: AsRef<[u8]>>(&mut self, start: i64, entries: &[(i32, D)]) -> Result<()> {
        self.write_op(|log| {
            if start < log.start_index() {
                return Err(Error::InvalidArgument(format!(
                    "insert_range at {start} is before the start of the log ({})",
                    log.start_index()
                )));
            }
            if start <= log.commit_index {
                return Err(Error::InvalidArgument(format!(
                    "insert_range at {start} would overwrite committed entries (commit index {})",
                    log.commit_index
                )));
            }
            check_lsn_room(start, entries.len())?;
            let gap = start > log.next_index();
            // Validate every term before discarding anything.
            let mut previous = if gap || start == log.start_index() {
                0
            } else {
                log.term_at(start - 1)?
            };
            for (term, _) in entries {
                check_term(*term, previous)?;
                previous = *term;
            }
            if gap {
                log.restart(start)?;
            } else {
                log.discard_from(start)?;
            }
            let entries_ref = entries.iter().map(|(t, d)| (*t, d.as_ref()));
            log.append_entries(entries_ref, Commit::Leave)?;
            if entries.is_empty() {
                log.sync_if(SyncPolicy::Always)?;
            }
            Ok(())
        })
    }

    /// Raises the commit index (never lowers it); may roll the active segment over.
    pub fn commit(&mut self, lsn: i64) -> Result<()> {
        self.write_op(|log| {
            if lsn > log.last_index() {
                return Err(Error::InvalidArgument(format!(
                    "cannot commit {lsn}: the last LSN is {}",
                    log.last_index()
                )));
            }
            if lsn < log.commit_index {
                return Ok(()); // below the commit index, commit does nothing (spec 3.1)
            }
            // Checked also when the index stays put: a truncation may have made the active
            // segment fully committed since the last commit.
            log.commit_index = lsn;
            // As after an append: the commit stands; a failed roll-over stops later writes.
            if let Err(e) = log.maybe_roll() {
                log.poisoned = Some(PoisonCause::from_error(&e));
            }
            Ok(())
        })
    }

    /// Drops the uncommitted entries after `lsn`.
    pub fn truncate_after(&mut self, lsn: i64) -> Result<()> {
        self.write_op(|log| {
            if lsn < log.commit_index {
                return Err(Error::InvalidArgument(format!(
                    "cannot truncate after {lsn}: entries up to {} are committed",
                    log.commit_index
                )));
            }
            if lsn >= log.last_index() {
                return Ok(());
            }
            log.discard_from(lsn + 1)?;
            log.sync_if(SyncPolicy::Always)
        })
    }

    /// Deletes the leading sealed segments whose entries are all `<= snapshot_index`.
    /// Returns how many segment files were deleted.
    pub fn compact(&mut self, snapshot_index: i64) -> Result<usize> {
        self.write_op(|log| {
            if snapshot_index > log.commit_index {
                return Err(Error::InvalidArgument(format!(
                    "cannot compact up to {snapshot_index}: only entries up to {} are committed",
                    log.commit_index
                )));
            }
            let obsolete = log.segments[..log.segments.len() - 1]
                .iter()
                .take_while(|s| s.last_lsn() <= snapshot_index)
                .count();
            for seg in log.segments.drain(..obsolete) {
                let path = seg.path();
                let removed = log.opts.storage.remove_file(path);
                removed.ctx("delete compacted segment", path)?;
            }
            if obsolete > 0 {
                sync_dir(&*log.opts.storage, &log.dir)?;
            }
            Ok(obsolete)
        })
    }

    /// Makes every written entry durable.
    pub fn sync(&mut self) -> Result<()> {
        self.write_op(|log| log.sync_active())
    }

    /// [`Error::Forked`] in a process forked after the log was opened: every use by a binding
    /// checks this first (the one place the rule is kept for a log; `crate::fork`).
    pub fn check_process(&self) -> Result<()> {
        self.born.check("log")
    }

    /// Syncs per policy and releases the directory lock. A forked child's copy lets go of its
    /// files without writing anything.
    pub fn close(mut self) -> Result<()> {
        if !self.born.is_here() {
            return Ok(());
        }
        if !self.opts.readonly && self.poisoned.is_none() && self.opts.sync == SyncPolicy::Batch {
            self.sync_active()?;
        }
        Ok(())
    }

    /// Like `close`, for an owner that cannot give the log away: syncs per policy, releases
    /// the directory lock and every file; the log holds nothing afterwards and refuses writes.
    pub fn release(&mut self) -> Result<()> {
        let result = if !self.opts.readonly
            && self.poisoned.is_none()
            && self.opts.sync == SyncPolicy::Batch
            && !self.segments.is_empty()
        {
            self.sync_active()
        } else {
            Ok(())
        };
        self.segments.clear();
        self._lock = None;
        self.poisoned = Some(PoisonCause::because("the log was closed"));
        result
    }

    pub(super) fn sync_if(&mut self, policy: SyncPolicy) -> Result<()> {
        if self.opts.sync == policy {
            self.sync_active()?;
        }
        Ok(())
    }

    /// Discards entries from `lsn` on: delete obsolete segments newest first, then rewrite the
    /// segment holding the cut without the discarded records ([`segment::rewrite_prefix`]).
    /// Fsyncs the active segment, remembering a failure (see `sync_failed`).
    pub(super) fn sync_active(&mut self) -> Result<()> {
        let result = self.active().sync();
        if let Err(e) = &result {
            self.sync_failed = Some(PoisonCause::from_error(e));
        }
        result
    }

    /// Why writes are refused, if they are (an I/O error, a failed roll-over, a close).
    pub fn poisoned(&self) -> Option<&PoisonCause> {
        self.poisoned.as_ref()
    }

    /// Discards entries from `lsn` on: delete obsolete segments newest first, then zero the cut.
    pub(super) fn discard_from(&mut self, lsn: i64) -> Result<()> {
        if lsn > self.last_index() {
            return Ok(());
        }
        // A cut rewrites the active segment: its preallocation is measured again.
        self.reserved = (0, 0);
        let k = self.segment_of(lsn);
        while self.segments.len() > k + 1 {
            let seg = self.segments.pop().expect("len > k + 1");
            let path = seg.path();
            let removed = self.opts.storage.remove_file(path);
            removed.ctx("delete discarded segment", path)?;
        }
        if self.segments.len() > 1 || k > 0 {
            sync_dir(&*self.opts.storage, &self.dir)?;
        }
        let opts = segment::RewriteOptions {
            preallocate: self.preallocation(),
            stop_after: self.cut_stop,
        };
        let seg = self.active();
        seg.unseal()?;
        seg.cut_at(lsn, &opts)
    }

    /// Bytes reserved in a new segment file (and in the file a cut writes).
    /// What a new segment is preallocated with: the first step of [`Log::grow_preallocation`].
    pub(super) fn preallocation(&self) -> u64 {
        if self.opts.preallocate {
            self.opts.soft_limit.min(PREALLOCATION_STEP)
        } else {
            0
        }
    }

    /// Before `bytes` more are written into the active segment: with preallocation, the zeros
    /// written ahead of its data grow in steps, doubling from [`PREALLOCATION_STEP`] up to the
    /// soft limit, so that appends keep writing into blocks already allocated (their fdatasync
    /// commits no size change) while a small log stays small. Best effort: a step that fails
    /// (disk full) leaves the append to succeed or fail on its own.
    fn grow_preallocation(&mut self, bytes: u64) {
        if !self.opts.preallocate {
            return;
        }
        let soft = self.opts.soft_limit;
        let active = self.active();
        let first = active.first_lsn();
        let end = active.size() + bytes + record::END_MARKER.len() as u64;
        let known = match self.reserved {
            (lsn, len) if lsn == first => len,
            _ => 0,
        };
        if end <= known || known >= soft {
            return;
        }
        let target = end
            .max(known.saturating_mul(2))
            .max(PREALLOCATION_STEP)
            .min(soft);
        self.reserved = match self.active().preallocate_to(target) {
            Ok(len) => (first, len),
            Err(_) => (first, 0),
        };
    }
}

/// A new segment's preallocation, and the smallest step it grows by (issue 43: a base holding
/// one record took 17 MB, its first segment preallocated whole at the 16 MiB soft limit).
pub(super) const PREALLOCATION_STEP: u64 = 1 << 20;

/// What a failed segment creation may have left on disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leftover {
    Nothing,
    File,
}

/// Whether entries are committed as they are appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    Leave,
    Through,
}

pub use crate::segment::MAX_ENTRY_LSN;

/// Refuses to place `count` entries from `first` on when the last would be past
/// [`MAX_ENTRY_LSN`].
fn check_lsn_room(first: i64, count: usize) -> Result<()> {
    let last = i64::try_from(count)
        .ok()
        .and_then(|n| first.checked_add(n))
        .map(|end| end - 1);
    match last {
        _ if count == 0 => Ok(()),
        Some(last) if last <= MAX_ENTRY_LSN => Ok(()),
        _ => Err(Error::InvalidArgument(format!(
            "{count} entries from LSN {first} would pass the largest LSN {MAX_ENTRY_LSN}"
        ))),
    }
}

fn check_term(term: i32, previous: i32) -> Result<()> {
    if term < 0 {
        return Err(Error::InvalidArgument(format!(
            "term must be >= 0 (got {term})"
        )));
    }
    if term < previous {
        return Err(Error::InvalidArgument(format!(
            "terms never decrease along the log: {term} after {previous}"
        )));
    }
    Ok(())
}
