//! Recovery at open: a last segment cut at every byte of its last two records reopens with
//! exactly the records written before the cut; damage in a sealed segment is an error naming
//! file and offset (never trimmed); repair cuts and moves files aside without deleting.

mod common;

use common::*;
use tflux_core::{Error, Log};

fn records() -> Vec<(i32, Vec<u8>)> {
    vec![
        (1, b"alpha".to_vec()),
        (1, vec![]),
        (2, b"gamma-record".to_vec()),
        (2, b"xyz".to_vec()),
        (3, vec![7u8; 34]),
    ]
}

fn segment_bytes(recs: &[(i32, Vec<u8>)]) -> Vec<u8> {
    let refs: Vec<(i32, &[u8])> = recs.iter().map(|(t, d)| (*t, d.as_slice())).collect();
    hand_segment(&refs)
}

/// Offsets where each record starts, plus the end.
fn boundaries(recs: &[(i32, Vec<u8>)]) -> Vec<usize> {
    let mut out = vec![8];
    for (t, d) in recs {
        out.push(out.last().unwrap() + hand_record(*t, d).len());
    }
    out
}

/// Records fully present after cutting `full` at `cut`. With zero fill, a record whose lost
/// bytes were zeros anyway (its padding) is identical to a complete one.
fn expected_after_cut(
    recs: &[(i32, Vec<u8>)],
    bounds: &[usize],
    full: &[u8],
    cut: usize,
    zero_fill: bool,
) -> Vec<(i64, i32, Vec<u8>)> {
    let present = |end: usize| end <= cut || (zero_fill && full[cut..end].iter().all(|&b| b == 0));
    let complete = bounds[1..].iter().take_while(|&&end| present(end)).count();
    recs[..complete]
        .iter()
        .enumerate()
        .map(|(i, (t, d))| (i as i64, *t, d.clone()))
        .collect()
}

#[test]
fn a_cut_at_every_byte_of_the_last_two_records_keeps_exactly_the_complete_ones() {
    let recs = records();
    let full = segment_bytes(&recs);
    let bounds = boundaries(&recs);
    let from = bounds[recs.len() - 2];
    for cut in from..=bounds[recs.len()] {
        for zero_fill in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let mut bytes = full[..cut].to_vec();
            if zero_fill {
                // A preallocated file: the lost bytes read back as zeros.
                bytes.resize(full.len() + 64, 0);
            }
            std::fs::write(dir.path().join(seg_name(0)), &bytes).unwrap();
            let want = expected_after_cut(&recs, &bounds, &full, cut, zero_fill);
            let mut o = opts(1 << 20, 2 << 20, false);
            o.empty_entries = false;
            let mut log = Log::open(dir.path(), o.clone()).unwrap();
            assert_eq!(
                all_entries(&mut log),
                want,
                "cut at {cut}, zero fill {zero_fill}"
            );
            // Appending after recovery works and survives a reopen.
            log.append(5, b"after").unwrap();
            drop(log);
            let mut log = Log::open(dir.path(), o).unwrap();
            let got = all_entries(&mut log);
            assert_eq!(got.len(), want.len() + 1, "cut at {cut}");
            assert_eq!(got.last().unwrap().2, b"after");
            assert!(!log.recovery().truncated(), "second open finds a clean log");
        }
    }
}

