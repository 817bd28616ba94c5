//! Compressed sealed segments (`NNN.log.z`, spec section 9): golden files whose 37 header bytes
//! are written here by hand from the spec's table and whose payload comes from the codec crates
//! themselves (never from tflux), read by every reader; damaged `.z` files are corruption
//! naming the file; both files of one segment are resolved by a writable open as the spec says.

mod common;

use std::io::Write;
use std::path::Path;

use common::{all_entries, hand_segment, opts, seg_name};
use tflux_core::format::compressed::{self, Method};
use tflux_core::log::recovery::{FindingKind, RecoveryMode, ScanOptions};
use tflux_core::{Error, Log, LogOptions};

const SEG_A: [(i32, &[u8]); 3] = [(1, b"alpha"), (1, b"beta"), (2, b"gamma")];
const SEG_B: [(i32, &[u8]); 2] = [(2, b"delta"), (3, b"epsilon")];

/// Header of `0000000000000000000.log.z` holding SEG_A (80 bytes, CRC 9A507D7F) with zstd.
const HEADER_A_ZSTD: [u8; 37] = [
    0x12, 0x76, 0xAD, 0x5A, // file marker
    0, 0, 0, 1, // version
    0, 0, 0, 0, 0, 0, 0, 0, // first LSN 0
    0, 0, 0, 0, 0, 0, 0, 2, // last LSN 2
    1, // method zstd
    0, 0, 0, 0, 0, 0, 0, 80, // original length
    0x9A, 0x50, 0x7D, 0x7F, // original CRC
];

/// Header of `0000000000000000003.log.z` holding SEG_B (60 bytes, CRC 71176486) with lz4.
const HEADER_B_LZ4: [u8; 37] = [
    0x12, 0x76, 0xAD, 0x5A, // file marker
    0, 0, 0, 1, // version
    0, 0, 0, 0, 0, 0, 0, 3, // first LSN 3
    0, 0, 0, 0, 0, 0, 0, 4, // last LSN 4
    2, // method lz4
    0, 0, 0, 0, 0, 0, 0, 60, // original length
    0x71, 0x17, 0x64, 0x86, // original CRC
];

fn zstd_payload(original: &[u8]) -> Vec<u8> {
    zstd::bulk::compress(original, 3).unwrap()
}

fn lz4_payload(original: &[u8]) -> Vec<u8> {
    let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
    enc.write_all(original).unwrap();
    enc.finish().unwrap()
}

fn zname(lsn: i64) -> String {
    format!("{lsn:019}.log.z")
}

fn file_a() -> Vec<u8> {
    [&HEADER_A_ZSTD[..], &zstd_payload(&hand_segment(&SEG_A))].concat()
}

fn file_b() -> Vec<u8> {
    [&HEADER_B_LZ4[..], &lz4_payload(&hand_segment(&SEG_B))].concat()
}

/// A log of two compressed sealed segments and an active plain one holding LSN 5.
fn golden_log(dir: &Path) {
    std::fs::write(dir.join(zname(0)), file_a()).unwrap();
    std::fs::write(dir.join(zname(3)), file_b()).unwrap();
    std::fs::write(dir.join(seg_name(5)), hand_segment(&[(3, b"zeta")])).unwrap();
}

fn expected() -> Vec<(i64, i32, Vec<u8>)> {
    let zeta: [(i32, &[u8]); 1] = [(3, b"zeta")];
    let all = SEG_A.iter().chain(SEG_B.iter()).chain(zeta.iter());
    all.enumerate()
        .map(|(i, (t, d))| (i as i64, *t, d.to_vec()))
        .collect()
}

#[test]
fn the_hand_written_headers_are_what_the_encoder_writes() {
    for (header, seg, method, first, last) in [
        (HEADER_A_ZSTD, hand_segment(&SEG_A), Method::Zstd, 0, 2),
        (HEADER_B_LZ4, hand_segment(&SEG_B), Method::Lz4, 3, 4),
    ] {
        let decoded = compressed::decode_header(&header).unwrap();
        assert_eq!(
            (
                decoded.first_lsn,
                decoded.last_lsn,
                decoded.method,
                decoded.original_len
            ),
            (first, last, method, seg.len() as u64)
        );
        assert_eq!(compressed::encode_header(&decoded), header);
        let ours = compressed::encode(method, first, last, &seg);
        assert_eq!(ours[..37], header);
        assert_eq!(compressed::decode(&ours).unwrap().1, seg);
    }
}

#[test]
fn codec_library_payloads_decode() {
    assert_eq!(
        compressed::decode(&file_a()).unwrap().1,
        hand_segment(&SEG_A)
    );
    assert_eq!(
        compressed::decode(&file_b()).unwrap().1,
        hand_segment(&SEG_B)
    );
}

