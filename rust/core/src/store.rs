//! The embedded durable queue over a base directory (spec sections 1, 7, 8): settings, the
//! writer lock (held by the log), metadata, snapshot, log and queue state. Restore on open =
//! snapshot + replay of the log after it.
//!
//! Every change is checked against the state, appended to the log as a delta, applied to the
//! state, and made durable per the sync policy before the call returns. Durability waits happen
//! outside the state lock, so concurrent writers share one fsync (group commit).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::base;
use crate::base::files;
use crate::base::settings::{Settings, StoreSync};
use crate::deliveries::Deliveries;
use crate::durability::watermarks::{Gate, SpaceProbe, Statvfs, Watermarks};
use crate::durability::{spawn_interval, GroupCommit, Stopper};
use crate::error::{Error, IoContext, PoisonCause, Result};
use crate::format::delta::DeltaRef;
use crate::format::dialect::Dialect;
use crate::format::metadata::Metadata;
use crate::io::storage::{self, Storage};
use crate::log::recovery::{Parallelism, RecoveryMode};
use crate::log::{Log, LogOptions, SyncPolicy};
use crate::replay::Replayer;
use crate::state::{raw_name, Applied, QueueConfig, QueueInfo, QueueState, Record};

/// How [`Store::open_with`] opens a base directory.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// No lock, no writes.
    pub readonly: bool,
    /// Where every change to the directory goes (tests inject faults here).
    pub storage: Arc<dyn Storage>,
    /// Measures how full the file system is (`DiskFullRatio`; tests inject their own).
    pub space: Arc<dyn SpaceProbe>,
    /// How long a writable open waits for another writer to release the directory lock
    /// (retrying with a growing pause) before it fails with `Locked`; `None` fails at once.
    pub lock_timeout: Option<Duration>,
    /// `AllCores` applies each sealed segment of the log while the next ones are still being
    /// scanned at open ([`crate::replay::Replayer`]); `OneCore` scans the whole log, then
    /// replays it. Same outcome either way. Defaults to [`Parallelism::from_env`].
    pub parallelism: Parallelism,
    /// The dialect asked for (spec section 11): `None` detects it from the files (a new
    /// directory is `spec`); a choice the files contradict is refused.
    pub dialect: Option<Dialect>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            readonly: false,
            storage: storage::real(),
            space: Arc::new(Statvfs),
            lock_timeout: None,
            parallelism: Parallelism::from_env(),
            dialect: None,
        }
    }
}

/// What opening found and did.
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    pub snapshot_index: Option<i64>,
    pub replayed: u64,
    pub torn_tail_cut: bool,
    /// Files put into data/temp at open: the copy of what a torn-tail cut removed, and the
    /// segments moved because the snapshot was ahead of the whole log.
    pub moved_aside: Vec<PathBuf>,
    /// A read-only open ignored a bad settings file (the defaults were used): its problem.
    pub settings_warning: Option<String>,
}

pub use crate::base::Layout;

struct Inner {
    log: Log,
    state: QueueState,
    metadata: Metadata,
    snapshot_index: i64,
    closed: bool,
    /// A read-only refresh failed half-way: the next one reopens from scratch.
    stale: bool,
    /// Leases and nack counts (not logged).
    deliveries: Deliveries,
}