#[test]
fn with_empty_entries_allowed_only_a_header_torn_right_after_its_term_is_ambiguous() {
    // Marker and term written, CRC and length still zero: on disk this *is* a valid empty
    // record (CRC of nothing is 0). Every other cut point is detected.
    let recs = records();
    let full = segment_bytes(&recs);
    let bounds = boundaries(&recs);
    let last_start = bounds[recs.len() - 1];
    for cut in bounds[recs.len() - 2]..=bounds[recs.len()] {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = full[..cut].to_vec();
        bytes.resize(full.len() + 64, 0);
        std::fs::write(dir.path().join(seg_name(0)), &bytes).unwrap();
        let mut want = expected_after_cut(&recs, &bounds, &full, cut, true);
        let record_start = *bounds.iter().rfind(|&&b| b <= cut).unwrap();
        if cut == record_start + 8 && record_start <= last_start {
            let i = want.len();
            want.push((i as i64, recs[i].0, vec![]));
        }
        let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
        assert_eq!(all_entries(&mut log), want, "cut at {cut}");
    }
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_names_the_file_and_the_record_offset() {
    let recs = records();
    let full = segment_bytes(&recs);
    let bounds = boundaries(&recs);
    // Every byte of every record except the term (not checksummed: see the term-order test).
    for (r, window) in bounds.windows(2).enumerate() {
        for at in window[0]..window[1] {
            let rel = at - window[0];
            if (4..8).contains(&rel) {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let mut bytes = full.clone();
            bytes[at] ^= 0x40;
            std::fs::write(dir.path().join(seg_name(0)), &bytes).unwrap();
            std::fs::write(
                dir.path().join(seg_name(recs.len() as i64)),
                hand_segment(&[(9, b"next")]),
            )
            .unwrap();
            match Log::open(dir.path(), opts(1 << 20, 2 << 20, false)) {
                Err(Error::Corruption { path, offset, .. }) => {
                    assert_eq!(path, dir.path().join(seg_name(0)));
                    assert_eq!(offset, Some(window[0] as u64), "record {r} byte {rel}");
                }
                other => panic!("record {r} byte {rel}: expected corruption, got {other:?}"),
            }
            // Nothing was changed on disk by the refused open.
            assert_eq!(std::fs::read(dir.path().join(seg_name(0))).unwrap(), bytes);
        }
    }
}

#[test]
fn a_decreasing_term_is_corruption_even_in_the_last_segment() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = hand_segment(&[(3, b"a"), (2, b"b")]);
    std::fs::write(dir.path().join(seg_name(0)), &bytes).unwrap();
    match Log::open(dir.path(), opts(1 << 20, 2 << 20, false)) {
        Err(Error::Corruption { offset, .. }) => assert_eq!(offset, Some(8 + 20)),
        other => panic!("expected corruption, got {other:?}"),
    }
    assert_eq!(std::fs::read(dir.path().join(seg_name(0))).unwrap(), bytes);
}

#[test]
fn a_gap_between_segments_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(seg_name(0)), hand_segment(&[(1, b"a")])).unwrap();
    std::fs::write(dir.path().join(seg_name(2)), hand_segment(&[(1, b"c")])).unwrap();
    match Log::open(dir.path(), opts(1 << 20, 2 << 20, false)) {
        Err(Error::Corruption { path, offset, .. }) => {
            assert_eq!(path, dir.path().join(seg_name(2)));
            assert_eq!(offset, Some(0));
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn repair_cuts_at_the_first_bad_record_and_moves_later_files_aside() {
    let base = tempfile::tempdir().unwrap();
    let logdir = base.path().join("data/log");
    std::fs::create_dir_all(&logdir).unwrap();
    let mut first = hand_segment(&[(1, b"keep"), (1, b"bad!"), (1, b"lost")]);
    let bad_at = 8 + 20;
    first[bad_at + 16] ^= 1; // a data byte of the second record
    std::fs::write(logdir.join(seg_name(0)), &first).unwrap();
    std::fs::write(logdir.join(seg_name(3)), hand_segment(&[(2, b"later")])).unwrap();
    let mut o = opts(1 << 20, 2 << 20, false);
    o.recovery = tflux_core::RecoveryMode::Repair;
    let mut log = Log::open(&logdir, o).unwrap();
    assert_eq!(all_entries(&mut log), vec![(0, 1, b"keep".to_vec())]);
    let report = log.recovery().clone();
    assert_eq!(report.cut_offset, Some(bad_at as u64));
    assert_eq!(
        report.moved.len(),
        2,
        "backup of the cut file + the later segment"
    );
    for moved in &report.moved {
        assert!(moved.starts_with(base.path().join("data/temp")));
        assert!(moved.exists());
    }
    assert!(!logdir.join(seg_name(3)).exists());
    // The log continues from the cut.
    assert_eq!(log.append(2, b"new").unwrap(), 1);
    drop(log);
    let mut log = Log::open(&logdir, opts(1 << 20, 2 << 20, false)).unwrap();
    assert_eq!(all_entries(&mut log).len(), 2);
}

#[test]
fn a_segment_whose_header_was_never_written_is_initialised_in_place() {
    for bytes in [vec![], vec![0x12, 0x76], vec![0u8; 4096]] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(seg_name(0)), hand_segment(&[(1, b"a")])).unwrap();
        std::fs::write(dir.path().join(seg_name(1)), &bytes).unwrap();
        let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
        assert_eq!(log.last_index(), 0);
        assert_eq!(log.append(1, b"b").unwrap(), 1);
        drop(log);
        let got = std::fs::read(dir.path().join(seg_name(1))).unwrap();
        assert_eq!(&got[..8], &[0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 1]);
    }
}

