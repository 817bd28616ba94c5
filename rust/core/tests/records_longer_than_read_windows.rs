//! Records longer than the windows the active segment is read through (the scan at open's
//! window, the replay's window, both 256 KiB), ending on or around a window's end, followed by
//! empty records; and runs of 1 KiB records straddling the windows. Every record must come
//! back from the replay right after open, `read`, `read_batch` and `read_deltas` with its LSN,
//! term and bytes, and the open and `verify` must find the end of the last record.

use proptest::prelude::*;
use tflux_core::format::delta::Delta;
use tflux_core::log::columns::{read_deltas_with, DeltaRead};
use tflux_core::log::recovery::Parallelism;
use tflux_core::{Log, LogOptions, SyncPolicy};

/// The window of the scan at open and of the replay of the active segment.
const WINDOW: usize = 256 << 10;
/// Header of a segment file.
const SEGMENT_HEADER: usize = 8;
/// Header of a record.
const RECORD_HEADER: usize = 16;

fn record_len(data: usize) -> usize {
    RECORD_HEADER + data.div_ceil(4) * 4
}

fn opts(preallocate: bool, readonly: bool) -> LogOptions {
    LogOptions {
        // One segment: everything written is in the active segment.
        soft_limit: 24 << 20,
        hard_limit: 48 << 20,
        preallocate,
        sync: SyncPolicy::Never,
        readonly,
        ..LogOptions::default()
    }
}

/// What to write next.
#[derive(Debug, Clone)]
enum Item {
    /// A record with no data.
    Empty,
    /// A record of this many data bytes.
    Data(usize),
    /// A record whose end (framing included) lies `delta` bytes (a multiple of 4) from
    /// `halves` half-windows past its own start: a record about one, two, ... windows long.
    Windows { halves: usize, delta: isize },
    /// A record whose end lies `delta` bytes from the `k`-th window boundary of the file after
    /// its start (boundaries at multiples of the window from the file's start).
    EndsAtBoundary { k: usize, delta: isize },
    /// `n` records of about 1 KiB, every `empty_every`-th one empty (0: none).
    Kib { n: usize, empty_every: usize },
}

/// Data lengths for `items`, written from offset `SEGMENT_HEADER` of the segment.
fn lengths(items: &[Item]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER;
    let data_for = |at: usize, end: isize| -> usize {
        // The longest data whose record ends at or before `end` (at least a header).
        let room = (end - at as isize).max(RECORD_HEADER as isize) as usize;
        room - RECORD_HEADER
    };
    for item in items {
        let before = out.len();
        match *item {
            Item::Empty => out.push(0),
            Item::Data(n) => out.push(n),
            Item::Windows { halves, delta } => {
                out.push(data_for(at, (at + halves * WINDOW / 2) as isize + delta))
            }
            Item::EndsAtBoundary { k, delta } => {
                let boundary = (at / WINDOW + k) * WINDOW;
                out.push(data_for(at, boundary as isize + delta))
            }
            Item::Kib { n, empty_every } => {
                for i in 0..n {
                    let empty = empty_every > 0 && i % empty_every == empty_every - 1;
                    out.push(if empty { 0 } else { 1000 + (i * 37) % 100 });
                }
            }
        }
        at += out[before..].iter().map(|&n| record_len(n)).sum::<usize>();
    }
    out
}