pub struct Store {
    layout: Layout,
    storage: Arc<dyn Storage>,
    space: Arc<dyn SpaceProbe>,
    disk: Gate,
    settings: Settings,
    /// The settings overrides the store was opened with (a read-only refresh reopens with them).
    overrides: Option<String>,
    readonly: bool,
    inner: Mutex<Inner>,
    /// Signalled when records become ready (enqueue, nack) or queues go away.
    ready: Condvar,
    durability: GroupCommit,
    /// Set when a failure after a successful write (an automatic snapshot) must stop later
    /// writes without failing the write itself.
    refused: Mutex<Option<PoisonCause>>,
    /// Whether a caller has been told that writes stopped (so `close` need not say it again).
    told: AtomicBool,
    syncer: Mutex<Option<JoinHandle<()>>>,
    /// The background compressor of `LogCompressSealedSegments` (stopped with the syncer).
    compressor: Mutex<Option<JoinHandle<()>>>,
    /// Wakes the interval syncer when the store closes, so close never waits out an interval
    /// (however long the setting). Shared with the thread, which holds no strong reference to
    /// the store while it sleeps (dropping the last handle must still close the store).
    syncer_stop: Arc<Stopper>,
    report: OpenReport,
    /// The process that opened the store: a forked child's copy refuses use (`crate::fork`).
    born: crate::fork::Birth,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Store {
    /// Opens (creating the layout unless read-only) the store in `base`. `overrides` is a JSON
    /// object of settings that win over `taskflux.settings.json`.
    pub fn open(base: &Path, overrides: Option<&str>, readonly: bool) -> Result<Store> {
        let opts = StoreOptions {
            readonly,
            ..StoreOptions::default()
        };
        Store::open_with(base, overrides, opts)
    }

    /// [`Store::open`] with every option (the storage seam included).
    pub fn open_with(base: &Path, overrides: Option<&str>, opts: StoreOptions) -> Result<Store> {
        let deadline = opts
            .lock_timeout
            .and_then(|t| Instant::now().checked_add(t));
        let mut pause = Duration::from_millis(5);
        loop {
            match Store::open_once(base, overrides, opts.clone()) {
                // A refused open changes nothing, so it can simply be tried again.
                Err(Error::Locked { .. }) if opts.lock_timeout.is_some() => {
                    let left = match deadline {
                        Some(d) => d.saturating_duration_since(Instant::now()),
                        None => pause,
                    };
                    if left.is_zero() {
                        return Store::open_once(base, overrides, opts);
                    }
                    std::thread::sleep(pause.min(left));
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }

    fn open_once(base: &Path, overrides: Option<&str>, opts: StoreOptions) -> Result<Store> {
        let StoreOptions {
            readonly,
            storage,
            space,
            parallelism,
            dialect,
            ..
        } = opts;
        base::require_kind(base, base::Kind::Store)?;
        // Before anything is read as data: a directory of the other dialect is never damage.
        let layout = Layout::detect(base, dialect)?;
        // A read-only look goes on past a bad settings file (Settings::load_for_reading).
        let (settings, settings_warning) = if readonly {
            Settings::load_for_reading(base, overrides)?
        } else {
            (Settings::load(base, overrides)?, None)
        };
        if layout.dialect == Dialect::Taskflux
            && settings.log_compress_sealed_segments.is_some()
            && !readonly
        {
            return Err(Error::Dialect {
                path: layout.base.clone(),
                reason: "LogCompressSealedSegments is set, but this store is in the taskflux \
                         dialect, where compressed segments do not exist (spec section 11): \
                         unset it to open the store"
                    .into(),
            });
        }
        let log_opts = log_options(&settings, readonly, &storage, layout.dialect);
        // Validate first, create after: an existing log is locked and scanned (no writes)
        // before anything is read, and nothing is created or cut until every check passed.
        let existing = readonly || layout.log.is_dir();
        // On every core, the replay of an existing log overlaps its scan: the snapshot is read
        // first, and each sealed segment the scan accepts is applied while the next ones are
        // checked. What was applied is kept only if the open accepts the scan and the snapshot
        // is still the one read (else it is dropped and the replay runs after the scan, as on
        // one core); errors keep their order (scan, metadata, snapshot, checks, replay).
        let early_id = base::snapshot_identity(&layout);
        let mut early = match (existing, parallelism) {
            (true, Parallelism::AllCores) => base::load_snapshot(&layout).ok(),
            _ => None,
        };
        let early_snapshot = early.as_ref().map(|r| r.snapshot);
        let mut replayer = early.as_mut().map(|r| {
            let start = r.snapshot_index() + 1;
            let mut replayer = Replayer::new(&mut r.state, start);
            replayer.expect_adds(crate::replay::adds_bound_of_dir(&layout.log));
            replayer
        });
        let pending = match (existing, replayer.as_mut()) {
            (false, _) => None,
            (true, Some(rp)) => Some(Log::prepare_feeding(
                &layout.log,
                log_opts.clone(),
                &mut |seg| rp.segment(seg),
            )?),
            (true, None) => Some(Log::prepare(&layout.log, log_opts.clone())?),
        };
        if let Some(p) = &pending {
            p.check()?;
        }
        let metadata = files::read_metadata_in(&layout.metadata, layout.dialect)?;
        let keep = replayer.is_some() && base::snapshot_identity(&layout) == early_id;
        let fresh = match keep {
            true => None,
            false => Some(base::load_snapshot(&layout)?),
        };
        let snapshot = match &fresh {
            Some(r) => r.snapshot,
            None => early_snapshot.flatten(),
        };
        let pending = match pending {
            Some(p) => p,
            None => {
                // No log yet: check the snapshot against an empty log, then create.
                base::check_continuity(&layout, 0, snapshot.map(|s| s.0))?;
                Log::prepare(&layout.log, log_opts)?
            }
        };
        pending.check()?;
        base::check_log(&layout, pending.scan(), &metadata, snapshot)?;
        let mut log = pending.open()?;
        if !readonly {
            let temp = crate::io::fsutil::temp_dir_named(
                &*storage,
                &layout.data,
                layout.dialect.temp_dir(),
            )?;
            // Snapshots and metadata of writers killed before their rename.
            crate::io::fsutil::remove_dead_temp_files(&*storage, &temp)?;
            if layout.dialect == Dialect::Taskflux
                && std::fs::symlink_metadata(&layout.metadata).is_err()
            {
                // A new taskflux directory says its dialect from the start (an empty log and
                // no snapshot say nothing, and would reopen as spec), as TaskFlux creates its
                // metadata file: the defaults, which every entry's term satisfies (checked).
                files::write_metadata_in(&*storage, &layout.metadata, &metadata, layout.dialect)?;
            }
        }
        let snapshot_index = snapshot.map_or(-1, |s| s.0);
        let mut report = OpenReport {
            torn_tail_cut: log.recovery().truncated(),
            snapshot_index: snapshot.map(|s| s.0),
            moved_aside: log.recovery().moved.clone(),
            settings_warning,
            ..OpenReport::default()
        };
        if log.last_index() < snapshot_index && !readonly {
            // The snapshot is ahead of the whole log: the log restarts after it. Its segments
            // move to data/temp rather than being deleted (the snapshot's index is outside its
            // checksum, so a damaged index must not cost the log). (Nothing was fed: every
            // entry of the log is at or below the snapshot's index.)
            let moved = log.restart_moving_aside(snapshot_index + 1)?;
            report.moved_aside.extend(moved);
        }
        let kept = if fresh.is_none() {
            replayer.map(|rp| rp.finish(&mut log)).transpose()?
        } else {
            drop(replayer);
            None
        };
        let mut state = match (kept, fresh) {
            (Some(replayed), _) => {
                report.replayed = replayed;
                early.take().expect("kept").state
            }
            (None, fresh) => {
                let mut restored = fresh.expect("loaded when not kept");
                report.replayed = base::replay(&mut restored.state, &mut log, snapshot_index)?;
                restored.state
            }
        };
        if !readonly && log.last_index() >= log.start_index() {
            log.commit(log.last_index())?;
        }
        // Replay read the whole log through maps; do not keep it resident, nor growth slack.
        log.unmap_sealed();
        state.shrink_to_fit();
        let synced = log.last_index();
        let store = Store {
            layout,
            storage,
            space,
            disk: Gate::default(),
            settings,
            overrides: overrides.map(str::to_string),
            readonly,
            inner: Mutex::new(Inner {
                log,
                state,
                metadata,
                snapshot_index,
                closed: false,
                stale: false,
                deliveries: Deliveries::default(),
            }),
            ready: Condvar::new(),
            durability: GroupCommit::new(synced),
            refused: Mutex::new(None),
            told: AtomicBool::new(false),
            syncer: Mutex::new(None),
            compressor: Mutex::new(None),
            syncer_stop: Arc::default(),
            report,
            born: crate::fork::Birth::now(),
        };
        Ok(store)
    }

    /// Starts the background threads: the fsync thread of the "interval" policy and the
    /// compressor of `LogCompressSealedSegments`.
    pub fn start_background_sync(self: &std::sync::Arc<Self>) {
        self.start_background_compression();
        if self.readonly || self.settings.log_sync_policy != StoreSync::Interval {
            return;
        }
        let weak = std::sync::Arc::downgrade(self);
        let every = Duration::from_millis(self.settings.log_sync_interval_ms);
        let stop = Arc::clone(&self.syncer_stop);
        let handle = spawn_interval(stop, every, move || {
            let Some(store) = weak.upgrade() else {
                return false;
            };
            if store.durability.stopped() {
                return false;
            }
            let last = lock(&store.inner).log.last_index();
            let _ = store.wait_durable(last);
            true
        });
        *lock(&self.syncer) = Some(handle);
    }

    /// Compresses sealed segments in the background (`LogCompressSealedSegments`): checks
    /// twice a second for segments sealed by a roll-over and compresses them one at a time,
    /// taking the store's lock for each (writers wait for at most one segment's compression).
    /// A failure stops the compressor, never the store's writes.
    fn start_background_compression(self: &std::sync::Arc<Self>) {
        let Some(method) = self.settings.log_compress_sealed_segments else {
            return;
        };
        if self.readonly {
            return;
        }
        let weak = std::sync::Arc::downgrade(self);
        let stop = Arc::clone(&self.syncer_stop);
        let handle = spawn_interval(stop, Duration::from_millis(500), move || {
            let Some(store) = weak.upgrade() else {
                return false;
            };
            store.compress_sealed(method).is_ok()
        });
        *lock(&self.compressor) = Some(handle);
    }

    /// Compresses every sealed segment not yet compressed, one per lock hold.
    pub fn compress_sealed(&self, method: crate::format::compressed::Method) -> Result<usize> {
        self.refuse_readonly()?;
        let todo = self.inner()?.log.compressible();
        let mut done = 0;
        for first in todo {
            // Not `writable()`: a background thread must not take the report of a stopped
            // store away from the caller it is owed to.
            let mut inner = self.inner()?;
            if let Some(cause) = self.stopped(&inner) {
                return Err(Error::Poisoned { cause });
            }
            done += usize::from(inner.log.compress_one(first, method)?.is_some());
        }
        Ok(done)
    }

    /// Whether this is the process that opened the store (not a forked child's copy).
    pub fn is_here(&self) -> bool {
        self.born.is_here()
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    fn inner(&self) -> Result<MutexGuard<'_, Inner>> {
        // Before the lock: a thread of the parent may have held it at the fork, forever here.
        self.born.check("store")?;
        let inner = lock(&self.inner);
        if inner.closed {
            return Err(Error::Closed("store"));
        }
        Ok(inner)
    }

    fn refuse_readonly(&self) -> Result<()> {
        if self.readonly {
            return Err(Error::ReadOnly {
                path: self.layout.base.clone(),
            });
        }
        Ok(())
    }

    fn writable(&self) -> Result<MutexGuard<'_, Inner>> {
        self.refuse_readonly()?;
        // Refused before anything is written, so a full disk never reaches the middle of a
        // write (the channel's high watermark, with no hysteresis).
        let ratio = Some(self.settings.disk_full_ratio);
        let marks = Watermarks {
            high: ratio,
            low: ratio,
            clean: None,
        };
        self.disk.check(&*self.space, &self.layout.log, &marks)?;
        // Closed first: a call after close is refused as such, whatever stopped writes before.
        let inner = self.inner()?;
        if let Some(cause) = self.stopped(&inner) {
            return self.tell(Err(Error::Poisoned { cause }));
        }
        Ok(inner)
    }

    /// Why writes stopped, if they did: a failed write, roll-over, snapshot or fsync.
    fn stopped(&self, inner: &Inner) -> Option<PoisonCause> {
        let refused = lock(&self.refused).clone();
        refused
            .or_else(|| self.durability.error())
            .or_else(|| inner.log.poisoned().cloned())
    }

    /// Passes a result on to a caller, noting when it tells them that writes stopped.
    fn tell<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::Io { .. } | Error::Poisoned { .. } | Error::NotDurable { .. }) = &result {
            self.told.store(true, Ordering::Relaxed);
        }
        result
    }

    /// Appends deltas (one write), commits them and applies them; returns what each did and
    /// the last LSN. The caller then waits for durability outside the lock.
    fn log_and_apply(
        &self,
        inner: &mut Inner,
        deltas: &[DeltaRef<'_>],
    ) -> Result<(Vec<Applied>, i64)> {
        let mut encoded: Vec<Vec<u8>> = Vec::with_capacity(deltas.len());
        for d in deltas {
            let mut buf = Vec::new();
            d.encode(&mut buf);
            encoded.push(buf);
        }
        let segments_before = inner.log.segments_len();
        // Appended and committed in one step: once this returns Ok the deltas are in the log,
        // and a roll-over that fails after them stops later writes instead of failing this one.
        let first = self.tell(
            inner
                .log
                .append_many_committed(inner.metadata.term, &encoded),
        )?;
        let last = first + deltas.len() as i64 - 1;
        // Once in the log, the deltas are applied before anything else can fail, so the state
        // always matches what a replay of the log would build.
        let mut applied = Vec::with_capacity(deltas.len());
        for (i, d) in deltas.iter().enumerate() {
            applied.push(inner.state.apply_delta(Some(first + i as i64), d)?);
        }
        if inner.log.segments_len() != segments_before {
            // The deltas are logged and applied: this call succeeds. A snapshot that cannot be
            // written stops later writes instead (fail-stop), naming the file and errno.
            if let Err(e) = self.maybe_snapshot(inner) {
                *lock(&self.refused) = Some(PoisonCause::from_error(&e));
            }
        }
        Ok((applied, last))
    }

    fn maybe_snapshot(&self, inner: &mut Inner) -> Result<()> {
        let threshold = self.settings.snapshot_creation_segments_threshold;
        if threshold == 0 {
            return Ok(());
        }
        if inner.log.sealed_segments_after(inner.snapshot_index) as u64 >= threshold {
            self.snapshot_locked(inner)?;
        }
        Ok(())
    }

    /// Waits until `lsn` is durable per the sync policy (group commit for "always").
    fn wait_durable(&self, lsn: i64) -> Result<()> {
        if self.settings.log_sync_policy == StoreSync::Never {
            return Ok(());
        }
        self.durability.wait(lsn, || {
            // Everything appended so far is covered by this fsync; later appends wait for the
            // next one (started by the first of them to arrive here).
            let (file, last) = lock(&self.inner).log.sync_handle()?;
            file.sync_data().ctx("fsync segment", &self.layout.log)?;
            Ok(last)
        })
    }

    /// Waits for durability per policy. The change is in the log and applied by now, so a
    /// failure here says exactly that: `NotDurable`.
    fn after_write(&self, lsn: i64) -> Result<()> {
        if self.settings.log_sync_policy == StoreSync::Always {
            let waited = self.wait_durable(lsn).map_err(|e| Error::NotDurable {
                cause: PoisonCause::from_error(&e),
            });
            self.tell(waited)?;
        }
        Ok(())
    }

    // ----- client operations -----

    pub fn create_queue(&self, name: &[u8], config: QueueConfig) -> Result<()> {
        self.create_queue_as(name, config, false).map(|_| ())
    }

    /// [`Store::create_queue`]; with `exist_ok`, a queue of that name and the same settings is
    /// not an error (nothing is written; `Ok(false)`), one with other settings still is.
    pub fn create_queue_as(
        &self,
        name: &[u8],
        config: QueueConfig,
        exist_ok: bool,
    ) -> Result<bool> {
        let lsn = {
            let mut inner = self.writable()?;
            if exist_ok && inner.state.queue(name).is_ok_and(|q| q.config() == config) {
                return Ok(false);
            }
            inner.state.check_create(name, &config)?;
            let delta = DeltaRef::CreateQueue {
                name,
                implementation: config.implementation,
                max_queue_size: config.max_queue_size.map_or(-1, |v| v as i32),
                max_message_size: config.max_message_size.map_or(-1, |v| v as i32),
                key_range: config.key_range,
            };
            self.log_and_apply(&mut inner, &[delta])?.1
        };
        self.after_write(lsn).map(|()| true)
    }

    pub fn delete_queue(&self, name: &[u8]) -> Result<()> {
        let lsn = {
            let mut inner = self.writable()?;
            inner.state.check_delete(name)?;
            let lsn = self
                .log_and_apply(&mut inner, &[DeltaRef::DeleteQueue { name }])?
                .1;
            inner.deliveries.drop_queue(name);
            lsn
        };
        self.ready.notify_all();
        self.after_write(lsn)
    }

    /// Enqueues records (one log write, one fsync); returns their ids. All are checked against
    /// the queue's policies first: either all are enqueued or none.
    pub fn enqueue_many(&self, name: &[u8], items: &[(i64, &[u8])]) -> Result<Vec<u64>> {
        let (ids, lsn) = {
            let mut inner = self.writable()?;
            inner.state.queue(name)?;
            if items.is_empty() {
                return Ok(Vec::new());
            }
            for (key, message) in items {
                inner.state.check_enqueue(name, *key, message.len())?;
            }
            let q = inner.state.queue(name)?;
            if q.last_id().checked_add(items.len() as u64).is_none() {
                return Err(Error::Policy {
                    queue: raw_name(name),
                    policy: "ids",
                    reason: format!(
                        "{} records would exhaust the queue's record ids",
                        items.len()
                    ),
                });
            }
            if let Some(max) = q.config().max_queue_size {
                if q.count() + items.len() as u64 > max as u64 {
                    return Err(Error::Policy {
                        queue: raw_name(name),
                        policy: "max_queue_size",
                        reason: format!(
                            "{} records do not fit ({} of {max} used)",
                            items.len(),
                            q.count()
                        ),
                    });
                }
            }
            let deltas: Vec<DeltaRef<'_>> = items
                .iter()
                .map(|(key, message)| DeltaRef::AddRecord {
                    name,
                    key: *key,
                    message,
                })
                .collect();
            let (applied, lsn) = self.log_and_apply(&mut inner, &deltas)?;
            let ids = applied
                .into_iter()
                .filter_map(|a| match a {
                    Applied::Added(id) => Some(id),
                    _ => None,
                })
                .collect();
            (ids, lsn)
        };
        self.ready.notify_all();
        self.after_write(lsn)?;
        Ok(ids)
    }

    pub fn enqueue(&self, name: &[u8], key: i64, message: &[u8]) -> Result<u64> {
        Ok(self.enqueue_many(name, &[(key, message)])?[0])
    }

    /// Takes the next record of `name` (smallest key, then lowest id), waiting up to `timeout`
    /// (`None` = forever) for one to arrive. Writes nothing: the record is in flight until
    /// acked (RemoveRecord is logged) or nacked (it goes back).
    /// Returns the record and its delivery's receipt, which `ack`/`nack` check: a receipt
    /// settles the one delivery it came with, never a later one of the same record.
    pub fn dequeue(&self, name: &[u8], timeout: Option<Duration>) -> Result<Option<(Record, u64)>> {
        self.dequeue_leased(name, timeout, None)
    }

    /// [`Store::dequeue`] with a lease: a record neither acked nor nacked within `lease` goes
    /// back by itself (counted as a failed delivery, like a nack).
    pub fn dequeue_leased(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<(Record, u64)>> {
        self.wait_for(name, timeout, |inner, now| {
            let q = inner.state.queue_mut(name)?;
            let Some(r) = q.dequeue().cloned() else {
                return Ok(None);
            };
            let receipt = inner.deliveries.deliver(name, r.id);
            if let Some(until) = lease.and_then(|l| now.checked_add(l)) {
                inner.deliveries.lease(name, r.id, until);
            }
            Ok(Some((r, receipt)))
        })
    }

    /// Waits up to `timeout` (`None` = forever) until `name` has a ready record, without
    /// taking it; true when one is ready. For waiters that take records elsewhere (asyncio):
    /// another consumer may take the record first, so the caller retries.
    pub fn wait_ready(&self, name: &[u8], timeout: Option<Duration>) -> Result<bool> {
        let ready = self.wait_for(name, timeout, |inner, _| {
            Ok(inner.state.queue_mut(name)?.peek().map(|_| ()))
        })?;
        Ok(ready.is_some())
    }

    /// The one wait loop of `dequeue` and `wait_ready`: runs `attempt` under the lock (after
    /// ending expired leases of `name`) until it gives a value, the deadline passes (`None`)
    /// or the store closes. Wakes on every change and when a lease of `name` runs out, since
    /// its record is ready then. Refuses read-only stores: a waiter there could only ever
    /// take records that no ack could settle.
    fn wait_for<T>(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        mut attempt: impl FnMut(&mut Inner, Instant) -> Result<Option<T>>,
    ) -> Result<Option<T>> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let forever = timeout.is_none() || deadline.is_none();
        self.refuse_readonly()?;
        let mut inner = self.inner()?;
        loop {
            let now = Instant::now();
            self.expire(&mut inner, name, now);
            if let Some(value) = attempt(&mut inner, now)? {
                return Ok(Some(value));
            }
            let mut wait = match deadline {
                _ if forever => Duration::from_secs(3600),
                Some(d) if now < d => d - now,
                _ => return Ok(None),
            };
            if let Some(next) = inner.deliveries.next_expiry(name) {
                wait = wait.min(next.saturating_duration_since(now));
            }
            inner = self
                .ready
                .wait_timeout(inner, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            if inner.closed {
                return Err(Error::Closed("store"));
            }
        }
    }

    /// Ends the deliveries of `name` whose lease ran out by `now` (each counts as a failure).
    fn expire(&self, inner: &mut Inner, name: &[u8], now: Instant) {
        let expired = inner.deliveries.expired(name, now);
        let mut back = false;
        for id in expired {
            if inner.state.queue(name).is_ok_and(|q| q.is_in_flight(id)) {
                // Nobody waits on an expiry: a dead-letter move is durable per the sync policy
                // of the next write (and a lost move only means the record is ready again).
                let _ = self.delivery_failed(inner, name, id);
                back = true;
            }
        }
        if back {
            self.ready.notify_all();
        }
    }

    /// An in-flight record's delivery failed (nack or expired lease): it goes back to its
    /// queue, or, after the queue's `DeadLetter` limit, moves to the dead-letter queue with
    /// one logged batch: AddRecord there first, then RemoveRecord here, so a crash between the
    /// two can duplicate the record but never lose it. Returns the LSN of a logged move.
    fn delivery_failed(&self, inner: &mut Inner, name: &[u8], id: u64) -> Result<Option<i64>> {
        inner.deliveries.end(name, id);
        let failures = inner.deliveries.failed(name, id);
        let rule = std::str::from_utf8(name)
            .ok()
            .and_then(|n| self.settings.dead_letter.get(n))
            .filter(|rule| failures >= rule.max_nacks);
        if let Some(rule) = rule {
            // The dead-letter queue may be missing, full or refuse the record, or writes may
            // have stopped: then the record stays in its queue (never lost), and the next
            // failure tries again.
            if let Ok(lsn) = self.dead_letter(inner, name, id, rule.queue.as_bytes()) {
                inner.deliveries.forget(name, id);
                return Ok(Some(lsn));
            }
        }
        inner.state.queue_mut(name)?.nack(id);
        Ok(None)
    }

    fn dead_letter(&self, inner: &mut Inner, name: &[u8], id: u64, to: &[u8]) -> Result<i64> {
        if let Some(cause) = self.stopped(inner) {
            return Err(Error::Poisoned { cause });
        }
        let record = inner
            .state
            .queue(name)?
            .in_flight_record(id)
            .cloned()
            .ok_or_else(|| Error::NotInFlight {
                queue: raw_name(name),
                id,
            })?;
        // A dead-letter queue that does not exist is created (a heap, no limits) in the same
        // batch as the move: a rule naming a missing queue left a poison record cycling
        // forever (docs/format.md, queue store decision "Dead-letter").
        let missing = matches!(inner.state.queue(to), Err(Error::NoSuchQueue { .. }));
        let dead_letter_queue = QueueConfig::default();
        if missing {
            inner.state.check_create(to, &dead_letter_queue)?;
        } else {
            inner
                .state
                .check_enqueue(to, record.key, record.data.len())?;
        }
        let create = DeltaRef::CreateQueue {
            name: to,
            implementation: dead_letter_queue.implementation,
            max_queue_size: -1,
            max_message_size: -1,
            key_range: None,
        };
        let moves = [
            DeltaRef::AddRecord {
                name: to,
                key: record.key,
                message: &record.data,
            },
            DeltaRef::RemoveRecord { name, id },
        ];
        let deltas: Vec<DeltaRef<'_>> =
            missing.then_some(create).into_iter().chain(moves).collect();
        Ok(self.log_and_apply(inner, &deltas)?.1)
    }

    /// Acknowledges an in-flight record: logs RemoveRecord and makes it durable. With
    /// `receipt` (from `dequeue`), only that delivery is settled: after its lease ran out and
    /// the record was delivered again, or after its queue was deleted, it is refused.
    pub fn ack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        let lsn = {
            let mut inner = self.writable()?;
            self.expire(&mut inner, name, Instant::now());
            if !in_flight(&inner, name, id, receipt)? {
                return Err(Error::NotInFlight {
                    queue: raw_name(name),
                    id,
                });
            }
            let lsn = self
                .log_and_apply(&mut inner, &[DeltaRef::RemoveRecord { name, id }])?
                .1;
            inner.deliveries.forget(name, id);
            lsn
        };
        self.after_write(lsn)
    }

    /// Acknowledges several in-flight records with one log write and one fsync: either all
    /// are acknowledged or, when one is not in flight (or named twice), none is.
    pub fn ack_many(&self, items: &[(&[u8], u64, Option<u64>)]) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let lsn = {
            let mut inner = self.writable()?;
            let now = Instant::now();
            for &(name, _, _) in items {
                self.expire(&mut inner, name, now);
            }
            let mut seen = std::collections::HashSet::new();
            for &(name, id, receipt) in items {
                if !in_flight(&inner, name, id, receipt)? || !seen.insert((name, id)) {
                    return Err(Error::NotInFlight {
                        queue: raw_name(name),
                        id,
                    });
                }
            }
            let deltas: Vec<DeltaRef<'_>> = items
                .iter()
                .map(|&(name, id, _)| DeltaRef::RemoveRecord { name, id })
                .collect();
            let lsn = self.log_and_apply(&mut inner, &deltas)?.1;
            for &(name, id, _) in items {
                inner.deliveries.forget(name, id);
            }
            lsn
        };
        self.after_write(lsn)
    }

    /// Puts an in-flight record back with its id (so before later records of the same key);
    /// `receipt` as in [`Store::ack`].
    pub fn nack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        self.refuse_readonly()?;
        let moved = {
            let mut inner = self.inner()?;
            self.expire(&mut inner, name, Instant::now());
            if !in_flight(&inner, name, id, receipt)? {
                return Err(Error::NotInFlight {
                    queue: raw_name(name),
                    id,
                });
            }
            self.delivery_failed(&mut inner, name, id)?
        };
        self.ready.notify_all();
        match moved {
            Some(lsn) => self.after_write(lsn),
            None => Ok(()),
        }
    }