#[test]
fn log_open_reads_compressed_sealed_segments() {
    let dir = tempfile::tempdir().unwrap();
    golden_log(dir.path());
    for readonly in [true, false] {
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                readonly,
                ..opts(1 << 20, 2 << 20, false)
            },
        )
        .unwrap();
        assert_eq!(all_entries(&mut log), expected());
        assert_eq!((log.start_index(), log.last_index()), (0, 5));
        assert_eq!(log.term_at(1).unwrap(), 1);
        assert_eq!(log.term_at(2).unwrap(), 2);
        assert_eq!(log.term_at(4).unwrap(), 3);
        let segs = log.segments();
        let methods: Vec<_> = segs.iter().map(|s| s.compression).collect();
        assert_eq!(methods, [Some(Method::Zstd), Some(Method::Lz4), None]);
        assert!(segs[0].sealed && segs[1].sealed);
        assert_eq!(segs[0].file_size, file_a().len() as u64);
        assert_eq!(
            segs[0].size, 76,
            "offset past the last record of the original"
        );
        // Budgeted reads cross compressed segment boundaries.
        let two: Vec<_> = log
            .read(2, Some(10))
            .unwrap()
            .iter()
            .map(|e| e.lsn)
            .collect();
        assert_eq!(two, [2, 3]);
    }
    // The writable open appended nothing and removed nothing.
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [zname(0), zname(3), seg_name(5)]);
}

fn corruption_path(e: Error) -> std::path::PathBuf {
    match e {
        Error::Corruption { path, .. } => path,
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_damaged_compressed_segment_is_corruption_naming_it() {
    let good = file_a();
    let mut cases: Vec<(&str, Vec<u8>)> = vec![("intact", good.clone())];
    let mut at = |name, offset: usize, value: u8| {
        let mut f = good.clone();
        f[offset] = value;
        cases.push((name, f));
    };
    at("marker", 3, 0x55);
    at("version", 7, 2);
    at("first LSN", 15, 1);
    at("last LSN", 23, 3);
    at("method", 24, 9);
    at("method lz4 on zstd bytes", 24, 2);
    at("length", 32, 84);
    at("crc", 36, 0x80);
    let last = good.len() - 2;
    at("payload", last, good[last] ^ 0x5A);
    cases.push(("truncated", good[..good.len() - 3].to_vec()));
    cases.push(("header only", good[..37].to_vec()));
    cases.push(("short", good[..20].to_vec()));
    for (what, bytes) in cases {
        let base = tempfile::tempdir().unwrap();
        let dir = &base.path().join("log");
        std::fs::create_dir(dir).unwrap();
        golden_log(dir);
        std::fs::write(dir.join(zname(0)), &bytes).unwrap();
        let opened = Log::open(dir, opts(1 << 20, 2 << 20, false));
        if what == "intact" {
            opened.unwrap();
            continue;
        }
        let err = opened.expect_err(what);
        assert_eq!(corruption_path(err), dir.join(zname(0)), "{what}");
        // verify reports it too, and names the file.
        let report = tflux_core::verify(dir).unwrap();
        assert!(!report.ok(), "{what}");
        // Repair moves the damaged .z aside like any damaged sealed segment.
        let repaired = Log::open(
            dir,
            LogOptions {
                recovery: RecoveryMode::Repair,
                ..opts(1 << 20, 2 << 20, false)
            },
        )
        .unwrap();
        assert!(
            repaired.recovery().moved.iter().any(|p| p
                .file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with(&zname(0))),
            "{what}: {:?}",
            repaired.recovery()
        );
        assert!(!dir.join(zname(0)).exists());
    }
}

#[test]
fn both_files_with_a_good_z_keep_the_z_and_delete_the_log() {
    let dir = tempfile::tempdir().unwrap();
    golden_log(dir.path());
    std::fs::write(dir.path().join(seg_name(3)), hand_segment(&SEG_B)).unwrap();
    // Read-only: reads the .z, reports the pair, changes nothing.
    let scan = tflux_core::log::recovery::scan_dir(
        dir.path(),
        ScanOptions {
            mode: RecoveryMode::ReportOnly,
            ..ScanOptions::default()
        },
        &tflux_core::io::storage::real(),
    )
    .unwrap();
    assert!(scan.ok());
    let twin = scan
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::CompressedTwin)
        .unwrap();
    assert_eq!(twin.path, dir.path().join(seg_name(3)));
    let mut ro = Log::open(
        dir.path(),
        LogOptions {
            readonly: true,
            ..opts(1 << 20, 2 << 20, false)
        },
    )
    .unwrap();
    assert_eq!(all_entries(&mut ro), expected());
    assert!(dir.path().join(seg_name(3)).exists());
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
    assert_eq!(all_entries(&mut log), expected());
    assert!(!dir.path().join(seg_name(3)).exists());
    assert!(dir.path().join(zname(3)).exists());
}

#[test]
fn both_files_with_a_bad_z_keep_the_log_and_move_the_z_into_temp() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("log");
    std::fs::create_dir(&dir).unwrap();
    golden_log(&dir);
    std::fs::write(dir.join(seg_name(3)), hand_segment(&SEG_B)).unwrap();
    let mut bad = file_b();
    bad[36] ^= 1; // original CRC
    std::fs::write(dir.join(zname(3)), &bad).unwrap();
    let mut log = Log::open(&dir, opts(1 << 20, 2 << 20, false)).unwrap();
    assert_eq!(all_entries(&mut log), expected());
    assert!(dir.join(seg_name(3)).exists());
    assert!(!dir.join(zname(3)).exists());
    let moved: Vec<_> = std::fs::read_dir(base.path().join("temp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(moved.iter().any(|n| n.ends_with(&zname(3))), "{moved:?}");
}

#[test]
fn a_compressed_last_segment_becomes_the_active_plain_segment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(zname(0)), file_a()).unwrap();
    std::fs::write(dir.path().join(zname(3)), file_b()).unwrap();
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
    assert!(dir.path().join(seg_name(3)).exists());
    assert!(!dir.path().join(zname(3)).exists());
    log.append(3, b"zeta").unwrap();
    assert_eq!(all_entries(&mut log), expected());
    drop(log);
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
    assert_eq!(all_entries(&mut log), expected());
}

