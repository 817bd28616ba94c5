//! Keeping the log's files in shape: rolling to a new segment, compressing sealed ones,
//! restarting at an LSN, and the fault-injection hooks of the crash tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::durability::policy::SyncPolicy;
use crate::error::{Error, IoContext, Result};
use crate::format::compressed::Method;
use crate::format::dialect::Dialect;
use crate::format::segment as seg_format;
use crate::io::fsutil::{self, sync_dir};
use crate::segment::{self, Segment};

use super::write::Leftover;
use super::Log;

impl Log {
    /// Fault injection for crash tests: the next cuts stop right after `step`, leaving the
    /// files as a kill there would (the call fails and the log refuses further writes).
    #[doc(hidden)]
    pub fn stop_cuts_after(&mut self, step: Option<segment::RewriteStep>) {
        self.cut_stop = step;
    }

    /// Fault injection for crash tests: the next compressions stop right after `step`.
    #[doc(hidden)]
    pub fn stop_compress_after(&mut self, step: Option<crate::segment::compress::CompressStep>) {
        self.compress_stop = step;
    }

    /// First LSNs of the sealed segments not yet compressed (never the active segment).
    /// Compressed segments (spec section 9) exist only in the spec dialect (section 11): a
    /// taskflux log refuses to compress, so TaskFlux can still open every file.
    pub(super) fn check_compressible_dialect(&self) -> Result<()> {
        match self.dialect {
            Dialect::Spec => Ok(()),
            Dialect::Taskflux => Err(Error::Dialect {
                path: self.dir.clone(),
                reason: "this log is in the taskflux dialect: compressed segments (spec \
                         section 9) exist only in the spec dialect, so nothing was compressed"
                    .into(),
            }),
        }
    }

    pub fn compressible(&self) -> Vec<i64> {
        let sealed = &self.segments[..self.segments.len().saturating_sub(1)];
        sealed
            .iter()
            .filter(|s| s.sealed() && !s.is_empty() && s.compression().is_none())
            // Original = header through end marker; a `.z` holds at most MAX_ORIGINAL_LEN.
            .filter(|s| s.size() + 4 <= crate::format::compressed::MAX_ORIGINAL_LEN)
            .map(|s| s.first_lsn())
            .collect()
    }

    /// Replaces the sealed segment starting at `first_lsn` by a `.log.z` (spec section 9);
    /// `None` when there is no such segment still to compress (compacted, already compressed,
    /// or the active one). One segment per call, so that an owner can release its lock between
    /// segments. A failure leaves the segment readable (the `.log` goes only once the `.z` is
    /// durable) and, unlike other writes, does not stop later writes: the active segment is
    /// never touched.
    pub fn compress_one(&mut self, first_lsn: i64, method: Method) -> Result<Option<PathBuf>> {
        self.check_writable()?;
        self.check_compressible_dialect()?;
        let log = self;
        {
            let last = log.segments.len().saturating_sub(1);
            let Some(k) = log.segments[..last]
                .iter()
                .position(|s| s.first_lsn() == first_lsn)
            else {
                return Ok(None);
            };
            if !log.compressible().contains(&first_lsn) {
                return Ok(None);
            }
            let opts = crate::segment::compress::CompressOptions {
                method,
                stop_after: log.compress_stop,
            };
            let (storage, dir) = (Arc::clone(&log.opts.storage), log.dir.clone());
            let seg = &mut log.segments[k];
            crate::segment::compress::compress_segment(&storage, &dir, seg, &opts).map(Some)
        }
    }

    /// Compresses every sealed segment not yet compressed; returns the new `.log.z` files.
    pub fn compress(&mut self, method: Method) -> Result<Vec<PathBuf>> {
        self.check_writable()?;
        self.check_compressible_dialect()?;
        let mut made = Vec::new();
        for first in self.compressible() {
            made.extend(self.compress_one(first, method)?);
        }
        Ok(made)
    }

    /// Discards the whole log and starts it again, empty, at `start`.
    pub(super) fn restart(&mut self, start: i64) -> Result<()> {
        self.restart_moving(start, None)
    }

    /// Starts the log again, empty, at `start`, moving every segment file into `../temp`
    /// (`restart-<unix time>-<name>`) instead of deleting it; returns the new paths. For a
    /// snapshot found ahead of the whole log: if that snapshot's index is itself damaged (it is
    /// outside the snapshot's checksum), the entries are still on disk to recover.
    pub fn restart_moving_aside(&mut self, start: i64) -> Result<Vec<PathBuf>> {
        self.write_op(|log| {
            let temp = log.temp_dir()?;
            let mut moved = Vec::new();
            log.restart_moving(start, Some((&temp, &mut moved)))?;
            sync_dir(&*log.opts.storage, &temp)?;
            Ok(moved)
        })
    }

    pub(super) fn restart_moving(
        &mut self,
        start: i64,
        mut aside: Option<(&Path, &mut Vec<PathBuf>)>,
    ) -> Result<()> {
        while let Some(seg) = self.segments.pop() {
            match aside.as_mut() {
                Some((temp, moved)) if !seg.is_empty() => {
                    let storage = &*self.opts.storage;
                    moved.push(fsutil::move_aside(storage, seg.path(), temp, "restart")?);
                }
                _ => {
                    let removed = self.opts.storage.remove_file(seg.path());
                    removed.ctx("delete discarded segment", seg.path())?
                }
            }
        }
        sync_dir(&*self.opts.storage, &self.dir)?;
        self.create_segment(start)?;
        self.commit_index = start - 1;
        Ok(())
    }