    /// Whether the delivery `receipt` of record `id` of `name` is still open (neither acked,
    /// nacked nor expired): what a closing owner waits for its clients to settle.
    pub fn is_delivery_open(&self, name: &[u8], id: u64, receipt: u64) -> bool {
        let Ok(mut inner) = self.inner() else {
            return false;
        };
        self.expire(&mut inner, name, Instant::now());
        in_flight(&inner, name, id, Some(receipt)).unwrap_or(false)
    }

    /// Ready records of `name` (in-flight ones are not counted).
    pub fn count(&self, name: &[u8]) -> Result<u64> {
        let mut inner = self.inner()?;
        self.expire(&mut inner, name, Instant::now());
        Ok(inner.state.queue(name)?.count())
    }

    /// The record `dequeue` would take next, without taking it.
    pub fn peek(&self, name: &[u8]) -> Result<Option<Record>> {
        let mut inner = self.inner()?;
        self.expire(&mut inner, name, Instant::now());
        Ok(inner.state.queue_mut(name)?.peek().cloned())
    }

    /// Read-only stores: catches up with the writer's log, applying the records it appended
    /// since the open (or the last refresh). Reopens from the snapshot instead when the writer
    /// compacted away records this store has not seen. Returns the deltas applied.
    pub fn refresh(&self) -> Result<u64> {
        if !self.readonly {
            return Err(Error::InvalidArgument(
                "refresh() is for read-only stores (a writable store is always current)".into(),
            ));
        }
        let mut inner = self.inner()?;
        let seen = inner.log.last_index().max(inner.snapshot_index);
        if !inner.stale {
            let opts = log_options(&self.settings, true, &self.storage, self.layout.dialect);
            let mut log = Log::prepare(&self.layout.log, opts)?.open()?;
            // The log still holds everything after what this store applied: replay the rest.
            if log.start_index() <= seen + 1 && log.last_index() >= seen {
                // A failure leaves a state that only a full reopen can repair.
                inner.stale = true;
                let applied = base::replay(&mut inner.state, &mut log, seen)?;
                log.unmap_sealed();
                inner.log = log;
                inner.stale = false;
                return Ok(applied);
            }
        }
        let opts = StoreOptions {
            readonly: true,
            storage: Arc::clone(&self.storage),
            ..StoreOptions::default()
        };
        let fresh = Store::open_with(&self.layout.base, self.overrides.as_deref(), opts)?;
        std::mem::swap(&mut *inner, &mut *lock(&fresh.inner));
        drop(inner);
        // `fresh` now holds the old state and log: closing it releases them.
        let applied = fresh.report.replayed;
        drop(fresh);
        Ok(applied)
    }

