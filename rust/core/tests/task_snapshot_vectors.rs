//! The task-layout snapshot vectors of `tests/data/task/` (written from the format text by
//! `make_task_snapshot.py` with `struct` and `zlib.crc32` alone; `task_snapshot.json` says what
//! each holds), read through the core: the good one gives its queues, records and each queue's
//! rules, delayed records and delivery counts; each bad one is corruption at the offset and
//! with the reason the manifest names. The JVM reader reads the same files
//! (`tests/spark/test_spark_tasks.py`), so the two are held equal.

mod common;

use common::*;
use serde_json::Value;
use tflux_core::format::dialect::Dialect;
use tflux_core::format::rules::QueueRules;
use tflux_core::format::snapshot::{self, QueueTasks};
use tflux_core::Error;

fn manifest() -> Value {
    let text = std::fs::read_to_string(data_dir().join("task/task_snapshot.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn pairs(v: &Value) -> Vec<(u64, i64)> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|p| (p[0].as_u64().unwrap(), p[1].as_i64().unwrap()))
        .collect()
}

fn want_tasks(v: &Value) -> QueueTasks {
    let r = &v["rules"];
    QueueTasks {
        name: v["queue"].as_str().unwrap().as_bytes().to_vec(),
        rules: QueueRules {
            dead_letter: r["dead_letter"].as_array().map(|d| {
                (
                    d[0].as_str().unwrap().as_bytes().to_vec(),
                    d[1].as_i64().unwrap() as i32,
                )
            }),
            retry_delay_ms: r["retry_delay_ms"].as_i64(),
            retry_backoff: r["retry_backoff"].as_i64(),
            retry_max_delay_ms: r["retry_max_delay_ms"].as_i64(),
            lease_ms: r["lease_ms"].as_i64(),
        },
        delayed: pairs(&v["delayed"]),
        attempts: pairs(&v["attempts"])
            .into_iter()
            .map(|(id, n)| (id, n as u32))
            .collect(),
    }
}

#[test]
fn the_task_snapshot_vector_gives_its_records_and_each_queues_task_state() {
    let m = manifest();
    let want = &m["tasks.snapshot"];
    let path = data_dir().join("task/tasks.snapshot");
    let bytes = std::fs::read(&path).unwrap();
    let (s, tasks) = snapshot::decode_full(&bytes, &path, Dialect::Spec).unwrap();
    assert_eq!(s.last_index, want["last_index"].as_i64().unwrap());
    assert_eq!(s.last_term, want["last_term"].as_i64().unwrap());
    let mut queues = s.queues.clone();
    queues.sort_by(|a, b| a.name.cmp(&b.name));
    let want_queues = want["queues"].as_array().unwrap();
    assert_eq!(queues.len(), want_queues.len());
    for (q, w) in queues.iter().zip(want_queues) {
        assert_eq!(q.name, w["queue"].as_str().unwrap().as_bytes());
        assert_eq!(
            q.implementation as i64,
            w["implementation"].as_i64().unwrap()
        );
        assert_eq!(q.last_id, w["last_id"].as_u64().unwrap());
        let records: Vec<(u64, i64, Vec<u8>)> = w["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_u64().unwrap(),
                    r["key"].as_i64().unwrap(),
                    unhex(r["message_hex"].as_str().unwrap()),
                )
            })
            .collect();
        assert_eq!(q.records, records);
    }
    let want_tasks: Vec<QueueTasks> = want["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(want_tasks)
        .collect();
    assert_eq!(tasks, want_tasks);
    // Old readers' decode reads the queues (delayed records included) without the tasks.
    assert_eq!(snapshot::decode(&bytes, &path).unwrap(), s);
}

#[test]
fn each_bad_task_snapshot_vector_is_corruption_at_its_offset_with_its_reason() {
    let m = manifest();
    let bad: Vec<(&String, &Value)> = m
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, v)| k.ends_with(".snapshot") && v.get("error").is_some())
        .collect();
    assert!(bad.len() >= 8);
    for (file, want) in bad {
        let path = data_dir().join("task").join(file);
        let bytes = std::fs::read(&path).unwrap();
        match snapshot::decode_full(&bytes, &path, Dialect::Spec) {
            Err(Error::Corruption { offset, reason, .. }) => {
                assert_eq!(offset, want["error_offset"].as_u64(), "{file}: {reason}");
                let reason_want = want["error"].as_str().unwrap();
                assert!(reason.contains(reason_want), "{file}: {reason}");
            }
            other => panic!("{file}: {other:?}"),
        }
    }
}