#[test]
fn a_discarded_tail_never_comes_back_after_a_torn_append() {
    // Truncation zeroes the discarded records: even if a later append of the same size is
    // torn before its end marker, the stale record behind it cannot be read back.
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, true)).unwrap();
    log.append_many(1, &[b"aaaa", b"bbbb", b"cccc"]).unwrap();
    log.truncate_after(0).unwrap();
    drop(log);
    let bytes = std::fs::read(dir.path().join(seg_name(0))).unwrap();
    assert!(bytes[8 + 20..].iter().all(|&b| b == 0));
}

#[test]
fn readonly_open_reports_a_torn_tail_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = hand_segment(&[(1, b"a"), (1, b"b")]);
    bytes.truncate(bytes.len() - 6);
    std::fs::write(dir.path().join(seg_name(0)), &bytes).unwrap();
    let mut o = opts(1 << 20, 2 << 20, false);
    o.readonly = true;
    let mut log = Log::open(dir.path(), o).unwrap();
    assert_eq!(all_entries(&mut log).len(), 1);
    assert_eq!(log.recovery().cut_offset, Some(28));
    assert!(matches!(log.append(1, b"x"), Err(Error::ReadOnly { .. })));
    drop(log);
    assert_eq!(std::fs::read(dir.path().join(seg_name(0))).unwrap(), bytes);
}

/// A log dir under `base/data/log` with a sealed segment damaged at its second record and a
/// later segment: repair cuts the first and moves the second into `data/temp`.
fn damaged_base(base: &std::path::Path) -> std::path::PathBuf {
    let logdir = base.join("data/log");
    std::fs::create_dir_all(&logdir).unwrap();
    let mut first = hand_segment(&[(1, b"keep"), (1, b"bad!"), (1, b"lost")]);
    first[8 + 20 + 16] ^= 1;
    std::fs::write(logdir.join(seg_name(0)), &first).unwrap();
    std::fs::write(logdir.join(seg_name(3)), hand_segment(&[(2, b"later")])).unwrap();
    logdir
}

fn repair_opts() -> tflux_core::LogOptions {
    let mut o = opts(1 << 20, 2 << 20, false);
    o.recovery = tflux_core::RecoveryMode::Repair;
    o
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn repair_never_renames_over_a_file_already_in_temp() {
    // Issue 10 defect 4: two repairs in the same second chose the same `repair-<secs>-<name>`
    // and the second rename replaced the first one's file. Files with every name a repair in
    // the next seconds could have chosen are planted; all must survive.
    let base = tempfile::tempdir().unwrap();
    let logdir = damaged_base(base.path());
    let temp = base.path().join("data/temp");
    std::fs::create_dir_all(&temp).unwrap();
    let now = unix_now();
    let planted: Vec<_> = (now..now + 3)
        .map(|s| temp.join(format!("repair-{s}-{}", seg_name(3))))
        .collect();
    for p in &planted {
        std::fs::write(p, b"an earlier repair's segment").unwrap();
    }
    let log = Log::open(&logdir, repair_opts()).unwrap();
    let moved = log.recovery().moved.clone();
    drop(log);
    for p in &planted {
        assert_eq!(std::fs::read(p).unwrap(), b"an earlier repair's segment");
    }
    let later = moved
        .iter()
        .find(|m| !m.to_string_lossy().ends_with(".orig"));
    assert_eq!(
        std::fs::read(later.unwrap()).unwrap(),
        hand_segment(&[(2, b"later")])
    );
}

#[test]
fn repair_backups_never_write_through_a_planted_symlink() {
    // Issue 10 defect 5: the backup of the cut segment went to a predictable name with
    // `fs::copy`, which follows a symlink planted there to a file outside the base.
    let base = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, b"not yours").unwrap();
    let logdir = damaged_base(base.path());
    let temp = base.path().join("data/temp");
    std::fs::create_dir_all(&temp).unwrap();
    let now = unix_now();
    for s in now..now + 3 {
        let link = temp.join(format!("repair-{s}-{}.orig", seg_name(0)));
        std::os::unix::fs::symlink(&victim, link).unwrap();
    }
    let log = Log::open(&logdir, repair_opts()).unwrap();
    let moved = log.recovery().moved.clone();
    drop(log);
    assert_eq!(std::fs::read(&victim).unwrap(), b"not yours");
    let backup = moved
        .iter()
        .find(|m| m.to_string_lossy().ends_with(".orig"));
    let backup = backup.unwrap();
    assert!(backup.starts_with(&temp));
    assert!(!std::fs::symlink_metadata(backup).unwrap().is_symlink());
}

