//! Unit tests of the delta columns: every kind in its columns, a sealed segment decoded alone.

use super::*;
use crate::format::delta::Delta;
use crate::{Log, LogOptions, SyncPolicy};

#[test]
fn every_kind_lands_in_its_columns_with_nulls_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogOptions {
            sync: SyncPolicy::Never,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let deltas = [
        Delta::CreateQueue {
            name: b"q".to_vec(),
            implementation: 2,
            max_queue_size: 5,
            max_message_size: -1,
            key_range: Some((-3, 3)),
        },
        Delta::AddRecord {
            name: b"q".to_vec(),
            key: -2,
            message: b"hi".to_vec(),
        },
        Delta::RemoveRecord {
            name: b"q".to_vec(),
            id: 1,
        },
        Delta::DeleteQueue {
            name: b"q".to_vec(),
        },
    ];
    let bytes: Vec<Vec<u8>> = deltas.iter().map(|d| d.encode()).collect();
    log.append_many(1, &bytes).unwrap();
    let c = read_deltas(&mut log, 0, 10, u64::MAX, true).unwrap();
    assert_eq!(c.lsn, vec![0, 1, 2, 3]);
    assert_eq!(
        c.kind.data,
        b"create_queueadd_recordremove_recorddelete_queue"
    );
    assert_eq!(c.key.values, vec![0, -2, 0, 0]);
    assert_eq!(c.key.validity.bytes, vec![0b0010]);
    assert_eq!(c.record_id.validity.bytes, vec![0b0100]);
    assert_eq!(c.key_min.values[0], -3);
    assert_eq!(c.key_max.validity.nulls, 3);
    assert_eq!(c.message.offsets, vec![0, 0, 2, 2, 2]);
    assert_eq!(
        c.raw.unwrap().data.len(),
        bytes.iter().map(Vec::len).sum::<usize>()
    );
    // A budget of one byte still returns the first entry.
    assert_eq!(read_deltas(&mut log, 1, 10, 1, false).unwrap().lsn, vec![1]);
}

#[test]
fn a_sealed_segment_decodes_alone_every_record_and_any_range() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogOptions {
            sync: SyncPolicy::Never,
            soft_limit: 512,
            hard_limit: 1024,
            ..LogOptions::default()
        },
    )
    .unwrap();
    let add = |k: i64| {
        Delta::AddRecord {
            name: b"q".to_vec(),
            key: k,
            message: vec![b'm'; k as usize % 7],
        }
        .encode()
    };
    for k in 0..40 {
        log.append_many(1, &[add(k)]).unwrap();
    }
    let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
    // More records than a sealed segment's index remembers offsets for.
    let seg = sealed
        .iter()
        .find(|s| s.count > 9)
        .expect("a long sealed segment");
    let position = crate::log::recovery::Position::Sealed;
    let all = read_segment_deltas(&seg.path, position, None, None, false, None).unwrap();
    let lsns: Vec<i64> = (seg.start_lsn..seg.start_lsn + seg.count as i64).collect();
    assert_eq!(all.lsn, lsns);
    assert_eq!(all.key.values, lsns);
    let (from, to) = (seg.start_lsn + 3, seg.start_lsn + 8);
    let some = read_segment_deltas(&seg.path, position, Some(from), Some(to), false, None).unwrap();
    assert_eq!(some.lsn, (from..=to).collect::<Vec<_>>());
    assert_eq!(some.key.values, (from..=to).collect::<Vec<_>>());
}

