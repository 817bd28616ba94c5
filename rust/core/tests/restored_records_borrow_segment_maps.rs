//! Restored records borrow their messages from the maps of sealed segments (issue 11,
//! "payloads without fresh pages"). The state a restore builds must be the one the online apply
//! builds with copied payloads, and a borrowed message must keep its bytes whatever later
//! happens to the file it was read from: compaction deletes it, a cut replaces it, compression
//! replaces it by a `.log.z`. Records of the active segment and of `.log.z` files are copied.

mod common;

use std::path::Path;

use common::ops::{self, add, remove, Op};
use common::opts;
use proptest::prelude::*;
use tflux_core::format::compressed::Method;
use tflux_core::log::{Log, LogOptions};
use tflux_core::replay::replay;
use tflux_core::state::{QueueInfo, QueueState};
use tflux_core::store::{Store, StoreOptions};

const NAMES: [&[u8]; 3] = [b"", b"a", b"b"];

/// Small segments (a few records each), so most records sit in sealed segments.
fn small() -> LogOptions {
    opts(600, 1 << 20, false)
}

fn message(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seed.wrapping_mul(31).wrapping_add(i as u64 * 7)) as u8)
        .collect()
}

type Seen = Vec<(QueueInfo, Vec<(u64, i64, Vec<u8>)>)>;

/// Every queue's summary and its records in dequeue order (consumes the ready records).
fn observe(s: &mut QueueState) -> Seen {
    let mut out = Vec::new();
    for info in s.infos() {
        let q = s.queue_mut(info.name.as_bytes()).unwrap();
        let mut order = Vec::new();
        while let Some(r) = q.dequeue() {
            order.push((r.id, r.key, r.data.to_vec()));
        }
        out.push((info, order));
    }
    out
}

/// (borrowed, owned) payloads among the state's records.
fn kinds(s: &QueueState) -> (usize, usize) {
    let mut n = (0, 0);
    for info in s.infos() {
        for r in s.queue(info.name.as_bytes()).unwrap().records() {
            if r.data.is_borrowed() {
                n.0 += 1;
            } else {
                n.1 += 1;
            }
        }
    }
    n
}

fn restore(dir: &Path, o: LogOptions) -> (QueueState, Log) {
    let mut log = Log::open(dir, o).unwrap();
    let mut state = QueueState::new();
    replay(&mut state, &mut log, None).unwrap();
    (state, log)
}

/// Writes `deltas` (one append each, committed) and closes the log.
fn write(dir: &Path, deltas: &[Vec<u8>]) {
    let mut log = Log::open(dir, small()).unwrap();
    for d in deltas {
        let lsn = log.append(1, d).unwrap();
        log.commit(lsn).unwrap();
    }
    log.close().unwrap();
}

/// A log of `n` adds of distinct 40-byte messages to the default queue, then `removes` removes
/// of its front records; returns the deltas and the messages still queued, by id.
type Messages = Vec<(u64, Vec<u8>)>;

fn adds_then_removes(n: u64, removes: u64) -> (Vec<Vec<u8>>, Messages) {
    let mut deltas = Vec::new();
    let mut live = Vec::new();
    for id in 1..=n {
        deltas.push(add(b"", 0, message(id, 40)));
        live.push((id, message(id, 40)));
    }
    for id in 1..=removes {
        deltas.push(remove(b"", id));
    }
    live.retain(|(id, _)| *id > removes);
    (deltas, live)
}

fn drain(s: &mut QueueState) -> Messages {
    let q = s.queue_mut(b"").unwrap();
    let mut out = Vec::new();
    while let Some(r) = q.dequeue() {
        out.push((r.id, r.data.to_vec()));
    }
    out
}

fn op() -> impl Strategy<Value = Op> {
    ops::valid(NAMES.len(), [1, 1, 12, 6], 20)
}

/// The delta for `op` against the online model, if the model accepts it.
fn valid_delta(op: &Op, model: &QueueState) -> Vec<u8> {
    ops::delta(op, &NAMES, model)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// A restore (borrowed payloads from sealed segments, copies from the active one) ends in
    /// exactly the state the online apply (every payload copied) builds from the same deltas,
    /// for a writable and a read-only open.
    #[test]
    fn restore_with_borrowed_payloads_matches_owned(
        ops in prop::collection::vec(op(), 1..160),
        readonly in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut online = QueueState::new();
        let mut deltas = Vec::new();
        for op in &ops {
            let d = valid_delta(op, &online);
            if online.apply(None, &d).is_ok() {
                deltas.push(d);
            }
        }
        prop_assume!(!deltas.is_empty());
        write(dir.path(), &deltas);
        let o = LogOptions { readonly, ..small() };
        let (mut restored, log) = restore(dir.path(), o);
        let (borrowed, _) = kinds(&restored);
        prop_assert!(borrowed == 0 || log.segments_len() > 1);
        prop_assert_eq!(
            restored.to_snapshot(1, 1),
            online.to_snapshot(1, 1)
        );
        prop_assert_eq!(observe(&mut restored), observe(&mut online));
    }
}

