//! `read_deltas` on every core against one core, and against the deltas written: random logs of
//! several segments (some compressed, some records appended after a reopen), random ranges,
//! budgets and raw columns. Also the CRC rule for reads (`Log::read_rechecks_crc`): a record
//! appended after the open is still checked.

use proptest::prelude::*;
use tflux_core::format::compressed::Method;
use tflux_core::format::delta::Delta;
use tflux_core::format::rules::RulesChange;
use tflux_core::log::columns::{read_deltas_with, DeltaColumns, DeltaRead};
use tflux_core::log::recovery::Parallelism;
use tflux_core::{Log, LogOptions, SyncPolicy};

fn opts(soft: u64) -> LogOptions {
    LogOptions {
        soft_limit: soft,
        hard_limit: soft * 2,
        preallocate: false,
        sync: SyncPolicy::Never,
        ..LogOptions::default()
    }
}

/// A delta, or bytes no decoder accepts (rarely), or a record id past Int64 (rarely).
fn entry() -> impl Strategy<Value = Vec<u8>> {
    let name = prop::sample::select(vec![b"".to_vec(), b"q".to_vec(), b"jobs".to_vec()]);
    let message = prop::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        8 => (name.clone(), any::<i64>(), message).prop_map(|(name, key, message)| {
            Delta::AddRecord { name, key, message }.encode()
        }),
        3 => (name.clone(), 0u64..1 << 40).prop_map(|(name, id)| {
            Delta::RemoveRecord { name, id }.encode()
        }),
        1 => (name.clone(), any::<i32>(), any::<Option<(i64, i64)>>()).prop_map(
            |(name, implementation, key_range)| Delta::CreateQueue {
                name,
                implementation,
                max_queue_size: -1,
                max_message_size: 7,
                key_range,
            }
            .encode()
        ),
        1 => name.clone().prop_map(|name| Delta::DeleteQueue { name }.encode()),
        1 => Just(b"Z".to_vec()),
        1 => name.clone().prop_map(|name| Delta::RemoveRecord { name, id: u64::MAX }.encode()),
        2 => task_entry(name),
    ]
}

/// A task-queue delta (spec section 12).
fn task_entry(name: impl Strategy<Value = Vec<u8>> + Clone) -> impl Strategy<Value = Vec<u8>> {
    let change = |v: Option<i64>| match v {
        Some(v) if v < 0 => Some(None),
        Some(v) => Some(Some(v)),
        None => None,
    };
    prop_oneof![
        (
            name.clone(),
            any::<i64>(),
            any::<i64>(),
            prop::collection::vec(any::<u8>(), 0..20)
        )
            .prop_map(|(name, key, not_before, message)| {
                Delta::AddLater {
                    name,
                    key,
                    not_before,
                    message,
                }
                .encode()
            }),
        (name.clone(), 0u64..1 << 40).prop_map(|(name, id)| Delta::Delivered { name, id }.encode()),
        (name.clone(), 0u64..1 << 40, any::<i64>()).prop_map(|(name, id, due)| Delta::Failed {
            name,
            id,
            due
        }
        .encode()),
        (name.clone(), prop::collection::vec(0u64..1 << 40, 0..5))
            .prop_map(|(name, kept)| Delta::Purge { name, kept }.encode()),
        (
            name,
            any::<[Option<i64>; 4]>(),
            any::<Option<Option<i32>>>()
        )
            .prop_map(move |(name, [a, b, c, d], dead)| Delta::QueueRules {
                name,
                change: RulesChange {
                    dead_letter: dead.map(|d| d.map(|n| (b"dead".to_vec(), n))),
                    retry_delay_ms: change(a),
                    retry_backoff: change(b),
                    retry_max_delay_ms: change(c),
                    lease_ms: change(d),
                },
            }
            .encode()),
    ]
}

fn read(log: &mut Log, start: i64, end: i64, max_bytes: u64, raw: bool, p: Parallelism) -> String {
    let opts = DeltaRead {
        max_bytes,
        raw,
        parallelism: p,
        part_entries: 3,
    };
    // Four threads, so that a read splits into up to four parts on any machine.
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    match pool.install(|| read_deltas_with(log, start, end, &opts)) {
        Ok(c) => {
            // The same entries as `read_batch` within the same budget (the bound it keeps).
            let batch = log.read_batch(start, end, max_bytes).unwrap();
            assert_eq!(
                (c.len(), c.lsn.first()),
                (batch.len(), (!batch.is_empty()).then_some(&start))
            );
            check_against_written(&c, log);
            format!("{c:?}")
        }
        Err(e) => format!("error: {e}"),
    }
}

