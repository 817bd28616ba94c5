//! `tflux convert`: a whole base directory (log, snapshot, metadata, settings) rewritten in the
//! other dialect (spec section 11). The deltas and the snapshot state are the same bytes in
//! both dialects, so converting re-frames each record and re-heads the snapshot and metadata;
//! every segment keeps its name (its first LSN), so the log's shape is the source's.
//!
//! The source is only read (a read-only open: every checksum checked, nothing cut). The copy is
//! built in a fresh directory beside the destination, fsynced, verified as an open would check
//! it (`base::verify_base`: every record's framing and checksum, terms, snapshot, metadata and
//! how they agree) and checked against the source (every entry's LSN, term, length and
//! checksum of its data, through a fingerprint of both logs; the snapshot and the metadata
//! decoded and compared), and only then renamed to the destination (which must not exist): a
//! failure at any point leaves no destination, and removes the half-built copy. The state is
//! not replayed: the deltas are the source's bytes, so the copy restores exactly when the
//! source does.
//!
//! Each record's data is checksummed three times, no more: by the source's open, when it is
//! encoded, and by the copy's verify (whose per-record checksums the fingerprint then reads
//! from the headers).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::base::files;
use crate::base::{self, Layout, VerifyDepth, VerifyOptions};
use crate::error::{Error, IoContext, Result};
use crate::format::dialect::Dialect;
use crate::format::record::with_framing;
use crate::format::record::END_MARKER;
use crate::format::segment as seg_format;
use crate::io::storage::{self, Rename, Storage};
use crate::log::{Log, LogOptions};

/// What a conversion did.
#[derive(Debug, Clone)]
pub struct ConvertReport {
    pub source: PathBuf,
    pub destination: PathBuf,
    pub from: Dialect,
    pub to: Dialect,
    pub entries: u64,
    pub segments: usize,
    /// Bytes of the source's segments (records, as read) and of the destination's.
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub snapshot: bool,
    pub metadata: bool,
    /// A torn tail of the source's last segment: not converted (the source keeps it).
    pub torn_tail: Option<(PathBuf, u64)>,
    /// Half-built copies of the destination left by conversions that died before cleaning up
    /// (their lock free), removed before this one started.
    pub leftovers_removed: Vec<PathBuf>,
    /// A hash of every entry's LSN, term, length and data checksum (in the destination's
    /// dialect), in order: what the destination's own records give back.
    pub fingerprint: u64,
    pub seconds: f64,
}

/// Told how far a conversion is (bytes of the source's log converted so far, of the total)
/// after each segment; false stops it (nothing is left behind, as for any failure).
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64) -> bool;

