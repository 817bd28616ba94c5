//! The snapshot codec (spec section 4 and the wide snapshot of 4.1): the golden snapshot
//! decodes to the manifest's values and agrees with a hand encoder written from the spec;
//! corrupt bytes at every offset class are `CorruptionError`s naming the offending field's
//! offset; absurd counts fail fast; random snapshots round-trip; encode, decode and a restore
//! accept the same snapshots; snapshot files are written atomically.

mod common;

use std::path::Path;

use common::*;
use proptest::prelude::*;
use tflux_core::base::files;
use tflux_core::format::metadata::Metadata;
use tflux_core::format::snapshot::{self, QueueData, Snapshot};
use tflux_core::io::storage::RealStorage;
use tflux_core::state::{IMPL_ARRAY, IMPL_HEAP};
use tflux_core::Error;

// ---------- a hand encoder of snapshots, written from spec section 4 ----------

struct HandQueue<'a> {
    name: &'a [u8],
    implementation: i32,
    last_id: u64,
    max_queue_size: i32,
    max_message_size: i32,
    key_range: Option<(i64, i64)>,
    records: Vec<(u64, i64, &'a [u8])>,
}

fn hand_queue<'a>(
    name: &'a [u8],
    last_id: u64,
    records: Vec<(u64, i64, &'a [u8])>,
) -> HandQueue<'a> {
    HandQueue {
        name,
        implementation: 1,
        last_id,
        max_queue_size: -1,
        max_message_size: -1,
        key_range: None,
        records,
    }
}

fn hand_state(queues: &[HandQueue]) -> Vec<u8> {
    let mut s = (queues.len() as i32).to_be_bytes().to_vec();
    for q in queues {
        s.push(q.name.len() as u8);
        s.extend_from_slice(q.name);
        s.extend_from_slice(&q.implementation.to_be_bytes());
        s.extend_from_slice(&q.last_id.to_be_bytes());
        s.extend_from_slice(&q.max_queue_size.to_be_bytes());
        s.extend_from_slice(&q.max_message_size.to_be_bytes());
        match q.key_range {
            Some((a, b)) => {
                s.push(1);
                s.extend_from_slice(&a.to_be_bytes());
                s.extend_from_slice(&b.to_be_bytes());
            }
            None => s.push(0),
        }
        s.extend_from_slice(&(q.records.len() as i32).to_be_bytes());
        for (id, key, data) in &q.records {
            s.extend_from_slice(&id.to_be_bytes());
            s.extend_from_slice(&key.to_be_bytes());
            s.extend_from_slice(&(data.len() as i32).to_be_bytes());
            s.extend_from_slice(data);
        }
    }
    s
}

fn hand_snapshot(index: i32, term: i32, state: &[u8]) -> Vec<u8> {
    let mut f = vec![0xB6, 0x38, 0x0F, 0xC9];
    f.extend_from_slice(&index.to_be_bytes());
    f.extend_from_slice(&term.to_be_bytes());
    f.extend_from_slice(&(state.len() as i32).to_be_bytes());
    f.extend_from_slice(state);
    f.extend_from_slice(&crc32fast::hash(state).to_be_bytes());
    f
}

/// The snapshot the manifest describes for `tflux.snapshot` (records in ascending id order).
fn manifest_snapshot() -> Snapshot {
    Snapshot {
        last_index: 41,
        last_term: 3,
        queues: vec![
            QueueData {
                name: vec![],
                implementation: 1,
                last_id: 3,
                max_queue_size: -1,
                max_message_size: -1,
                key_range: None,
                records: vec![(2, 10, b"b".to_vec()), (3, 10, b"c".to_vec())],
            },
            QueueData {
                name: b"jobs".to_vec(),
                implementation: 2,
                last_id: 7,
                max_queue_size: 50,
                max_message_size: 1024,
                key_range: Some((0, 9)),
                records: vec![(4, 9, vec![]), (7, 0, b"xxxxx".to_vec())],
            },
        ],
    }
}

fn snap_err(bytes: &[u8]) -> (u64, String) {
    corruption_offset(snapshot::decode(bytes, Path::new("tflux.snapshot")))
}

// ---------- snapshot ----------