/// Entry `i` of a nullable column: its value, or `None` where it is null (whose value, when
/// the column has values, is zero).
fn at<T: Copy + Default + PartialEq + std::fmt::Debug>(
    c: &tflux_core::log::columns::Nullable<T>,
    i: usize,
) -> Option<T> {
    assert!(c.values.is_empty() || c.values.len() == c.validity.len);
    let value = c.values.get(i).copied();
    if c.validity.is_valid(i) {
        Some(value.expect("a present entry has a value"))
    } else {
        assert!(
            value.is_none_or(|v| v == T::default()),
            "null entry {i} is not zero"
        );
        None
    }
}

/// Every decoded row holds the delta stored at its LSN, every column's validity says which
/// fields its kind carries, and the bitmaps count their nulls right.
fn check_against_written(c: &DeltaColumns, log: &mut Log) {
    let n = c.len();
    for bits in [&c.kind.validity, &c.queue.validity, &c.message.validity] {
        assert_eq!(bits.len, n);
    }
    for (i, &lsn) in c.lsn.iter().enumerate() {
        assert_eq!(lsn, c.lsn[0] + i as i64);
        let entry = log.read(lsn, Some(0)).unwrap().remove(0);
        assert_eq!(c.term[i], entry.term);
        let data = entry.data;
        let written = Delta::decode(&data).unwrap();
        let kind = c.kind_at(i);
        let message = c.message.value(i);
        let queue = c.queue_at(i);
        assert!(c.kind.validity.is_valid(i) && c.queue.validity.is_valid(i));
        assert_eq!(queue, written.as_ref().name(), "queue at LSN {lsn}");
        let (mut key, mut id, mut settings, mut range) = (None, None, None, None);
        let (mut due, mut kept, mut rules) = (None, None, None);
        match written {
            Delta::AddRecord {
                key: k, message: m, ..
            } => {
                assert_eq!(kind, b"add_record");
                assert!(c.message.validity.is_valid(i));
                assert_eq!(message, &m[..]);
                key = Some(k);
            }
            Delta::RemoveRecord { id: r, .. } => {
                assert_eq!(kind, b"remove_record");
                id = Some(r as i64);
            }
            Delta::CreateQueue {
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
                ..
            } => {
                assert_eq!(kind, b"create_queue");
                settings = Some((implementation, max_queue_size, max_message_size));
                range = key_range;
            }
            Delta::DeleteQueue { .. } => assert_eq!(kind, b"delete_queue"),
            Delta::AddLater {
                key: k,
                not_before,
                message: m,
                ..
            } => {
                assert_eq!(kind, b"add_later");
                assert!(c.message.validity.is_valid(i));
                assert_eq!(message, &m[..]);
                (key, due) = (Some(k), Some(not_before));
            }
            Delta::Delivered { id: r, .. } => {
                assert_eq!(kind, b"delivered");
                id = Some(r as i64);
            }
            Delta::Failed { id: r, due: d, .. } => {
                assert_eq!(kind, b"failed");
                (id, due) = (Some(r as i64), Some(d));
            }
            Delta::Purge { kept: k, .. } => {
                assert_eq!(kind, b"purge");
                kept = Some(k.iter().map(|&r| r as i64).collect::<Vec<_>>());
            }
            Delta::QueueRules { change, .. } => {
                assert_eq!(kind, b"queue_rules");
                rules = Some(tflux_core::log::columns::rules_json(&change.as_borrowed()));
            }
        }
        assert_eq!(at(&c.due, i), due, "due at LSN {lsn}");
        assert_eq!(c.kept_ids.validity.is_valid(i), kept.is_some());
        assert_eq!(
            c.kept_ids.value(i),
            kept.unwrap_or_default(),
            "kept ids at LSN {lsn}"
        );
        assert_eq!(c.rules.validity.is_valid(i), rules.is_some());
        assert_eq!(c.rules.value(i), rules.unwrap_or_default().as_bytes());
        if key.is_none() {
            assert!(!c.message.validity.is_valid(i) && message.is_empty());
        }
        assert_eq!(at(&c.key, i), key, "key at LSN {lsn}");
        assert_eq!(at(&c.record_id, i), id, "record id at LSN {lsn}");
        let got = at(&c.implementation, i).map(|v| {
            let queue_size = at(&c.max_queue_size, i).unwrap();
            (v, queue_size, at(&c.max_message_size, i).unwrap())
        });
        assert_eq!(got, settings, "settings at LSN {lsn}");
        assert_eq!(
            at(&c.key_min, i).zip(at(&c.key_max, i)),
            range,
            "key range at LSN {lsn}"
        );
        if let Some(raw) = &c.raw {
            assert!(raw.validity.is_valid(i));
            assert_eq!(
                &raw.data[raw.offsets[i] as usize..raw.offsets[i + 1] as usize],
                &data[..]
            );
        }
    }
    // Each variable-width column has one offset per entry and one more, its data ends at the
    // last; a fixed-width column has a value per entry when some entry is present and none at
    // all when none is (the bindings then hand Arrow shared zeros).
    // The one kind or queue of every entry is named once, and only then.
    let one =
        |at: &dyn Fn(usize) -> Vec<u8>| (n > 0 && (0..n).all(|i| at(i) == at(0))).then(|| at(0));
    assert_eq!(
        one(&|i| c.kind_at(i).to_vec()),
        c.repeats.kind.map(|k| k.as_bytes().to_vec())
    );
    assert_eq!(one(&|i| c.queue_at(i).to_vec()), c.repeats.queue);
    let mut binary = vec![&c.message, &c.rules];
    assert_eq!(c.kept_ids.offsets.len(), n + 1);
    assert_eq!(c.kept_ids.values.len(), c.kept_ids.offsets[n] as usize);
    for (column, repeated) in [
        (&c.kind, c.repeats.kind.is_some()),
        (&c.queue, c.repeats.queue.is_some()),
    ] {
        if repeated {
            assert!(column.offsets.is_empty() && column.data.is_empty());
        } else {
            binary.push(column);
        }
    }
    binary.extend(&c.raw);
    for b in binary {
        assert_eq!(b.offsets.len(), n + 1);
        assert_eq!(b.offsets[0], 0);
        assert_eq!(b.data.len(), b.offsets[n] as usize);
    }
    let present = |bits: &tflux_core::log::columns::Bitmap, values: usize| {
        assert_eq!(
            values == 0,
            n == 0 || bits.nulls == n,
            "values {values}, {bits:?}"
        );
    };
    present(&c.key.validity, c.key.values.len());
    present(&c.record_id.validity, c.record_id.values.len());
    present(&c.implementation.validity, c.implementation.values.len());
    present(&c.max_queue_size.validity, c.max_queue_size.values.len());
    present(
        &c.max_message_size.validity,
        c.max_message_size.values.len(),
    );
    present(&c.key_min.validity, c.key_min.values.len());
    present(&c.key_max.validity, c.key_max.values.len());
    present(&c.due.validity, c.due.values.len());
    let columns = [
        &c.due.validity,
        &c.kept_ids.validity,
        &c.rules.validity,
        &c.key.validity,
        &c.record_id.validity,
        &c.implementation.validity,
        &c.max_queue_size.validity,
        &c.max_message_size.validity,
        &c.key_min.validity,
        &c.key_max.validity,
        &c.message.validity,
    ];
    for bits in columns {
        let nulls = (0..n).filter(|&i| !bits.is_valid(i)).count();
        assert_eq!(bits.nulls, nulls);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn every_core_decodes_what_one_core_decodes(
        before in prop::collection::vec(entry(), 1..120),
        after in prop::collection::vec(entry(), 0..40),
        soft in 128u64..1024,
        compress in any::<bool>(),
        readonly in any::<bool>(),
        reads in prop::collection::vec((0u16..200, 0u16..200, 1u64..3000, any::<bool>()), 1..12),
    ) {
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("log");
        {
            let mut log = Log::open(&dir, opts(soft)).unwrap();
            for chunk in before.chunks(7) {
                log.append_many(1, chunk).unwrap();
            }
            if compress {
                log.compress(Method::Zstd).unwrap();
            }
        }
        // Reopened: `before` was checked by the scan at open, `after` is appended since.
        let mut log = Log::open(&dir, opts(soft)).unwrap();
        for chunk in after.chunks(5) {
            log.append_many(1, chunk).unwrap();
        }
        let mut ro = if readonly {
            let mut o = opts(soft);
            o.readonly = true;
            Some(Log::open(&dir, o).unwrap())
        } else {
            None
        };
        let log = ro.as_mut().unwrap_or(&mut log);
        let n = log.last_index() + 1;
        for (a, b, max_bytes, raw) in reads {
            let start = i64::from(a) % (n + 1);
            let end = start + i64::from(b);
            let one = read(log, start, end, max_bytes, raw, Parallelism::OneCore);
            let all = read(log, start, end, max_bytes, raw, Parallelism::AllCores);
            prop_assert_eq!(one, all);
        }
    }
}

/// Flips a byte of the data of the record at `lsn` in its segment file, behind the log's back.
fn flip_data_byte(log: &Log, lsn: i64) {
    use std::os::unix::fs::FileExt;
    let seg = log
        .segments()
        .into_iter()
        .find(|s| s.start_lsn <= lsn && lsn < s.start_lsn + s.count as i64)
        .unwrap();
    let bytes = std::fs::read(&seg.path).unwrap();
    // Walk the records from the header (8 bytes): 16-byte headers, data padded to 4.
    let mut at = 8usize;
    for _ in seg.start_lsn..lsn {
        let len = i32::from_be_bytes(bytes[at + 12..at + 16].try_into().unwrap()) as usize;
        at += 16 + len.div_ceil(4) * 4;
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&seg.path)
        .unwrap();
    file.write_all_at(&[bytes[at + 16] ^ 0x40], (at + 16) as u64)
        .unwrap();
}

fn add(k: i64) -> Vec<u8> {
    Delta::AddRecord {
        name: b"q".to_vec(),
        key: k,
        message: vec![b'm'; 20],
    }
    .encode()
}

#[test]
fn a_record_appended_after_the_open_is_checked_on_read() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("log");
    Log::open(&dir, opts(1 << 20))
        .unwrap()
        .append_many(1, &(0..10).map(add).collect::<Vec<_>>())
        .unwrap();
    let mut log = Log::open(&dir, opts(1 << 20)).unwrap();
    log.append_many(1, &(10..20).map(add).collect::<Vec<_>>())
        .unwrap();
    flip_data_byte(&log, 15);
    for p in [Parallelism::OneCore, Parallelism::AllCores] {
        let opts = DeltaRead {
            max_bytes: u64::MAX,
            raw: false,
            parallelism: p,
            part_entries: 2,
        };
        let e = read_deltas_with(&mut log, 0, 20, &opts).unwrap_err();
        assert!(e.to_string().contains("checksum"), "{e}");
        // The records before it were checked by the scan at open, or are intact.
        assert_eq!(read_deltas_with(&mut log, 0, 15, &opts).unwrap().len(), 15);
    }
}

