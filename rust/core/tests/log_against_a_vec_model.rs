//! Model test: random sequences of log operations against a plain `Vec` of entries, with tiny
//! segment limits so roll-over, cuts across segments and compaction happen constantly.

mod common;

use common::*;
use proptest::prelude::*;
use tflux_core::format::compressed::Method;
use tflux_core::{Log, LogOptions};

#[derive(Debug, Clone)]
enum Op {
    Append(u8, Vec<u8>),
    AppendMany(u8, Vec<Vec<u8>>),
    Insert(u8, u8, Vec<Vec<u8>>),
    Commit(u8),
    Truncate(u8),
    Compact(u8),
    Reopen,
    /// Compresses every sealed segment (a later cut into one decompresses it).
    Compress,
    /// Reads records at random positions alone (`read` and `read_batch` of one, so that sealed
    /// segments build their full offsets), from this log and from a read-only open.
    ReadAt(Vec<u16>),
}

fn op() -> impl Strategy<Value = Op> {
    let data = prop::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        3 => (0u8..3, data.clone()).prop_map(|(t, d)| Op::Append(t, d)),
        2 => (0u8..3, prop::collection::vec(data.clone(), 0..5)).prop_map(|(t, d)| Op::AppendMany(t, d)),
        2 => (any::<u8>(), 0u8..3, prop::collection::vec(data, 0..4)).prop_map(|(s, t, d)| Op::Insert(s, t, d)),
        2 => any::<u8>().prop_map(Op::Commit),
        1 => any::<u8>().prop_map(Op::Truncate),
        1 => any::<u8>().prop_map(Op::Compact),
        1 => Just(Op::Reopen),
        1 => Just(Op::Compress),
        2 => prop::collection::vec(any::<u16>(), 1..12).prop_map(Op::ReadAt),
    ]
}

/// The model: entries from `start`, each `(term, data)`, and the commit index.
struct Model {
    start: i64,
    entries: Vec<(i32, Vec<u8>)>,
    commit: i64,
}

impl Model {
    fn last(&self) -> i64 {
        self.start + self.entries.len() as i64 - 1
    }
    fn last_term(&self) -> i32 {
        self.entries.last().map_or(0, |e| e.0)
    }
    /// A position in [start, last + 2] picked by a random byte.
    fn pick(&self, b: u8) -> i64 {
        self.start + (b as i64 % (self.entries.len() as i64 + 2))
    }
}

fn check(log: &mut Log, m: &Model) {
    assert_eq!(log.start_index(), m.start);
    assert_eq!(log.last_index(), m.last());
    assert_eq!(log.commit_index(), m.commit);
    let got = all_entries(log);
    let want: Vec<_> = m
        .entries
        .iter()
        .enumerate()
        .map(|(i, (t, d))| (m.start + i as i64, *t, d.clone()))
        .collect();
    assert_eq!(got, want);
    // Random access: every entry read alone, and its term.
    for (lsn, term, data) in want.iter().step_by(7) {
        let one = log.read(*lsn, Some(0)).unwrap();
        assert_eq!((one[0].lsn, one[0].term, &one[0].data), (*lsn, *term, data));
        assert_eq!(log.term_at(*lsn).unwrap(), *term);
    }
    let segs = log.segments();
    assert!(segs.iter().rev().skip(1).all(|s| s.sealed));
    assert!(!segs.last().unwrap().sealed);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
    #[test]
    fn log_matches_a_vec_model(ops in prop::collection::vec(op(), 1..40), prealloc in any::<bool>()) {
        run_model(ops, 64, 160, prealloc)?;
    }

    /// Segments of ~100 records: sealed segments keep a sparse index (every 8th offset), so
    /// reads, terms and cuts inside them walk record headers.
    #[test]
    fn log_with_many_records_per_segment_matches_a_vec_model(
        ops in prop::collection::vec(op(), 1..120),
        prealloc in any::<bool>(),
    ) {
        run_model(ops, 2400, 4800, prealloc)?;
    }
}

/// The same options, read-only (sees what the writer has written, committed or not).
fn readonly(o: &LogOptions) -> LogOptions {
    let mut ro = o.clone();
    ro.readonly = true;
    ro.commit_index = None;
    ro
}

