//! The embedded durable queue over a base directory (spec sections 1, 7, 8): settings, the
//! writer lock (held by the log), metadata, snapshot, log and queue state. Restore on open =
//! snapshot + replay of the log after it.
//!
//! Every change is checked against the state, appended to the log as a delta, applied to the
//! state, and made durable per the sync policy before the call returns. Durability waits happen
//! outside the state lock, so concurrent writers share one fsync (group commit).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::base::settings::{Settings, StoreSync};
use crate::durability::watermarks::{Gate, SpaceProbe, Statvfs, Watermarks};
use crate::durability::{GroupCommit, Logged, Stopper};
use crate::error::{Error, IoContext, PoisonCause, Result};
use crate::format::delta::DeltaRef;
use crate::format::dialect::Dialect;
use crate::format::metadata::Metadata;
use crate::io::storage::{self, Storage};
use crate::log::recovery::Parallelism;
use crate::log::Log;
use crate::state::{Applied, QueueState};
use crate::store::deliveries::Deliveries;

pub mod arrivals;
mod background;
mod deliver;
pub mod deliveries;
mod open;
mod queues;
mod read;
pub mod request;
pub mod tasks;

pub use read::Listed;
pub use request::{Reply, Request, StoreInfo};
pub use tasks::{now_ms, Delivery, QueueStats};

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
    /// When the records this owner added arrived (not logged).
    arrivals: arrivals::Arrivals,
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
    ready: crate::signal::Signal,
    durability: GroupCommit,
    /// Set when an automatic snapshot failed after a successful write: later writes are
    /// refused (the write itself stands) until a later write's retry of the snapshot succeeds
    /// or the store is reopened ([`background::SnapshotRefusal`]).
    refused: Mutex<Option<background::SnapshotRefusal>>,
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

/// Notes when the records `deltas` added arrived ([`arrivals`]): one clock read and one
/// look-up per queue and write, whatever the number of records.
fn note_arrivals(inner: &mut Inner, deltas: &[DeltaRef<'_>], applied: &[Applied]) {
    let mut now = None;
    let mut noted: Option<&[u8]> = None;
    for (d, a) in deltas.iter().zip(applied) {
        let name = d.name();
        match *a {
            Applied::Added(id) if noted != Some(name) => {
                let now = *now.get_or_insert_with(tasks::now_ms);
                let state = &inner.state;
                inner
                    .arrivals
                    .note_lazily(name, id, now, || state.queue(name).ok());
                noted = Some(name);
            }
            Applied::Created | Applied::Deleted => {
                inner.arrivals.forget(name);
                noted = None;
            }
            _ => {}
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Store {
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
        let mut inner = self.inner()?;
        self.retry_snapshot(&mut inner);
        if let Some(cause) = self.stopped(&inner) {
            return self.tell(Err(Error::Poisoned { cause }));
        }
        Ok(inner)
    }

    /// Why writes stopped, if they did: a failed write, roll-over, snapshot or fsync.
    fn stopped(&self, inner: &Inner) -> Option<PoisonCause> {
        let refused = lock(&self.refused).as_ref().map(|r| r.cause.clone());
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
        note_arrivals(inner, deltas, &applied);
        if inner.log.segments_len() != segments_before {
            // The deltas are logged and applied: this call succeeds. A snapshot that cannot be
            // written stops later writes instead, naming the file and errno, until a later
            // write's retry writes it (`retry_snapshot`).
            if let Err(e) = self.maybe_snapshot(inner) {
                self.refuse_after_snapshot(&e, true);
            }
        }
        Ok((applied, last))
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

    /// Waits until a change made by one of the `*_logged` calls (or several: see
    /// [`Logged::and`]) is durable per the sync policy. A failure says that the change is
    /// logged and applied, and not known durable: `NotDurable`.
    pub fn make_durable(&self, logged: Logged) -> Result<()> {
        match logged.lsn() {
            Some(lsn) => self.after_write(lsn),
            None => Ok(()),
        }
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

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}