#[test]
fn records_of_sealed_segments_borrow_and_of_the_active_one_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (deltas, live) = adds_then_removes(200, 0);
    write(dir.path(), &deltas);
    let (mut state, log) = restore(dir.path(), small());
    assert!(log.segments_len() > 3);
    let active_first = log.segments().last().unwrap().start_lsn;
    let q = state.queue(b"").unwrap();
    for r in q.records() {
        // The first entry is the first add (ids count from 1).
        let lsn = log.start_index() + r.id as i64 - 1;
        assert_eq!(r.data.is_borrowed(), lsn < active_first, "record {}", r.id);
    }
    assert_eq!(drain(&mut state), live);
}

#[test]
fn a_borrowed_record_outlives_compaction_of_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (deltas, live) = adds_then_removes(200, 50);
    write(dir.path(), &deltas);
    let (mut state, mut log) = restore(dir.path(), small());
    assert!(kinds(&state).0 > 100);
    let last = log.last_index();
    log.commit(last).unwrap();
    let before = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(log.compact(last).unwrap() > 3);
    assert!(std::fs::read_dir(dir.path()).unwrap().count() < before);
    drop(log);
    assert_eq!(drain(&mut state), live);
}

/// The restore's batch holds one count per segment while it runs and each surviving record
/// takes its own when it settles: once the log and its segments are gone and every file was
/// deleted and others written under the same names, the records still read their own bytes.
#[test]
fn restored_records_keep_their_bytes_after_the_files_are_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let (deltas, live) = adds_then_removes(300, 120);
    write(dir.path(), &deltas);
    let (mut state, log) = restore(dir.path(), small());
    assert!(kinds(&state).0 > 100);
    drop(log);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, vec![0xA5; len]).unwrap();
    }
    assert_eq!(drain(&mut state), live);
}

#[test]
fn a_borrowed_record_outlives_a_cut_of_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (deltas, live) = adds_then_removes(200, 0);
    write(dir.path(), &deltas);
    let (mut state, mut log) = restore(dir.path(), small());
    let second = log.segments()[1].clone();
    // Cut inside the second (sealed) segment and write other entries where the cut ones were:
    // the records restored from the cut segment keep their bytes.
    let cut_after = second.start_lsn + 1;
    log.truncate_after(cut_after).unwrap();
    assert_eq!(log.last_index(), cut_after);
    for _ in 0..50 {
        log.append(2, &add(b"", 0, vec![0xEE; 40])).unwrap();
    }
    log.sync().unwrap();
    assert!(kinds(&state).0 > 0);
    drop(log);
    assert_eq!(drain(&mut state), live);
}

#[test]
fn a_borrowed_record_outlives_compression_of_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (deltas, live) = adds_then_removes(200, 20);
    write(dir.path(), &deltas);
    let (mut state, mut log) = restore(dir.path(), small());
    assert!(kinds(&state).0 > 100);
    let made = log.compress(Method::Zstd).unwrap();
    assert!(made.len() > 3);
    let plain_left = std::fs::read_dir(dir.path())
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension() == Some("log".as_ref()))
        .count();
    assert_eq!(plain_left, 1, "only the active segment stays a .log");
    drop(log);
    assert_eq!(drain(&mut state), live.clone());

    // A restore from the `.log.z` files copies (a record must not pin a decompressed segment).
    let (mut again, _log) = restore(dir.path(), small());
    assert_eq!(kinds(&again).0, 0);
    assert_eq!(drain(&mut again), live);
}