fn run_model(ops: Vec<Op>, soft: u64, hard: u64, prealloc: bool) -> Result<(), TestCaseError> {
    {
        // The log in a directory of its own: compression's temp directory goes beside it.
        let base = tempfile::tempdir().unwrap();
        let dir = base.path().join("log");
        let o = opts(soft, hard, prealloc);
        let mut log = Log::open(&dir, o.clone()).unwrap();
        let mut m = Model {
            start: 0,
            entries: vec![],
            commit: -1,
        };
        let mut term_base = 0i32;
        for op in ops {
            match op {
                Op::Append(dt, d) => {
                    let t = m.last_term() + dt as i32;
                    let lsn = log.append(t, &d).unwrap();
                    prop_assert_eq!(lsn, m.last() + 1);
                    m.entries.push((t, d));
                }
                Op::AppendMany(dt, ds) => {
                    let t = m.last_term() + dt as i32;
                    let first = log.append_many(t, &ds).unwrap();
                    prop_assert_eq!(first, m.last() + 1);
                    m.entries.extend(ds.into_iter().map(|d| (t, d)));
                }
                Op::Insert(s, dt, ds) => {
                    let start = m.pick(s) + if s % 7 == 0 { 3 } else { 0 };
                    let prev = if start > m.last() + 1 || start == m.start {
                        term_base
                    } else {
                        m.entries
                            .get((start - 1 - m.start) as usize)
                            .map_or(0, |e| e.0)
                    };
                    let t = prev.max(m.last_term().min(prev + 1)) + dt as i32;
                    let entries: Vec<(i32, Vec<u8>)> = ds.into_iter().map(|d| (t, d)).collect();
                    let r = log.insert_range(start, &entries);
                    if start <= m.commit || start < m.start {
                        prop_assert!(r.is_err());
                    } else {
                        r.unwrap();
                        if start > m.last() + 1 {
                            m.start = start;
                            m.entries.clear();
                            m.commit = start - 1;
                        } else {
                            m.entries.truncate((start - m.start) as usize);
                        }
                        m.entries.extend(entries);
                    }
                    term_base = m.last_term();
                }
                Op::Commit(b) => {
                    let i = m.pick(b) - 1;
                    let r = log.commit(i);
                    if i > m.last() {
                        prop_assert!(r.is_err());
                    } else {
                        r.unwrap();
                        m.commit = m.commit.max(i);
                    }
                }
                Op::Truncate(b) => {
                    let i = m.pick(b) - 1;
                    let r = log.truncate_after(i);
                    if i < m.commit {
                        prop_assert!(r.is_err());
                    } else {
                        r.unwrap();
                        if i < m.last() {
                            m.entries.truncate((i + 1 - m.start) as usize);
                        }
                    }
                }
                Op::Compact(b) => {
                    let i = m.pick(b) - 1;
                    let r = log.compact(i);
                    if i > m.commit {
                        prop_assert!(r.is_err());
                    } else {
                        r.unwrap();
                        let new_start = log.start_index();
                        prop_assert!(new_start >= m.start && new_start <= i + 1);
                        m.entries.drain(..(new_start - m.start) as usize);
                        m.start = new_start;
                    }
                }
                Op::Compress => {
                    log.compress(Method::Lz4).unwrap();
                }
                Op::ReadAt(picks) => {
                    let mut ro = Log::open(&dir, readonly(&o)).unwrap();
                    for p in picks {
                        if m.entries.is_empty() {
                            break;
                        }
                        let i = p as usize % m.entries.len();
                        let lsn = m.start + i as i64;
                        let (term, data) = &m.entries[i];
                        for l in [&mut log, &mut ro] {
                            let one = l.read(lsn, Some(1)).unwrap();
                            prop_assert_eq!(
                                (one[0].lsn, one[0].term, &one[0].data),
                                (lsn, *term, data)
                            );
                            let batch = l.read_batch(lsn, lsn + 1, 4 << 20).unwrap();
                            prop_assert_eq!(&batch.terms, &vec![*term]);
                            prop_assert_eq!(&batch.data, data);
                        }
                    }
                }
                Op::Reopen => {
                    drop(log);
                    let mut o2 = o.clone();
                    o2.commit_index = Some(m.commit);
                    log = Log::open(&dir, o2).unwrap();
                }
            }
            check(&mut log, &m);
        }
    }
    Ok(())
}
