//! Copy-on-truncate: a cut (`truncate_after`, `insert_range`) writes the kept records into a new
//! file and renames it over the segment. A crash after any step of the cut leaves the old segment
//! or the new one under its name (never neither), the next open removes the leftover `.cut` file,
//! and the old file is never changed, so a reader holding it keeps its entries. Through the
//! storage seam: a power loss at every operation of a cut (`faults.rs` also fails each one).

mod common;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use common::*;
use tflux_core::io::storage::Storage;
use tflux_core::io::testing::FaultStorage;
use tflux_core::segment::{RewriteStep, CUT_SUFFIX};
use tflux_core::{Error, Log, LogOptions, SyncPolicy};

const STEPS: [RewriteStep; 5] = [
    RewriteStep::Created,
    RewriteStep::Written,
    RewriteStep::Synced,
    RewriteStep::Renamed,
    RewriteStep::DirSynced,
];

/// 32-byte records (16 data bytes); `soft=64, hard=100` seals a segment at its third record.
fn data(i: i64) -> Vec<u8> {
    vec![b'A' + i as u8; 16]
}

fn limits(preallocate: bool) -> LogOptions {
    opts(64, 100, preallocate)
}

/// LSNs 0-2 | 3-5 | 6 (the last segment active), closed.
fn seven_in_three_segments(dir: &Path, preallocate: bool) -> Vec<(i64, i32, Vec<u8>)> {
    let mut log = Log::open(dir, limits(preallocate)).unwrap();
    for i in 0..7 {
        log.append(1, &data(i)).unwrap();
    }
    let layout: Vec<_> = log.segments().iter().map(|s| s.start_lsn).collect();
    assert_eq!(layout, vec![0, 3, 6]);
    let all = all_entries(&mut log);
    log.close().unwrap();
    all
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

fn read_all(mut f: &std::fs::File) -> Vec<u8> {
    let mut out = Vec::new();
    f.read_to_end(&mut out).unwrap();
    out
}

#[test]
fn a_cut_stopped_after_each_step_reopens_with_the_old_segment_or_the_new_one() {
    // (cut after LSN, segment holding the cut): inside the active segment, and into a sealed one.
    for (after, seg) in [(6, 6), (5, 6), (4, 3), (2, 3), (0, 0), (-1, 0)] {
        for preallocate in [false, true] {
            for step in STEPS {
                let case =
                    format!("truncate_after({after}), stop after {step:?}, prealloc {preallocate}");
                let dir = tempfile::tempdir().unwrap();
                let all = seven_in_three_segments(dir.path(), preallocate);
                let path = dir.path().join(seg_name(seg));
                let before = std::fs::read(&path).unwrap();
                let held = std::fs::File::open(&path).unwrap();

                let mut log = Log::open(dir.path(), limits(preallocate)).unwrap();
                log.stop_cuts_after(Some(step));
                let cut = log.truncate_after(after);
                if after == 6 {
                    assert!(cut.is_ok(), "{case}: nothing to cut");
                } else {
                    assert!(matches!(cut, Err(Error::Io { .. })), "{case}: {cut:?}");
                    assert!(
                        log.append(1, b"no").is_err(),
                        "{case}: fail-stop after the failed cut"
                    );
                }
                drop(log); // the "kill": only what reached the files counts

                // Never a missing segment; the old file is untouched whatever happened.
                assert!(path.is_file(), "{case}: segment missing");
                assert_eq!(read_all(&held), before, "{case}: old file changed in place");
                let renamed = step >= RewriteStep::Renamed || after == 6;
                let leftover = format!("{}{CUT_SUFFIX}", seg_name(seg));
                assert_eq!(
                    names(dir.path()).contains(&leftover),
                    !renamed,
                    "{case}: {:?}",
                    names(dir.path())
                );
                if !renamed {
                    assert_eq!(std::fs::read(&path).unwrap(), before, "{case}");
                }

                // Later segments were deleted before the cut started: the log now ends with the
                // cut segment, holding either all its old records or just the kept ones.
                let old_end = if seg == 6 { 7 } else { seg + 3 };
                let want_len = if renamed { after + 1 } else { old_end };
                let mut log = Log::open(dir.path(), limits(preallocate)).unwrap();
                assert_eq!(
                    all_entries(&mut log),
                    all[..want_len as usize].to_vec(),
                    "{case}"
                );
                assert!(!log.recovery().truncated(), "{case}: no torn tail to cut");
                assert!(log.ignored_files().is_empty(), "{case}: leftovers removed");
                assert!(!names(dir.path()).iter().any(|n| n.ends_with(CUT_SUFFIX)));

                // The log goes on: a cut now completes, appends follow, a reopen agrees.
                log.truncate_after(after.min(want_len - 1)).unwrap();
                let next = log.append(2, b"next").unwrap();
                assert_eq!(next, after + 1, "{case}");
                let got = all_entries(&mut log);
                log.close().unwrap();
                let mut again = Log::open(dir.path(), limits(preallocate)).unwrap();
                assert_eq!(all_entries(&mut again), got, "{case}");
                let mut want = all[..(after + 1) as usize].to_vec();
                want.push((next, 2, b"next".to_vec()));
                assert_eq!(got, want, "{case}");
            }
        }
    }
}

#[test]
fn a_cut_never_changes_the_file_a_reader_holds() {
    let dir = tempfile::tempdir().unwrap();
    let all = seven_in_three_segments(dir.path(), true);
    let mut reader = Log::open(
        dir.path(),
        LogOptions {
            readonly: true,
            ..limits(true)
        },
    )
    .unwrap();
    assert_eq!(all_entries(&mut reader), all); // maps the sealed segments
    let mut writer = Log::open(dir.path(), limits(true)).unwrap();
    writer.truncate_after(1).unwrap();
    writer.append(1, &[b'x'; 48]).unwrap(); // a new LSN 2 where the old LSN 2 and 3 were
    writer
        .insert_range(3, &[(2, b"y".to_vec()), (2, vec![b'z'; 40])])
        .unwrap();
    writer.truncate_after(3).unwrap();
    writer.append_many(3, &[b"p", b"q", b"r"]).unwrap();
    for lsn in 0..7 {
        let got = reader.read(lsn, Some(0)).unwrap();
        assert_eq!(
            (got[0].lsn, got[0].term, &got[0].data),
            (all[lsn as usize].0, 1, &all[lsn as usize].2)
        );
    }
    assert_eq!(all_entries(&mut reader), all);
}

/// The durable outcome of a cut interrupted by a power loss: before it (all 7 entries), after
/// the later segments were deleted (the cut segment whole), or after it (the kept entries).
fn power_loss_outcomes(after: i64, seg: i64) -> Vec<usize> {
    let old_end = if seg == 6 { 7 } else { seg as usize + 3 };
    vec![7, old_end, (after + 1) as usize]
}

#[test]
fn a_power_loss_at_every_operation_of_a_cut_leaves_the_old_segment_or_the_new_one() {
    for (after, seg) in [(4, 3), (0, 0), (5, 6)] {
        // A clean run counts the cut's operations; then power goes off at each of them (and,
        // last, just after the call returned: a durable cut must survive).
        let mut count = None;
        let mut i = 0;
        loop {
            let dir = tempfile::tempdir().unwrap();
            let all = seven_in_three_segments(dir.path(), true);
            let storage = FaultStorage::new(dir.path()).unwrap();
            let durable = LogOptions {
                sync: SyncPolicy::Always,
                storage: storage.clone() as Arc<dyn Storage>,
                ..limits(true)
            };
            let mut log = Log::open(dir.path(), durable).unwrap();
            let base = storage.ops();
            if count.is_some() {
                storage.crash_at(base + i);
            }
            let cut = log.truncate_after(after);
            let n = storage.ops() - base;
            drop(log);
            storage.crash().unwrap();
            let case = format!("truncate_after({after}), power off at operation {i} of {n}");
            let mut log = Log::open(dir.path(), limits(true)).unwrap();
            let got = all_entries(&mut log);
            assert!(!log.recovery().truncated(), "{case}");
            assert!(log.ignored_files().is_empty(), "{case}");
            match count {
                None => {
                    assert!(cut.is_ok(), "{case}");
                    assert_eq!(got, all[..(after + 1) as usize].to_vec(), "{case}");
                    count = Some(n);
                }
                Some(total) => {
                    let kept = power_loss_outcomes(after, seg);
                    assert!(kept.contains(&got.len()), "{case}: {} entries", got.len());
                    assert_eq!(got, all[..got.len()].to_vec(), "{case}");
                    if i >= total {
                        assert!(cut.is_ok(), "{case}");
                        assert_eq!(got.len(), (after + 1) as usize, "{case}: durable cut");
                        break;
                    }
                    i += 1;
                }
            }
        }
        assert!(
            count.unwrap() >= 5,
            "the cut creates, writes, syncs, renames, syncs the dir"
        );
    }
}

#[test]
fn a_refused_open_keeps_a_cut_leftover_and_an_accepted_one_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    seven_in_three_segments(dir.path(), false);
    let sealed = dir.path().join(tflux_core::format::segment::file_name(3));
    let leftover = dir
        .path()
        .join(format!("{}{CUT_SUFFIX}", file_name_of(&sealed)));
    std::fs::write(&leftover, b"half a cut").unwrap();
    // Damage a record of the sealed middle segment: a strict open refuses the log.
    let good = std::fs::read(&sealed).unwrap();
    let mut bad = good.clone();
    bad[20] ^= 0xFF;
    std::fs::write(&sealed, &bad).unwrap();
    assert!(Log::open(dir.path(), limits(false)).is_err());
    assert!(
        leftover.exists(),
        "a refused open removed {}",
        leftover.display()
    );
    // Once the damage is gone, the open is accepted and cleans up.
    std::fs::write(&sealed, &good).unwrap();
    let log = Log::open(dir.path(), limits(false)).unwrap();
    assert!(!leftover.exists());
    assert!(log.ignored_files().is_empty(), "{:?}", log.ignored_files());
}

fn file_name_of(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}