proptest::proptest! {
    /// `Columns::check` (which skips the full decode for deltas of the queue seen last)
    /// keeps the codes, and stops at the error, that decoding every delta in full gives.
    #[test]
    fn check_agrees_with_a_full_decode_of_every_delta(
        deltas in proptest::collection::vec(
            (0usize..3, 0u8..4, proptest::prelude::any::<u64>(), 0usize..40, 0u8..5),
            1..60,
        ),
    ) {
        let names: [&[u8]; 3] = [b"", b"q", b"jobs"];
        let records: Vec<Vec<u8>> = deltas
            .iter()
            .map(|&(q, kind, x, at, change)| {
                let name = names[q].to_vec();
                let mut bytes = match kind {
                    0 => Delta::AddRecord { name, key: x as i64, message: vec![1; at % 9] },
                    1 => Delta::RemoveRecord { name, id: x >> (at % 2) },
                    2 => Delta::DeleteQueue { name },
                    _ => Delta::CreateQueue {
                        name,
                        implementation: 1,
                        max_queue_size: -1,
                        max_message_size: -1,
                        key_range: None,
                    },
                }
                .encode();
                let at = at % bytes.len();
                match change {
                    0 => bytes[at] ^= x as u8 | 1,
                    1 => bytes.truncate(at),
                    2 => bytes.insert(at, x as u8),
                    _ => {}
                }
                bytes
            })
            .collect();
        let mut columns = Columns::new(0, records.len(), 0);
        let mut got = Ok(());
        for (lsn, data) in records.iter().enumerate() {
            got = columns.push(lsn as i64, 1, data);
            if got.is_err() {
                break;
            }
        }
        let mut model = Columns::new(0, records.len(), 0);
        let mut want = Ok(());
        for (lsn, data) in records.iter().enumerate() {
            // Longer than any name: every delta decoded in full.
            model.queue_seen = vec![b'q'; 256];
            want = model.push(lsn as i64, 1, data);
            if want.is_err() {
                break;
            }
        }
        proptest::prop_assert_eq!(&columns.codes, &model.codes);
        proptest::prop_assert_eq!(format!("{got:?}"), format!("{want:?}"));
    }
}

#[test]
fn undecodable_data_names_the_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(
        dir.path(),
        LogOptions {
            sync: SyncPolicy::Never,
            ..LogOptions::default()
        },
    )
    .unwrap();
    log.append_many(1, &[b"Z".to_vec()]).unwrap();
    let e = read_deltas(&mut log, 0, 1, u64::MAX, false).unwrap_err();
    assert!(e.to_string().contains("LSN 0"), "{e}");
}

#[test]
fn a_task_snapshot_puts_each_records_due_and_attempts_on_its_row() {
    use crate::format::rules::QueueRules;
    use crate::format::snapshot::{QueueData, QueueTasks, Snapshot};
    let queue = |name: &[u8], ids: &[u64]| QueueData {
        name: name.to_vec(),
        implementation: 1,
        last_id: 9,
        max_queue_size: -1,
        max_message_size: -1,
        key_range: None,
        records: ids.iter().map(|&id| (id, 0, vec![id as u8])).collect(),
    };
    let s = Snapshot {
        last_index: 4,
        last_term: 1,
        // Out of name order: rows come by queue name, then id.
        queues: vec![
            queue(b"b", &[2, 5, 7]),
            queue(b"", &[]),
            queue(b"a", &[1, 3]),
        ],
    };
    let rules = QueueRules {
        lease_ms: Some(30_000),
        ..QueueRules::default()
    };
    let tasks = vec![QueueTasks {
        name: b"b".to_vec(),
        rules: rules.clone(),
        delayed: vec![(5, 1_000), (7, 2_000)],
        attempts: vec![(2, 3), (7, 1)],
    }];
    let c = SnapshotColumns::from_snapshot_with_tasks(&s, tasks).unwrap();
    assert_eq!(c.record_id, [1, 3, 2, 5, 7]);
    let due: Vec<_> = (0..c.len())
        .map(|i| c.due.validity.is_valid(i).then(|| c.due.values[i]))
        .collect();
    assert_eq!(due, [None, None, None, Some(1_000), Some(2_000)]);
    assert_eq!(c.attempts, [0, 0, 3, 0, 1]);
    assert_eq!(c.tasks, [(b"b".to_vec(), rules)]);

    // A plain snapshot: no values, every due null, no counts (nothing per record to build).
    let plain = SnapshotColumns::from_snapshot(&s).unwrap();
    assert!(plain.due.values.is_empty() && plain.attempts.is_empty() && plain.tasks.is_empty());
    assert_eq!((plain.due.validity.len, plain.due.validity.nulls), (5, 5));
    assert!(plain.due.validity.bytes.is_empty());
}
