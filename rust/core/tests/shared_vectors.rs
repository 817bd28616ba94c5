//! The shared vectors of the Java twins (`tests/data/twins`, written from the spec by
//! `tests/data/twins/make_vectors.py`, never by tflux): the core must read each one exactly as
//! its manifest says. The same files are read by the Python API and by the JVM reader in
//! `tests/spark/test_jvm_twins.py`, so the core and its Java twin are held to one set of bytes:
//! compressed sealed segments (spec 9), the wide snapshot (4.1), a receiver cursor (10), a
//! replay whose record ids and live records are given (7) and deltas the bounds-checked reader
//! refuses (2, 6), a log of two dialects (11) and a snapshot index past the largest LSN.

mod common;

use std::path::{Path, PathBuf};

use common::{all_entries, opts, unhex};
use serde_json::Value;
use tflux_core::format::{compressed, receiver, snapshot};
use tflux_core::state::{Applied, QueueState};
use tflux_core::{Error, Log, LogOptions};

fn twins() -> PathBuf {
    common::data_dir().join("twins")
}

fn manifest() -> Value {
    serde_json::from_str(&std::fs::read_to_string(twins().join("manifest.json")).unwrap()).unwrap()
}

fn read(name: &str) -> Vec<u8> {
    std::fs::read(twins().join(name)).unwrap()
}

/// A base directory laid out as the vector's `install` map says (destination -> vector file).
fn install(vector: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (dest, src) in manifest()[vector]["install"].as_object().unwrap() {
        let to = dir.path().join(dest);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(twins().join(src.as_str().unwrap()), to).unwrap();
    }
    dir
}

fn readonly() -> LogOptions {
    LogOptions {
        readonly: true,
        ..opts(1 << 20, 2 << 20, false)
    }
}

fn records(v: &Value) -> Vec<(i64, i32, Vec<u8>)> {
    v["records"]
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

/// The path and offset of a corruption error (any other error fails the test).
fn corruption(e: Error) -> (PathBuf, Option<u64>, String) {
    match e {
        Error::Corruption {
            path,
            offset,
            reason,
        } => (path, offset, reason),
        other => panic!("expected a corruption error, got {other}"),
    }
}

#[test]
fn each_compressed_vector_decodes_to_the_segment_its_header_describes() {
    let m = manifest();
    for name in ["zstd.log.z", "lz4.log.z"] {
        let v = &m[name];
        let (header, original) = compressed::decode(&read(name)).unwrap();
        assert_eq!(header.first_lsn, v["first_lsn"].as_i64().unwrap(), "{name}");
        assert_eq!(header.last_lsn, v["last_lsn"].as_i64().unwrap(), "{name}");
        assert_eq!(
            i64::from(header.method.byte()),
            v["method"].as_i64().unwrap()
        );
        assert_eq!(header.original_len, v["original_len"].as_u64().unwrap());
        assert_eq!(original.len() as u64, header.original_len);
        let crc = format!("{:08x}", crc32fast::hash(&original));
        assert_eq!(crc, v["original_crc"].as_str().unwrap(), "{name}");
        assert_eq!(format!("{:08x}", header.original_crc), crc);
    }
}

#[test]
fn a_log_with_a_compressed_sealed_segment_reads_every_record_of_the_manifest() {
    let m = manifest();
    for name in ["zstd.log.z", "lz4.log.z"] {
        let base = install(name);
        let mut log = Log::open(base.path().join("data/log"), readonly()).unwrap();
        assert_eq!(all_entries(&mut log), records(&m[name]), "{name}");
        let z = &log.segments()[0];
        let count = m[name]["last_lsn"].as_u64().unwrap() + 1;
        assert!(
            z.sealed && z.compression.is_some() && z.count == count,
            "{z:?}"
        );
    }
}

#[test]
fn the_compressed_vector_with_a_wrong_crc_is_corruption_at_the_crc_field() {
    let m = &manifest()["bad_crc.log.z"];
    let want = m["error_offset"].as_u64().unwrap();
    let bad = compressed::decode(&read("bad_crc.log.z")).unwrap_err();
    assert_eq!(bad.offset(), want);
    let base = install("bad_crc.log.z");
    let e = Log::open(base.path().join("data/log"), readonly()).unwrap_err();
    let (path, offset, reason) = corruption(e);
    assert!(
        path.ends_with(m["error_file"].as_str().unwrap()),
        "{path:?}"
    );
    assert_eq!(offset, Some(want), "{reason}");
    assert!(reason.contains("CRC"), "{reason}");
}

#[test]
fn a_flipped_payload_byte_of_a_compressed_vector_is_never_read_as_the_segment() {
    for name in ["zstd.log.z", "lz4.log.z"] {
        let good = read(name);
        let (_, original) = compressed::decode(&good).unwrap();
        let mut refused = 0;
        for at in compressed::HEADER_LEN..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            match compressed::decode(&bad) {
                // Frame fields the codec never reads may change freely; the bytes may not.
                Ok((_, decoded)) => assert_eq!(decoded, original, "{name}: byte {at} flipped"),
                Err(e) => {
                    assert!(e.offset() >= 25, "{name}: byte {at}: {e:?}");
                    refused += 1;
                }
            }
        }
        assert!(
            refused > (good.len() - compressed::HEADER_LEN) / 2,
            "{name}"
        );
    }
}

