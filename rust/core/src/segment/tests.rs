//! Unit tests of the segment wing: the walk, the index and the open-time scan of one file.

use proptest::prelude::*;

use crate::format::dialect::Dialect;
use crate::format::record::{self, BadRecord};
use crate::format::segment as header;
use crate::io::storage::RealStorage;
use crate::log::recovery::{scan_segment, FindingKind, Position, ScanOptions};

use super::index::RecordIndex;
use super::scan::{scan_file, scan_file_with, ActiveBytes, ActiveRead, FileScan};
use super::walk::{scan_records, ScanStop};

/// Everything a scan's classification reads, for comparing two scans of one file.
fn outcome(s: &FileScan) -> String {
    let offsets: Vec<u64> = if s.index.is_dense() {
        (0..s.index.len()).map(|i| s.index.offset(i)).collect()
    } else {
        Vec::new()
    };
    let ambiguous = s.index.is_dense() && s.ends_with_ambiguous_empty_record();
    let ambiguous_reach = ambiguous.then(|| s.nonzero_end(*offsets.last().unwrap()));
    // How far garbage reaches only matters where the scan stopped on a problem.
    let reach = (s.stop != ScanStop::Clean).then(|| s.nonzero_end(s.end));
    format!(
        "{:?} len {} count {} end {} stop {:?} terms {:?}..{:?} index {offsets:?} \
         reach {reach:?} torn header {} ambiguous {ambiguous} {ambiguous_reach:?}",
        s.header,
        s.file_len,
        s.count,
        s.end,
        s.stop,
        s.first_term,
        s.last_term,
        s.stop_is_torn_header(),
    )
}

/// `scan_records_from` stops at the first record whose term is negative or below the term
/// before it (the one given for the first record, which may itself be negative), naming
/// that term and the one before, and visits every record before it.
#[test]
fn the_scan_stops_at_the_first_negative_or_decreasing_term() {
    let terms = prop::collection::vec(-3i32..4, 0..8);
    proptest!(|(terms in terms, previous_term in -3i32..4)| {
        let mut buf = header::header().to_vec();
        let mut starts = Vec::new();
        for &t in &terms {
            starts.push(buf.len() as u64);
            record::encode_any_term(&mut buf, t, b"x");
        }
        let mut seen = Vec::new();
        let (end, stop) = scan_records(&buf, previous_term, |o, t, _| seen.push((o, t)));
        let mut before = previous_term;
        let mut expected = (buf.len() as u64, ScanStop::Clean);
        for (k, &t) in terms.iter().enumerate() {
            if t < 0 || t < before {
                let offset = starts[k];
                expected = (offset, ScanStop::Term { offset, term: t, previous: before });
                break;
            }
            before = t;
        }
        prop_assert_eq!((end, stop), expected.clone());
        let visited = starts.iter().take_while(|&&o| o < expected.0).count();
        let want: Vec<(u64, i32)> = starts.iter().copied().zip(terms.iter().copied()).take(visited).collect();
        prop_assert_eq!(seen, want);
    });
}

/// The active segment read `chunk` bytes at a time against the whole file read at once.
fn same_as_whole(bytes: &[u8], chunk: u64, build_index: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0000000000000000000.log");
    std::fs::write(&path, bytes).unwrap();
    let scan = |chunk, active| {
        scan_file_with(
            &RealStorage,
            Dialect::Spec,
            &path,
            false,
            false,
            0,
            build_index,
            chunk,
            active,
            None,
        )
        .unwrap()
    };
    let whole = scan(u64::MAX, ActiveBytes::Kept);
    let chunked = scan(chunk, ActiveBytes::Kept);
    assert_eq!(outcome(&chunked), outcome(&whole), "chunk {chunk}");
    let end = whole.end as usize;
    assert_eq!(chunked.bytes.get(..end), whole.bytes.get(..end));
    // Through a window: the same findings; the bytes only when the records do not end
    // cleanly (then they are scanned again whole).
    for chunk in [chunk, u64::MAX] {
        let windowed = scan(chunk, ActiveBytes::Dropped);
        assert_eq!(outcome(&windowed), outcome(&whole), "window {chunk}");
        if windowed.bytes.is_empty() {
            assert_eq!(windowed.stop, ScanStop::Clean, "window {chunk}");
        } else {
            assert_eq!(windowed.bytes.get(..end), whole.bytes.get(..end));
        }
    }
}