#[test]
fn golden_snapshot_decodes_to_the_manifest_values() {
    let what = manifest()["tflux.snapshot"]["what"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(what.contains("last index 41, last term 3"), "{what}");
    let bytes = golden("tflux.snapshot");
    let decoded = snapshot::decode(&bytes, Path::new("tflux.snapshot")).unwrap();
    // The file holds 'jobs' records as id 7 then id 4: decode returns them in id order.
    assert_eq!(decoded, manifest_snapshot());
}

#[test]
fn golden_snapshot_agrees_with_the_hand_encoder() {
    // Guards the hand encoder: it is the reference for the corruption cases below.
    let mut jobs = hand_queue(b"jobs", 7, vec![(7, 0, b"xxxxx"), (4, 9, b"")]);
    jobs.implementation = 2;
    jobs.max_queue_size = 50;
    jobs.max_message_size = 1024;
    jobs.key_range = Some((0, 9));
    let state = hand_state(&[hand_queue(b"", 3, vec![(2, 10, b"b"), (3, 10, b"c")]), jobs]);
    assert_eq!(hand_snapshot(41, 3, &state), golden("tflux.snapshot"));
}

#[test]
fn snapshots_encode_records_in_id_order() {
    let mut jobs = hand_queue(b"jobs", 7, vec![(4, 9, b""), (7, 0, b"xxxxx")]);
    jobs.implementation = 2;
    jobs.max_queue_size = 50;
    jobs.max_message_size = 1024;
    jobs.key_range = Some((0, 9));
    let state = hand_state(&[hand_queue(b"", 3, vec![(2, 10, b"b"), (3, 10, b"c")]), jobs]);
    let expected = hand_snapshot(41, 3, &state);
    let mut s = manifest_snapshot();
    s.queues[1].records.reverse();
    assert_eq!(snapshot::encode(&s).unwrap(), expected);
    let golden = snapshot::decode(&golden("tflux.snapshot"), Path::new("x")).unwrap();
    let again = snapshot::encode(&golden).unwrap();
    assert_eq!(snapshot::decode(&again, Path::new("x")).unwrap(), golden);
}

#[test]
fn every_truncated_snapshot_is_corruption() {
    let bytes = golden("tflux.snapshot");
    for cut in 1..bytes.len() {
        let (offset, reason) = snap_err(&bytes[..cut]);
        assert!(offset <= cut as u64, "cut {cut}: {offset} {reason}");
    }
}

#[test]
fn every_flipped_snapshot_byte_outside_index_and_term_is_corruption() {
    let bytes = golden("tflux.snapshot");
    for i in 0..bytes.len() {
        for flip in [0x01, 0x80] {
            let mut b = bytes.clone();
            b[i] ^= flip;
            let r = snapshot::decode(&b, Path::new("s"));
            match i {
                4..=11 if flip == 0x01 => assert!(r.is_ok(), "byte {i}"), // not checksummed
                4 | 8 => assert!(r.is_err(), "sign of index/term at {i}"),
                5..=11 => assert!(r.is_ok()),
                _ => {
                    let (offset, _) = corruption_offset(r);
                    let expected = match i {
                        0..=3 => 0,
                        12..=15 => offset, // length: past the end or trailing bytes, both fine
                        _ => bytes.len() as u64 - 4,
                    };
                    assert_eq!(offset, expected, "byte {i} flip {flip:#x}");
                }
            }
        }
    }
}

#[test]
fn snapshot_header_errors_name_their_offsets() {
    let state = hand_state(&[hand_queue(b"", 0, vec![])]);
    let good = hand_snapshot(5, 2, &state);
    assert!(snapshot::decode(&good, Path::new("s")).is_ok());

    let mut bad_marker = good.clone();
    bad_marker[0] = 0;
    assert_eq!(snap_err(&bad_marker).0, 0);
    assert_eq!(snap_err(&hand_snapshot(-1, 2, &state)).0, 4);
    assert_eq!(snap_err(&hand_snapshot(5, -2, &state)).0, 8);

    let mut trailing = good.clone();
    trailing.extend_from_slice(b"xyz");
    let (offset, reason) = snap_err(&trailing);
    assert_eq!(
        (offset, reason.as_str()),
        (good.len() as u64, "3 trailing bytes after the checksum")
    );

    let mut crc = good.clone();
    let n = crc.len();
    crc[n - 1] ^= 1;
    let (offset, reason) = snap_err(&crc);
    assert_eq!(offset, n as u64 - 4);
    assert!(reason.starts_with("checksum mismatch"), "{reason}");

    let mut huge = good[..12].to_vec();
    huge.extend_from_slice(&i32::MAX.to_be_bytes());
    huge.extend_from_slice(&good[16..]);
    let (offset, reason) = snap_err(&huge);
    assert_eq!(offset, 12);
    assert!(
        reason.starts_with("state length 2147483647 runs past the end"),
        "{reason}"
    );

    let mut negative = good[..12].to_vec();
    negative.extend_from_slice(&(-4i32).to_be_bytes());
    negative.extend_from_slice(&good[16..]);
    assert_eq!(
        snap_err(&negative),
        (12, "state length -4 is negative".into())
    );
}

#[test]
fn snapshot_state_errors_name_their_offsets() {
    const Q0: u64 = 20; // first queue (after marker, index, term, length, count)
    let default = || hand_queue(b"", 5, vec![]);
    let check = |state: Vec<u8>, offset: u64, reason: &str| {
        let (o, r) = snap_err(&hand_snapshot(1, 1, &state));
        assert_eq!((o, r.as_str()), (offset, reason));
    };
    // Duplicate queue names: the second name's length byte.
    check(
        hand_state(&[
            default(),
            hand_queue(b"q", 0, vec![]),
            hand_queue(b"q", 0, vec![]),
        ]),
        Q0 + 26 + 27,
        "duplicate queue \"q\"",
    );
    check(
        hand_state(&[default(), default()]),
        Q0 + 26,
        "duplicate queue \"\"",
    );
    // Missing default queue: reported at the queue count.
    check(
        hand_state(&[hand_queue(b"q", 0, vec![])]),
        16,
        "no default queue (empty name) in the snapshot",
    );
    check(
        hand_state(&[]),
        16,
        "no default queue (empty name) in the snapshot",
    );
    // Record ids: above last id, duplicates adjacent and apart (the later one is named).
    let rec0 = Q0 + 26;
    check(
        hand_state(&[hand_queue(b"", 5, vec![(1, 0, b"a"), (6, 0, b"")])]),
        rec0 + 21,
        "record id 6 in queue \"\" is above its last id 5",
    );
    check(
        hand_state(&[hand_queue(b"", 5, vec![(2, 0, b""), (2, 0, b"")])]),
        rec0 + 20,
        "duplicate record id 2 in queue \"\"",
    );
    check(
        hand_state(&[hand_queue(
            b"",
            5,
            vec![(3, 0, b"xy"), (1, 0, b""), (3, 0, b"")],
        )]),
        rec0 + 22 + 20,
        "duplicate record id 3 in queue \"\"",
    );
    check(
        hand_state(&[hand_queue(
            b"",
            5,
            vec![(4, 0, b""), (2, 0, b"abc"), (3, 0, b""), (2, 7, b"")],
        )]),
        rec0 + 20 + 23 + 20,
        "duplicate record id 2 in queue \"\"",
    );
    // Bool other than 0/1 in the key range flag.
    let mut state = hand_state(&[default()]);
    state[4 + 1 + 4 + 8 + 4 + 4] = 2;
    check(state, Q0 + 21, "key range flag 0x02 is not a Bool (0 or 1)");
    // Invalid name byte.
    check(
        hand_state(&[default(), hand_queue(b"a b", 0, vec![])]),
        Q0 + 26 + 2,
        "queue name byte 0x20 at offset 48 is not in '!'..'~'",
    );
    // Trailing bytes inside the state.
    let mut state = hand_state(&[default()]);
    state.push(0);
    check(
        state,
        Q0 + 26,
        "1 trailing bytes in the state after the last queue",
    );
}

#[test]
fn absurd_counts_fail_fast() {
    // Queue count 2^31-1 with one queue's worth of bytes.
    let mut state = hand_state(&[hand_queue(b"", 0, vec![])]);
    state[..4].copy_from_slice(&i32::MAX.to_be_bytes());
    let (offset, reason) = snap_err(&hand_snapshot(1, 1, &state));
    assert_eq!(offset, 16);
    assert!(
        reason.starts_with("queue count 2147483647 runs past the end"),
        "{reason}"
    );
    // Record count 2^31-1.
    let mut state = hand_state(&[hand_queue(b"", 9, vec![(1, 0, b"")])]);
    let at = 4 + 22;
    state[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    let (offset, reason) = snap_err(&hand_snapshot(1, 1, &state));
    assert_eq!(offset, 16 + at as u64);
    assert!(
        reason.starts_with("record count 2147483647 runs past the end"),
        "{reason}"
    );
    // Negative counts.
    let mut state = hand_state(&[hand_queue(b"", 0, vec![])]);
    state[..4].copy_from_slice(&(-1i32).to_be_bytes());
    assert_eq!(
        snap_err(&hand_snapshot(1, 1, &state)),
        (16, "queue count -1 is negative".into())
    );
    // Record data length 2^31-1.
    let mut state = hand_state(&[hand_queue(b"", 9, vec![(1, 0, b"abc")])]);
    let at = 4 + 26 + 16;
    state[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
    let (offset, reason) = snap_err(&hand_snapshot(1, 1, &state));
    assert_eq!(offset, 16 + at as u64);
    assert_eq!(
        reason,
        "record data length 2147483647 runs past the end (3 bytes left)"
    );
}

#[test]
fn snapshot_encode_refuses_what_decode_would_refuse() {
    let invalid = |s: &Snapshot, needle: &str| match snapshot::encode(s) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(needle), "{m}"),
        other => panic!("expected InvalidArgument({needle}), got {other:?}"),
    };
    let base = manifest_snapshot();
    let mut s = base.clone();
    s.last_index = -1;
    invalid(&s, "last index -1");
    let mut s = base.clone();
    s.last_term = -1;
    invalid(&s, "last term -1");
    let mut s = base.clone();
    s.queues[1].name = b"a b".to_vec();
    invalid(&s, "queue name byte 0x20");
    let mut s = base.clone();
    s.queues[1].name = vec![b'x'; 256];
    invalid(&s, "256 bytes");
    let mut s = base.clone();
    s.queues[1].name = vec![];
    invalid(&s, "duplicate queue");
    let mut s = base.clone();
    s.queues.remove(0);
    invalid(&s, "default queue");
    let mut s = base.clone();
    s.queues[0].records.push((2, 0, vec![]));
    invalid(&s, "duplicate record id 2");
    let mut s = base.clone();
    s.queues[0].last_id = 2;
    invalid(&s, "above its last id");
    // What a restore refuses (spec 7): the codec refuses it too (issue 10, defect 10).
    let mut s = base.clone();
    s.queues[0].implementation = 7;
    invalid(&s, "unknown queue implementation code 7");
    let mut s = base.clone();
    s.queues[1].key_range = None;
    invalid(&s, "needs a key range");
    let mut s = base.clone();
    s.queues[1].key_range = Some((5, 4));
    invalid(&s, "min 5 is greater than max 4");
    let mut s = base.clone();
    s.queues[1].records[0].1 = 10;
    invalid(&s, "key 10 is outside the array queue's range [0, 9]");
    let mut s = base.clone();
    s.queues[1].max_queue_size = -2;
    invalid(&s, "max queue size -2 is invalid");
    let mut s = base.clone();
    s.queues[0].max_message_size = i32::MIN;
    invalid(&s, "max message size -2147483648 is invalid");
    let mut s = base;
    s.last_index = i32::MAX as i64;
    s.last_term = i32::MAX as i64;
    assert!(snapshot::encode(&s).is_ok());
}

/// Whatever a restore refuses, decode refuses as corruption at the field's offset.
#[test]
fn snapshot_decode_refuses_what_a_restore_refuses() {
    const Q0: u64 = 20; // first queue
    let check = |queues: &[HandQueue], offset: u64, needle: &str| {
        let (o, r) = snap_err(&hand_snapshot(1, 1, &hand_state(queues)));
        assert_eq!(o, offset, "{r}");
        assert!(r.contains(needle), "{r}");
    };
    let q = |implementation, max_queue_size, key_range, records| HandQueue {
        implementation,
        max_queue_size,
        key_range,
        ..hand_queue(b"", 9, records)
    };
    // Settings errors are reported where the queue's settings start (after the name).
    check(&[q(7, -1, None, vec![])], Q0 + 1, "implementation code 7");
    check(&[q(2, -1, None, vec![])], Q0 + 1, "needs a key range");
    check(&[q(1, -2, None, vec![])], Q0 + 1, "max queue size -2");
    check(
        &[q(1, -1, Some((3, 2)), vec![])],
        Q0 + 1,
        "min 3 is greater",
    );
    // A record outside an array queue's range: its key field.
    let rec0 = Q0 + 1 + 4 + 8 + 4 + 4 + 17 + 4;
    check(
        &[q(2, -1, Some((0, 3)), vec![(1, 3, b"ab"), (2, 4, b"")])],
        rec0 + 22 + 8,
        "key 4 is outside the array queue's range [0, 3]",
    );
    // A heap queue with a range holds any key (the range is only an enqueue policy).
    let ok = hand_snapshot(
        1,
        1,
        &hand_state(&[q(1, -1, Some((0, 3)), vec![(1, 9, b"")])]),
    );
    assert!(snapshot::decode(&ok, Path::new("s")).is_ok());
}

/// Spec 4.1 written independently: marker B6 38 0F CA, Int64 index and term, the state, and a
/// CRC over the 16 index/term bytes followed by the state bytes.
fn hand_wide_snapshot(index: i64, term: i64, state: &[u8]) -> Vec<u8> {
    let mut f = vec![0xB6, 0x38, 0x0F, 0xCA];
    f.extend_from_slice(&index.to_be_bytes());
    f.extend_from_slice(&term.to_be_bytes());
    f.extend_from_slice(&(state.len() as i32).to_be_bytes());
    f.extend_from_slice(state);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&f[4..20]);
    crc.update(state);
    f.extend_from_slice(&crc.finalize().to_be_bytes());
    f
}

