//! Issue 43, defect 1: a snapshot whose last index is 2^63-1 (past the largest LSN an entry can
//! have) used to restart the log at a wrapped, negative LSN: the open created
//! `-9223372036854775808.log`, moved the old segment to temp and acknowledged an enqueue, and
//! `tflux verify` said OK. Scenario: a store with one logged record gets a snapshot ahead of its
//! log at each index near the limit, in TaskFlux's header (the index is outside its checksum)
//! and in the spec's wide layout (valid checksum). Past the limit, the open refuses naming the
//! snapshot and its last-index field, moves nothing, and `verify_base` reports the same error;
//! at the limit and below, the log restarts after the snapshot as before.

use std::path::Path;

use tflux_core::base::files;
use tflux_core::error::Error;
use tflux_core::format::dialect::Dialect;
use tflux_core::format::snapshot::{self, Snapshot};
use tflux_core::log::MAX_ENTRY_LSN;
use tflux_core::store::{Store, StoreOptions};
use tflux_core::{verify_base, Layout, VerifyOptions};

const FAST: &str = r#"{"LogPreallocateSegments": false, "DiskFullRatio": 1.0}"#;

/// Offset of the last index in every snapshot layout (after the 4-byte marker).
const LAST_INDEX_AT: u64 = 4;

fn open(base: &Path, dialect: Dialect) -> tflux_core::Result<Store> {
    let opts = StoreOptions {
        dialect: Some(dialect),
        ..StoreOptions::default()
    };
    Store::open_with(base, Some(FAST), opts)
}

/// A store in `dialect` holding one record, closed.
fn base_with_one_record(base: &Path, dialect: Dialect) -> Layout {
    let store = open(base, dialect).unwrap();
    store.enqueue(b"", 1, b"logged").unwrap();
    store.close().unwrap();
    Layout::in_dialect(base, dialect)
}

/// The bytes of a snapshot of the empty default queue whose last index is `index`, written
/// as TaskFlux would (index outside the checksum) or in the spec's wide layout (checksum over
/// index, term and state, recomputed here).
fn snapshot_at(layout: &Layout, index: i64) -> Vec<u8> {
    let mut s = Snapshot {
        last_index: 5,
        last_term: 1,
        queues: Vec::new(),
    };
    let state = tflux_core::state::QueueState::new().to_snapshot(5, 1);
    s.queues = state.queues;
    // A wide layout for the spec dialect: an index past Int32 selects it.
    s.last_index = (i32::MAX as i64) + 1;
    let mut bytes = snapshot::encode_in(&s, layout.dialect).unwrap();
    bytes[4..12].copy_from_slice(&index.to_be_bytes());
    if layout.dialect == Dialect::Spec {
        assert_eq!(&bytes[..4], &[0xB6, 0x38, 0x0F, 0xCA], "wide layout");
        let crc_at = bytes.len() - 4;
        let mut crc = crc32fast::Hasher::new();
        crc.update(&bytes[4..20]);
        crc.update(&bytes[24..crc_at]);
        let crc = crc.finalize().to_be_bytes();
        bytes[crc_at..].copy_from_slice(&crc);
    }
    bytes
}

/// Every file under `dir`, relative, sorted (with sizes).
fn tree(dir: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, meta.len()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_snapshot_past_the_largest_lsn_is_refused_by_open_and_verify_and_moves_nothing() {
    for dialect in Dialect::ALL {
        let dir = tempfile::tempdir().unwrap();
        let layout = base_with_one_record(dir.path(), dialect);
        std::fs::write(&layout.snapshot, snapshot_at(&layout, i64::MAX)).unwrap();
        let before = tree(dir.path());
        for readonly in [false, true] {
            let err = match readonly {
                false => open(dir.path(), dialect).map(|_| ()).unwrap_err(),
                true => Store::open(dir.path(), Some(FAST), true)
                    .map(|_| ())
                    .unwrap_err(),
            };
            match &err {
                Error::Corruption {
                    path,
                    offset,
                    reason,
                } => {
                    assert_eq!(path, &layout.snapshot, "{dialect}: {err}");
                    assert_eq!(*offset, Some(LAST_INDEX_AT), "{dialect}: {err}");
                    assert!(reason.contains("last index"), "{dialect}: {err}");
                    assert!(reason.contains("largest LSN"), "{dialect}: {err}");
                }
                other => panic!("{dialect}: expected corruption, got {other:?}"),
            }
            assert_eq!(
                tree(dir.path()),
                before,
                "{dialect}: a refused open moved files"
            );
        }
        // verify agrees with the open, with the same error (one rule in one place).
        let report = verify_base(dir.path(), VerifyOptions::default()).unwrap();
        assert!(!report.ok(), "{dialect}: verify said OK");
        let finding = report
            .problems
            .iter()
            .find(|p| p.fatal && p.path == layout.snapshot)
            .unwrap_or_else(|| panic!("{dialect}: {:?}", report.problems));
        assert_eq!(finding.offset, Some(LAST_INDEX_AT), "{finding:?}");
        assert!(finding.message.contains("largest LSN"), "{finding:?}");
        // The reader of one snapshot file refuses it the same way.
        let err = files::read_snapshot_in(&layout.snapshot, dialect).unwrap_err();
        assert!(err.to_string().contains("largest LSN"), "{err}");
    }
}

#[test]
fn a_snapshot_at_the_largest_lsn_or_below_restarts_the_log_after_it() {
    for dialect in Dialect::ALL {
        for index in [MAX_ENTRY_LSN, MAX_ENTRY_LSN - 1] {
            let dir = tempfile::tempdir().unwrap();
            let layout = base_with_one_record(dir.path(), dialect);
            std::fs::write(&layout.snapshot, snapshot_at(&layout, index)).unwrap();
            assert!(verify_base(dir.path(), VerifyOptions::default())
                .unwrap()
                .ok());
            let store = open(dir.path(), dialect).unwrap();
            assert_eq!(
                store.open_report().moved_aside.len(),
                1,
                "{dialect} {index}"
            );
            store.close().unwrap();
            let store = open(dir.path(), dialect).unwrap();
            store.close().unwrap();
        }
    }
}

#[test]
fn a_snapshot_past_the_largest_lsn_is_never_written() {
    let s = Snapshot {
        last_index: i64::MAX,
        last_term: 1,
        queues: tflux_core::state::QueueState::new()
            .to_snapshot(0, 1)
            .queues,
    };
    for dialect in Dialect::ALL {
        let err = snapshot::encode_in(&s, dialect).unwrap_err();
        assert!(err.to_string().contains("largest LSN"), "{err}");
    }
    let ok = Snapshot {
        last_index: MAX_ENTRY_LSN,
        ..s
    };
    let bytes = snapshot::encode(&ok).unwrap();
    assert_eq!(
        snapshot::decode(&bytes, Path::new("s")).unwrap().last_index,
        MAX_ENTRY_LSN
    );
}
