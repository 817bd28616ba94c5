//! Fault injection through the storage seam (`tflux_core::io::testing::FaultStorage`).
//! Scenario: a scripted Store workload (create queues, enqueue, enqueue_many, dequeue + ack,
//! ack_many, delete a queue, snapshots, roll-overs every few records with tiny segments) runs once cleanly to
//! count its changing file operations; then, for every operation index, it runs again with
//! - that operation failing with EIO, then with ENOSPC (a failing write leaves half its bytes),
//!   after which the directory is reopened as is (a restart) and again after a power loss;
//! - a power loss at that operation (it and everything after it fail; unsynced bytes and
//!   unsynced directory entries are dropped).
//!
//! After each run: 0 acknowledged changes lost (every call that returned Ok is in the restored
//! state) and 0 ghost writes (a call that returned an error has no effect, unless the error is
//! `NotDurable`, which says the change was written and may survive).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tflux_core::error::Error;
use tflux_core::io::testing::{Fault, FaultStorage, OpKind, EIO, ENOSPC};
use tflux_core::state::QueueConfig;
use tflux_core::store::{Store, StoreOptions};
use tflux_core::{Log, LogOptions, SyncPolicy};

/// Tiny segments: a roll-over every few records, automatic snapshots every two sealed ones; the
/// disk-full watermark at 1.0 so that the host's own disk usage never refuses a write here.
const SETTINGS: &str = r#"{"LogFileSoftLimit": 200, "LogFileHardLimit": 200,
    "LogPreallocateSegments": true, "SnapshotCreationSegmentsThreshold": 2,
    "DiskFullRatio": 1.0}"#;

/// Queue name -> the `(key, message)` records it holds.
type Model = BTreeMap<String, BTreeSet<(i64, Vec<u8>)>>;

/// What one client call did to the durable state if it took effect.
#[derive(Debug, Clone)]
enum Effect {
    None,
    Create(String),
    Delete(String),
    Add(String, Vec<(i64, Vec<u8>)>),
    Remove(String, Vec<(i64, Vec<u8>)>),
}

fn apply(model: &mut Model, effect: &Effect) {
    match effect {
        Effect::None => {}
        Effect::Create(q) => {
            model.entry(q.clone()).or_default();
        }
        Effect::Delete(q) => {
            model.remove(q);
        }
        Effect::Add(q, records) => model
            .get_mut(q)
            .expect("added to an existing queue")
            .extend(records.iter().cloned()),
        Effect::Remove(q, records) => {
            let held = model.get_mut(q).expect("removed from an existing queue");
            for r in records {
                held.remove(r);
            }
        }
    }
}

/// The outcome of a workload run: what must be there, and what may be.
#[derive(Default)]
struct Outcome {
    acknowledged: Model,
    /// Effects of calls that failed with `NotDurable`, in order.
    maybe: Vec<Effect>,
    calls: usize,
    errors: usize,
}

impl Outcome {
    /// Notes one call: its effect if it took effect, and its result.
    fn record<T>(&mut self, effect: Effect, result: Result<T, Error>) {
        self.calls += 1;
        match result {
            Ok(_) => apply(&mut self.acknowledged, &effect),
            Err(Error::NotDurable { .. }) => {
                self.errors += 1;
                self.maybe.push(effect);
            }
            Err(_) => self.errors += 1,
        }
    }
}

fn msg(i: usize) -> Vec<u8> {
    format!("message-{i:04}-{}", "x".repeat(i % 7)).into_bytes()
}

