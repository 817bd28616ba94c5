//! Issue 43, defects 10 and 11: detection read only the first record of the log, and a log
//! whose files could not decide its dialect was read as spec. Scenario: logs and bases built by
//! hand (a spec first segment and a taskflux last one; a taskflux log whose first record has
//! one bit flipped and no metadata or snapshot to speak) are opened read-only, verified and
//! opened writable. Mixed dialects are a `Dialect` error naming the other segment; an undecided
//! directory is a `Dialect` error saying what each `--dialect` would do; nothing is cut, moved
//! or created by any of these refusals.

mod common;

use std::path::Path;

use common::{hand_segment, seg_name};
use tflux_core::codec::crc32_mpeg2;
use tflux_core::error::Error;
use tflux_core::format::dialect::Dialect;
use tflux_core::log::{Log, LogOptions};
use tflux_core::store::{Store, StoreOptions};
use tflux_core::{verify_base, VerifyOptions};

const FAST: &str = r#"{"LogPreallocateSegments": false, "DiskFullRatio": 1.0}"#;

fn taskflux_record(term: i64, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0xAA, 0xF5, 0x34, 0xC4];
    out.extend_from_slice(&term.to_be_bytes());
    out.extend_from_slice(&crc32_mpeg2(data).to_be_bytes());
    out.extend_from_slice(&(data.len() as i32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

fn taskflux_segment(records: &[(i64, &[u8])]) -> Vec<u8> {
    let mut out = vec![0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 1];
    for (term, data) in records {
        out.extend(taskflux_record(*term, data));
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out
}

/// Every file under `dir` with its bytes, sorted.
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            if e.metadata().unwrap().is_dir() {
                out.push((e.path().display().to_string() + "/", Vec::new()));
                stack.push(e.path());
            } else {
                out.push((
                    e.path().display().to_string(),
                    std::fs::read(e.path()).unwrap(),
                ));
            }
        }
    }
    out.sort();
    out
}

fn dialect_error(r: tflux_core::Result<impl std::fmt::Debug>) -> (std::path::PathBuf, String) {
    match r {
        Err(Error::Dialect { path, reason }) => (path, reason),
        other => panic!("expected a dialect error, got {other:?}"),
    }
}

/// Deltas of a store: creates of queues named `q0`, `q1`, ...
fn creates(n: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| common::create_queue(format!("q{i}").as_bytes(), false))
        .collect()
}

/// A store base whose log has a spec first segment (3 entries) and a taskflux last one.
fn mixed_base(base: &Path) -> std::path::PathBuf {
    let log = base.join("data").join("log");
    std::fs::create_dir_all(&log).unwrap();
    let d = creates(6);
    let spec: Vec<(i32, &[u8])> = d[..3].iter().map(|x| (1, x.as_slice())).collect();
    let tf: Vec<(i64, &[u8])> = d[3..].iter().map(|x| (1, x.as_slice())).collect();
    std::fs::write(log.join(seg_name(0)), hand_segment(&spec)).unwrap();
    let last = log.join(seg_name(3));
    std::fs::write(&last, taskflux_segment(&tf)).unwrap();
    last
}

#[test]
fn a_last_segment_of_the_other_dialect_is_refused_by_every_open_and_by_verify() {
    let dir = tempfile::tempdir().unwrap();
    let last = mixed_base(dir.path());
    let log_dir = last.parent().unwrap().to_path_buf();
    let before = tree(dir.path());
    for readonly in [true, false] {
        let (path, reason) =
            dialect_error(Store::open(dir.path(), Some(FAST), readonly).map(|_| ()));
        assert_eq!(path, last, "{reason}");
        assert!(reason.contains("two dialects"), "{reason}");
        let opts = LogOptions {
            readonly,
            ..LogOptions::default()
        };
        let (path, _) = dialect_error(Log::open(&log_dir, opts));
        assert_eq!(path, last);
    }
    let (path, _) = dialect_error(verify_base(dir.path(), VerifyOptions::default()));
    assert_eq!(path, last);
    // Asking for a dialect does not help: the other segment still disagrees.
    for dialect in Dialect::ALL {
        let opts = StoreOptions {
            dialect: Some(dialect),
            ..StoreOptions::default()
        };
        dialect_error(Store::open_with(dir.path(), Some(FAST), opts).map(|_| ()));
    }
    assert_eq!(
        tree(dir.path()),
        before,
        "a refused open changed the directory"
    );
}