/// The data of record `lsn`, `n` bytes, different at every position and in every record (a
/// record read from the wrong offset, or cut short, cannot pass for it).
fn payload(lsn: i64, n: usize) -> Vec<u8> {
    let mut x = (lsn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The record written at `lsn` as a delta (`read_deltas` decodes only deltas): an add whose
/// message pads it to `n` data bytes, or nothing at all (`n == 0`, an empty record).
fn delta_payload(lsn: i64, n: usize) -> Vec<u8> {
    if n == 0 {
        return Vec::new();
    }
    let head = Delta::AddRecord {
        name: b"q".to_vec(),
        key: lsn,
        message: Vec::new(),
    }
    .encode()
    .len();
    let message = payload(lsn, n.saturating_sub(head));
    Delta::AddRecord {
        name: b"q".to_vec(),
        key: lsn,
        message,
    }
    .encode()
}

type Written = Vec<(i64, i32, Vec<u8>)>;

/// Writes the records (terms rising now and then, appended in groups of `group`), closes the
/// log; returns what was written and the end offset of the last record.
fn write(dir: &std::path::Path, data: Vec<Vec<u8>>, preallocate: bool, group: usize) -> Written {
    let mut log = Log::open(dir, opts(preallocate, false)).unwrap();
    let mut written = Vec::new();
    let mut lsn = 0i64;
    for (k, chunk) in data.chunks(group.max(1)).enumerate() {
        let term = 1 + (k / 3) as i32;
        let first = log.append_many(term, chunk).unwrap();
        assert_eq!(first, lsn);
        for d in chunk {
            written.push((lsn, term, d.clone()));
            lsn += 1;
        }
    }
    log.close().unwrap();
    written
}

fn end_of(written: &Written) -> u64 {
    (SEGMENT_HEADER + written.iter().map(|r| record_len(r.2.len())).sum::<usize>()) as u64
}

/// Everything a reader of the log returns, checked against what was written.
fn check_log(log: &mut Log, written: &Written, what: &str) {
    let n = written.len() as i64;
    assert_eq!(log.last_index(), n - 1, "{what}: last index");
    let segments = log.segments();
    assert_eq!(segments.len(), 1, "{what}");
    assert_eq!(
        segments[0].size,
        end_of(written),
        "{what}: end of the records"
    );
    assert_eq!(segments[0].count, n as u64, "{what}: records");

    // The replay right after open (the active segment through its window).
    let mut replayed = Vec::new();
    log.scan_checked_at_open(0, n, |lsn, term, data, source| {
        assert!(
            source.is_none(),
            "{what}: the active segment's records are copied"
        );
        replayed.push((lsn, term, data.to_vec()));
        true
    })
    .unwrap();
    assert_same(&replayed, written, &format!("{what}: replay"));

    // Reads from several starts, unbounded and within budgets around the records' sizes.
    let starts: Vec<i64> = [0, n / 2, n - 1]
        .into_iter()
        .filter(|&s| (0..n).contains(&s))
        .collect();
    for &start in &starts {
        let all = log.read(start, None).unwrap();
        let all: Written = all.into_iter().map(|e| (e.lsn, e.term, e.data)).collect();
        assert_same(
            &all,
            &written[start as usize..],
            &format!("{what}: read({start})"),
        );
        for budget in [0u64, 1000, WINDOW as u64, 3 << 20] {
            let want = within(&written[start as usize..], budget);
            let got: Written = log
                .read(start, Some(budget))
                .unwrap()
                .into_iter()
                .map(|e| (e.lsn, e.term, e.data))
                .collect();
            assert_same(&got, want, &format!("{what}: read({start}, {budget})"));
            let batch = log.read_batch(start, n, budget).unwrap();
            let got: Written = (0..batch.len())
                .map(|i| {
                    let e = batch.entry(i);
                    (e.lsn, e.term, e.data)
                })
                .collect();
            let want = within(&written[start as usize..], budget.min(i32::MAX as u64));
            assert_same(
                &got,
                want,
                &format!("{what}: read_batch({start}, {budget})"),
            );
        }
        // Ranges ending at each of the last records.
        for end in (start + 1..=n).rev().take(if start == 0 { 3 } else { 1 }) {
            let batch = log.read_batch(start, end, u64::MAX).unwrap();
            assert_eq!(
                batch.len() as i64,
                end - start,
                "{what}: read_batch({start}..{end})"
            );
            for i in 0..batch.len() {
                let e = batch.entry(i);
                assert_eq!(
                    (e.lsn, e.term, &e.data),
                    (
                        written[e.lsn as usize].0,
                        written[e.lsn as usize].1,
                        &written[e.lsn as usize].2
                    ),
                    "{what}: read_batch({start}..{end})"
                );
            }
        }
    }
}

/// The prefix of `records` a read with this data budget returns: the first always, then each
/// next one while the total stays within the budget.
fn within(records: &[(i64, i32, Vec<u8>)], budget: u64) -> &[(i64, i32, Vec<u8>)] {
    let mut used = 0u64;
    let mut k = 0;
    for (i, r) in records.iter().enumerate() {
        used += r.2.len() as u64;
        if i > 0 && used > budget {
            break;
        }
        k = i + 1;
    }
    &records[..k]
}

fn assert_same(got: &[(i64, i32, Vec<u8>)], want: &[(i64, i32, Vec<u8>)], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: records returned");
    for (g, w) in got.iter().zip(want) {
        // Compare lengths and a few bytes first: a failure then says which record, not 1 MiB.
        assert_eq!((g.0, g.1, g.2.len()), (w.0, w.1, w.2.len()), "{what}");
        assert!(g.2 == w.2, "{what}: the bytes of record {} differ", w.0);
    }
}

/// Writes `items`, then checks the log opened writable, read-only, and verified.
fn check_items(items: &[Item], preallocate: bool, group: usize) {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("log");
    let lens = lengths(items);
    let data = lens
        .iter()
        .enumerate()
        .map(|(lsn, &n)| payload(lsn as i64, n))
        .collect();
    let written = write(&dir, data, preallocate, group);
    let what = format!("{items:?} preallocate {preallocate} group {group}");
    check_opened(&dir, &written, &what);
}

fn check_opened(dir: &std::path::Path, written: &Written, what: &str) {
    let report = tflux_core::verify(dir).unwrap();
    assert!(report.ok(), "{what}: verify {:?}", report.problems);
    assert!(
        report.problems.is_empty(),
        "{what}: verify {:?}",
        report.problems
    );
    assert_eq!(report.records, written.len() as u64, "{what}: verify");
    assert_eq!(
        report.segments[0].size,
        end_of(written),
        "{what}: verify end"
    );
    for readonly in [false, true] {
        let mut log = Log::open(dir, opts(false, readonly)).unwrap();
        assert!(!log.recovery().truncated(), "{what}: {:?}", log.recovery());
        check_log(&mut log, written, &format!("{what} readonly {readonly}"));
    }
    // Nothing was cut: the same again after the writable open.
    let report = tflux_core::verify(dir).unwrap();
    assert_eq!(
        report.segments[0].size,
        end_of(written),
        "{what}: verify end"
    );
    check_trailing_empty(dir, written, what);
}

/// A log without empty entries (a store's) reads a trailing empty record followed by nothing
/// but zeros as a header torn after its term, and cuts it; a non-zero byte anywhere after it,
/// however far past the windows, makes it a record. Read-only opens report without cutting.
fn check_trailing_empty(dir: &std::path::Path, written: &Written, what: &str) {
    use std::os::unix::fs::FileExt;
    let no_empty = || LogOptions {
        empty_entries: false,
        ..opts(false, true)
    };
    let n = written.len();
    let trailing = written.iter().rev().take_while(|r| r.2.is_empty()).count();
    let log = Log::open(dir, no_empty()).unwrap();
    if trailing == 0 {
        assert!(!log.recovery().truncated(), "{what}: {:?}", log.recovery());
        assert_eq!(log.last_index(), n as i64 - 1, "{what}");
        return;
    }
    // Only the last one is ambiguous (an empty record before it is followed by its marker).
    let last_offset = end_of(written) - RECORD_HEADER as u64;
    assert_eq!(log.recovery().cut_offset, Some(last_offset), "{what}");
    assert_eq!(log.recovery().records_kept, n as u64 - 1, "{what}");
    drop(log);
    // A byte past the end marker, past a window or two from it (the file grows if it must).
    let path = log_file(dir);
    let len = std::fs::metadata(&path).unwrap().len();
    let garbage = end_of(written) + 4 + 2 * WINDOW as u64 + 1000;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0x5A], garbage).unwrap();
    let log = Log::open(dir, no_empty()).unwrap();
    assert!(
        !log.recovery().truncated(),
        "{what}: garbage at {garbage}: {:?}",
        log.recovery()
    );
    assert_eq!(log.last_index(), n as i64 - 1, "{what}");
    drop(log);
    f.write_all_at(&[0], garbage).unwrap();
    f.set_len(len).unwrap();
}

