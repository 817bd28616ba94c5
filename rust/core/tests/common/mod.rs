//! Helpers shared by the integration tests: golden files and a hand encoder written from the
//! spec (independent of `tflux_core::format`), and the stores several tests start from.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tflux_core::format::delta::Delta;
use tflux_core::format::rules::QueueRules;
use tflux_core::state::{QueueConfig, QueueState, IMPL_ARRAY, IMPL_HEAP};
use tflux_core::store::Store;
use tflux_core::{Log, LogOptions, SyncPolicy};

pub fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/data")
}

pub fn golden(name: &str) -> Vec<u8> {
    std::fs::read(data_dir().join(name)).expect("golden file")
}

pub fn manifest() -> serde_json::Value {
    let text = std::fs::read_to_string(data_dir().join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// `(lsn, term, data)` of a manifest entry's expected records.
pub fn expected_records(name: &str) -> Vec<(i64, i32, Vec<u8>)> {
    manifest()[name]["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["lsn"].as_i64().unwrap(),
                r["term"].as_i64().unwrap() as i32,
                unhex(r["data_hex"].as_str().unwrap()),
            )
        })
        .collect()
}

/// The offset and reason of a corruption error (panics on anything else).
pub fn corruption_offset(r: tflux_core::Result<impl std::fmt::Debug>) -> (u64, String) {
    match r {
        Err(tflux_core::Error::Corruption {
            offset: Some(o),
            reason,
            ..
        }) => (o, reason),
        other => panic!("expected a corruption error with an offset, got {other:?}"),
    }
}

/// One record, framed by hand from the spec's table.
pub fn hand_record(term: i32, data: &[u8]) -> Vec<u8> {
    let mut out = vec![0xAA, 0xF5, 0x34, 0xC4];
    out.extend_from_slice(&term.to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(data).to_be_bytes());
    out.extend_from_slice(&(data.len() as i32).to_be_bytes());
    out.extend_from_slice(data);
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out
}

/// A whole segment: header, records, end marker.
pub fn hand_segment(records: &[(i32, &[u8])]) -> Vec<u8> {
    let mut out = vec![0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 1];
    for (term, data) in records {
        out.extend(hand_record(*term, data));
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out
}

pub fn opts(soft: u64, hard: u64, preallocate: bool) -> LogOptions {
    LogOptions {
        soft_limit: soft,
        hard_limit: hard,
        preallocate,
        sync: SyncPolicy::Never,
        ..LogOptions::default()
    }
}

pub fn all_entries(log: &mut Log) -> Vec<(i64, i32, Vec<u8>)> {
    let start = log.start_index();
    log.read(start, None)
        .unwrap()
        .into_iter()
        .map(|e| (e.lsn, e.term, e.data))
        .collect()
}

pub fn seg_name(lsn: i64) -> String {
    format!("{lsn:019}.log")
}

/// A CreateQueue of `name` for the state-machine models: an array queue of keys 0..=7 when
/// `array`, else a heap; no limits.
pub fn create_queue(name: &[u8], array: bool) -> Vec<u8> {
    Delta::CreateQueue {
        name: name.to_vec(),
        implementation: if array { IMPL_ARRAY } else { IMPL_HEAP },
        max_queue_size: -1,
        max_message_size: -1,
        key_range: array.then_some((0, 7)),
    }
    .encode()
}

/// The id of the `n`-th (modulo their count) record of queue `name` in `model`, in id order:
/// a RemoveRecord the model accepts; 0 when the queue is missing or empty.
pub fn nth_live_id(model: &QueueState, name: &[u8], n: usize) -> u64 {
    model.queue(name).map_or(0, |queue| {
        let mut ids: Vec<u64> = queue.records().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.get(n % ids.len().max(1)).copied().unwrap_or(0)
    })
}

/// The settings of a durable test store: every write fsynced before the call returns, and the
/// disk watermark off (the host's disk may be fuller than the default ratio allows).
pub const DURABLE: &str = r#"{"DiskFullRatio": 1.0, "LogSyncPolicy": "always"}"#;

/// Creates `queue` with its deliveries counted (and logged): a dead-letter rule, to `dead`
/// after 3 deliveries.
pub fn create_counted(store: &Store, queue: &[u8]) {
    let rules = QueueRules {
        dead_letter: Some((b"dead".to_vec(), 3)),
        ..QueueRules::default()
    };
    store
        .create_queue_with_rules(queue, QueueConfig::default(), &rules, false)
        .unwrap();
}

/// A [`DURABLE`] store in `dir` with the counted queue `jobs` ([`create_counted`]) holding
/// `records`.
pub fn ruled_store(dir: &Path, records: &[(i64, &[u8])]) -> Store {
    let store = Store::open(dir, Some(DURABLE), false).unwrap();
    create_counted(&store, b"jobs");
    store.enqueue_many(b"jobs", records).unwrap();
    store
}

pub mod ops;