    pub fn queues(&self) -> Result<Vec<QueueInfo>> {
        let mut inner = self.inner()?;
        let now = Instant::now();
        for name in inner.deliveries.leased_queues() {
            self.expire(&mut inner, &name, now);
        }
        Ok(inner.state.infos())
    }

    /// Ready records of a queue in dequeue order: `(id, key, data)`.
    pub fn peek_all(&self, name: &[u8]) -> Result<Vec<Record>> {
        let mut inner = self.inner()?;
        self.expire(&mut inner, name, Instant::now());
        let q = inner.state.queue(name)?;
        Ok(q.ready_in_order().into_iter().cloned().collect())
    }

    /// Runs `f` on the state under the lock (inspection, snapshot export).
    pub fn with_state<T>(&self, f: impl FnOnce(&QueueState) -> T) -> Result<T> {
        Ok(f(&self.inner()?.state))
    }

    /// `(start, last, snapshot index)` of the log.
    pub fn log_bounds(&self) -> Result<(i64, i64, i64)> {
        let inner = self.inner()?;
        Ok((
            inner.log.start_index(),
            inner.log.last_index(),
            inner.snapshot_index,
        ))
    }

    pub fn metadata(&self) -> Result<Metadata> {
        Ok(self.inner()?.metadata)
    }

