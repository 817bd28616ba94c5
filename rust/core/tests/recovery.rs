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
