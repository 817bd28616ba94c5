//! Issue 43, defect 21 (footprint): a base holding one record took 17 MB, its first segment
//! preallocated whole at the 16 MiB soft limit. Scenario: a store with the default settings
//! holds one record; a log with preallocation is appended to past several steps. The first
//! segment is preallocated with 1 MiB, and the zeros ahead of the data grow in steps (doubling)
//! up to the soft limit, never past it; every entry reads back after a reopen.

mod common;

use std::path::Path;

use common::{all_entries, opts};
use tflux_core::log::Log;
use tflux_core::store::Store;

const MIB: u64 = 1 << 20;

fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

#[test]
fn a_store_holding_one_record_takes_about_a_mebibyte_not_the_soft_limit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), Some(r#"{"DiskFullRatio": 1.0}"#), false).unwrap();
    store.enqueue(b"", 1, b"one record").unwrap();
    store.close().unwrap();
    let total = bytes_under(dir.path());
    assert!(total <= MIB + 4096, "a base of one record takes {total} B");
}

#[test]
fn preallocation_grows_in_doubling_steps_up_to_the_soft_limit() {
    let dir = tempfile::tempdir().unwrap();
    let soft = 6 * MIB;
    let mut log = Log::open(dir.path(), opts(soft, 8 * MIB, true)).unwrap();
    let file_len = |log: &Log| log.segments().last().unwrap().file_size;
    assert_eq!(file_len(&log), MIB);
    let record = vec![7u8; 100 << 10];
    let mut written = Vec::new();
    let mut seen = vec![file_len(&log)];
    while log.segments_len() == 1 {
        log.append(1, &record).unwrap();
        written.push(record.clone());
        let info = log.segments().last().unwrap().clone();
        if log.segments_len() == 1 {
            // Always room ahead of the data, up to the soft limit.
            assert!(info.file_size >= info.size.min(soft), "{info:?}");
            assert!(info.file_size <= soft.max(info.size + 4), "{info:?}");
        }
        if *seen.last().unwrap() != info.file_size && log.segments_len() == 1 {
            seen.push(info.file_size);
        }
    }
    // 1, 2, 4 MiB, then the soft limit (6 MiB), then the data itself grows past it.
    assert_eq!(&seen[..4], &[MIB, 2 * MIB, 4 * MIB, soft], "{seen:?}");
    // The new segment starts again at the first step.
    assert_eq!(file_len(&log), MIB);
    log.close().unwrap();
    let mut log = Log::open(dir.path(), opts(soft, 8 * MIB, true)).unwrap();
    let entries = all_entries(&mut log);
    assert_eq!(entries.len(), written.len());
    assert!(entries.iter().all(|(_, _, d)| d == &record));
}