/// Runs the scripted workload against a store in `base` opened through `storage`.
fn workload(base: &Path, storage: Arc<FaultStorage>) -> Outcome {
    let mut out = Outcome::default();
    // Every state holds the default queue (named "").
    out.acknowledged.insert(String::new(), BTreeSet::new());
    let opts = StoreOptions {
        readonly: false,
        storage,

        ..StoreOptions::default()
    };
    let store = match Store::open_with(base, Some(SETTINGS), opts) {
        Ok(s) => s,
        Err(_) => {
            out.errors += 1;
            return out;
        }
    };
    let mut n = 0usize;
    let mut next = || {
        n += 1;
        msg(n)
    };
    for q in ["a", "b", "c"] {
        let r = store.create_queue(q.as_bytes(), QueueConfig::default());
        out.record(Effect::Create(q.into()), r);
    }
    for round in 0..4 {
        for q in ["a", "b"] {
            let m = next();
            let key = (round * 7 % 5) as i64;
            let r = store.enqueue(q.as_bytes(), key, &m);
            out.record(Effect::Add(q.into(), vec![(key, m)]), r);
        }
        let batch: Vec<(i64, Vec<u8>)> = (0..3).map(|k| (k as i64, next())).collect();
        let items: Vec<(i64, &[u8])> = batch.iter().map(|(k, m)| (*k, m.as_slice())).collect();
        let r = store.enqueue_many(b"a", &items);
        out.record(Effect::Add("a".into(), batch.clone()), r);
        // Take one record and acknowledge it.
        if let Ok(Some((rec, inc))) = store.dequeue(b"a", Some(Duration::ZERO)) {
            let r = store.ack(b"a", rec.id, Some(inc));
            let removed = vec![(rec.key, rec.data.to_vec())];
            out.record(Effect::Remove("a".into(), removed), r);
        }
        // Take two and acknowledge them in one write.
        let mut taken = Vec::new();
        for _ in 0..2 {
            if let Ok(Some((rec, inc))) = store.dequeue(b"b", Some(Duration::ZERO)) {
                taken.push((rec, inc));
            }
        }
        if !taken.is_empty() {
            let acks: Vec<(&[u8], u64, Option<u64>)> = taken
                .iter()
                .map(|(rec, inc)| (b"b".as_slice(), rec.id, Some(*inc)))
                .collect();
            let removed = taken
                .iter()
                .map(|(rec, _)| (rec.key, rec.data.to_vec()))
                .collect();
            let r = store.ack_many(&acks);
            out.record(Effect::Remove("b".into(), removed), r);
        }
        if round == 1 {
            let r = store.snapshot();
            out.record(Effect::None, r);
            let r = store.delete_queue(b"c");
            out.record(Effect::Delete("c".into()), r);
        }
    }
    let r = store.close();
    out.record(Effect::None, r);
    out
}

/// The restored state of `base`, opened with the real file system.
fn restored(base: &Path) -> Model {
    let store = Store::open(base, Some(SETTINGS), false)
        .unwrap_or_else(|e| panic!("reopening {} failed: {e}", base.display()));
    let mut model = Model::new();
    for q in store.queues().unwrap() {
        let records = store.peek_all(q.name.as_bytes()).unwrap();
        model.insert(
            q.name.clone(),
            records.iter().map(|r| (r.key, r.data.to_vec())).collect(),
        );
    }
    store.close().unwrap();
    model
}

/// 0 lost, 0 ghosts: the restored state is the acknowledged one plus possibly the effects of
/// `NotDurable` calls.
fn check(what: &str, restored: &Model, out: &Outcome) {
    let maybe = &out.maybe;
    let candidates = 1usize << maybe.len();
    for mask in 0..candidates {
        let mut expected = out.acknowledged.clone();
        for (i, e) in maybe.iter().enumerate() {
            if mask & (1 << i) != 0 {
                apply(&mut expected, e);
            }
        }
        if &expected == restored {
            return;
        }
    }
    panic!(
        "{what}: restored state differs from every allowed one\nrestored: {restored:?}\nacknowledged: {:?}\nmaybe: {maybe:?}",
        out.acknowledged
    );
}

/// Whether operation `index` of the clean run is part of making a segment file (its create and
/// the writes and syncs of that file right after, before anything else is touched): a
/// roll-over whose new segment cannot be made (and left nothing behind) is tried again after
/// the next write and stops nothing (issue 30 item 5), so a one-shot fault there is absorbed,
/// not reported. Every other check (nothing lost, no ghost) still holds for it.
fn is_roll_over_create(storage: &FaultStorage, index: u64) -> bool {
    let Some((_, path)) = storage.op(index) else {
        return false;
    };
    if path.extension().is_none_or(|e| e != "log") {
        return false;
    }
    for i in (0..=index).rev() {
        match storage.op(i) {
            Some((OpKind::Create, p)) if p == path => return true,
            Some((OpKind::Write | OpKind::Sync, p)) if p == path => continue,
            _ => return false,
        }
    }
    false
}

/// Runs the workload with a fault and checks the directory after a restart and after a
/// power loss.
fn run(setup: impl FnOnce(&FaultStorage), what: &str) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let storage = FaultStorage::new(base).unwrap();
    setup(&storage);
    let out = workload(base, Arc::clone(&storage));
    check(&format!("{what}, restart"), &restored(base), &out);
    storage.crash().unwrap();
    check(&format!("{what}, power loss"), &restored(base), &out);
    out
}