/// Records of 64 bytes from the header on, the last one sized so they end at `end`.
fn records_until(end: usize) -> Vec<u8> {
    let mut buf = header::header().to_vec();
    let mut k = 0u8;
    while end - buf.len() >= 64 + 80 {
        record::encode(&mut buf, 1, &[k; 48]);
        k = k.wrapping_add(1);
    }
    let last = end - buf.len() - record::HEADER_LEN;
    record::encode(&mut buf, 1, &vec![0xA5; last]);
    assert_eq!(buf.len(), end);
    buf
}

const CHUNK: usize = ActiveRead::CHUNK as usize;

#[test]
fn a_trailing_empty_record_is_seen_whatever_window_its_end_marker_falls_in() {
    // A window that ends right after the empty record leaves the end marker to the next
    // window, which visits no record: the scan must still know the last one was empty.
    let mut bytes = header::header().to_vec();
    for k in 0..3u8 {
        record::encode(&mut bytes, 1, &[k + 1; 20]);
    }
    record::encode(&mut bytes, 1, &[]);
    bytes.resize(bytes.len() + 64, 0);
    for chunk in 1..=bytes.len() as u64 {
        same_as_whole(&bytes, chunk, true);
        same_as_whole(&bytes, chunk, false);
    }
}

#[test]
fn an_end_marker_at_or_across_a_chunk_boundary_ends_the_scan_as_a_whole_read_does() {
    // Record ends are 4-aligned, so is the chunk: the marker sits just before, right at,
    // or just after the boundary (the property test below straddles it).
    for end in [CHUNK - 8, CHUNK - 4, CHUNK, CHUNK + 4] {
        let mut bytes = records_until(end);
        bytes.resize(5 << 20, 0);
        same_as_whole(&bytes, ActiveRead::CHUNK, true);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0000000000000000000.log");
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan_file(&RealStorage, Dialect::Spec, &path, false, false, 0, true).unwrap();
        assert_eq!((scan.end, &scan.stop), (end as u64, &ScanStop::Clean));
    }
}

#[test]
fn a_bad_record_past_the_first_chunk_is_found_where_a_whole_read_finds_it() {
    // A flipped data byte at about 3 MiB, then garbage at 4.5 MiB the cut must reach.
    let mut bytes = records_until(3 << 20);
    let bad = bytes.len();
    record::encode(&mut bytes, 1, &[7; 48]);
    bytes.extend(records_until(1 << 20)[header::HEADER_LEN..].iter());
    bytes[bad + record::HEADER_LEN + 5] ^= 0x40;
    bytes.resize(9 << 19, 0);
    bytes.extend_from_slice(&[1, 2, 3]);
    bytes.resize(5 << 20, 0);
    same_as_whole(&bytes, ActiveRead::CHUNK, true);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0000000000000000000.log");
    std::fs::write(&path, &bytes).unwrap();
    let options = ScanOptions::default();
    let (scan, finding) = scan_segment(&path, Position::Last, 0, &options).unwrap();
    let f = finding.expect("a torn tail");
    assert_eq!(f.kind, FindingKind::TornTail);
    assert_eq!(f.offset, Some(bad as u64));
    assert_eq!(f.reach, Some((9 << 19) + 3));
    assert!(matches!(
        scan.stop,
        ScanStop::Bad {
            reason: BadRecord::BadChecksum { .. },
            ..
        }
    ));
}

#[test]
fn an_absurd_length_near_a_chunk_boundary_is_judged_against_the_whole_file() {
    for at in [CHUNK - 16, CHUNK - 8, CHUNK - 4, CHUNK] {
        let mut bytes = records_until(at);
        record::encode(&mut bytes, 1, &[9; 40]);
        // Length fields past the chunk, past the file, and negative.
        for len in [(CHUNK as u32) + 100, 0x7FFF_FFF0, 0x8000_0000] {
            let mut bytes = bytes.clone();
            bytes[at + 12..at + 16].copy_from_slice(&len.to_be_bytes());
            bytes.resize(3 << 20, 0);
            same_as_whole(&bytes, ActiveRead::CHUNK, true);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("0000000000000000000.log");
            std::fs::write(&path, &bytes).unwrap();
            let scan =
                scan_file(&RealStorage, Dialect::Spec, &path, false, false, 0, true).unwrap();
            let ScanStop::Bad { offset, reason } = &scan.stop else {
                panic!("{:?}", scan.stop)
            };
            assert_eq!(*offset, at as u64);
            if let BadRecord::PastEnd { available, .. } = reason {
                assert_eq!(*available, bytes.len() - at);
            }
        }
    }
}