#[test]
fn repair_refuses_a_temp_directory_that_is_a_symlink_out_of_the_base() {
    let base = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let logdir = damaged_base(base.path());
    std::os::unix::fs::symlink(outside.path(), base.path().join("data/temp")).unwrap();
    assert!(Log::open(&logdir, repair_opts()).is_err());
    assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    assert!(
        logdir.join(seg_name(3)).exists(),
        "a refused repair moves nothing"
    );
}

#[test]
fn a_segment_named_entry_that_is_not_a_regular_file_is_corruption_naming_it() {
    // Issue 10 defect 6: a directory, FIFO or symlink to a device with a segment's name was
    // ignored: the store opened without its records and verify said OK.
    type Make = fn(&std::path::Path);
    let specials: [(&str, Make); 4] = [
        ("directory", |p| std::fs::create_dir(p).unwrap()),
        ("fifo", |p| {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc_mkfifo(c.as_ptr(), 0o600) }, 0);
        }),
        ("symlink to /dev/zero", |p| {
            std::os::unix::fs::symlink("/dev/zero", p).unwrap()
        }),
        ("symlink to /dev/null", |p| {
            std::os::unix::fs::symlink("/dev/null", p).unwrap()
        }),
    ];
    for (what, make) in specials {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(seg_name(0)), hand_segment(&[(1, b"a")])).unwrap();
        let special = dir.path().join(seg_name(1));
        make(&special);
        for readonly in [false, true] {
            let mut o = opts(1 << 20, 2 << 20, false);
            o.readonly = readonly;
            match Log::open(dir.path(), o) {
                Err(Error::Corruption { path, .. }) => assert_eq!(path, special, "{what}"),
                other => panic!("{what}: expected corruption, got {other:?}"),
            }
        }
        let report = tflux_core::verify(dir.path()).unwrap();
        assert!(!report.ok(), "{what}");
        assert!(
            report.problems.iter().any(|p| p.fatal && p.path == special),
            "{what}"
        );
    }
}

extern "C" {
    #[link_name = "mkfifo"]
    fn libc_mkfifo(path: *const std::ffi::c_char, mode: u32) -> i32;
}

#[test]
fn a_refused_store_open_changes_nothing() {
    // Issue 10 defect 14: the store created data/log and a 16 MiB segment (and cut torn
    // tails) before failing on bad metadata or a bad snapshot.
    use tflux_core::store::Store;
    let base = tempfile::tempdir().unwrap();
    let data = base.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("tflux.metadata"), [0xAB; 20]).unwrap();
    assert!(Store::open(base.path(), None, false).is_err());
    assert!(
        !data.join("log").exists(),
        "no log created by a refused open"
    );
    assert!(!data.join("temp").exists());

    // An existing log with a torn tail and a bad snapshot: the tail stays as it was.
    let base = tempfile::tempdir().unwrap();
    let logdir = base.path().join("data/log");
    std::fs::create_dir_all(&logdir).unwrap();
    let mut torn = hand_segment(&[(1, b"\x00\x00\x00\x01q")]);
    torn.truncate(torn.len() - 4); // no end marker:
    torn.extend_from_slice(&hand_record(1, b"cut")[..10]); // a record torn mid-header
    std::fs::write(logdir.join(seg_name(0)), &torn).unwrap();
    std::fs::write(base.path().join("data/tflux.snapshot"), b"garbage").unwrap();
    assert!(Store::open(base.path(), None, false).is_err());
    assert_eq!(std::fs::read(logdir.join(seg_name(0))).unwrap(), torn);
    assert!(!base.path().join("data/temp").exists());
}