/// The one segment file of the log in `dir`.
fn log_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.remove(0)
}

#[test]
fn a_record_longer_than_the_window_then_empty_records_reads_back_whole() {
    use Item::*;
    let mut layouts = Vec::new();
    // The long record ends just before, at and just after one, two and four windows from its
    // own start (where the scan's window begins once the record did not fit the first one),
    // with the empty record's end and its end marker on either side of that end.
    for halves in [2, 3, 4, 8] {
        for delta in [-20, -16, -12, -4, 0, 4] {
            for lead in [0, 120 << 10, WINDOW - 64] {
                layouts.push(vec![Data(lead), Windows { halves, delta }, Empty]);
            }
            layouts.push(vec![
                Windows { halves, delta },
                Empty,
                Empty,
                Data(5),
                Empty,
            ]);
        }
    }
    // The long record ends near a boundary of the file's windows, the first one's included.
    for k in [1, 2, 9] {
        for delta in [-20, -16, -4, 0, 4] {
            layouts.push(vec![Data(40), EndsAtBoundary { k, delta }, Empty]);
            layouts.push(vec![Data(40), EndsAtBoundary { k, delta }, Empty, Empty]);
        }
    }
    for (i, items) in layouts.iter().enumerate() {
        check_items(items, i % 2 == 0, 1 + i % 3);
    }
}