#[test]
fn every_failing_operation_loses_nothing_acknowledged_and_writes_no_ghost() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultStorage::new(dir.path()).unwrap();
    let clean = workload(dir.path(), Arc::clone(&storage));
    assert_eq!(clean.errors, 0, "the clean run fails nowhere");
    let total = storage.ops();
    assert!(
        storage.ops_of(OpKind::Rename) > 0 && storage.ops_of(OpKind::Remove) > 0,
        "the workload snapshots and compacts"
    );
    assert!(
        storage.ops_of(OpKind::Create) > 4,
        "the workload rolls over"
    );
    let mut failed_calls = 0;
    for index in 0..total {
        for errno in [EIO, ENOSPC] {
            let what = format!("errno {errno} at operation {index} {:?}", storage.op(index));
            let out = run(
                |s| {
                    s.fail(Fault {
                        kind: None,
                        nth: index,
                        errno,
                    })
                },
                &what,
            );
            assert!(
                out.errors > 0 || is_roll_over_create(&storage, index),
                "{what}: the fault is reported"
            );
            failed_calls += out.errors;
        }
        let what = format!("power loss at operation {index} {:?}", storage.op(index));
        run(|s| s.crash_at(index), &what);
    }
    eprintln!(
        "{total} operations x (EIO, ENOSPC, power loss): {} runs, {failed_calls} failed calls",
        total * 3
    );
}

// ----- the raw log ------------------------------------------------------------------------------

/// `(lsn, term, data)` of every entry a log holds, in order.
type Entries = Vec<(i64, i32, Vec<u8>)>;

/// A log operation of the scripted workload.
#[derive(Debug, Clone)]
enum LogOp {
    Append(i32, Vec<Vec<u8>>),
    Commit(i64),
    Truncate(i64),
    Insert(i64, Vec<(i32, Vec<u8>)>),
    Compact(i64),
}

fn log_script() -> Vec<LogOp> {
    let data = |tag: &str, n: usize| -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| format!("{tag}{i:02}-{}", "z".repeat(i % 5)).into_bytes())
            .collect()
    };
    let mut ops = Vec::new();
    for (i, d) in data("a", 8).into_iter().enumerate() {
        ops.push(LogOp::Append(1 + (i / 4) as i32, vec![d]));
    }
    ops.push(LogOp::Append(2, data("b", 5)));
    ops.push(LogOp::Commit(6));
    ops.push(LogOp::Truncate(9));
    ops.push(LogOp::Append(3, data("c", 4)));
    ops.push(LogOp::Insert(
        11,
        vec![(3, b"i0".to_vec()), (4, b"i1-longer".to_vec())],
    ));
    ops.push(LogOp::Commit(12));
    ops.push(LogOp::Compact(8));
    ops.push(LogOp::Append(4, data("d", 6)));
    ops.push(LogOp::Truncate(14));
    ops
}

fn log_options(storage: Arc<dyn tflux_core::io::storage::Storage>) -> LogOptions {
    LogOptions {
        soft_limit: 96,
        hard_limit: 160,
        preallocate: true,
        sync: SyncPolicy::Always,
        storage,
        ..LogOptions::default()
    }
}

fn log_entries(log: &mut Log) -> Entries {
    let start = log.start_index();
    let entries = log.read(start, None).expect("a reopened log reads back");
    entries
        .into_iter()
        .map(|e| (e.lsn, e.term, e.data))
        .collect()
}

/// Whether `restored` is a state the failed operation `op` may leave, given the entries
/// before it and after it had it succeeded: all of it, none of it, or (for discarding
/// operations) part of the discard, which only drops entries the call was dropping anyway.
fn allowed_after_failure(
    op: &LogOp,
    before: &Entries,
    after: &Entries,
    restored: &Entries,
) -> bool {
    if restored == before || restored == after {
        return true;
    }
    let is_prefix = |keep_from: i64| {
        restored.len() <= before.len()
            && before.starts_with(restored)
            && restored.last().is_none_or(|e| e.0 + 1 >= keep_from)
    };
    match op {
        LogOp::Truncate(lsn) => is_prefix(*lsn + 1),
        LogOp::Insert(start, _) => is_prefix(*start),
        LogOp::Compact(_) => before.ends_with(restored) && after.len() <= restored.len(),
        LogOp::Append(..) | LogOp::Commit(_) => false,
    }
}

