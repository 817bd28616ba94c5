//! Copy-on-truncate: a cut (`truncate_after`, `insert_range`) writes the kept records into a new
//! file and renames it over the segment. A crash after any step of the cut leaves the old segment
//! or the new one under its name (never neither), the next open removes the leftover `.cut` file,
//! and the old file is never changed, so a reader holding it keeps its entries.

mod common;

use std::io::Read;
use std::path::Path;

use common::*;
use tflux_core::segment::{RewriteStep, CUT_SUFFIX};
use tflux_core::{Error, Log, LogOptions};

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