#[test]
fn a_trailing_empty_record_is_judged_on_the_whole_rest_of_the_file() {
    // An empty record followed by zeros may be a torn header: whether only zeros follow is
    // a question about every byte of the file, also those past the first chunk.
    for garbage in [None, Some(CHUNK + 1000)] {
        let mut bytes = records_until(4096);
        record::encode(&mut bytes, 1, &[]);
        bytes.resize(3 << 20, 0);
        if let Some(at) = garbage {
            bytes[at] = 0x11;
        }
        same_as_whole(&bytes, ActiveRead::CHUNK, true);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0000000000000000000.log");
        std::fs::write(&path, &bytes).unwrap();
        let scan = scan_file(&RealStorage, Dialect::Spec, &path, false, false, 0, true).unwrap();
        assert_eq!(scan.ends_with_ambiguous_empty_record(), garbage.is_none());
    }
}

fn segment_bytes() -> impl Strategy<Value = (Vec<u8>, u64, bool)> {
    let len = prop_oneof![1 => Just(0usize), 4 => 0usize..120];
    let records = prop::collection::vec((0i32..4, len), 0..30);
    (
        records,
        any::<bool>(),
        prop::option::weighted(0.4, (0u16..1000, any::<u8>())),
        prop::option::weighted(0.2, (0usize..30, any::<u32>())),
        prop::option::weighted(0.2, 0u16..1000),
        0usize..600,
        prop::option::weighted(0.3, 0u16..1000),
        (1u64..400, any::<bool>()),
    )
        .prop_map(
            |(mut records, marker, flip, length, cut, zeros, garbage, (chunk, index))| {
                if records.len() % 3 != 0 {
                    records.sort_by_key(|r| r.0);
                }
                let mut buf = header::header().to_vec();
                let mut starts = Vec::new();
                for (k, &(term, len)) in records.iter().enumerate() {
                    starts.push(buf.len());
                    record::encode(&mut buf, term, &vec![k as u8 | 1; len]);
                }
                if marker {
                    buf.extend_from_slice(&record::END_MARKER);
                }
                buf.resize(buf.len() + zeros, 0);
                if let Some((at, word)) = length.filter(|_| !starts.is_empty()) {
                    let at = starts[at % starts.len()] + 12;
                    buf[at..at + 4].copy_from_slice(&word.to_be_bytes());
                }
                if let Some((at, x)) = flip {
                    let at = buf.len() * at as usize / 1000;
                    buf[at] ^= x | 1;
                }
                if let Some(at) = garbage {
                    let at = buf.len() * at as usize / 1000;
                    buf[at] = 0xEE;
                }
                if let Some(c) = cut {
                    buf.truncate(buf.len() * c as usize / 1000);
                }
                (buf, chunk, index)
            },
        )
}

proptest! {
    #[test]
    fn the_active_segment_read_in_chunks_scans_like_the_whole_file(
        (bytes, chunk, index) in segment_bytes()
    ) {
        same_as_whole(&bytes, chunk, index);
    }
}

#[test]
#[should_panic(expected = "sparse index")]
fn a_sparse_index_refuses_to_answer_for_one_record_even_in_release_builds() {
    let mut index = RecordIndex::sparse(8);
    for i in 0..20 {
        index.push(8 + 16 * i, 1);
    }
    // Record 9's offset is not remembered; the answer would be another record's.
    index.offset(9);
}

#[test]
fn a_dense_index_answers_for_every_record() {
    let mut index = RecordIndex::default();
    for i in 0..20 {
        index.push(8 + 16 * i, 1);
    }
    assert_eq!(index.offset(9), 8 + 16 * 9);
    assert_eq!(index.iter_until(8 + 16 * 9), 9);
}
