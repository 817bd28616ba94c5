//! Issue 43, defect 2: an owner out of file descriptors (EMFILE) at a roll-over got its new
//! segment, failed the directory fsync and refused every later write, even once descriptors
//! were free again; and with none left at all, the active segment grew past the hard limit
//! without an error. Scenario: a store on the fault-injecting storage with tiny segments; the
//! roll-over's directory fsync, or its segment creation (several times in a row), fails with
//! EMFILE. The write that triggered the roll-over stands; a write that would grow a segment
//! already past its hard limit is refused with the error (nothing written); the store recovers
//! on the next write once descriptors are back, and a reopen holds every acknowledged record.

use std::path::Path;
use std::sync::Arc;

use tflux_core::error::Error;
use tflux_core::io::testing::{Fault, FaultStorage, OpKind};
use tflux_core::store::{Store, StoreOptions};

const EMFILE: i32 = 24;
const HARD: u64 = 256;
const SMALL: &str = r#"{"LogFileSoftLimit": 256, "LogFileHardLimit": 256,
    "LogPreallocateSegments": true, "SnapshotCreationSegmentsThreshold": 0,
    "DiskFullRatio": 1.0}"#;

fn open(base: &Path) -> (Store, Arc<FaultStorage>) {
    let storage = FaultStorage::new(base).unwrap();
    let opts = StoreOptions {
        storage: storage.clone(),
        ..StoreOptions::default()
    };
    (Store::open_with(base, Some(SMALL), opts).unwrap(), storage)
}

fn payload(i: usize) -> Vec<u8> {
    format!("record {i:04} {}", "x".repeat(40)).into_bytes()
}

/// Enqueues until a roll-over happens (a new segment file appears); returns how many.
fn segment_count(base: &Path) -> usize {
    std::fs::read_dir(base.join("data").join("log"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".log")
        })
        .count()
}

/// Largest segment file's data (the last non-zero byte: segments are preallocated).
fn largest_used(base: &Path) -> u64 {
    std::fs::read_dir(base.join("data").join("log"))
        .unwrap()
        .map(|e| {
            let bytes = std::fs::read(e.unwrap().path()).unwrap();
            bytes
                .iter()
                .rposition(|&b| b != 0)
                .map_or(0, |p| p as u64 + 1)
        })
        .max()
        .unwrap()
}

fn reopened_payloads(base: &Path) -> Vec<Vec<u8>> {
    let store = Store::open(base, Some(SMALL), false).unwrap();
    let mut out: Vec<Vec<u8>> = store
        .peek_all(b"")
        .unwrap()
        .iter()
        .map(|r| r.data.to_vec())
        .collect();
    out.sort();
    store.close().unwrap();
    out
}

#[test]
fn emfile_at_the_roll_over_directory_fsync_does_not_stop_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (store, storage) = open(dir.path());
    let mut acked = Vec::new();
    // Every directory fsync from now on fails once: the next roll-over's.
    storage.fail(Fault {
        kind: Some(OpKind::SyncDir),
        nth: storage.ops_of(OpKind::SyncDir),
        errno: EMFILE,
    });
    for i in 0..40 {
        let p = payload(i);
        store
            .enqueue(b"", 0, &p)
            .unwrap_or_else(|e| panic!("enqueue {i}: {e}"));
        acked.push(p);
    }
    assert!(
        segment_count(dir.path()) > 1,
        "it rolled over once the fsync worked"
    );
    store.close().unwrap();
    acked.sort();
    assert_eq!(reopened_payloads(dir.path()), acked);
}

#[test]
fn no_descriptor_for_a_roll_over_refuses_writes_past_the_hard_limit_then_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (store, storage) = open(dir.path());
    let mut acked = Vec::new();
    let mut i = 0;
    let fail_next_create = |storage: &FaultStorage| {
        storage.fail(Fault {
            kind: Some(OpKind::Create),
            nth: storage.ops_of(OpKind::Create),
            errno: EMFILE,
        })
    };
    let mut refused = 0;
    while refused < 3 {
        let p = payload(i);
        i += 1;
        // No descriptor for any segment file from now on.
        fail_next_create(&storage);
        match store.enqueue(b"", 0, &p) {
            Ok(_) => acked.push(p),
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(EMFILE) => {
                refused += 1;
            }
            Err(e) => panic!("enqueue {i}: {e}"),
        }
        assert!(
            i < 100,
            "no write was refused: the segment grows without limit"
        );
        // One batch may cross the hard limit (it triggers the roll-over); no more.
        assert!(
            largest_used(dir.path()) <= HARD + 100,
            "the active segment grew to {} B past its hard limit {HARD}",
            largest_used(dir.path())
        );
    }
    assert_eq!(segment_count(dir.path()), 1);
    // Descriptors are back: the next write rolls over and succeeds; nothing was lost.
    storage.fail(Fault {
        kind: Some(OpKind::Create),
        nth: u64::MAX,
        errno: EMFILE,
    });
    for _ in 0..10 {
        let p = payload(i);
        i += 1;
        store.enqueue(b"", 0, &p).unwrap();
        acked.push(p);
    }
    assert!(segment_count(dir.path()) > 1);
    store.close().unwrap();
    acked.sort();
    assert_eq!(reopened_payloads(dir.path()), acked);
}
