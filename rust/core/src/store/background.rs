//! What the store does on its own: the interval fsync, the compression of sealed segments, and
//! snapshots (taken by threshold after a write, or on request) with the log compacted up to them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::base::files;
use crate::durability::interval::spawn_interval;
use crate::durability::policy::StoreSync;
use crate::error::{Error, PoisonCause, Result};

use super::{lock, Inner, Store};

impl Store {
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
    pub(super) fn start_background_compression(self: &std::sync::Arc<Self>) {
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
}

/// How long after a failed try of the automatic snapshot the next write tries it again: a
/// snapshot writes the whole state under the store's lock, so writers retrying in a loop
/// against a full disk try it at most once a second, and are refused at once in between.
pub(super) const SNAPSHOT_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Writes refused because the automatic snapshot after a roll-over failed (docs/format.md,
/// "A snapshot that cannot be written"). Nothing acknowledged is at risk: the log still holds
/// every change and is compacted only after a snapshot is durable, and the old snapshot is
/// replaced atomically or not at all. Refusing writes keeps the log from growing without bound
/// unnoticed; retrying lets a passing cause (a full disk that was cleaned, no descriptor left
/// for a moment) end the refusal without a reopen, as a roll-over short of descriptors does.
#[derive(Debug)]
pub(super) struct SnapshotRefusal {
    /// What a refused write is told: the snapshot's error, its file and errno.
    pub(super) cause: PoisonCause,
    /// The first write at or after this instant tries the snapshot again.
    retry_at: Instant,
}

impl Store {
    /// Refuses later writes after the automatic snapshot failed with `e`; `first` logs the
    /// ERROR line (a retry that fails again only renews the cause the callers are told).
    pub(super) fn refuse_after_snapshot(&self, e: &Error, first: bool) {
        if first {
            ::log::error!(
                target: crate::events::STORE,
                "writes to {} are refused: the snapshot after a roll-over failed ({e}); the \
                 next write after {} s tries it again, and reopening also recovers",
                self.layout.base.display(),
                SNAPSHOT_RETRY_PAUSE.as_secs()
            );
        }
        let base = PoisonCause::from_error(e);
        let cause = PoisonCause {
            reason: format!(
                "the automatic snapshot after a roll-over failed: {}; nothing acknowledged is \
                 lost, and a write at least {} s later tries the snapshot again",
                base.reason,
                SNAPSHOT_RETRY_PAUSE.as_secs()
            ),
            ..base
        };
        *super::lock(&self.refused) = Some(SnapshotRefusal {
            cause,
            retry_at: Instant::now() + SNAPSHOT_RETRY_PAUSE,
        });
    }

    /// Tries the failed automatic snapshot again when writes are refused for it and the pause
    /// is over: written, writes resume (a WARNING says so); failed, they stay refused with the
    /// newest error. A log that stopped itself (a failed write or fsync) is not retried here.
    pub(super) fn retry_snapshot(&self, inner: &mut Inner) {
        let due = matches!(&*super::lock(&self.refused), Some(r) if Instant::now() >= r.retry_at);
        if !due || inner.log.poisoned().is_some() || self.durability.error().is_some() {
            return;
        }
        match self.snapshot_locked(inner) {
            Ok(_) => {
                let was = super::lock(&self.refused).take();
                if let Some(was) = was {
                    ::log::warn!(
                        target: crate::events::STORE,
                        "writes to {} resume: the snapshot after a roll-over was written on a \
                         later try (it had failed: {})",
                        self.layout.base.display(),
                        was.cause.reason
                    );
                }
            }
            Err(e) => self.refuse_after_snapshot(&e, false),
        }
    }
}

impl Store {
    pub(super) fn maybe_snapshot(&self, inner: &mut Inner) -> Result<()> {
        let threshold = self.settings.snapshot_creation_segments_threshold;
        if threshold == 0 {
            return Ok(());
        }
        if inner.log.sealed_segments_after(inner.snapshot_index) as u64 >= threshold {
            self.snapshot_locked(inner)?;
        }
        Ok(())
    }
}

impl Store {
    /// Writes a snapshot of the current state and compacts the log up to it. Returns false when
    /// nothing was logged since the last snapshot.
    pub fn snapshot(&self) -> Result<bool> {
        let mut inner = self.writable()?;
        self.tell(self.snapshot_locked(&mut inner))
    }

    pub(super) fn snapshot_locked(&self, inner: &mut Inner) -> Result<bool> {
        let last = inner.log.last_index();
        if last <= inner.snapshot_index {
            return Ok(false);
        }
        let term = inner.log.term_at(last)? as i64;
        // The snapshot must never be ahead of a durable log: sync first.
        inner.log.sync()?;
        let snap = inner.state.to_snapshot(last, term);
        files::write_snapshot_full(
            &*self.storage,
            &self.layout.snapshot,
            &snap,
            &inner.state.to_tasks(),
            self.layout.dialect,
        )?;
        inner.snapshot_index = last;
        inner.log.compact(last)?;
        Ok(true)
    }
}
