//! Opening a store: settings, the writer lock, metadata, snapshot and log, each checked by the
//! base directory's restore checks in order, then the replay into the queue state.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::base::settings::Settings;
use crate::base::{self, files, Layout};
use crate::durability::group_commit::GroupCommit;
use crate::durability::policy::SyncPolicy;
use crate::durability::watermarks::Gate;
use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::io::storage::Storage;
use crate::log::recovery::{Parallelism, RecoveryMode};
use crate::log::{Log, LogOptions};
use crate::replay::Replayer;

use super::deliveries::Deliveries;
use super::{Inner, OpenReport, Store, StoreOptions};

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

    pub(super) fn open_once(
        base: &Path,
        overrides: Option<&str>,
        opts: StoreOptions,
    ) -> Result<Store> {
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
            // An old base's 0755 directories: the owner's open makes them its own.
            crate::io::storage::make_private(
                &[&layout.base, &layout.data, &layout.log, &temp],
                crate::events::STORE,
            );
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
                arrivals: Default::default(),
            }),
            ready: crate::signal::Signal::new(),
            durability: GroupCommit::new(synced),
            refused: Mutex::new(None),
            told: AtomicBool::new(false),
            syncer: Mutex::new(None),
            compressor: Mutex::new(None),
            syncer_stop: Arc::default(),
            report,
            born: crate::fork::Birth::now(),
        };
        if !readonly {
            // A refused routing (a full disk, the taskflux dialect) leaves the setting's rule
            // in force in memory, as before (`Store::delivery_failed`).
            let _ = store.route_dead_letter_settings();
        }
        Ok(store)
    }
}

/// How the store opens its log.
pub(super) fn log_options(
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
