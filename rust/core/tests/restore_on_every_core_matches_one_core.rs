//! A store's restore on every core (each sealed segment applied while the next ones are still
//! scanned) ends exactly as the restore on one core (the whole log scanned, then replayed):
//! the same state, the same report, the same error (a replay error at the same LSN, the same
//! corruption, the same torn tail), and the same files afterwards, read-only and writable,
//! over random logs with invalid deltas, a snapshot ending anywhere, damaged sealed segments
//! and torn tails.

mod common;

use std::path::Path;

use common::ops::{self, Op};
use common::opts;
use proptest::prelude::*;
use tflux_core::base::Layout;
use tflux_core::log::recovery::Parallelism;
use tflux_core::log::Log;
use tflux_core::state::QueueState;
use tflux_core::store::{Store, StoreOptions};

const NAMES: [&[u8]; 3] = [b"", b"a", b"b"];
const HEADER: usize = tflux_core::format::segment::HEADER_LEN;
const SETTINGS: &str = r#"{"SnapshotCreationSegmentsThreshold": 0, "DiskFullRatio": 1.0}"#;

fn op() -> impl Strategy<Value = Op> {
    ops::valid(NAMES.len(), [1, 1, 14, 6], 20)
}

fn delta(op: &Op, model: &QueueState) -> Vec<u8> {
    ops::delta(op, &NAMES, model)
}

/// Damage done to the written log.
#[derive(Debug, Clone)]
struct Damage {
    /// Flip one byte of segment file `.0` (modulo their number) at `.1` per mille of it.
    flip: Option<(usize, u16)>,
    /// Cut the last segment at this fraction (per mille) of its records' end.
    torn: Option<u16>,
}

fn damage() -> impl Strategy<Value = Damage> {
    (
        prop::option::weighted(0.3, (any::<usize>(), 0u16..1000)),
        prop::option::weighted(0.3, 0u16..1000),
    )
        .prop_map(|(flip, torn)| Damage { flip, torn })
}

fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    files.sort();
    files
}