fn snapshot_queues(s: &snapshot::Snapshot) -> Value {
    let queues: Vec<Value> = s
        .queues
        .iter()
        .map(|q| {
            let recs: Vec<Value> = q
                .records
                .iter()
                .map(|(id, key, data)| {
                    let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
                    serde_json::json!({"id": id, "key": key, "message_hex": hex})
                })
                .collect();
            serde_json::json!({
                "queue": String::from_utf8(q.name.clone()).unwrap(),
                "implementation": q.implementation,
                "last_id": q.last_id,
                "max_queue_size": q.max_queue_size,
                "max_message_size": q.max_message_size,
                "key_range": q.key_range.map(|(a, b)| vec![a, b]),
                "records": recs,
            })
        })
        .collect();
    Value::Array(queues)
}

/// The manifest's queues with each queue's records by ascending id (the order a reader
/// returns them in; the file stores them out of order).
fn by_id(queues: &Value) -> Value {
    let mut queues = queues.clone();
    for q in queues.as_array_mut().unwrap() {
        q["records"]
            .as_array_mut()
            .unwrap()
            .sort_by_key(|r| r["id"].as_u64().unwrap());
    }
    queues
}

#[test]
fn the_wide_snapshot_vector_decodes_to_its_64_bit_index_term_and_queues() {
    let m = &manifest()["wide.snapshot"];
    let path = twins().join("wide.snapshot");
    let s = snapshot::decode(&read("wide.snapshot"), &path).unwrap();
    assert_eq!(s.last_index, m["last_index"].as_i64().unwrap());
    assert_eq!(s.last_term, m["last_term"].as_i64().unwrap());
    assert_eq!(s.layout(), snapshot::Layout::Wide);
    assert_eq!(snapshot_queues(&s), by_id(&m["queues"]));
}

#[test]
fn a_flipped_bit_of_the_wide_index_fails_the_checksum_that_covers_it() {
    let m = &manifest()["wide_index_flipped.snapshot"];
    let path = twins().join("wide_index_flipped.snapshot");
    let e = snapshot::decode(&read("wide_index_flipped.snapshot"), &path).unwrap_err();
    let (at, offset, reason) = corruption(e);
    assert_eq!(at, path);
    assert_eq!(offset, m["error_offset"].as_u64());
    assert!(reason.contains("checksum mismatch"), "{reason}");
}

#[test]
fn the_cursor_vector_holds_its_receivers_next_lsn() {
    let m = &manifest()["reader.cursor"];
    let want = m["next_lsn"].as_i64().unwrap();
    let path = twins().join("reader.cursor");
    assert_eq!(
        receiver::decode(&read("reader.cursor"), &path).unwrap(),
        want
    );
    let base = install("reader.cursor");
    let cursors = base.path().join("data/cursors");
    let listed = tflux_core::channel::cursor::list(&cursors).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].0, m["receiver"].as_str().unwrap());
    assert_eq!(*listed[0].1.as_ref().unwrap(), want);
}

