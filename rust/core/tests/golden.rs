//! Golden vectors: files written from the spec by an independent encoder (tests/data) must be
//! read exactly, and the log must write byte-identical segments.

mod common;

use common::*;
use tflux_core::{verify, Log};

#[test]
fn reads_every_padding_case_of_the_golden_segment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(seg_name(0)),
        golden("0000000000000000000.log"),
    )
    .unwrap();
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
    assert_eq!(
        all_entries(&mut log),
        expected_records("0000000000000000000.log")
    );
    assert!(!log.recovery().truncated());
}

#[test]
fn writes_byte_identical_segments() {
    let expected = golden("0000000000000000000.log");
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
    for (_, term, data) in expected_records("0000000000000000000.log") {
        log.append(term, &data).unwrap();
    }
    drop(log);
    let written = std::fs::read(dir.path().join(seg_name(0))).unwrap();
    assert_eq!(written, expected);
}

#[test]
fn preallocated_segment_matches_the_golden_file() {
    let expected = golden("preallocated_4096.log");
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), opts(4096, 8192, true)).unwrap();
    let recs = expected_records("preallocated_4096.log");
    let datas: Vec<&[u8]> = recs.iter().map(|r| r.2.as_slice()).collect();
    log.append_many(1, &datas).unwrap();
    drop(log);
    assert_eq!(
        std::fs::read(dir.path().join(seg_name(0))).unwrap(),
        expected
    );
}

#[test]
fn hand_encoder_agrees_with_the_golden_file() {
    // Guards the test helpers themselves: they are the reference for the other tests.
    let recs = expected_records("0000000000000000000.log");
    let refs: Vec<(i32, &[u8])> = recs.iter().map(|r| (r.1, r.2.as_slice())).collect();
    assert_eq!(hand_segment(&refs), golden("0000000000000000000.log"));
}

#[test]
fn torn_tail_vector_is_cut_at_the_manifest_offset() {
    for (name, key) in [
        ("torn_tail.log", "cut_at_offset"),
        ("bad_crc_tail.log", "bad_record_offset"),
    ] {
        let cut = manifest()[name][key].as_u64().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(seg_name(0));
        std::fs::write(&path, golden(name)).unwrap();
        let report = verify(dir.path()).unwrap();
        assert!(report.ok(), "{name}: a torn tail is not fatal");
        assert_eq!(report.problems[0].offset, Some(cut));
        let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
        assert_eq!(all_entries(&mut log), expected_records(name), "{name}");
        assert_eq!(log.recovery().cut_offset, Some(cut));
        drop(log);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[cut as usize..cut as usize + 4], &[0, 0, 0, 0]);
    }
}

#[test]
fn bad_crc_in_a_sealed_segment_is_corruption_at_the_manifest_offset() {
    let dir = tempfile::tempdir().unwrap();
    let recs = expected_records("bad_crc_tail.log");
    // Three records in the damaged segment: the next segment starts at LSN 3.
    std::fs::write(dir.path().join(seg_name(0)), golden("bad_crc_tail.log")).unwrap();
    std::fs::write(dir.path().join(seg_name(3)), hand_segment(&[(9, b"later")])).unwrap();
    let err = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap_err();
    match err {
        tflux_core::Error::Corruption { path, offset, .. } => {
            assert_eq!(path, dir.path().join(seg_name(0)));
            assert_eq!(offset, Some(48));
        }
        other => panic!("expected corruption, got {other}"),
    }
    assert_eq!(recs.len(), 2);
}
