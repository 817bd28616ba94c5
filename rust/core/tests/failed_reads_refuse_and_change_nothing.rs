//! Reads through the storage seam (`Storage::open_file`, `list_dir`, `map`) failing one at a
//! time. Scenario: a log of several sealed segments and an active one, with a torn tail for
//! the open to cut; for each kind of read and each of its occurrences in turn, that read fails
//! with EIO while the log is opened (and, for a map, while its sealed segments are read).
//!
//! Every failure must come back as `Error::Io` naming the file or directory it was reading;
//! a refused open changes no byte and no name in the directory; a failed read leaves the
//! open log usable (the same read succeeds again); and the fault, once spent, changes nothing
//! of what the log reads back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tflux_core::error::Error;
use tflux_core::io::storage::Storage;
use tflux_core::io::testing::{FaultStorage, ReadKind, EIO};
use tflux_core::{Log, LogOptions, SyncPolicy};

type Entries = Vec<(i64, i32, Vec<u8>)>;

fn options(storage: Arc<dyn Storage>) -> LogOptions {
    LogOptions {
        soft_limit: 120,
        hard_limit: 200,
        preallocate: true,
        sync: SyncPolicy::Always,
        storage,
        ..LogOptions::default()
    }
}

/// Writes the log and returns what it holds; its last segment ends in a torn record.
fn make_log(dir: &Path) -> Entries {
    let mut log = Log::open(dir, options(tflux_core::io::storage::real())).unwrap();
    for i in 0..40 {
        log.append(1 + i / 10, format!("entry-{i:03}").as_bytes())
            .unwrap();
    }
    let entries = read_all(&mut log).unwrap();
    log.close().unwrap();
    // A torn tail: the marker of a record that was never completed, after the last one.
    let last = last_segment(dir);
    let scan = tflux_core::segment::scan_file(
        &tflux_core::io::storage::RealStorage,
        tflux_core::format::dialect::Dialect::Spec,
        &last,
        false,
        false,
        0,
        true,
    )
    .unwrap();
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    f.write_all_at(&[0xAA, 0xF5, 0x34, 0xC4, 0, 0, 0, 9], scan.end)
        .unwrap();
    entries
}

fn last_segment(dir: &Path) -> PathBuf {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    names.sort();
    names.pop().unwrap()
}

fn read_all(log: &mut Log) -> tflux_core::error::Result<Entries> {
    let start = log.start_index();
    Ok(log
        .read(start, None)?
        .into_iter()
        .map(|e| (e.lsn, e.term, e.data))
        .collect())
}

/// Every name under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(tree(&path));
        } else {
            out.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
    out
}

/// The failure is an I/O error about `dir` or a file in it.
fn assert_names_a_file_of(err: &Error, dir: &Path, what: &str) {
    match err {
        Error::Io { path, source, .. } => {
            assert!(
                path.starts_with(dir),
                "{what}: {} is not in the log",
                path.display()
            );
            assert_eq!(source.raw_os_error(), Some(EIO), "{what}: {err}");
        }
        other => panic!("{what}: expected an I/O error naming the file, got {other:?}"),
    }
}

#[test]
fn every_failing_read_is_an_io_error_naming_its_file_and_a_refused_open_changes_nothing() {
    for kind in [ReadKind::List, ReadKind::Open, ReadKind::Map] {
        let mut nth = 0;
        loop {
            let what = format!("{kind:?} #{nth}");
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("log");
            std::fs::create_dir(&dir).unwrap();
            let want = make_log(&dir);
            let before = tree(&dir);
            let storage = FaultStorage::new(root.path()).unwrap();
            storage.fail_read(kind, nth, EIO);
            let opened = Log::open(&dir, options(storage.clone()));
            let reached = storage.reads_of(kind) > nth;
            match opened {
                Err(e) => {
                    assert!(reached, "{what}: the open failed without the fault: {e}");
                    assert_names_a_file_of(&e, &dir, &what);
                    assert_eq!(tree(&dir), before, "{what}: a refused open changed the log");
                    // The fault is spent: the same open now succeeds.
                    let mut log = Log::open(&dir, options(storage.clone())).unwrap();
                    assert_eq!(read_all(&mut log).unwrap(), want, "{what}");
                }
                Ok(mut log) => {
                    // The fault may wait for a read of the open log (a sealed segment's map).
                    let first = read_all(&mut log);
                    let reached = storage.reads_of(kind) > nth;
                    match first {
                        Err(e) => {
                            assert!(reached, "{what}: a read failed without the fault: {e}");
                            assert_names_a_file_of(&e, &dir, &what);
                            assert_eq!(read_all(&mut log).unwrap(), want, "{what}: retried");
                        }
                        Ok(got) => {
                            assert_eq!(got, want, "{what}");
                            if !reached {
                                break; // no read of this kind is left to fail
                            }
                        }
                    }
                }
            }
            nth += 1;
            assert!(nth < 1000, "{what}: reads never ran out");
        }
        assert!(nth > 0, "{kind:?}: the open and reads made no such read");
    }
}
