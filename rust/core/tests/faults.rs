//! Fault injection through the storage seam (`tflux_core::storage::testing::FaultStorage`).
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
use tflux_core::state::QueueConfig;
use tflux_core::storage::testing::{Fault, FaultStorage, OpKind, EIO, ENOSPC};
use tflux_core::store::{Store, StoreOptions};

/// Tiny segments: a roll-over every few records, automatic snapshots every two sealed ones.
const SETTINGS: &str = r#"{"LogFileSoftLimit": 200, "LogFileHardLimit": 200,
    "LogPreallocateSegments": true, "SnapshotCreationSegmentsThreshold": 2}"#;

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
            assert!(out.errors > 0, "{what}: the fault is reported");
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
