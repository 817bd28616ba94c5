//! The task-queue deltas of spec section 12 (docs/format.md, "Task-queue deltas"): each golden
//! vector of `tests/data/task/task_deltas.json` (written from the table by
//! `make_task_deltas.py` with `struct` alone) decodes to its fields and encodes back to its
//! exact bytes; every cut of a vector is refused (a delta consumes its data exactly); and a
//! reader that meets a marker it does not know stops with a replay error naming the LSN,
//! never skipping the entry.

mod common;

use common::*;
use serde_json::Value;
use tflux_core::format::delta::{self, Delta};
use tflux_core::format::rules::{Change, RulesChange};
use tflux_core::state::QueueState;
use tflux_core::Error;

fn change_int(v: &Value) -> Change<i64> {
    match v {
        Value::String(s) if s == "keep" => None,
        Value::Null => Some(None),
        v => Some(Some(v.as_i64().unwrap())),
    }
}

fn change_dead(v: &Value) -> Change<(Vec<u8>, i32)> {
    match v {
        Value::String(s) if s == "keep" => None,
        Value::Null => Some(None),
        v => Some(Some((
            v[0].as_str().unwrap().as_bytes().to_vec(),
            v[1].as_i64().unwrap() as i32,
        ))),
    }
}

fn vectors() -> Vec<(String, Delta, Vec<u8>)> {
    let text = std::fs::read_to_string(data_dir().join("task/task_deltas.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    json.as_object()
        .unwrap()
        .iter()
        .filter(|(label, _)| *label != "what")
        .map(|(label, v)| {
            let name = v["queue"].as_str().unwrap().as_bytes().to_vec();
            let delta = match v["kind"].as_str().unwrap() {
                "Q" => Delta::QueueRules {
                    name,
                    change: RulesChange {
                        dead_letter: change_dead(&v["dead_letter"]),
                        retry_delay_ms: change_int(&v["retry_delay_ms"]),
                        retry_backoff: change_int(&v["retry_backoff"]),
                        retry_max_delay_ms: change_int(&v["retry_max_delay_ms"]),
                        lease_ms: change_int(&v["lease_ms"]),
                    },
                },
                "L" => Delta::AddLater {
                    name,
                    key: v["key"].as_i64().unwrap(),
                    not_before: v["not_before"].as_i64().unwrap(),
                    message: unhex(v["message_hex"].as_str().unwrap()),
                },
                "V" => Delta::Delivered {
                    name,
                    id: v["record_id"].as_u64().unwrap(),
                },
                "F" => Delta::Failed {
                    name,
                    id: v["record_id"].as_u64().unwrap(),
                    due: v["due"].as_i64().unwrap(),
                },
                "P" => Delta::Purge {
                    name,
                    kept: v["kept"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|k| k.as_u64().unwrap())
                        .collect(),
                },
                other => panic!("{label}: unknown kind {other}"),
            };
            (label.clone(), delta, unhex(v["hex"].as_str().unwrap()))
        })
        .collect()
}

#[test]
fn each_task_vector_decodes_to_its_fields_and_encodes_to_its_bytes() {
    let all = vectors();
    assert_eq!(all.len(), 9);
    for (label, delta, bytes) in all {
        assert_eq!(Delta::decode(&bytes).unwrap(), delta, "{label}");
        assert_eq!(delta.encode(), bytes, "{label}");
        assert!(delta.as_ref().is_task_queue(), "{label}");
    }
}

#[test]
fn every_cut_of_a_task_vector_is_refused_never_read_short() {
    for (label, _, bytes) in vectors() {
        for cut in 0..bytes.len() {
            assert!(
                delta::decode(&bytes[..cut]).is_err(),
                "{label} cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        let e = delta::decode(&longer).unwrap_err();
        assert_eq!(e.offset, bytes.len(), "{label}: {e:?}");
        assert!(e.reason.contains("trailing"), "{label}: {e:?}");
    }
}

#[test]
fn a_bool_flag_of_a_rules_change_other_than_0_or_1_is_refused_at_its_offset() {
    let (_, _, bytes) = vectors()
        .into_iter()
        .find(|(l, _, _)| l == "rules_set_all")
        .unwrap();
    let mut bad = bytes.clone();
    // 'Q', name length, "jobs": the dead letter's change flag.
    bad[6] = 2;
    let e = delta::decode(&bad).unwrap_err();
    assert_eq!(e.offset, 6, "{e:?}");
    assert!(e.reason.contains("dead letter change flag"), "{e:?}");
}

/// What an old reader does with a delta of a kind it does not know (here one no reader
/// knows): the replay stops at that entry with an error naming its LSN.
#[test]
fn an_unknown_marker_stops_replay_naming_the_lsn() {
    let mut state = QueueState::new();
    state.apply(Some(0), &create_queue(b"jobs", false)).unwrap();
    let e = state.apply(Some(1), b"Z\x04jobs").unwrap_err();
    match e {
        Error::Replay { lsn, reason, .. } => {
            assert_eq!(lsn, Some(1));
            assert!(reason.contains("unknown delta marker 0x5A"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}