#[test]
fn a_cut_into_a_compressed_segment_decompresses_it_first() {
    let dir = tempfile::tempdir().unwrap();
    golden_log(dir.path());
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
    log.truncate_after(3).unwrap();
    assert_eq!(all_entries(&mut log), expected()[..4].to_vec());
    log.append(4, b"eta").unwrap();
    drop(log);
    let mut log = Log::open(dir.path(), opts(1 << 20, 2 << 20, false)).unwrap();
    let got = all_entries(&mut log);
    assert_eq!(got.len(), 5);
    assert_eq!(got[4], (4, 4, b"eta".to_vec()));
    assert!(dir.path().join(zname(0)).exists());
    assert!(!dir.path().join(zname(3)).exists());
}

/// A log under `base/log` with several sealed segments of compressible entries (and the
/// active one), and its entries.
fn plain_log(base: &Path) -> (std::path::PathBuf, Vec<(i64, i32, Vec<u8>)>) {
    let dir = base.join("log");
    let mut log = Log::open(&dir, opts(2048, 4096, true)).unwrap();
    for i in 0..120 {
        let data = format!("entry {i}: {}", "abc".repeat(20));
        log.append(1 + i / 50, data.as_bytes()).unwrap();
        log.commit(i as i64).unwrap();
    }
    let entries = all_entries(&mut log);
    (dir, entries)
}

fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

#[test]
fn compress_replaces_every_sealed_segment_and_never_the_active_one() {
    for method in [Method::Zstd, Method::Lz4] {
        let base = tempfile::tempdir().unwrap();
        let (dir, entries) = plain_log(base.path());
        let mut log = Log::open(&dir, opts(2048, 4096, true)).unwrap();
        let sealed = log.segments().len() - 1;
        assert!(sealed >= 3);
        let made = log.compress(method).unwrap();
        assert_eq!(made.len(), sealed);
        assert_eq!(
            log.compress(method).unwrap(),
            Vec::<std::path::PathBuf>::new()
        );
        assert_eq!(all_entries(&mut log), entries);
        let segs = log.segments();
        assert!(segs[..sealed].iter().all(|s| s.compression == Some(method)));
        assert!(segs[..sealed].iter().all(|s| s.file_size < s.size));
        assert_eq!(segs[sealed].compression, None);
        // Writing goes on in the active segment, and a reopen reads everything back.
        log.append(9, b"after").unwrap();
        drop(log);
        let mut log = Log::open(&dir, opts(2048, 4096, true)).unwrap();
        let got = all_entries(&mut log);
        assert_eq!(got[..entries.len()], entries[..]);
        assert_eq!(got.last().unwrap().2, b"after");
        let listed = names(&dir);
        assert_eq!(
            listed.iter().filter(|n| n.ends_with(".log.z")).count(),
            sealed
        );
        assert_eq!(names(&base.path().join("temp")), Vec::<String>::new());
        assert!(tflux_core::verify(&dir).unwrap().ok());
    }
}

