//! Opening a log: scan, check and act on what the scan found ([`PendingOpen`]), and the check
//! that no other process replaced a segment file while this one scanned.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::format::segment as seg_format;
use crate::io::fsutil;
use crate::segment::{self, Segment};

use super::recovery::{self, LogScan, RecoveryMode, ScanOptions};
use super::{Log, LogOptions};

/// A log scanned and locked but not yet opened ([`Log::prepare`]).
pub struct PendingOpen {
    dir: PathBuf,
    opts: LogOptions,
    lock: Option<crate::fork::ParentOnly<File>>,
    scan: LogScan,
    /// Read-only: the segments as listed before the scan (a failure explained by a writer's
    /// change since is a stale read).
    before: Option<Vec<FileIdentity>>,
}

impl PendingOpen {
    /// What the scan found.
    pub fn scan(&self) -> &LogScan {
        &self.scan
    }

    /// The error the open will raise for the scan's first fatal finding (none when repairing).
    pub fn check(&self) -> Result<()> {
        if self.opts.recovery == RecoveryMode::Repair {
            return Ok(());
        }
        match (self.scan.first_fatal(), &self.before) {
            (None, _) => Ok(()),
            (Some(f), Some(before)) => Err(stale_if_changed(f.to_error(), &self.dir, before)),
            (Some(f), None) => Err(f.to_error()),
        }
    }

    /// Acts on the scan: refuses on a fatal finding (unless repairing), else cuts a torn tail,
    /// initialises a half-created segment or executes the repair plan, and opens the log.
    pub fn open(self) -> Result<Log> {
        self.check()?;
        let PendingOpen {
            dir,
            opts,
            lock,
            scan,
            ..
        } = self;
        let first = scan.listed.first().map_or(0, |f| f.first_lsn);
        let mut ignored = scan.ignored.clone();
        if !opts.readonly {
            // Only once the open is accepted: a refused open changes nothing.
            if segment::remove_cut_leftovers(&*opts.storage, &dir)? > 0 {
                ignored.retain(|p| p.exists());
            }
            crate::segment::compress::remove_leftovers(&*opts.storage, &dir)?;
        }
        let dialect = scan.dialect;
        let recovered = recovery::recover(scan, !opts.readonly, &opts.storage)?;
        let mut log = Log {
            dir,
            dialect,
            opts,
            segments: recovered.segments,
            commit_index: -1,
            _lock: lock,
            recovery: recovered.report,
            ignored,
            poisoned: None,
            cut_stop: None,
            compress_stop: None,
            sync_failed: None,
            born: crate::fork::Birth::now(),
            refused_for_room: false,
            roll_failed: false,
            reserved: (-1, 0),
        };
        if log.segments.is_empty() && !log.opts.readonly {
            log.create_segment(first)?;
        }
        let floor = log.start_index() - 1;
        log.commit_index = match log.opts.commit_index {
            None => floor,
            Some(ci) if ci >= floor && ci <= log.last_index() => ci,
            Some(ci) => {
                return Err(Error::InvalidArgument(format!(
                    "commit_index {ci} is outside the log [{floor}, {}]",
                    log.last_index()
                )))
            }
        };
        Ok(log)
    }
}

impl Log {
    /// Opens (creating it if needed, unless read-only) the log in `dir`: scans it (no writes),
    /// then acts on what the scan found. A refused open changes nothing.
    ///
    /// Read-only, a writer may change the directory while it is scanned (compaction deletes
    /// segments, a cut replaces one, a roll-over adds one): a failure that such a change
    /// explains is [`Error::StaleRead`] (reopen and retry), not corruption.
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<Log> {
        Log::prepare(dir, opts)?.open()
    }

    /// The first half of [`Log::open`]: takes the writer lock (unless read-only) and scans every
    /// segment, writing nothing. The caller may check the scan before [`PendingOpen::open`].
    pub fn prepare(dir: impl AsRef<Path>, opts: LogOptions) -> Result<PendingOpen> {
        Log::prepare_with(dir.as_ref(), opts, &mut |_| {}, false)
    }

    /// [`Log::prepare`] that hands `feed` each sealed segment as soon as the scan has accepted
    /// it for good ([`recovery::scan_dir_feeding`]), in LSN order, while the other segments
    /// are still being scanned: a restore applies one segment while the next ones are checked.
    /// What the scan finds, and the open after it, are exactly those of [`Log::prepare`].
    ///
    /// The pool's scan of each sealed segment also writes its replay steps
    /// ([`crate::format::steps`], [`Segment::replay_steps`]) for `feed`.
    pub fn prepare_feeding(
        dir: impl AsRef<Path>,
        opts: LogOptions,
        feed: &mut dyn FnMut(&mut Segment),
    ) -> Result<PendingOpen> {
        Log::prepare_with(dir.as_ref(), opts, feed, true)
    }