#[test]
fn the_cursor_vector_with_a_changed_lsn_is_corruption_naming_it() {
    let m = &manifest()["bad_crc.cursor"];
    let path = twins().join("bad_crc.cursor");
    let e = receiver::decode(&read("bad_crc.cursor"), &path).unwrap_err();
    let (at, offset, reason) = corruption(e);
    assert_eq!(at, path);
    assert_eq!(offset, m["error_offset"].as_u64());
    assert!(reason.contains("checksum mismatch"), "{reason}");
}

fn replay_json() -> Value {
    serde_json::from_str(&std::fs::read_to_string(twins().join("replay.json")).unwrap()).unwrap()
}

/// Every live queue as the vector writes it: implementation, last id, records in dequeue order.
fn live(state: &QueueState) -> Value {
    let mut out = serde_json::Map::new();
    for info in state.infos() {
        let q = state.queue(info.name.as_bytes()).unwrap();
        let recs: Vec<Value> = q
            .ready_in_order()
            .iter()
            .map(|r| {
                let hex: String = r.data.iter().map(|b| format!("{b:02x}")).collect();
                serde_json::json!({"id": r.id, "key": r.key, "message_hex": hex})
            })
            .collect();
        out.insert(
            info.name.clone(),
            serde_json::json!({
                "implementation": info.config.implementation,
                "last_id": info.last_id,
                "records": recs,
            }),
        );
    }
    Value::Object(out)
}

#[test]
fn applying_the_replay_deltas_gives_each_add_the_vectors_record_id() {
    let r = replay_json();
    let mut state = QueueState::new();
    for e in r["entries"].as_array().unwrap() {
        let lsn = e["lsn"].as_i64().unwrap();
        let applied = state
            .apply(Some(lsn), &unhex(e["hex"].as_str().unwrap()))
            .unwrap();
        match (applied, e["kind"].as_str().unwrap()) {
            (Applied::Added(id), "A") => {
                assert_eq!(id, e["record_id"].as_u64().unwrap(), "LSN {lsn}")
            }
            (Applied::Created, "C") | (Applied::Deleted, "D") | (Applied::Removed, "R") => {}
            (got, kind) => panic!("LSN {lsn}: {kind} applied as {got:?}"),
        }
    }
    assert_eq!(live(&state), r["live"]);
}

fn replayed(base: &Path, snapshot_at: Option<&Path>) -> QueueState {
    let mut log = Log::open(base.join("data/log"), readonly()).unwrap();
    match snapshot_at {
        None => {
            let mut state = QueueState::new();
            tflux_core::replay::replay(&mut state, &mut log, None).unwrap();
            state
        }
        Some(path) => {
            let s = snapshot::decode(&std::fs::read(path).unwrap(), path).unwrap();
            let mut state = QueueState::from_snapshot(&s).unwrap();
            tflux_core::base::replay(&mut state, &mut log, s.last_index).unwrap();
            state
        }
    }
}

#[test]
fn replaying_the_vector_log_leaves_the_vectors_live_records() {
    let want = replay_json()["live"].clone();
    let base = install("replay");
    assert_eq!(live(&replayed(base.path(), None)), want);
}

#[test]
fn replaying_from_the_vector_snapshot_leaves_the_same_live_records() {
    let m = &manifest()["replay_after_snapshot"];
    let base = install("replay_after_snapshot");
    let snap = base.path().join("data/tflux.snapshot");
    let s = snapshot::decode(&std::fs::read(&snap).unwrap(), &snap).unwrap();
    assert_eq!(s.last_index, m["snapshot"]["last_index"].as_i64().unwrap());
    assert_eq!(snapshot_queues(&s), by_id(&m["snapshot"]["queues"]));
    let want = replay_json()["live"].clone();
    assert_eq!(live(&replayed(base.path(), Some(&snap))), want);
}