/// Converts the base directory `src` (in `from`, or the dialect its files say) into a new base
/// directory `dst` in `to`. `dst` must not exist (or be an empty directory); its parent must,
/// unless `create` makes the missing parents (as every directory a user names is made:
/// [`crate::io::fsutil::create_named_dir`]).
pub fn convert_base(
    src: &Path,
    dst: &Path,
    to: Dialect,
    from: Option<Dialect>,
    create: bool,
    progress: Progress<'_>,
) -> Result<ConvertReport> {
    let started = Instant::now();
    base::require_kind(src, base::Kind::Store)?;
    let source = Layout::detect(src, from)?;
    let (src_real, dst_real) = (real_path(src), real_path(dst));
    if dst_real.starts_with(&src_real) || src_real.starts_with(&dst_real) {
        let (inner, outer) = if dst_real.starts_with(&src_real) {
            ("the destination", "the source")
        } else {
            ("the source", "the destination")
        };
        return Err(Error::InvalidArgument(format!(
            "{} is inside {} ({} -> {}): a base directory is converted into a directory apart              from it",
            inner,
            outer,
            src.display(),
            dst.display()
        )));
    }
    // As `git clone`: an existing empty directory is taken (replaced by the finished copy in
    // one rename, which fails if it is no longer empty); anything else is never overwritten.
    let empty_dir = std::fs::symlink_metadata(dst).is_ok_and(|m| m.is_dir())
        && std::fs::read_dir(dst).is_ok_and(|mut entries| entries.next().is_none());
    if !empty_dir && std::fs::symlink_metadata(dst).is_ok() {
        return Err(Error::InvalidArgument(format!(
            "{} exists and is not an empty directory: convert writes a new base directory and              never overwrites one",
            dst.display()
        )));
    }
    let parent = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = dst.file_name().and_then(|n| n.to_str()).ok_or_else(|| {
        Error::InvalidArgument(format!("{}: not a directory name", dst.display()))
    })?;
    // Checked before anything is made: a typo in a parent is an error, not a new tree.
    crate::io::fsutil::check_named_dir(dst, create)?;
    let fs = storage::real();
    if create {
        crate::io::fsutil::create_named_dir(&*fs, &parent, true)?;
    }
    // A fresh name beside the destination (same file system: the final rename is atomic).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let leftovers = remove_dead_conversions(&*fs, &parent, name);
    let temp = parent.join(format!(
        "{}{}-{nanos}",
        hidden_prefix(name),
        std::process::id()
    ));
    fs.create_dir(&temp)
        .ctx("create conversion directory", &temp)?;
    // Held until the copy is renamed (or removed): what tells a later conversion this one is
    // alive. The kernel drops it when the process dies, kill -9 included.
    let _alive = crate::io::fsutil::lock_dir(&*fs, &temp)?;
    let built = build(&source, &temp, to, &*fs, progress).and_then(|mut report| {
        report.leftovers_removed = leftovers;
        let mode = if empty_dir {
            Rename::Replace
        } else {
            Rename::NoReplace
        };
        fs.rename(&temp, dst, mode)
            .ctx("rename converted directory to", dst)?;
        crate::io::fsutil::sync_dir(&*fs, &parent)?;
        report.source = src.to_path_buf();
        report.destination = dst.to_path_buf();
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    });
    if built.is_err() {
        // Only the directory this call created, never the destination or the source.
        let _ = std::fs::remove_dir_all(&temp);
    }
    built
}