/// Writes the base directory: a snapshot of the state after the first `snapshot_at` deltas
/// (when given) and the log of the deltas (small segments), then damages it. A delta the
/// state refuses is left out unless it is an [`Op::RemoveAbsent`] (the replay stops at the first
/// refused delta, so refused Adds to queues never created would end most replays early).
fn write_base(base: &Path, ops: &[Op], snapshot_at: Option<usize>, damage: &Damage) {
    let layout = Layout::new(base);
    std::fs::create_dir_all(&layout.data).unwrap();
    let mut model = QueueState::new();
    let mut log = Log::open(&layout.log, opts(500, 1 << 20, false)).unwrap();
    let mut written = 0usize;
    for op in ops {
        let d = delta(op, &model);
        if model.apply(None, &d).is_err() && !matches!(op, Op::RemoveAbsent(_)) {
            continue;
        }
        let lsn = log.append(1, &d).unwrap();
        log.commit(lsn).unwrap();
        written += 1;
        if snapshot_at == Some(written) {
            let s = model.to_snapshot(lsn, 1);
            tflux_core::base::files::write_snapshot(
                &*tflux_core::io::storage::real(),
                &layout.snapshot,
                &s,
            )
            .unwrap();
        }
    }
    log.close().unwrap();
    let files = segment_files(&layout.log);
    if let Some((k, at)) = damage.flip {
        let path = &files[k % files.len()];
        let mut bytes = std::fs::read(path).unwrap();
        // Past the segment header: damage a record (or the zeros after them).
        let body = bytes.len().saturating_sub(HEADER).max(1);
        let i = (HEADER + body * at as usize / 1000).min(bytes.len() - 1);
        bytes[i] ^= 0x5A;
        std::fs::write(path, bytes).unwrap();
    }
    if let Some(at) = damage.torn {
        let path = files.last().unwrap();
        let bytes = std::fs::read(path).unwrap();
        let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        let cut = (HEADER + end.saturating_sub(HEADER) * at as usize / 1000).min(bytes.len());
        let mut kept = bytes[..cut].to_vec();
        kept.resize(bytes.len(), 0);
        std::fs::write(path, kept).unwrap();
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

/// Every file under `dir` (path relative to it, bytes), sorted.
fn files_under(dir: &Path, root: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_under(&p, root, out);
        } else if p.file_name().is_some_and(|n| n != "LOCK" && n != ".lock") {
            let mut rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            // Files moved aside carry a unique tag (time, process, counter): keep their name.
            if let Some(name) = rel.strip_prefix("data/temp/") {
                rel = format!("data/temp/{}", name.rsplit('-').next().unwrap_or(name));
            }
            out.push((rel, std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
}

type Outcome = (
    std::result::Result<(String, String), String>,
    Vec<(String, Vec<u8>)>,
);

/// Opens `base` with `parallelism` and reports what came of it: the state and the report, or
/// the error; and the files afterwards.
fn restore(base: &Path, readonly: bool, parallelism: Parallelism) -> Outcome {
    let opts = StoreOptions {
        readonly,
        parallelism,
        ..StoreOptions::default()
    };
    let result = Store::open_with(base, Some(SETTINGS), opts).map(|store| {
        let state = store.with_state(|s| s.to_snapshot(0, 0)).unwrap();
        let r = store.open_report();
        let report = format!(
            "replayed {} torn {} snapshot {:?} moved {}",
            r.replayed,
            r.torn_tail_cut,
            r.snapshot_index,
            r.moved_aside.len()
        );
        drop(store);
        (format!("{state:?}"), report)
    });
    let mut files = Vec::new();
    files_under(base, base, &mut files);
    let named =
        |e: tflux_core::error::Error| e.to_string().replace(&*base.to_string_lossy(), "BASE");
    (result.map_err(named), files)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, .. ProptestConfig::default() })]

    #[test]
    fn overlapped_restore_equals_restore_after_the_scan(
        mut ops in prop::collection::vec(op(), 1..120),
        invalid in prop::option::weighted(0.4, (any::<prop::sample::Index>(), 0..3usize)),
        snapshot_at in prop::option::weighted(0.3, 0usize..120),
        damage in damage(),
        readonly in any::<bool>(),
    ) {
        // At most one refused delta: the replay stops at it.
        if let Some((at, q)) = invalid {
            ops.insert(at.index(ops.len() + 1), Op::RemoveAbsent(q));
        }
        let dir = tempfile::tempdir().unwrap();
        let written = dir.path().join("written");
        write_base(&written, &ops, snapshot_at, &damage);
        let (one, all) = (dir.path().join("one"), dir.path().join("all"));
        copy_dir(&written, &one);
        copy_dir(&written, &all);
        let sequential = restore(&one, readonly, Parallelism::OneCore);
        let overlapped = restore(&all, readonly, Parallelism::AllCores);
        prop_assert_eq!(&overlapped.0, &sequential.0);
        let names = |o: &Outcome| o.1.iter().map(|f| (f.0.clone(), f.1.len())).collect::<Vec<_>>();
        prop_assert_eq!(names(&overlapped), names(&sequential));
        prop_assert!(overlapped.1 == sequential.1, "the files after the open differ");
    }
}

/// A replay error in an early sealed segment and a corrupt later sealed segment: the open
/// refuses with the corruption (found by the scan), on every core as on one, although the
/// overlapped replay met the bad delta first.
#[test]
fn a_corrupt_later_segment_wins_over_an_earlier_replay_error() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("b");
    let mut ops = vec![Op::Create(1, false), Op::RemoveAbsent(1)];
    ops.extend((0..60).map(|i| Op::Add(1, i % 8, 40)));
    let files_flip = Damage {
        flip: None,
        torn: None,
    };
    write_base(&base, &ops, None, &files_flip);
    let layout = Layout::new(&base);
    let files = segment_files(&layout.log);
    assert!(files.len() >= 3, "{} segments", files.len());
    let victim = &files[files.len() - 2];
    let mut bytes = std::fs::read(victim).unwrap();
    bytes[40] ^= 0x5A;
    std::fs::write(victim, bytes).unwrap();
    let all = restore(&base, true, Parallelism::AllCores).0.unwrap_err();
    let one = restore(&base, true, Parallelism::OneCore).0.unwrap_err();
    assert_eq!(all, one);
    assert!(
        all.contains(&*victim.file_name().unwrap().to_string_lossy()),
        "{all}"
    );
}