/// Runs the log script; returns the acknowledged entries and, for the first failed
/// operation, what it was with the entries before and after it.
fn log_workload(
    dir: &Path,
    storage: Arc<FaultStorage>,
) -> (Entries, Option<(LogOp, Entries, Entries)>) {
    let mut model: Entries = Vec::new();
    let Ok(mut log) = Log::open(dir, log_options(storage)) else {
        return (model, Some((LogOp::Commit(-1), Vec::new(), Vec::new())));
    };
    let mut failed = None;
    for op in log_script() {
        let mut after = model.clone();
        let result = match &op {
            LogOp::Append(term, items) => {
                let first = log.last_index() + 1;
                for (i, d) in items.iter().enumerate() {
                    after.push((first + i as i64, *term, d.clone()));
                }
                log.append_many(*term, items).map(|_| ())
            }
            LogOp::Commit(lsn) => log.commit(*lsn),
            LogOp::Truncate(lsn) => {
                after.retain(|e| e.0 <= *lsn);
                log.truncate_after(*lsn)
            }
            LogOp::Insert(start, items) => {
                after.retain(|e| e.0 < *start);
                for (i, (t, d)) in items.iter().enumerate() {
                    after.push((start + i as i64, *t, d.clone()));
                }
                log.insert_range(*start, items)
            }
            LogOp::Compact(index) => log.compact(*index).map(|_| {
                let start = log.start_index();
                after.retain(|e| e.0 >= start);
            }),
        };
        match result {
            Ok(()) => model = after,
            Err(_) if failed.is_none() => {
                // Compaction's effect is known only once it ran: allow any start up to `index`.
                if let LogOp::Compact(index) = &op {
                    after.retain(|e| e.0 > *index);
                }
                failed = Some((op, model.clone(), after));
            }
            Err(_) => {}
        }
    }
    let _ = log.close();
    (model, failed)
}

fn check_log(what: &str, dir: &Path, model: &Entries, failed: &Option<(LogOp, Entries, Entries)>) {
    let mut log = Log::open(dir, LogOptions::default())
        .unwrap_or_else(|e| panic!("{what}: reopening failed: {e}"));
    let restored = log_entries(&mut log);
    let ok = match failed {
        None => &restored == model,
        Some((op, before, after)) => allowed_after_failure(op, before, after, &restored),
    };
    assert!(
        ok,
        "{what}: restored log differs from every allowed one\nrestored: {restored:?}\nacknowledged: {model:?}\nfailed: {failed:?}"
    );
}

fn run_log(setup: impl FnOnce(&FaultStorage), what: &str) -> bool {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultStorage::new(dir.path()).unwrap();
    setup(&storage);
    let log_dir = dir.path().join("log");
    let (model, failed) = log_workload(&log_dir, Arc::clone(&storage));
    if log_dir.is_dir() {
        check_log(&format!("{what}, restart"), &log_dir, &model, &failed);
    }
    storage.crash().unwrap();
    if log_dir.is_dir() {
        check_log(&format!("{what}, power loss"), &log_dir, &model, &failed);
    } else {
        assert!(
            model.is_empty(),
            "{what}: acknowledged entries but no log directory"
        );
    }
    failed.is_some()
}

#[test]
fn every_failing_operation_of_a_raw_log_leaves_a_log_that_opens_with_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let storage = FaultStorage::new(dir.path()).unwrap();
    let (model, failed) = log_workload(&dir.path().join("log"), Arc::clone(&storage));
    assert!(failed.is_none(), "the clean run fails nowhere: {failed:?}");
    assert!(!model.is_empty());
    let total = storage.ops();
    assert!(
        storage.ops_of(OpKind::Rename) > 0,
        "truncation copies and renames"
    );
    assert!(
        storage.ops_of(OpKind::Remove) > 0,
        "compaction and truncation delete segments"
    );
    for index in 0..total {
        for errno in [EIO, ENOSPC] {
            let what = format!(
                "log: errno {errno} at operation {index} {:?}",
                storage.op(index)
            );
            let fault = Fault {
                kind: None,
                nth: index,
                errno,
            };
            assert!(
                run_log(|s| s.fail(fault), &what) || is_roll_over_create(&storage, index),
                "{what}: the fault is reported"
            );
        }
        let what = format!(
            "log: power loss at operation {index} {:?}",
            storage.op(index)
        );
        run_log(|s| s.crash_at(index), &what);
    }
    eprintln!("log: {total} operations x (EIO, ENOSPC, power loss)");
}