/// Issue 10, defect 9: a snapshot past LSN 2^31-1 is written in the wide layout, read back, and
/// narrow files stay byte-identical to the seed's layout up to Int32::MAX.
#[test]
fn wide_snapshots_past_int32() {
    let state = hand_state(&[hand_queue(b"", 3, vec![(2, 10, b"b"), (3, 10, b"c")])]);
    let s = snapshot::decode(&hand_snapshot(1, 1, &state), Path::new("s")).unwrap();
    for (index, term) in [
        (i32::MAX as i64 + 1, 1),
        (5, i32::MAX as i64 + 1),
        // The largest LSN an entry can have: a snapshot's index names an entry (issue 43).
        (tflux_core::log::MAX_ENTRY_LSN, i64::MAX),
    ] {
        let wide = Snapshot {
            last_index: index,
            last_term: term,
            ..s.clone()
        };
        let bytes = snapshot::encode(&wide).unwrap();
        assert_eq!(bytes, hand_wide_snapshot(index, term, &state));
        assert_eq!(snapshot::decode(&bytes, Path::new("s")).unwrap(), wide);
    }
    let narrow = Snapshot {
        last_index: i32::MAX as i64,
        last_term: i32::MAX as i64,
        ..s.clone()
    };
    assert_eq!(
        snapshot::encode(&narrow).unwrap(),
        hand_snapshot(i32::MAX, i32::MAX, &state)
    );
    // Readers accept the wide layout for small values too.
    let small = hand_wide_snapshot(7, 2, &state);
    assert_eq!(
        snapshot::decode(&small, Path::new("s")).unwrap().last_index,
        7
    );
    // The wide checksum covers index and term: any flipped header bit is caught.
    for i in 4..20 {
        let mut b = small.clone();
        b[i] ^= 0x01;
        let (offset, reason) = snap_err(&b);
        assert_eq!(offset, b.len() as u64 - 4, "byte {i}: {reason}");
    }
    // Negative values are refused in either layout, at their field.
    assert_eq!(snap_err(&hand_wide_snapshot(-1, 2, &state)).0, 4);
    assert_eq!(snap_err(&hand_wide_snapshot(1, -2, &state)).0, 12);
    // A narrow marker with wide fields (or the reverse) fails, never misreads.
    let mut mixed = hand_wide_snapshot(7, 2, &state);
    mixed[3] = 0xC9;
    assert!(snapshot::decode(&mixed, Path::new("s")).is_err());
}