    /// Rolls over to a new segment when the active one is past its limits. `Ok(Some(e))`: the
    /// roll-over failed and left nothing behind (it is tried again after the next write, and
    /// [`Log::ensure_room`] refuses writes into a segment past its hard limit until it
    /// succeeds); `Err`: it failed and may have left a file (fail-stop).
    pub(super) fn maybe_roll(&mut self) -> Result<Option<Error>> {
        let (soft, hard) = (self.opts.soft_limit, self.opts.hard_limit);
        let committed = self.commit_index;
        let active = self.active();
        if active.is_empty() {
            return Ok(None);
        }
        let size = active.size();
        let all_committed = committed >= active.last_lsn();
        if (soft < size && all_committed) || hard < size {
            let next = active.last_lsn() + 1;
            if self.opts.sync == SyncPolicy::Batch {
                self.sync_active()?;
            }
            // The new segment first, then the old one sealed: a new segment that cannot be made
            // (disk full while preallocating) and left nothing behind leaves the active one as
            // it was, still active. The roll-over is then tried again after the next write (the
            // limits are hints), and nothing stops: a channel can still collect and free the
            // space it needs (issue 30 item 5: the log refused every write, again after each
            // reopen, and collection too).
            match self.try_create_segment(next) {
                Ok(()) => {
                    let previous = self.segments.len() - 2;
                    self.segments[previous].seal();
                }
                Err((e, Leftover::Nothing)) => {
                    self.roll_failed = true;
                    return Ok(Some(e));
                }
                Err((e, Leftover::File)) => return Err(e),
            }
        }
        Ok(None)
    }

    /// Whether the active segment holds entries past its hard limit.
    fn over_hard_limit(&mut self) -> bool {
        let hard = self.opts.hard_limit;
        let active = self.active();
        !active.is_empty() && active.size() > hard
    }

    /// Before a write: the active segment never grows past its hard limit without an error.
    /// When it is past it and its roll-over failed (e.g. out of descriptors), the roll-over is tried
    /// again first; if it fails again, this write is refused with its error and nothing is
    /// written. Out of descriptors, the log is not stopped: the next write tries again (issue
    /// 43: one EMFILE at roll-over refused every later write, even once descriptors were free
    /// again); any other failure stops writes until reopened, as a failed write does.
    pub(super) fn ensure_room(&mut self) -> Result<()> {
        if !self.roll_failed || !self.over_hard_limit() {
            return Ok(());
        }
        match self.maybe_roll()? {
            Some(e) if self.over_hard_limit() => {
                // Out of descriptors is transient: this write is refused, later ones try again.
                // Anything else (a full disk) stops writes as a failed write does (fail-stop).
                self.refused_for_room = out_of_descriptors(&e);
                Err(e)
            }
            _ => Ok(()),
        }
    }

    pub(super) fn create_segment(&mut self, first_lsn: i64) -> Result<()> {
        self.try_create_segment(first_lsn).map_err(|(e, _)| e)
    }

    /// Creates and adds the segment starting at `first_lsn`; on failure, whether a file of it
    /// may be left on disk (one that would be taken for the active segment at the next open,
    /// and overlap the records written meanwhile).
    pub(super) fn try_create_segment(
        &mut self,
        first_lsn: i64,
    ) -> std::result::Result<(), (Error, Leftover)> {
        let preallocate = self.preallocation();
        let seg = match Segment::create(
            &self.opts.storage,
            self.dialect,
            &self.dir,
            first_lsn,
            preallocate,
        ) {
            Ok(seg) => seg,
            Err(e) => {
                // Do not leave a half-made file behind (e.g. disk full while preallocating).
                let path = self.dir.join(seg_format::file_name(first_lsn));
                let left = match self.opts.storage.remove_file(&path) {
                    Ok(()) => Leftover::Nothing,
                    Err(r) if r.kind() == std::io::ErrorKind::NotFound => Leftover::Nothing,
                    Err(_) => Leftover::File,
                };
                return Err((e, left));
            }
        };
        // A failed directory fsync proves nothing about what is on disk: the file may be.
        if let Err(e) = sync_dir(&*self.opts.storage, &self.dir) {
            if !out_of_descriptors(&e) {
                return Err((e, Leftover::File));
            }
            // The directory could not even be opened for its fsync, so no fsync ran (nothing
            // was dropped): the new, still empty segment is removed as a half-made one is, and
            // the roll-over is tried again later.
            let path = seg.path().to_path_buf();
            drop(seg);
            let left = match self.opts.storage.remove_file(&path) {
                Ok(()) => Leftover::Nothing,
                Err(r) if r.kind() == std::io::ErrorKind::NotFound => Leftover::Nothing,
                Err(_) => Leftover::File,
            };
            return Err((e, left));
        }
        self.reserved = (first_lsn, preallocate);
        self.roll_failed = false;
        self.segments.push(seg);
        Ok(())
    }
}

/// Out of file descriptors (`EMFILE`, `ENFILE`): the `open` that failed changed nothing and
/// ran no fsync, and the same operation may succeed once descriptors are free again.
fn out_of_descriptors(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)))
}