#[test]
fn each_bad_delta_vector_is_refused_at_the_offset_of_its_bad_field() {
    let bad: Value =
        serde_json::from_str(&std::fs::read_to_string(twins().join("bad_deltas.json")).unwrap())
            .unwrap();
    let cases = bad
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k != "what");
    let mut n = 0;
    for (name, case) in cases {
        let data = unhex(case["hex"].as_str().unwrap());
        let e = tflux_core::format::delta::decode(&data).unwrap_err();
        assert_eq!(
            e.offset as u64,
            case["error_offset"].as_u64().unwrap(),
            "{name}: {}",
            e.reason
        );
        n += 1;
    }
    assert!(n >= 10);
}

#[test]
fn the_mixed_dialect_vector_is_refused_naming_its_last_segment() {
    let m = &manifest()["mixed_spec.log"];
    let base = install("mixed_spec.log");
    let dir = base.path().join("data/log");
    match Log::open(&dir, readonly()) {
        Err(Error::Dialect { path, reason }) => {
            assert_eq!(path, dir.join(m["error_file"].as_str().unwrap()));
            assert!(reason.contains("two dialects"), "{reason}");
        }
        Err(other) => panic!("expected a dialect error, got {other}"),
        Ok(_) => panic!("a log of two dialects opened"),
    }
}

#[test]
fn the_snapshot_vector_past_the_largest_lsn_is_corruption_of_its_last_index() {
    let m = &manifest()["index_max.snapshot"];
    let path = twins().join("index_max.snapshot");
    let e = snapshot::decode(&read("index_max.snapshot"), &path).unwrap_err();
    let (at, offset, reason) = corruption(e);
    assert_eq!(at, path);
    assert_eq!(offset, m["error_offset"].as_u64());
    assert!(
        reason.contains(&format!("last index {} is past", m["last_index"])),
        "{reason}"
    );
}

/// The dialect the files of the vector's base directory say, as every open decides it.
fn base_dialect(base: &Path) -> tflux_core::Result<tflux_core::log::dialect::Dialect> {
    let data = base.join("data");
    tflux_core::log::dialect::base_dialect(
        tflux_core::log::dialect::BaseFiles {
            metadata: &data.join("tflux.metadata"),
            snapshot: &data.join("tflux.snapshot"),
            log: &data.join("log"),
        },
        None,
    )
}

#[test]
fn the_undecided_vector_is_refused_naming_its_segment_unless_a_dialect_is_chosen() {
    let m = &manifest()["undecided.log"];
    let base = install("undecided.log");
    let dir = base.path().join("data/log");
    match base_dialect(base.path()) {
        Err(Error::Dialect { path, reason }) => {
            assert_eq!(path, dir.join(m["error_file"].as_str().unwrap()));
            assert!(reason.contains("cannot decide"), "{reason}");
        }
        other => panic!("expected the undecided refusal, got {other:?}"),
    }
    assert!(matches!(
        Log::open(&dir, readonly()),
        Err(Error::Dialect { .. })
    ));
}

#[test]
fn the_second_record_vector_says_its_dialect() {
    let m = &manifest()["second_says.log"];
    let base = install("second_says.log");
    let said = base_dialect(base.path()).unwrap();
    assert_eq!(said.name(), m["dialect"].as_str().unwrap());
}

#[test]
fn the_task_snapshot_vector_says_spec_and_is_refused_beside_a_taskflux_segment() {
    let m = &manifest()["task.snapshot"];
    let bytes = read("task.snapshot");
    let says = tflux_core::format::detect::snapshot_says(&bytes, bytes.len() as u64);
    assert_eq!(
        says.map(|s| s.dialect),
        Some(tflux_core::log::dialect::Dialect::Spec)
    );
    let base = install("task.snapshot");
    match base_dialect(base.path()) {
        Err(Error::Dialect { path, reason }) => {
            let segment = base
                .path()
                .join("data/log")
                .join(m["error_file"].as_str().unwrap());
            assert_eq!(path, segment);
            assert!(reason.contains("two dialects"), "{reason}");
        }
        other => panic!("expected a dialect error, got {other:?}"),
    }
}