#[test]
fn a_readonly_log_refuses_to_compress() {
    let base = tempfile::tempdir().unwrap();
    let (dir, _) = plain_log(base.path());
    let mut log = Log::open(
        &dir,
        LogOptions {
            readonly: true,
            ..opts(2048, 4096, true)
        },
    )
    .unwrap();
    assert!(matches!(
        log.compress(Method::Zstd),
        Err(Error::ReadOnly { .. })
    ));
}

#[test]
fn a_compression_stopped_after_any_step_loses_nothing_and_leaves_no_orphan_after_reopen() {
    use tflux_core::segment::compress::CompressStep;
    for step in CompressStep::ALL {
        let base = tempfile::tempdir().unwrap();
        let (dir, entries) = plain_log(base.path());
        let mut log = Log::open(&dir, opts(2048, 4096, true)).unwrap();
        log.stop_compress_after(Some(step));
        let first = log.compressible()[1];
        assert!(log.compress_one(first, Method::Zstd).is_err(), "{step:?}");
        drop(log);
        // What a kill there leaves: readers (read-only) see every entry already.
        let mut ro = Log::open(
            &dir,
            LogOptions {
                readonly: true,
                ..opts(2048, 4096, true)
            },
        )
        .unwrap();
        assert_eq!(all_entries(&mut ro), entries, "{step:?} read-only");
        drop(ro);
        let mut log = Log::open(&dir, opts(2048, 4096, true)).unwrap();
        assert_eq!(all_entries(&mut log), entries, "{step:?}");
        // No orphan: one file per segment, nothing left in temp.
        let listed = names(&dir);
        let plain = seg_name(first);
        let z = zname(first);
        let both = listed.contains(&plain) && listed.contains(&z);
        assert!(!both, "{step:?}: {listed:?}");
        assert!(listed.contains(&plain) || listed.contains(&z), "{step:?}");
        let expect_z = step >= CompressStep::Renamed;
        assert_eq!(listed.contains(&z), expect_z, "{step:?}: {listed:?}");
        assert_eq!(
            names(&base.path().join("temp")),
            Vec::<String>::new(),
            "{step:?}"
        );
        // And compressing again completes.
        log.compress(Method::Zstd).unwrap();
        assert_eq!(all_entries(&mut log), entries, "{step:?}");
    }
}

/// Sibling logs share the parent's `temp/` and have segments of the same names: a log's open
/// and its compressions must leave the other's copy in progress alone (an unprefixed copy name
/// let a sibling's open remove it and a sibling's compression replace it, so that the first
/// log could rename the other's records in place of its own segment).
#[test]
fn sibling_logs_never_touch_each_others_compressed_copies() {
    use tflux_core::segment::compress::CompressStep;
    let base = tempfile::tempdir().unwrap();
    let mut entries = Vec::new();
    for name in ["a", "b"] {
        let mut log = Log::open(base.path().join(name), opts(2048, 4096, true)).unwrap();
        for i in 0..120 {
            let data = format!("log {name}, entry {i}: {}", "xyz".repeat(20));
            log.append(1, data.as_bytes()).unwrap();
        }
        entries.push(all_entries(&mut log));
    }
    let temp = base.path().join("temp");
    // Log a stops with its copy of its second segment written in temp/ (what a kill leaves).
    let mut a = Log::open(base.path().join("a"), opts(2048, 4096, true)).unwrap();
    a.stop_compress_after(Some(CompressStep::Written));
    let first = a.compressible()[1];
    assert!(a.compress_one(first, Method::Zstd).is_err());
    let left = names(&temp);
    assert_eq!(left.len(), 1, "{left:?}");
    let copy = std::fs::read(temp.join(&left[0])).unwrap();
    drop(a);
    // Log b opens (removing its own leftovers) and compresses the segment of the same name.
    let mut b = Log::open(base.path().join("b"), opts(2048, 4096, true)).unwrap();
    assert_eq!(b.compressible()[1], first);
    b.compress(Method::Zstd).unwrap();
    assert_eq!(all_entries(&mut b), entries[1]);
    assert_eq!(names(&temp), left, "log b removed or replaced log a's copy");
    assert_eq!(std::fs::read(temp.join(&left[0])).unwrap(), copy);
    drop(b);
    // Log a's own writable open removes its leftover; compressing again keeps its entries.
    let mut a = Log::open(base.path().join("a"), opts(2048, 4096, true)).unwrap();
    assert_eq!(names(&temp), Vec::<String>::new());
    a.compress(Method::Zstd).unwrap();
    assert_eq!(all_entries(&mut a), entries[0]);
    drop(a);
    for (name, expected) in ["a", "b"].iter().zip(&entries) {
        let mut log = Log::open(base.path().join(name), opts(2048, 4096, true)).unwrap();
        assert_eq!(&all_entries(&mut log), expected, "log {name}");
    }
}