/// A taskflux store base of `n` entries in one segment, no metadata, no snapshot, whose first
/// record has one bit flipped at `at` (from the record's start).
fn damaged_base(base: &Path, n: usize, at: usize) -> std::path::PathBuf {
    let log = base.join("data").join("log");
    std::fs::create_dir_all(&log).unwrap();
    let d = creates(n);
    let tf: Vec<(i64, &[u8])> = d.iter().map(|x| (1, x.as_slice())).collect();
    let mut bytes = taskflux_segment(&tf);
    bytes[8 + at] ^= 0x01;
    let path = log.join(seg_name(0));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// [`damaged_base`] with the bit in the first record's length field: no framing finds the
/// second record either, so no file says the dialect.
fn undecided_base(base: &Path, n: usize) -> std::path::PathBuf {
    damaged_base(base, n, 19)
}

#[test]
fn a_damaged_first_record_leaves_the_second_record_to_say_the_dialect() {
    // The bit in the payload or the checksum: the length still leads to the second record.
    for at in [20, 12] {
        let dir = tempfile::tempdir().unwrap();
        damaged_base(dir.path(), 5, at);
        let layout = tflux_core::Layout::detect(dir.path(), None).unwrap();
        assert_eq!(layout.dialect, Dialect::Taskflux, "bit at {at}");
    }
}

#[test]
fn a_log_whose_files_cannot_decide_its_dialect_is_refused_and_nothing_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let segment = undecided_base(dir.path(), 53);
    let before = tree(dir.path());
    for readonly in [true, false] {
        let (path, reason) =
            dialect_error(Store::open(dir.path(), Some(FAST), readonly).map(|_| ()));
        assert_eq!(path, segment, "{reason}");
        assert!(reason.contains("cannot decide"), "{reason}");
        // What each choice would do, in the scanner's words.
        assert!(reason.contains("--dialect spec"), "{reason}");
        assert!(reason.contains("--dialect taskflux"), "{reason}");
        assert!(reason.contains("reads 0 entries"), "{reason}");
        let opts = LogOptions {
            readonly,
            ..LogOptions::default()
        };
        dialect_error(Log::open(segment.parent().unwrap(), opts));
    }
    dialect_error(verify_base(dir.path(), VerifyOptions::default()));
    assert_eq!(
        tree(dir.path()),
        before,
        "a refused open changed the directory"
    );
    // A choice decides: the taskflux read sees the damage at the first record (as a torn
    // tail of the last segment), and a read-only open of it opens.
    let opts = StoreOptions {
        readonly: true,
        dialect: Some(Dialect::Taskflux),
        ..StoreOptions::default()
    };
    Store::open_with(dir.path(), Some(FAST), opts).unwrap();
}

#[test]
fn logs_that_say_nothing_because_they_hold_nothing_or_a_torn_first_write_open_as_spec() {
    // A header alone, a header and the end marker, and zeros (a preallocated segment); and a
    // first write torn by a power loss (a prefix of the record, then zeros or the end of the
    // file): nothing after it was ever written, so a cut loses nothing acknowledged.
    let record = common::hand_record(1, &common::create_queue(b"q", false));
    let torn = |keep: usize, zeros: usize| {
        let mut b = hand_segment(&[]);
        b.truncate(8);
        b.extend_from_slice(&record[..keep]);
        b.extend(vec![0; zeros]);
        b
    };
    for bytes in [
        vec![0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 1],
        hand_segment(&[]),
        [hand_segment(&[]), vec![0; 4096]].concat(),
        torn(1, 4096),
        torn(3, 4096),
        torn(record.len() - 1, 4096),
        torn(record.len() / 2, 0),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("data").join("log");
        std::fs::create_dir_all(&log).unwrap();
        std::fs::write(log.join(seg_name(0)), &bytes).unwrap();
        let store = Store::open(dir.path(), Some(FAST), false).unwrap();
        store.close().unwrap();
        let layout = tflux_core::Layout::detect(dir.path(), None).unwrap();
        assert_eq!(layout.dialect, Dialect::Spec);
    }
}