#[test]
fn a_store_keeps_borrowed_records_through_snapshot_and_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let settings = r#"{"LogFileSoftLimit": 4096, "LogPreallocateSegments": false, "SnapshotCreationSegmentsThreshold": 1000, "DiskFullRatio": 1.0}"#;
    let messages: Vec<Vec<u8>> = (0..300).map(|i| message(i, 64)).collect();
    {
        let store = Store::open(base, Some(settings), false).unwrap();
        for m in &messages {
            store.enqueue(b"", 0, m).unwrap();
        }
        store.close().unwrap();
    }
    let store = Store::open_with(base, Some(settings), StoreOptions::default()).unwrap();
    let borrowed = store.with_state(kinds).unwrap().0;
    assert!(borrowed > 200, "{borrowed} borrowed");
    assert!(store.snapshot().unwrap());
    let (start, _, _) = store.log_bounds().unwrap();
    assert!(start > 1, "the snapshot compacted the log (start {start})");
    let mut got = Vec::new();
    while let Some((r, _)) = store.dequeue(b"", Some(std::time::Duration::ZERO)).unwrap() {
        got.push(r.data.to_vec());
        store.ack(b"", r.id, None).unwrap();
    }
    assert_eq!(got, messages);
    store.close().unwrap();
}

/// Ad-hoc: `TFLUX_BORROW_LOG=<log dir> cargo test --release --test restored_records_borrow_segment_maps -- --ignored`.
#[test]
#[ignore]
fn count_borrowed_in_a_given_log() {
    let dir = std::env::var("TFLUX_BORROW_LOG").unwrap();
    let o = LogOptions {
        readonly: true,
        ..LogOptions::default()
    };
    let (state, log) = restore(Path::new(&dir), o);
    eprintln!("{:?} of {} segments", kinds(&state), log.segments_len());
}

/// The overlapped restore replays each sealed segment from the map its scan made (no second
/// map of the log), and no segment stays mapped once the scan has walked past it, fed or not.
#[test]
fn a_fed_segment_is_replayed_from_its_scans_map_and_then_unmapped() {
    let dir = tempfile::tempdir().unwrap();
    let (deltas, _) = adds_then_removes(60, 20);
    write(dir.path(), &deltas);
    let storage = tflux_core::io::storage::real();
    let options = tflux_core::log::recovery::ScanOptions::default();
    let mut fed = 0;
    let scan = tflux_core::log::recovery::scan_dir_feeding(
        dir.path(),
        options.clone(),
        &storage,
        &mut |seg| {
            assert!(
                seg.is_mapped(),
                "{} fed without the scan's map",
                seg.path().display()
            );
            fed += 1;
        },
    )
    .unwrap();
    assert!(fed >= 2, "the log has sealed segments ({fed} fed)");
    for scan in [
        scan,
        tflux_core::log::recovery::scan_dir(dir.path(), options, &storage).unwrap(),
    ] {
        for f in &scan.files {
            let seg = f.segment.as_ref().unwrap();
            assert!(!seg.is_mapped(), "{} still mapped", seg.path().display());
        }
    }
}

/// The replay after open reads the active segment a window of whole records at a time: every
/// record comes once, in order, with its own bytes and term (copied: no source to borrow
/// from), across window boundaries and for a record longer than a window; and a replay that
/// stops early stops there.
#[test]
fn the_replay_reads_a_large_active_segment_window_by_window() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(64 << 20, 128 << 20, false);
    let mut log = Log::open(dir.path(), o.clone()).unwrap();
    let mut written = Vec::new();
    for i in 0..3000u64 {
        // 1-3 KiB records (about 6 MiB: three windows), one of 5 MiB among them.
        let len = if i == 1700 {
            5 << 20
        } else {
            1000 + (i as usize * 37) % 2100
        };
        let data = message(i, len);
        let term = 1 + (i / 1000) as i32;
        let lsn = log.append(term, &data).unwrap();
        written.push((lsn, term, data));
    }
    log.commit(written.last().unwrap().0).unwrap();
    log.close().unwrap();
    let mut log = Log::open(dir.path(), o).unwrap();
    assert_eq!(log.segments().len(), 1, "all in the active segment");
    let (start, end) = (log.start_index(), log.last_index() + 1);
    let mut seen = Vec::new();
    log.scan_checked_at_open(start, end, |lsn, term, data, source| {
        assert!(source.is_none(), "active records are copied");
        seen.push((lsn, term, data.to_vec()));
        true
    })
    .unwrap();
    assert!(
        seen == written,
        "{} records replayed, {} written",
        seen.len(),
        written.len()
    );
    let mut stopped = 0;
    log.scan_checked_at_open(start + 10, end, |lsn, _, _, _| {
        assert_eq!(lsn, start + 10 + stopped);
        stopped += 1;
        stopped < 2500
    })
    .unwrap();
    assert_eq!(stopped, 2500);
}