    pub(super) fn prepare_with(
        dir: &Path,
        opts: LogOptions,
        feed: &mut dyn FnMut(&mut Segment),
        steps: bool,
    ) -> Result<PendingOpen> {
        if !opts.readonly {
            return Log::prepare_scanned(dir, opts, feed, steps);
        }
        let before = segment_identities(dir);
        let mut pending = Log::prepare_scanned(dir, opts, feed, steps)
            .map_err(|e| stale_if_changed(e, dir, &before))?;
        pending.before = Some(before);
        Ok(pending)
    }

    pub(super) fn prepare_scanned(
        dir: &Path,
        opts: LogOptions,
        feed: &mut dyn FnMut(&mut Segment),
        steps: bool,
    ) -> Result<PendingOpen> {
        opts.validate()?;
        let dir = dir.to_path_buf();
        if opts.readonly {
            if !dir.is_dir() {
                return Err(Error::io(
                    "open log directory",
                    &dir,
                    std::io::Error::from_raw_os_error(crate::error::missing_dir_errno(&dir)),
                ));
            }
        } else {
            fsutil::create_dir_durable(&*opts.storage, &dir)?;
        }
        let lock = if opts.readonly {
            None
        } else {
            Some(crate::fork::ParentOnly::new(fsutil::lock_dir(
                &*opts.storage,
                &dir,
            )?))
        };
        let scan = recovery::scan_dir_feeding(
            &dir,
            ScanOptions {
                mode: opts.recovery,
                empty_entries: opts.empty_entries,
                steps,
                dialect: opts.dialect,
                ..ScanOptions::default()
            },
            &opts.storage,
            feed,
        )?;
        Ok(PendingOpen {
            dir,
            opts,
            lock,
            scan,
            before: None,
        })
    }

    /// Opens a read-only log from a scan already made (verify: the log is read once).
    pub fn open_from_scan(scan: LogScan, opts: LogOptions) -> Result<Log> {
        opts.validate()?;
        if !opts.readonly {
            return Err(Error::InvalidArgument(
                "only a read-only log opens from an earlier scan (a writer scans under its lock)"
                    .into(),
            ));
        }
        PendingOpen {
            dir: scan.dir.clone(),
            opts,
            lock: None,
            scan,
            before: None,
        }
        .open()
    }

    pub(super) fn temp_dir(&self) -> Result<PathBuf> {
        fsutil::temp_dir_beside(&*self.opts.storage, &self.dir, self.dialect)
    }
}

/// Name, device, inode and birth time of a file: a file deleted and made again under the same
/// name may reuse the inode number, not the birth time (where the file system records one).
type FileIdentity = (std::ffi::OsString, u64, u64, Option<SystemTime>);

/// The [`FileIdentity`] of every segment-named entry of `dir`, sorted; empty when the
/// directory cannot be listed. Two equal lists mean no segment was added, removed or replaced
/// in between (appends do not count).
fn segment_identities(dir: &Path) -> Vec<FileIdentity> {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| {
                    seg_format::parse_file_name(n)
                        .or_else(|| crate::format::compressed::parse_file_name(n))
                })
                .is_some()
        })
        .filter_map(|e| {
            let meta = fs::metadata(e.path()).ok()?;
            Some((e.file_name(), meta.dev(), meta.ino(), meta.created().ok()))
        })
        .collect();
    out.sort();
    out
}

/// A read-only open's failure becomes [`Error::StaleRead`] when the segments changed since
/// `before` (a writer deleted, replaced or added one while they were scanned) and the failure
/// is one such a change causes: corruption (a gap, a record being written or replaced) or a
/// file gone missing.
fn stale_if_changed(err: Error, dir: &Path, before: &[FileIdentity]) -> Error {
    let changed = || segment_identities(dir) != before;
    match err {
        Error::Corruption {
            path,
            offset,
            reason,
        } if changed() => Error::stale_read(&path, offset, reason),
        // A segment listed (and stat'ed), then not found: deleted since. Only a dangling
        // symbolic link under a segment's name is not found for good. (No identity check: a
        // roll-over and a cut can delete a file and make the same names and inode numbers
        // again within one timestamp tick.)
        Error::Io { op, path, source }
            if source.kind() == std::io::ErrorKind::NotFound
                && path != dir
                && (path.symlink_metadata().is_err() || path.exists() || changed()) =>
        {
            Error::stale_read(&path, None, format!("{op}: {source}"))
        }
        err => err,
    }
}