#[test]
fn a_cut_rewrites_records_that_reads_check_again() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("log");
    Log::open(&dir, opts(1 << 20))
        .unwrap()
        .append_many(1, &(0..10).map(add).collect::<Vec<_>>())
        .unwrap();
    let mut log = Log::open(&dir, opts(1 << 20)).unwrap();
    // Copy-on-truncate: records 0..=5 now live in a file this process wrote, not the scan's.
    log.truncate_after(5).unwrap();
    flip_data_byte(&log, 2);
    let e = tflux_core::log::columns::read_deltas(&mut log, 0, 6, u64::MAX, false).unwrap_err();
    assert!(e.to_string().contains("checksum"), "{e}");
}

/// Long runs of AddRecords (whole rounds of them, which fill their columns in one pass) of
/// queues that change between runs and within a round, then the other kinds and an
/// undecodable record: every entry as written, on one core and on several, and the error of
/// the bad record the same either way.
#[test]
fn long_runs_of_adds_of_changing_queues_decode_as_written() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("log");
    let mut log = Log::open(&dir, opts(1 << 18)).unwrap();
    let queue = |k: i64| match (k / 5000, k % 7) {
        (0, _) => b"jobs".to_vec(),
        (1, 3) => b"q".to_vec(),
        (1, _) => b"".to_vec(),
        _ => b"jobs2".to_vec(),
    };
    let mut deltas: Vec<Vec<u8>> = (0..15_000)
        .map(|k| {
            Delta::AddRecord {
                name: queue(k),
                key: k,
                message: vec![k as u8; (k % 50) as usize],
            }
            .encode()
        })
        .collect();
    deltas.push(
        Delta::RemoveRecord {
            name: b"jobs".to_vec(),
            id: 3,
        }
        .encode(),
    );
    deltas.push(
        Delta::DeleteQueue {
            name: b"jobs2".to_vec(),
        }
        .encode(),
    );
    deltas.extend((0..5000).map(|k| {
        Delta::AddRecord {
            name: b"jobs".to_vec(),
            key: -k,
            message: vec![7; 3],
        }
        .encode()
    }));
    // Same queue and a length that fits, but not an AddRecord's layout.
    let mut bad = Delta::AddRecord {
        name: b"jobs".to_vec(),
        key: 1,
        message: vec![1; 4],
    }
    .encode();
    bad.push(0);
    deltas.push(bad);
    for chunk in deltas.chunks(1000) {
        log.append_many(1, chunk).unwrap();
    }
    let n = deltas.len() as i64;
    for p in [Parallelism::OneCore, Parallelism::AllCores] {
        let opts = DeltaRead {
            max_bytes: u64::MAX,
            raw: true,
            parallelism: p,
            part_entries: 1000,
        };
        let c = read_deltas_with(&mut log, 0, n - 1, &opts).unwrap();
        assert_eq!(c.len() as i64, n - 1);
        check_against_written(&c, &mut log);
        let e = read_deltas_with(&mut log, 0, n, &opts).unwrap_err();
        assert!(e.to_string().contains(&format!("LSN {}", n - 1)), "{e}");
    }
}