    /// Writes a snapshot of the current state and compacts the log up to it. Returns false when
    /// nothing was logged since the last snapshot.
    pub fn snapshot(&self) -> Result<bool> {
        let mut inner = self.writable()?;
        self.tell(self.snapshot_locked(&mut inner))
    }

    fn snapshot_locked(&self, inner: &mut Inner) -> Result<bool> {
        let last = inner.log.last_index();
        if last <= inner.snapshot_index {
            return Ok(false);
        }
        let term = inner.log.term_at(last)? as i64;
        // The snapshot must never be ahead of a durable log: sync first.
        inner.log.sync()?;
        let snap = inner.state.to_snapshot(last, term);
        files::write_snapshot_in(
            &*self.storage,
            &self.layout.snapshot,
            &snap,
            self.layout.dialect,
        )?;
        inner.snapshot_index = last;
        inner.log.compact(last)?;
        Ok(true)
    }

    /// Syncs everything and releases the lock. Further calls fail with `Closed`; waiting
    /// dequeues wake up, and writers waiting for durability return once close synced their
    /// changes. After writes stopped, close reports that failure only if no caller was told
    /// of it yet (e.g. a background fsync failed), so it is reported exactly once.
    pub fn close(&self) -> Result<()> {
        if !self.born.is_here() {
            // A forked child's copy: the parent's threads and lock are not its to stop, join
            // or release, and nothing may be written. Letting go of it is all there is to do.
            return Ok(());
        }
        self.durability.stop();
        self.syncer_stop.stop();
        let result = {
            let mut inner = lock(&self.inner);
            if inner.closed {
                return Ok(());
            }
            inner.closed = true;
            let stopped = if self.readonly {
                None
            } else {
                self.stopped(&inner)
            };
            // After a failed fsync no later one proves anything (log decision 14): skip it.
            let fsync_failed = self.durability.error().is_some();
            let synced = if self.readonly
                || self.settings.log_sync_policy == StoreSync::Never
                || fsync_failed
            {
                Ok(())
            } else {
                let last = inner.log.last_index();
                let synced = inner.log.sync();
                if synced.is_ok() {
                    // Writers still waiting for their fsync are covered by this one.
                    self.durability.mark_synced(last);
                }
                synced
            };
            let synced = match stopped {
                // Writes had stopped: report that once (a sync refused by the stopped log, or
                // failing now, is part of the same failure).
                Some(cause) => {
                    let told = self.told.swap(true, Ordering::Relaxed);
                    if told {
                        Ok(())
                    } else {
                        Err(Error::Poisoned { cause })
                    }
                }
                None => synced,
            };
            // Release the directory lock now, not when the last reference goes away.
            let released = inner.log.release();
            synced.and(released)
        };
        self.ready.notify_all();
        if let Some(h) = lock(&self.syncer).take() {
            let _ = h.join();
        }
        if let Some(h) = lock(&self.compressor).take() {
            let _ = h.join();
        }
        result
    }
}