#[test]
fn runs_of_kib_records_straddle_the_windows() {
    use Item::*;
    for (items, preallocate) in [
        (
            vec![Kib {
                n: 800,
                empty_every: 0,
            }],
            true,
        ),
        (
            vec![
                Kib {
                    n: 800,
                    empty_every: 0,
                },
                Empty,
            ],
            true,
        ),
        (
            vec![
                Kib {
                    n: 760,
                    empty_every: 7,
                },
                Empty,
                Empty,
            ],
            false,
        ),
        (
            vec![
                Data(17),
                Kib {
                    n: 600,
                    empty_every: 253,
                },
                Windows {
                    halves: 2,
                    delta: 0,
                },
                Empty,
            ],
            true,
        ),
    ] {
        for group in [1, 64] {
            check_items(&items, preallocate, group);
        }
    }
}

#[test]
fn read_deltas_decodes_long_deltas_across_the_windows_and_names_an_empty_record() {
    use Item::*;
    let items = [
        Data(300),
        Windows {
            halves: 2,
            delta: -16,
        },
        Empty,
        Kib {
            n: 300,
            empty_every: 0,
        },
        EndsAtBoundary { k: 1, delta: 0 },
        Empty,
        Windows {
            halves: 5,
            delta: 4,
        },
        Data(64),
    ];
    let lens = lengths(&items);
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("log");
    let data: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(lsn, &n)| delta_payload(lsn as i64, n))
        .collect();
    let empties: Vec<i64> = (0..data.len() as i64)
        .filter(|&l| data[l as usize].is_empty())
        .collect();
    let written = write(&dir, data, true, 5);
    check_opened(&dir, &written, "deltas");
    let mut log = Log::open(&dir, opts(false, false)).unwrap();
    let n = written.len() as i64;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    for parallelism in [Parallelism::OneCore, Parallelism::AllCores] {
        let opts = DeltaRead {
            max_bytes: u64::MAX,
            raw: true,
            parallelism,
            part_entries: 3,
        };
        // Between empty records: every delta as written.
        let mut bounds = vec![-1];
        bounds.extend(&empties);
        bounds.push(n);
        for w in bounds.windows(2) {
            let (start, end) = (w[0] + 1, w[1]);
            if start >= end {
                continue;
            }
            let c = pool
                .install(|| read_deltas_with(&mut log, start, end, &opts))
                .unwrap();
            assert_eq!(
                c.len() as i64,
                end - start,
                "{parallelism:?} {start}..{end}"
            );
            let raw = c.raw.as_ref().unwrap();
            for (i, &lsn) in c.lsn.iter().enumerate() {
                assert_eq!(lsn, start + i as i64);
                assert_eq!(c.term[i], written[lsn as usize].1);
                let got = &raw.data[raw.offsets[i] as usize..raw.offsets[i + 1] as usize];
                assert!(got == &written[lsn as usize].2[..], "LSN {lsn}");
                let Delta::AddRecord { message, .. } = Delta::decode(got).unwrap() else {
                    panic!("LSN {lsn}")
                };
                let m = &c.message.data
                    [c.message.offsets[i] as usize..c.message.offsets[i + 1] as usize];
                assert!(m == &message[..], "message at LSN {lsn}");
            }
        }
        // Across an empty record: refused, naming it.
        for &empty in &empties {
            let e = pool
                .install(|| read_deltas_with(&mut log, 0, n, &opts))
                .map(|c| c.len())
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("at LSN {}", empties[0])), "{e}");
            let e = pool
                .install(|| read_deltas_with(&mut log, empty, n, &opts))
                .map(|c| c.len())
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("at LSN {empty}")), "{e}");
        }
    }
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        3 => Just(Item::Empty),
        3 => (0usize..200).prop_map(Item::Data),
        1 => (1000usize..1100).prop_map(Item::Data),
        1 => (WINDOW - 300..WINDOW + 300).prop_map(Item::Data),
        1 => (WINDOW..(2 << 20) + 4096).prop_map(Item::Data),
        3 => (1usize..10, -12isize..=12).prop_map(|(halves, d)| Item::Windows { halves, delta: d * 4 }),
        3 => (1usize..4, -12isize..=12).prop_map(|(k, d)| Item::EndsAtBoundary { k, delta: d * 4 }),
        1 => (200usize..700, 0usize..300).prop_map(|(n, e)| Item::Kib { n, empty_every: e }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    #[test]
    fn records_around_and_past_the_windows_read_back_whole(
        items in prop::collection::vec(item(), 1..8),
        empties_after in 0usize..3,
        preallocate in any::<bool>(),
        group in 1usize..6,
    ) {
        let mut items = items;
        items.extend(std::iter::repeat_n(Item::Empty, empties_after));
        check_items(&items, preallocate, group);
    }
}
