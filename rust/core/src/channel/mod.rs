//! Persistent channels on the segmented log (the File Channel design, Kafka's consumers and
//! retention, DLedger's disk watermarks): senders append opaque messages to a [`Log`], named
//! receivers read them in LSN order from their own durable cursor (spec section 10).
//!
//! A channel directory has the base layout without snapshot and metadata: `data/log/`,
//! `data/cursors/` (one `NAME.cursor` per receiver, and `locks/NAME` that a live receiver holds),
//! `data/temp/`. One writable channel per directory (the log's lock); any number of read-only
//! ones, in other processes, whose receivers follow the files (the scanner's follow mode, [`crate::log::follow`]).
//!
//! Modules: [`cursor`] (cursor files and name locks), [`receiver`] (over the log's follower),
//! [`collect`] (which segments may go), the disk watermarks of [`crate::durability::watermarks`].

pub mod collect;
pub mod cursor;
pub mod receiver;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::base::settings::StoreSync;
use crate::durability::{spawn_interval, GroupCommit, Logged, Stopper};
use crate::error::{Error, IoContext, PoisonCause, Result};
use crate::format::dialect::Dialect;
use crate::io::fsutil;
use crate::io::storage::{self, Storage};
use crate::log::recovery::RecoveryMode;
use crate::log::{Log, LogOptions, SyncPolicy};

use crate::durability::watermarks::Gate;
pub use crate::durability::watermarks::{SpaceProbe, Statvfs, Watermarks};
pub use crate::log::follow::Messages;
pub use collect::Retention;
pub use receiver::{Receiver, Start};

/// The term every channel record carries (a channel is not a Raft log; terms stay constant).
const TERM: i32 = 0;

/// Paths of a channel directory. The one place that knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelLayout {
    pub base: PathBuf,
    pub data: PathBuf,
    pub log: PathBuf,
    pub cursors: PathBuf,
    pub temp: PathBuf,
}

impl ChannelLayout {
    pub fn new(base: &Path) -> ChannelLayout {
        let layout = crate::base::Layout::new(base);
        ChannelLayout {
            base: layout.base,
            cursors: layout.data.join("cursors"),
            data: layout.data,
            log: layout.log,
            temp: layout.temp,
        }
    }
}

/// How [`Channel::open`] opens a directory.
#[derive(Debug, Clone)]
pub struct ChannelOptions {
    /// When sends are fsynced: before `send` returns (group commit), every
    /// `sync_interval_ms` in the background, or never (the operating system decides).
    pub sync: StoreSync,
    pub sync_interval_ms: u64,
    pub retention: Retention,
    /// Compress sealed segments with this method ("zstd" or "lz4"); validated here.
    pub compress_sealed: Option<String>,
    /// Receivers only: no sender, no lock on the log, no collection.
    pub readonly: bool,
    pub soft_limit: u64,
    pub hard_limit: u64,
    pub preallocate: bool,
    pub watermarks: Watermarks,
    pub storage: Arc<dyn Storage>,
    pub space: Arc<dyn SpaceProbe>,
}

impl Default for ChannelOptions {
    fn default() -> Self {
        let log = LogOptions::default();
        ChannelOptions {
            sync: StoreSync::Always,
            sync_interval_ms: 100,
            retention: Retention::default(),
            compress_sealed: None,
            readonly: false,
            soft_limit: log.soft_limit,
            hard_limit: log.hard_limit,
            preallocate: log.preallocate,
            watermarks: Watermarks::default(),
            storage: storage::real(),
            space: Arc::new(Statvfs),
        }
    }
}

