//! Keeping the log's files in shape: rolling to a new segment, compressing sealed ones,
//! restarting at an LSN, and the fault-injection hooks of the crash tests.

use super::{
    fsutil, seg_format, segment, sync_dir, Arc, Dialect, Error, IoContext, Leftover, Log, Method,
    Path, PathBuf, Result, Segment, SyncPolicy,
};

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

    pub(super) fn maybe_roll(&mut self) -> Result<()> {
        let (soft, hard) = (self.opts.soft_limit, self.opts.hard_limit);
        let committed = self.commit_index;
        let active = self.active();
        if active.is_empty() {
            return Ok(());
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
                Err((_, Leftover::Nothing)) => {}
                Err((e, Leftover::File)) => return Err(e),
            }
        }
        Ok(())
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
        sync_dir(&*self.opts.storage, &self.dir).map_err(|e| (e, Leftover::File))?;
        self.segments.push(seg);
        Ok(())
    }
}