#[test]
fn snapshot_files_are_written_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let path = data.join("tflux.snapshot");
    assert_eq!(files::read_snapshot(&path).unwrap(), None);
    std::fs::write(&path, b"").unwrap();
    assert_eq!(files::read_snapshot(&path).unwrap(), None);
    std::fs::write(&path, golden("tflux.snapshot")).unwrap();
    assert_eq!(
        files::read_snapshot(&path).unwrap(),
        Some(manifest_snapshot())
    );

    let mut s = manifest_snapshot();
    s.last_index = 99;
    files::write_snapshot(&RealStorage, &path, &s).unwrap();
    assert_eq!(files::read_snapshot(&path).unwrap(), Some(s.clone()));
    let temp: Vec<_> = std::fs::read_dir(data.join("temp")).unwrap().collect();
    assert!(temp.is_empty(), "temp files left behind: {temp:?}");

    // A refused snapshot leaves the old file alone.
    let mut bad = s.clone();
    bad.last_term = -5;
    assert!(matches!(
        files::write_snapshot(&RealStorage, &path, &bad),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(files::read_snapshot(&path).unwrap(), Some(s));
}

#[test]
fn snapshot_read_reports_io_errors_and_corruption_with_the_path() {
    let dir = tempfile::tempdir().unwrap();
    // A directory where the file should be: refused naming the file, not "absent".
    match files::read_snapshot(dir.path()) {
        Err(Error::Corruption { path, reason, .. }) => {
            assert_eq!(path, dir.path());
            assert!(
                reason.contains("a directory, not a regular file"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let path = dir.path().join("tflux.snapshot");
    std::fs::write(&path, b"\xB6\x38\x0F").unwrap();
    match files::read_snapshot(&path) {
        Err(Error::Corruption { path: p, .. }) => assert_eq!(p, path),
        other => panic!("{other:?}"),
    }
}

#[test]
fn atomic_write_does_not_create_a_missing_parent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope").join("tflux.metadata");
    match files::write_metadata(&RealStorage, &path, &Metadata::default()) {
        Err(Error::Io { source, .. }) => assert_eq!(source.kind(), std::io::ErrorKind::NotFound),
        other => panic!("{other:?}"),
    }
    assert!(!dir.path().join("nope").exists());
}

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(0x21u8..=0x7E, 0..=255)
}

/// A size limit as stored: -1 (none) or 0..=Int32::MAX.
fn limit() -> impl Strategy<Value = i32> {
    prop_oneof![Just(-1), 0..=i32::MAX]
}

/// A key range with min <= max.
fn key_range() -> impl Strategy<Value = (i64, i64)> {
    (any::<i64>(), any::<i64>()).prop_map(|(a, b)| (a.min(b), a.max(b)))
}

/// A queue a restore accepts (spec 7): heap with any keys, or array with keys inside its range.
fn queue_strategy(name: Vec<u8>) -> impl Strategy<Value = QueueData> {
    (
        prop_oneof![Just(IMPL_HEAP), Just(IMPL_ARRAY)],
        limit(),
        limit(),
        prop::option::of(key_range()),
        key_range(),
        prop::collection::btree_map(
            any::<u64>(),
            (any::<i64>(), prop::collection::vec(any::<u8>(), 0..40)),
            0..12,
        ),
        any::<u64>(),
    )
        .prop_map(
            move |(
                implementation,
                max_queue_size,
                max_message_size,
                range,
                array_range,
                recs,
                extra,
            )| {
                let key_range = if implementation == IMPL_ARRAY {
                    Some(array_range)
                } else {
                    range
                };
                let max_id = recs.keys().next_back().copied().unwrap_or(0);
                let records = recs
                    .into_iter()
                    .map(|(id, (k, d))| {
                        let k = match (implementation, key_range) {
                            (IMPL_ARRAY, Some((min, max))) => {
                                let span = max as i128 - min as i128 + 1;
                                (min as i128 + (k as i128).rem_euclid(span)) as i64
                            }
                            _ => k,
                        };
                        (id, k, d)
                    })
                    .collect();
                QueueData {
                    name: name.clone(),
                    implementation,
                    last_id: max_id.saturating_add(extra % 4),
                    max_queue_size,
                    max_message_size,
                    key_range,
                    records,
                }
            },
        )
}

/// Index or term: mostly narrow (fits Int32), sometimes wide (spec 4.1).
fn header_value() -> impl Strategy<Value = i64> {
    prop_oneof![3 => 0..=i32::MAX as i64, 1 => 0..=i64::MAX]
}

fn snapshot_strategy() -> impl Strategy<Value = Snapshot> {
    (
        header_value().prop_map(|i| i.min(tflux_core::log::MAX_ENTRY_LSN)),
        header_value(),
        prop::collection::btree_set(name(), 0..5),
    )
        .prop_flat_map(|(last_index, last_term, mut names)| {
            names.insert(vec![]);
            let queues: Vec<_> = names.into_iter().map(queue_strategy).collect();
            (Just(last_index), Just(last_term), queues)
        })
        .prop_map(|(last_index, last_term, queues)| Snapshot {
            last_index,
            last_term,
            queues,
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]

    #[test]
    fn snapshots_round_trip(s in snapshot_strategy()) {
        let bytes = snapshot::encode(&s).unwrap();
        prop_assert_eq!(snapshot::decode(&bytes, Path::new("s")).unwrap(), s);
    }

    #[test]
    fn shuffled_snapshot_records_come_back_in_id_order(s in snapshot_strategy(), seed in any::<u64>()) {
        let s = Snapshot { last_index: s.last_index & i32::MAX as i64, last_term: s.last_term & i32::MAX as i64, ..s };
        // Hand-encode with records reversed or rotated: decoding must sort them.
        let queues: Vec<HandQueue> = s.queues.iter().map(|q| {
            let mut records: Vec<(u64, i64, &[u8])> = q.records.iter().map(|(i, k, d)| (*i, *k, d.as_slice())).collect();
            if seed % 2 == 0 { records.reverse() } else if !records.is_empty() {
                let n = (seed as usize) % records.len();
                records.rotate_left(n);
            }
            HandQueue {
                name: &q.name, implementation: q.implementation, last_id: q.last_id,
                max_queue_size: q.max_queue_size, max_message_size: q.max_message_size,
                key_range: q.key_range, records,
            }
        }).collect();
        let bytes = hand_snapshot(s.last_index as i32, s.last_term as i32, &hand_state(&queues));
        prop_assert_eq!(snapshot::decode(&bytes, Path::new("s")).unwrap(), s);
    }

    #[test]
    fn corrupted_snapshots_never_panic(s in snapshot_strategy(), at in any::<prop::sample::Index>(), flip in 1u8..) {
        let mut bytes = snapshot::encode(&s).unwrap();
        let i = at.index(bytes.len());
        bytes[i] ^= flip;
        let _ = snapshot::decode(&bytes, Path::new("s"));
        bytes.truncate(i);
        prop_assert!(snapshot::decode(&bytes, Path::new("s")).is_err());
    }
}

// ---------- the codec agrees with a restore (issue 10, defect 10) ----------

/// A queue with any field values, valid or not (small ranges so that keys fall in and out).
fn any_queue() -> impl Strategy<Value = QueueData> {
    (
        prop_oneof![Just(b"".to_vec()), Just(b"a".to_vec()), name()],
        prop_oneof![Just(1), Just(2), Just(0), Just(7), any::<i32>()],
        0u64..12,
        prop_oneof![Just(-1), Just(-2), 0..5, any::<i32>()],
        prop_oneof![Just(-1), Just(i32::MIN), 0..5],
        prop::option::of((-3i64..6, -3i64..6)),
        prop::collection::vec(
            (0u64..12, -5i64..8, prop::collection::vec(any::<u8>(), 0..3)),
            0..5,
        ),
    )
        .prop_map(
            |(name, implementation, last_id, mqs, mms, key_range, records)| QueueData {
                name,
                implementation,
                last_id,
                max_queue_size: mqs,
                max_message_size: mms,
                key_range,
                records,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    /// Encode, decode and restore share one validation: a snapshot is written iff a restore
    /// accepts it, and what is written decodes and restores.
    #[test]
    fn encode_accepts_exactly_what_a_restore_accepts(
        index in header_value(),
        queues in prop::collection::vec(any_queue(), 0..4),
    ) {
        let s = Snapshot { last_index: index, last_term: 1, queues };
        let restored = tflux_core::state::QueueState::from_snapshot(&s);
        match snapshot::encode(&s) {
            Ok(bytes) => {
                prop_assert!(restored.is_ok(), "{:?}", restored.err());
                let back = snapshot::decode(&bytes, Path::new("s")).unwrap();
                prop_assert!(tflux_core::state::QueueState::from_snapshot(&back).is_ok());
            }
            Err(e) => {
                prop_assert!(restored.is_err(), "encode refused ({e}) what a restore accepts");
            }
        }
    }
}