/// How the store opens its log.
fn log_options(
    settings: &Settings,
    readonly: bool,
    storage: &Arc<dyn Storage>,
    dialect: Dialect,
) -> LogOptions {
    LogOptions {
        soft_limit: settings.log_file_soft_limit,
        hard_limit: settings.log_file_hard_limit,
        preallocate: settings.log_preallocate_segments,
        // Syncing is the store's job (group commit); Batch makes roll-over sync the segment
        // it seals, so every entry of a sealed segment is durable.
        sync: SyncPolicy::Batch,
        recovery: RecoveryMode::TolerateTornTail,
        readonly,
        commit_index: None,
        empty_entries: base::store_scan_options(RecoveryMode::TolerateTornTail, dialect)
            .empty_entries,
        storage: Arc::clone(storage),
        dialect: Some(dialect),
    }
}

/// Whether record `id` of queue `name` is in flight (and, when given, in the delivery of
/// `receipt`; receipts are unique in the process, so one of an earlier life of the queue or an
/// earlier open of the store never matches either).
fn in_flight(inner: &Inner, name: &[u8], id: u64, receipt: Option<u64>) -> Result<bool> {
    let q = inner.state.queue(name)?;
    Ok(q.is_in_flight(id) && receipt.is_none_or(|r| inner.deliveries.is_current(name, id, r)))
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