/// Entries of every kind and queue in an order where each column's first value comes after
/// null entries and its last before them (the columns are written an entry at a time, the
/// nulls before a value when it comes and those after the last one at the end), read over
/// every range and every budget, in parts of one entry and more: each read as written, the
/// same on one core and on several.
#[test]
fn columns_filled_between_nulls_decode_as_written_over_every_range_and_budget() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("log");
    let mut log = Log::open(&dir, opts(256)).unwrap();
    let name = |q: &[u8]| q.to_vec();
    let deltas = vec![
        Delta::DeleteQueue { name: name(b"a") },
        Delta::RemoveRecord {
            name: name(b"a"),
            id: 1,
        },
        Delta::AddRecord {
            name: name(b"a"),
            key: -5,
            message: b"xy".to_vec(),
        },
        Delta::CreateQueue {
            name: name(b"b"),
            implementation: 3,
            max_queue_size: 9,
            max_message_size: -1,
            key_range: Some((-1, 1)),
        },
        Delta::AddRecord {
            name: name(b"b"),
            key: 7,
            message: Vec::new(),
        },
        Delta::AddRecord {
            name: name(b"b"),
            key: 8,
            message: b"z".to_vec(),
        },
        Delta::CreateQueue {
            name: name(b""),
            implementation: 1,
            max_queue_size: -1,
            max_message_size: 4,
            key_range: None,
        },
        Delta::RemoveRecord {
            name: name(b"b"),
            id: 2,
        },
        Delta::DeleteQueue { name: name(b"b") },
    ];
    let bytes: Vec<Vec<u8>> = deltas.iter().map(Delta::encode).collect();
    for chunk in bytes.chunks(2) {
        log.append_many(1, chunk).unwrap();
    }
    let n = bytes.len() as i64;
    for start in 0..n {
        for end in start + 1..=n {
            let total: u64 = (start..end).map(|i| bytes[i as usize].len() as u64).sum();
            for max_bytes in 1..=total + 1 {
                for part_entries in [1, 2] {
                    let one = DeltaRead {
                        max_bytes,
                        raw: max_bytes % 2 == 0,
                        parallelism: Parallelism::OneCore,
                        part_entries,
                    };
                    let all = DeltaRead {
                        parallelism: Parallelism::AllCores,
                        ..one
                    };
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(4)
                        .build()
                        .unwrap();
                    let a = read_deltas_with(&mut log, start, end, &one).unwrap();
                    let b = pool
                        .install(|| read_deltas_with(&mut log, start, end, &all))
                        .unwrap();
                    let batch = log.read_batch(start, end, max_bytes).unwrap();
                    assert_eq!(a.len(), batch.len());
                    check_against_written(&a, &mut log);
                    assert_eq!(format!("{a:?}"), format!("{b:?}"));
                }
            }
        }
    }
}