/// `path` with its nearest existing ancestor resolved by the system (symlinks, `..`) and the
/// rest appended: where it is or would be, for comparing a destination that does not exist yet.
fn real_path(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(found) = std::fs::canonicalize(existing) {
            return rest.iter().rev().fold(found, |acc, name| acc.join(name));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// The start of the name of a half-built copy of `name` (then the pid and a time).
fn hidden_prefix(name: &str) -> String {
    format!(".{name}.converting-")
}

/// Removes the half-built copies of `name` in `parent` that a conversion killed before it could
/// clean up (kill -9, power loss) left behind: those whose directory lock nobody holds (a live
/// conversion holds its own; the kernel releases a dead one's, whatever its pid namespace).
/// They only ever hold bytes the source still has. Returns what was removed; one that cannot be
/// examined or removed is left as it is.
fn remove_dead_conversions(fs: &dyn Storage, parent: &Path, name: &str) -> Vec<PathBuf> {
    let prefix = hidden_prefix(name);
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for entry in entries.flatten() {
        let stale = entry.file_name().to_str().is_some_and(|n| {
            n.strip_prefix(prefix.as_str()).is_some_and(|rest| {
                !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'-')
            })
        });
        // A directory itself, never a symlink to one.
        if !stale || !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let path = entry.path();
        let Ok(lock) = crate::io::fsutil::lock_dir(fs, &path) else {
            continue; // alive (or unreadable): not ours to touch
        };
        if std::fs::remove_dir_all(&path).is_ok() {
            removed.push(path);
        }
        drop(lock);
    }
    if !removed.is_empty() {
        let _ = crate::io::fsutil::sync_dir(fs, parent);
    }
    removed
}

/// Writes the converted copy of `source` into the empty directory `out`, then checks it.
fn build(
    source: &Layout,
    out: &Path,
    to: Dialect,
    fs: &dyn Storage,
    progress: Progress<'_>,
) -> Result<ConvertReport> {
    let from = source.dialect;
    let target = Layout::in_dialect(out, to);
    crate::io::fsutil::create_dir_durable(fs, &target.log)?;
    let mut report = ConvertReport {
        source: source.base.clone(),
        destination: out.to_path_buf(),
        from,
        to,
        entries: 0,
        segments: 0,
        bytes_read: 0,
        bytes_written: 0,
        snapshot: false,
        metadata: false,
        torn_tail: None,
        leftovers_removed: Vec::new(),
        fingerprint: Fingerprint::new().finish(),
        seconds: 0.0,
    };
    if let Ok(bytes) = std::fs::read(&source.settings) {
        write_file(&target.settings, &bytes)?;
    }
    // Metadata: the same term and vote; a taskflux copy always has one, so that it says its
    // dialect even with an empty log (as a new taskflux store writes it).
    let metadata_present = std::fs::symlink_metadata(&source.metadata).is_ok();
    let metadata = files::read_metadata_in(&source.metadata, from)?;
    if metadata_present || to == Dialect::Taskflux {
        let bytes = crate::format::metadata::encode_in(&metadata, to);
        write_file(&target.metadata, &bytes)?;
        report.metadata = true;
    }
    // Snapshot: the same state under the target's header; TaskFlux's "no snapshot yet" empty
    // file stays an empty file.
    let (snapshot, tasks) = match files::read_snapshot_full(&source.snapshot, from)? {
        Some((s, tasks)) => (Some(s), tasks),
        None => (None, Vec::new()),
    };
    if let Some(q) = tasks.first().filter(|_| to == Dialect::Taskflux) {
        // A task-layout snapshot (spec section 12): its rules, delays and counts have no
        // place in TaskFlux's snapshot, and converting without them would change the queues.
        return Err(Error::InvalidArgument(format!(
            "the taskflux dialect cannot represent the task-queue state of queue '{}' \
             (rules, delayed records or delivery counts) in {} (spec section 12): nothing \
             was written",
            String::from_utf8_lossy(&q.name),
            source.snapshot.display()
        )));
    }
    match &snapshot {
        Some(s) => {
            // The task state goes along (spec to spec); a taskflux target was refused above.
            let bytes = if tasks.is_empty() {
                crate::format::snapshot::encode_in(s, to)?
            } else {
                crate::format::snapshot::encode_with_tasks(s, &tasks)?
            };
            write_file(&target.snapshot, &bytes)?;
            report.snapshot = true;
        }
        None if std::fs::symlink_metadata(&source.snapshot).is_ok() => {
            write_file(&target.snapshot, &[])?;
        }
        None => {}
    }
    // The log, segment by segment, each record re-framed.
    if source.log.is_dir() {
        let opts = LogOptions {
            readonly: true,
            empty_entries: false,
            dialect: Some(from),
            ..LogOptions::default()
        };
        let mut log = Log::open(&source.log, opts)?;
        if log.recovery().truncated() {
            let r = log.recovery();
            report.torn_tail = r.cut_path.clone().zip(r.cut_offset);
        }
        let segments = log.segments();
        let total: u64 = segments.iter().map(|s| s.size).sum();
        let mut fingerprint = Fingerprint::new();
        let mut written_files = Vec::with_capacity(segments.len());
        // The kernel's copy into the page cache (a third of a conversion's time) runs on a
        // second thread, behind the encoding of the next buffer
        // (docs/internals/benchmark-notes.md, "Dialects").
        let outcome = std::thread::scope(|scope| -> Result<()> {
            let (writes, written_back, writer) = spawn_writer(scope);
            // A buffer the writer is done with, or a new one (at most four exist).
            let spare = || {
                let mut b = written_back.try_recv().unwrap_or_default();
                b.clear();
                b.reserve(WRITE_BUFFER);
                b
            };
            let mut buf = Vec::with_capacity(WRITE_BUFFER);
            let mut failed = false;
            // The first delta the taskflux dialect cannot hold (spec section 12): (LSN, kind).
            let mut refused: Option<(i64, &'static str)> = None;
            for info in &segments {
                let path = target.log.join(seg_format::file_name(info.start_lsn));
                let file = Arc::new(storage::create_new_file(&path).ctx("create segment", &path)?);
                let path = Arc::new(path);
                buf.extend_from_slice(&seg_format::header());
                let end = info.start_lsn + info.count as i64;
                let mut written = 0u64;
                // The open checked every record's checksum: not again here.
                log.scan_checked_at_open(info.start_lsn, end, |lsn, term, data, _| {
                    if to == Dialect::Taskflux {
                        if let Some(kind) = task_queue_kind(data) {
                            refused = Some((lsn, kind));
                            return false;
                        }
                    }
                    let checksum = with_framing!(to, F => F::encode(&mut buf, term, data));
                    fingerprint.add(lsn, term, data.len(), checksum);
                    if buf.len() >= WRITE_BUFFER {
                        written += buf.len() as u64;
                        let full = std::mem::replace(&mut buf, spare());
                        if writes.send((file.clone(), path.clone(), full)).is_err() {
                            failed = true; // the writer stopped on an error: it says which
                            return false;
                        }
                    }
                    true
                })?;
                if let Some((lsn, kind)) = refused {
                    return Err(Error::InvalidArgument(format!(
                        "the taskflux dialect cannot represent the {kind} delta at LSN {lsn} \
                         (TaskFlux has four deltas; spec section 12): nothing was written"
                    )));
                }
                if failed {
                    break;
                }
                buf.extend_from_slice(&END_MARKER);
                written += buf.len() as u64;
                let last = std::mem::replace(&mut buf, spare());
                if writes.send((file.clone(), path.clone(), last)).is_err() {
                    break;
                }
                // Synced once all are written: the kernel writes the earlier ones back
                // meanwhile (one fsync after each file waited for each in turn).
                written_files.push((file, path));
                report.entries += info.count;
                report.segments += 1;
                report.bytes_read += info.size;
                report.bytes_written += written;
                if !progress(report.bytes_read, total) {
                    return Err(Error::InvalidArgument(
                        "the conversion was stopped (nothing was written to the destination)"
                            .into(),
                    ));
                }
            }
            drop(writes);
            writer.join().unwrap_or_else(|_| {
                Err(Error::InvalidArgument(
                    "the conversion's writer thread panicked".into(),
                ))
            })
        });
        outcome?;
        report.fingerprint = fingerprint.finish();
        for (file, path) in written_files {
            file.sync_all().ctx("fsync segment", path.as_path())?;
        }
    }
    for dir in [&target.log, &target.data, &target.base] {
        crate::io::fsutil::sync_dir(fs, dir)?;
    }
    check(source, out, to, &report, snapshot.as_ref(), &metadata)?;
    Ok(report)
}

/// The kind of a task-queue delta (spec section 12), which the taskflux dialect cannot hold;
/// `None` for TaskFlux's four kinds and for data that is not a delta (copied as it is, as
/// before: convert re-frames bytes, it does not judge them).
fn task_queue_kind(data: &[u8]) -> Option<&'static str> {
    crate::format::delta::decode(data)
        .ok()
        .filter(|d| d.is_task_queue())
        .map(|d| d.kind_name())
}

/// Bytes handed to the writer thread at a time.
const WRITE_BUFFER: usize = 4 << 20;

/// A buffer for the writer thread: the file it goes on the end of, that file's path (for the
/// error), the bytes.
type WriteJob = (Arc<File>, Arc<PathBuf>, Vec<u8>);

/// Starts the thread that appends each job's bytes to its file, in the order sent; it stops at
/// the first error (the sender's `send` then fails) and returns it from `join`. Each buffer
/// written comes back on the second channel, to be filled again (new buffers cost a page fault
/// per 4 KiB); two may wait, so memory stays bounded whatever the disk's speed.
fn spawn_writer<'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
) -> (
    std::sync::mpsc::SyncSender<WriteJob>,
    std::sync::mpsc::Receiver<Vec<u8>>,
    std::thread::ScopedJoinHandle<'scope, Result<()>>,
) {
    let (send, receive) = std::sync::mpsc::sync_channel::<WriteJob>(2);
    let (give_back, written_back) = std::sync::mpsc::channel::<Vec<u8>>();
    let writer = scope.spawn(move || -> Result<()> {
        for (file, path, bytes) in receive {
            (&*file)
                .write_all(&bytes)
                .ctx("write segment", path.as_path())?;
            let _ = give_back.send(bytes); // the encoder may be done: then it is dropped
        }
        Ok(())
    });
    (send, written_back, writer)
}

