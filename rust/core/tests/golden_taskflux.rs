//! Golden vectors of the taskflux dialect (spec section 11): `tests/data/taskflux`, written by
//! an encoder independent of tflux (`make_vectors.py`). The core must read them exactly, write
//! byte-identical records, metadata and snapshot headers, and cut damage where the manifest says.

mod common;

use std::path::Path;

use common::{seg_name, unhex};
use tflux_core::format::{metadata, snapshot};
use tflux_core::log::dialect::Dialect;
use tflux_core::{Log, LogOptions, SyncPolicy};

fn data(name: &str) -> Vec<u8> {
    std::fs::read(common::data_dir().join("taskflux").join(name)).expect("golden file")
}

fn manifest() -> serde_json::Value {
    serde_json::from_slice(&data("manifest.json")).unwrap()
}

fn records(name: &str) -> Vec<(i64, i32, Vec<u8>)> {
    manifest()[name]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let term = i32::try_from(r["term"].as_i64().unwrap()).unwrap();
            (
                r["lsn"].as_i64().unwrap(),
                term,
                unhex(r["data_hex"].as_str().unwrap()),
            )
        })
        .collect()
}

fn opts(dialect: Option<Dialect>) -> LogOptions {
    LogOptions {
        soft_limit: 1 << 20,
        hard_limit: 2 << 20,
        preallocate: false,
        sync: SyncPolicy::Never,
        dialect,
        ..LogOptions::default()
    }
}

fn open_with(dir: &Path, name: &str, dialect: Option<Dialect>) -> Log {
    std::fs::write(dir.join(seg_name(0)), data(name)).unwrap();
    Log::open(dir, opts(dialect)).unwrap()
}

#[test]
fn every_record_vector_reads_back_in_the_dialect_its_first_record_says() {
    for name in ["0000000000000000000.log", "large_term.log"] {
        let dir = tempfile::tempdir().unwrap();
        let mut log = open_with(dir.path(), name, None);
        assert_eq!(log.dialect(), Dialect::Taskflux, "{name}");
        assert_eq!(common::all_entries(&mut log), records(name), "{name}");
        assert!(!log.recovery().truncated());
    }
}

#[test]
fn appending_the_vector_records_writes_the_vector_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), opts(Some(Dialect::Taskflux))).unwrap();
    for (_, term, bytes) in records("0000000000000000000.log") {
        log.append(term, &bytes).unwrap();
    }
    drop(log);
    let written = std::fs::read(dir.path().join(seg_name(0))).unwrap();
    assert_eq!(written, data("0000000000000000000.log"));
}

#[test]
fn damaged_tails_are_cut_at_the_manifest_offset() {
    for (name, key) in [
        ("torn_tail.log", "cut_at_offset"),
        ("bad_crc_tail.log", "bad_record_offset"),
        ("after_taskflux_repair.log", "cut_at_offset"),
    ] {
        let cut = manifest()[name][key].as_u64().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut log = open_with(dir.path(), name, Some(Dialect::Taskflux));
        assert_eq!(common::all_entries(&mut log), records(name), "{name}");
        assert_eq!(log.recovery().cut_offset, Some(cut), "{name}");
        drop(log);
        let bytes = std::fs::read(dir.path().join(seg_name(0))).unwrap();
        assert!(bytes[cut as usize..].iter().all(|&b| b == 0), "{name}");
    }
}

#[test]
fn a_spec_choice_the_vector_contradicts_is_a_dialect_error_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(seg_name(0)), data("torn_tail.log")).unwrap();
    let err = Log::open(dir.path(), opts(Some(Dialect::Spec))).unwrap_err();
    assert!(matches!(err, tflux_core::Error::Dialect { .. }), "{err}");
    let bytes = std::fs::read(dir.path().join(seg_name(0))).unwrap();
    assert_eq!(bytes, data("torn_tail.log"));
}

#[test]
fn metadata_and_snapshot_vectors_decode_and_encode_byte_for_byte() {
    let m =
        metadata::decode_in(&data("tflux.metadata"), Path::new("m"), Dialect::Taskflux).unwrap();
    assert_eq!((m.term, m.voted_for), (7, Some(2)));
    assert_eq!(
        metadata::encode_in(&m, Dialect::Taskflux),
        data("tflux.metadata")
    );
    let none = metadata::decode_in(
        &data("tflux.metadata.novote"),
        Path::new("m"),
        Dialect::Taskflux,
    )
    .unwrap();
    assert_eq!(none.voted_for, None);
    let s =
        snapshot::decode_in(&data("tflux.snapshot"), Path::new("s"), Dialect::Taskflux).unwrap();
    let spec = std::fs::read(common::data_dir().join("tflux.snapshot")).unwrap();
    assert_eq!(s, snapshot::decode(&spec, Path::new("s")).unwrap());
    let bytes = snapshot::encode_in(&s, Dialect::Taskflux).unwrap();
    assert_eq!(bytes[..24], data("tflux.snapshot")[..24]);
    assert_eq!(
        snapshot::decode_in(&bytes, Path::new("s"), Dialect::Taskflux).unwrap(),
        s
    );
    // Each reader refuses the other dialect's file, at its first field.
    assert!(snapshot::decode(&data("tflux.snapshot"), Path::new("s")).is_err());
    assert!(metadata::decode(&data("tflux.metadata"), Path::new("m")).is_err());
}

#[test]
fn crc32_mpeg2_matches_the_manifest_check_values() {
    let crc = &manifest()["crc"];
    for (input, key) in [
        (&b"123456789"[..], "123456789"),
        (b"", "empty"),
        (b"hello", "hello"),
    ] {
        let want = u32::from_str_radix(crc[key].as_str().unwrap(), 16).unwrap();
        assert_eq!(tflux_core::codec::crc32_mpeg2(input), want, "{key}");
    }
}