impl ChannelOptions {
    fn validate(&self) -> Result<()> {
        self.watermarks.validate()?;
        if let Some(m) = &self.compress_sealed {
            if crate::format::compressed::Method::parse(m).is_none() {
                return Err(Error::InvalidArgument(format!(
                    "compress_sealed must be None, \"zstd\" or \"lz4\" (got {m:?})"
                )));
            }
        }
        if self.sync == StoreSync::Interval && self.sync_interval_ms == 0 {
            return Err(Error::InvalidArgument(
                "sync_interval_ms must be > 0 for sync=\"interval\"".into(),
            ));
        }
        Ok(())
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) struct Shared {
    pub(crate) layout: ChannelLayout,
    pub(crate) opts: ChannelOptions,
    /// The writer's log (None when read-only).
    log: Option<Mutex<Log>>,
    /// Bumped and signalled on every send (and at close): wakes this process's receivers.
    pub(crate) sent: Mutex<u64>,
    pub(crate) wake: Condvar,
    pub(crate) closed: AtomicBool,
    durability: GroupCommit,
    gate: Gate,
    /// Why sends stopped after a failure that did not fail the send itself (a collection or
    /// roll-over after the append).
    refused: Mutex<Option<PoisonCause>>,
    stopper: Arc<Stopper>,
    syncer: Mutex<Option<JoinHandle<()>>>,
    /// The name locks of this channel's receivers: `close` releases them all, so a closed
    /// channel's receivers (unusable from then on) hold no name a reopened channel needs.
    pub(crate) names: Mutex<Vec<std::sync::Weak<receiver::HeldName>>>,
    /// The process that opened the channel: a forked child's copy (and its senders and
    /// receivers) refuses use (`crate::fork`).
    born: crate::fork::Birth,
}

impl Shared {
    pub(crate) fn check_open(&self) -> Result<()> {
        self.born.check("channel")?;
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed("channel"));
        }
        Ok(())
    }

    /// The first LSN the log holds and the LSN the next send gets.
    pub(crate) fn bounds(&self) -> Result<(i64, i64)> {
        match &self.log {
            Some(log) => {
                let log = lock(log);
                Ok((log.start_index(), log.last_index() + 1))
            }
            None => crate::log::follow::bounds(&self.layout.log),
        }
    }
}

/// Why a collection runs: it decides what a cursor that cannot be read does to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Collect {
    /// `collect()`: the caller hears about the cursor.
    Asked,
    /// After a send sealed a segment (retention).
    RollOver,
    /// Above the disk cleaning ratio, retention ignored (never past a cursor).
    DiskClean,
}

/// A channel: cheap to clone (clones share the log, the receivers' wake-up and the close).
#[derive(Clone)]
pub struct Channel {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("base", &self.shared.layout.base)
            .field("readonly", &self.shared.opts.readonly)
            .finish()
    }
}

impl Channel {
    /// Opens (creating the layout unless read-only) the channel directory `base`.
    pub fn open(base: &Path, opts: ChannelOptions) -> Result<Channel> {
        opts.validate()?;
        crate::base::require_kind(base, crate::base::Kind::Channel)?;
        let layout = ChannelLayout::new(base);
        if layout.log.is_dir() {
            // Channels exist only in the spec dialect (spec section 11).
            let (segments, _) = fsutil::list_segments(&*opts.storage, &layout.log)?;
            crate::log::dialect::log_dialect(&segments, Some(Dialect::Spec))?;
        }
        let log = if opts.readonly {
            if !layout.log.is_dir() {
                return Err(Error::io(
                    "open channel log directory",
                    &layout.log,
                    std::io::Error::from_raw_os_error(crate::error::missing_dir_errno(&layout.log)),
                ));
            }
            None
        } else {
            let storage = &*opts.storage;
            let log_opts = LogOptions {
                soft_limit: opts.soft_limit,
                hard_limit: opts.hard_limit,
                preallocate: opts.preallocate,
                // The channel syncs (group commit); Batch makes roll-over sync the segment it
                // seals, so every entry of a sealed segment is durable.
                sync: SyncPolicy::Batch,
                recovery: RecoveryMode::TolerateTornTail,
                readonly: false,
                commit_index: None,
                // Messages are never empty: an empty record at the tail is a torn header.
                empty_entries: false,
                storage: Arc::clone(&opts.storage),
                // Channels exist only in the spec dialect (spec section 11): a taskflux log
                // here is refused, never read as damage.
                dialect: Some(Dialect::Spec),
            };
            let mut log = Log::open(&layout.log, log_opts)?;
            fsutil::create_dir_durable(storage, &layout.cursors)?;
            fsutil::create_dir_durable(storage, &layout.temp)?;
            // An old channel's 0755 directories: the sender's open makes them its own.
            crate::io::storage::make_private(
                &[
                    &layout.base,
                    &layout.data,
                    &layout.log,
                    &layout.cursors,
                    &layout.temp,
                ],
                crate::events::STORE,
            );
            // Cursor writes of receivers killed mid-ack (issue 30 item 9 left them for good).
            fsutil::remove_dead_temp_files(storage, &layout.cursors.join(fsutil::TEMP_DIR))?;
            if log.last_index() >= log.start_index() {
                log.commit(log.last_index())?;
            }
            Some(Mutex::new(log))
        };
        let synced = log.as_ref().map_or(-1, |l| lock(l).last_index());
        let shared = Arc::new(Shared {
            layout,
            log,
            sent: Mutex::new(0),
            wake: Condvar::new(),
            closed: AtomicBool::new(false),
            durability: GroupCommit::new(synced),
            gate: Gate::default(),
            refused: Mutex::new(None),
            stopper: Arc::default(),
            syncer: Mutex::new(None),
            names: Mutex::new(Vec::new()),
            opts,
            born: crate::fork::Birth::now(),
        });
        let channel = Channel { shared };
        channel.start_background_sync();
        Ok(channel)
    }