/// Creates `path` with `bytes`, fsynced (its directory is synced by the caller).
fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = storage::create_new_file(path).ctx("create", path)?;
    file.write_all(bytes).ctx("write", path)?;
    file.sync_all().ctx("fsync", path)
}

/// An order-sensitive 64-bit hash of a log's entries: LSN, term, data length and the data's
/// checksum in the destination's dialect (which verify checks against the data itself).
struct Fingerprint(u64);

impl Fingerprint {
    fn new() -> Fingerprint {
        Fingerprint(0x6A09_E667_F3BC_C908)
    }

    fn add(&mut self, lsn: i64, term: i32, len: usize, checksum: u32) {
        // The three fields spread by odd multipliers, then one round of splitmix64's
        // finaliser over the running state (order-sensitive).
        let fields = (lsn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ ((u64::from(term as u32) << 32) | len as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
            ^ u64::from(checksum).wrapping_mul(0x1656_67B1_9E37_79F9);
        let mut z = (self.0 ^ fields).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        self.0 = z ^ (z >> 31);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The copy opens as the source does (`verify_base` in `to`: every record's framing and
/// checksum, terms, snapshot, metadata and how they agree) and holds what the source holds:
/// the same log bounds and entries (fingerprint), snapshot and metadata.
fn check(
    source: &Layout,
    out: &Path,
    to: Dialect,
    report: &ConvertReport,
    snapshot: Option<&crate::format::snapshot::Snapshot>,
    metadata: &crate::format::metadata::Metadata,
) -> Result<()> {
    let options = VerifyOptions {
        depth: VerifyDepth::Files,
        dialect: Some(to),
        progress: None,
    };
    let verified = base::verify_base(out, options)?;
    if let Some(bad) = verified.problems.iter().find(|p| p.fatal) {
        return Err(Error::corruption(
            &bad.path,
            bad.offset,
            format!("the converted copy does not verify: {}", bad.message),
        ));
    }
    let target = Layout::in_dialect(out, to);
    let differs = |what: &str| {
        Error::corruption(
            out,
            None,
            format!("the converted copy differs from the source: {what}"),
        )
    };
    if files::read_snapshot_in(&target.snapshot, to)?.as_ref() != snapshot {
        return Err(differs("snapshot"));
    }
    if &files::read_metadata_in(&target.metadata, to)? != metadata {
        return Err(differs("metadata"));
    }
    if !source.log.is_dir() {
        return Ok(());
    }
    // verify checked every record's framing and checksum, and counted each segment's
    // records: the segment walker (framing only) hands each header's fields to the
    // fingerprint.
    let mut fingerprint = Fingerprint::new();
    let mut entries = 0u64;
    for seg in verified.segments.iter().filter(|s| s.count > 0) {
        let file = File::open(&seg.path).ctx("open segment", &seg.path)?;
        let len = file.metadata().ctx("stat segment", &seg.path)?.len();
        let map = crate::io::mmap::map_readonly(&file, len).ctx("map segment", &seg.path)?;
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let last = seg.start_lsn + seg.count as i64 - 1;
        let walked = with_framing!(to, F => crate::segment::walk_framing::<F>(
            bytes,
            seg_format::HEADER_LEN,
            seg.start_lsn,
            seg.start_lsn,
            last,
            |lsn, term, data, at| {
                fingerprint.add(lsn, term, data.len(), F::stored_checksum(&bytes[at..]));
                Ok(true)
            },
        ));
        walked.map_err(|(at, why)| Error::corruption(&seg.path, Some(at as u64), why))?;
        entries += seg.count;
    }
    if entries != report.entries {
        return Err(differs("the number of entries"));
    }
    if fingerprint.finish() != report.fingerprint {
        return Err(differs("the entries (LSN, term or data)"));
    }
    Ok(())
}