    fn start_background_sync(&self) {
        let s = &self.shared;
        if s.opts.readonly || s.opts.sync != StoreSync::Interval {
            return;
        }
        let weak = Arc::downgrade(s);
        let every = Duration::from_millis(s.opts.sync_interval_ms);
        let handle = spawn_interval(Arc::clone(&s.stopper), every, move || {
            let Some(shared) = weak.upgrade() else {
                return false;
            };
            if shared.durability.stopped() {
                return false;
            }
            let channel = Channel { shared };
            let _ = channel.wait_durable(channel.last_lsn_written());
            true
        });
        *lock(&s.syncer) = Some(handle);
    }

    pub fn layout(&self) -> &ChannelLayout {
        &self.shared.layout
    }

    pub fn readonly(&self) -> bool {
        self.shared.opts.readonly
    }

    /// Whether this is the process that opened the channel (not a forked child's copy).
    pub fn is_here(&self) -> bool {
        self.shared.born.is_here()
    }

    pub fn options(&self) -> &ChannelOptions {
        &self.shared.opts
    }

    fn log(&self) -> Result<MutexGuard<'_, Log>> {
        self.shared.check_open()?;
        match &self.shared.log {
            Some(log) => Ok(lock(log)),
            None => Err(Error::ReadOnly {
                path: self.shared.layout.base.clone(),
            }),
        }
    }

    fn last_lsn_written(&self) -> i64 {
        self.shared
            .log
            .as_ref()
            .map_or(-1, |l| lock(l).last_index())
    }

    /// `(first LSN held, LSN of the next send)`.
    pub fn bounds(&self) -> Result<(i64, i64)> {
        self.shared.check_open()?;
        self.shared.bounds()
    }

    /// Why sends are refused, if they are (fail-stop after an I/O error until reopened).
    pub fn stopped(&self) -> Option<PoisonCause> {
        let log = self.shared.log.as_ref()?;
        lock(&self.shared.refused)
            .clone()
            .or_else(|| self.shared.durability.error())
            .or_else(|| lock(log).poisoned().cloned())
    }

    /// Appends `items` (all or nothing) and makes them durable per the sync policy; returns
    /// the LSN of the first.
    pub fn send_many<D: AsRef<[u8]>>(&self, items: &[D]) -> Result<i64> {
        let (first, logged) = self.send_many_logged(items)?;
        self.make_durable(logged)?;
        Ok(first)
    }

    /// [`Channel::send_many`] without the wait for durability: the messages are in the log
    /// and visible to receivers; [`Channel::make_durable`] makes them durable per the sync
    /// policy (one wait may cover the sends of several callers).
    pub fn send_many_logged<D: AsRef<[u8]>>(&self, items: &[D]) -> Result<(i64, Logged)> {
        let s = &*self.shared;
        if s.opts.readonly {
            return Err(Error::ReadOnly {
                path: s.layout.base.clone(),
            });
        }
        s.check_open()?;
        if items.iter().any(|d| d.as_ref().is_empty()) {
            return Err(Error::InvalidArgument(
                "a channel message must not be empty (an empty record cannot be told from a torn one)".into(),
            ));
        }
        if items.is_empty() {
            return Ok((self.bounds()?.1, Logged::NOTHING));
        }
        if let Some(cause) = self.stopped() {
            return Err(Error::Poisoned { cause });
        }
        let check = || {
            s.gate
                .check(&*s.opts.space, &s.layout.log, &s.opts.watermarks)
        };
        let checked = check();
        // Above the cleaning ratio collection runs first, also when the send is being refused
        // (else a disk filled by this channel would refuse sends for good: nothing else frees
        // it); then the marks are looked at again.
        let over_clean = match &checked {
            Ok(c) => c.clean,
            Err(Error::DiskFull { used, .. }) => {
                s.opts.watermarks.clean.is_some_and(|c| *used >= c)
            }
            Err(_) => false,
        };
        if over_clean && self.collect_with(Collect::DiskClean)? > 0 {
            check()?;
        } else {
            checked?;
        }
        let (first, rolled) = {
            let mut log = self.log()?;
            let before = log.segments_len();
            let first = log.append_many_committed(TERM, items)?;
            (first, log.segments_len() != before)
        };
        let last = first + items.len() as i64 - 1;
        {
            *lock(&s.sent) += 1;
            s.wake.notify_all();
        }
        if rolled {
            // The messages are in the log: this send succeeds. A collection that fails after
            // it stops later sends instead (fail-stop).
            if let Err(e) = self.collect_with(Collect::RollOver) {
                *lock(&s.refused) = Some(PoisonCause::from_error(&e));
            }
            self.compress_sealed();
        }
        Ok((first, Logged::at(last)))
    }

    /// Waits until what [`Channel::send_many_logged`] logged is durable per the sync policy
    /// (only "always" waits); a failure is `NotDurable`: the messages are sent, not known
    /// durable.
    pub fn make_durable(&self, logged: Logged) -> Result<()> {
        match logged.lsn() {
            Some(last) if self.shared.opts.sync == StoreSync::Always => {
                self.wait_durable(last).map_err(|e| Error::NotDurable {
                    cause: PoisonCause::from_error(&e),
                })
            }
            _ => Ok(()),
        }
    }

    /// With `compress_sealed`, replaces the sealed segments not yet compressed by `.log.z`
    /// files (spec section 9; `Log::compress_one`, one per lock hold). A failure leaves the
    /// segment as it was and never stops sends (the active segment is never touched); the
    /// next roll-over tries again.
    fn compress_sealed(&self) {
        let s = &*self.shared;
        let Some(method) = s
            .opts
            .compress_sealed
            .as_deref()
            .and_then(crate::format::compressed::Method::parse)
        else {
            return;
        };
        let Some(log) = &s.log else { return };
        let pending = lock(log).compressible();
        for first in pending {
            if lock(log).compress_one(first, method).is_err() {
                return;
            }
        }
    }

    /// Waits until `lsn` is durable (group commit).
    fn wait_durable(&self, lsn: i64) -> Result<()> {
        let Some(log) = &self.shared.log else {
            return Ok(());
        };
        self.shared.durability.wait(lsn, || {
            let (file, last) = lock(log).sync_handle()?;
            file.sync_data()
                .ctx("fsync segment", &self.shared.layout.log)?;
            Ok(last)
        })
    }

    /// Makes every sent message durable now.
    pub fn sync(&self) -> Result<()> {
        let last = self.log()?.last_index();
        self.wait_durable(last)
    }

    /// Opens receiver `name` (its cursor decides where it resumes; `start` applies only when
    /// it has none yet).
    pub fn receiver(&self, name: &str, start: Start) -> Result<Receiver> {
        self.shared.check_open()?;
        Receiver::open(Arc::clone(&self.shared), name, start)
    }

    /// Every receiver of the directory and its cursor (first unacknowledged LSN); the error
    /// of the first cursor that cannot be read, naming it.
    pub fn receivers(&self) -> Result<Vec<(String, i64)>> {
        self.shared.check_open()?;
        cursor::list(&self.shared.layout.cursors)?
            .into_iter()
            .map(|(name, next)| Ok((name, next?)))
            .collect()
    }

    /// Deletes receiver `name`'s cursor (it no longer holds back collection). False when it
    /// did not exist; `Error::ReceiverLocked` while someone has it open.
    pub fn drop_receiver(&self, name: &str) -> Result<bool> {
        let s = &*self.shared;
        if s.opts.readonly {
            return Err(Error::ReadOnly {
                path: s.layout.base.clone(),
            });
        }
        s.check_open()?;
        crate::format::receiver::validate_name(name)?;
        let storage = &*s.opts.storage;
        let held = cursor::lock(storage, &s.layout.cursors, name)?;
        let path = cursor::cursor_path(&s.layout.cursors, name);
        let existed = match storage.remove_file(&path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => return Err(Error::io("delete cursor", &path, e)),
        };
        fsutil::sync_dir(storage, &s.layout.cursors)?;
        // Remove the lock file while holding it (a waiting locker checks the name afterwards).
        let _ = storage.remove_file(&held.path);
        drop(held);
        Ok(existed)
    }

    /// Deletes the oldest sealed segments that every receiver has acknowledged and retention
    /// lets go ([`collect`]); returns how many.
    pub fn collect(&self) -> Result<usize> {
        self.collect_with(Collect::Asked)
    }

    fn collect_with(&self, why: Collect) -> Result<usize> {
        let s = &*self.shared;
        s.born.check("channel")?;
        if s.opts.readonly {
            return Err(Error::ReadOnly {
                path: s.layout.base.clone(),
            });
        }
        // Cursors first: one read later can only be further on (acks only move forward). A
        // cursor that cannot be read holds back everything (its receiver's position is
        // unknown): an error for a caller who asked, nothing collected on the automatic paths,
        // whose sends must go on (the receiver's own reads report it).
        let mut cursors = Vec::new();
        for (_, next) in cursor::list(&s.layout.cursors)? {
            match (next, why) {
                (Ok(next), _) => cursors.push(next),
                (Err(e), Collect::Asked) => return Err(e),
                (Err(_), _) => return Ok(0),
            }
        }
        let mut log = self.log()?;
        let infos = log.segments();
        let total: u64 = infos.iter().map(|i| i.size).sum();
        let mut sealed = Vec::new();
        for info in infos.iter().filter(|i| i.sealed) {
            let modified = std::fs::metadata(&info.path)
                .and_then(|m| m.modified())
                .ctx("stat segment", &info.path)?;
            sealed.push(collect::SegmentFacts {
                last_lsn: info.start_lsn + info.count as i64 - 1,
                bytes: info.size,
                modified_ms: unix_ms(modified),
            });
        }
        let n = collect::collectable(
            &sealed,
            total,
            &cursors,
            s.opts.retention,
            unix_ms(SystemTime::now()),
            why == Collect::DiskClean,
        );
        if n == 0 {
            return Ok(0);
        }
        log.compact(sealed[n - 1].last_lsn)
    }

    /// Closes the channel: receivers waiting in `recv` raise `Closed`, later sends are refused,
    /// sent messages are synced per policy and the log's lock is released.
    pub fn close(&self) -> Result<()> {
        let s = &*self.shared;
        if !s.born.is_here() {
            // A forked child's copy: nothing of the parent's to sync, stop or release here.
            return Ok(());
        }
        if s.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        s.durability.stop();
        s.stopper.stop();
        {
            *lock(&s.sent) += 1;
            s.wake.notify_all();
        }
        for held in std::mem::take(&mut *lock(&s.names)) {
            if let Some(held) = held.upgrade() {
                *lock(&held) = None;
            }
        }
        let mut result = Ok(());
        if let Some(log) = &s.log {
            let mut log = lock(log);
            if s.opts.sync != StoreSync::Never
                && s.durability.error().is_none()
                && log.poisoned().is_none()
            {
                let last = log.last_index();
                result = log.sync();
                if result.is_ok() {
                    s.durability.mark_synced(last);
                }
            }
            let released = log.release();
            result = result.and(released);
        }
        if let Some(h) = lock(&s.syncer).take() {
            let _ = h.join();
        }
        result
    }

    pub fn closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }

    /// Whether sends are being refused for lack of disk space (until below the low ratio).
    pub fn disk_full(&self) -> bool {
        self.shared.gate.is_full()
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(u64::MAX as u128) as u64)
}
