//! The recovery scanner on every core finds exactly what it finds on one: same findings (kind,
//! file, offset, message, fatality), same segments, same records, in every recovery mode, over
//! random log directories with damaged records, terms that go down inside and across segments,
//! gaps, overlaps, empty segments and stray files.

mod common;

use common::*;
use proptest::prelude::*;
use tflux_core::log::recovery::{scan_dir, Keep, LogScan, Parallelism, RecoveryMode, ScanOptions};

#[derive(Debug, Clone)]
struct Seg {
    /// (term, data length) of each record.
    records: Vec<(i32, usize)>,
    /// Shift of the start LSN from where the previous segment ends (0 mostly).
    shift: i64,
    /// Flip one byte at this fraction of the file (per mille), or none.
    flip: Option<u16>,
    /// Cut the file at this fraction (per mille), or keep it whole.
    cut: Option<u16>,
}

fn seg() -> impl Strategy<Value = Seg> {
    (
        prop::collection::vec(
            (
                prop_oneof![8 => 1i32..4, 1 => 0i32..1, 1 => -1i32..0],
                0..90usize,
            ),
            0..12,
        ),
        prop_oneof![8 => Just(0i64), 1 => -2i64..3],
        prop::option::weighted(0.2, 0u16..1000),
        prop::option::weighted(0.15, 0u16..1000),
    )
        .prop_map(|(mut records, shift, flip, cut)| {
            // Mostly ascending terms (a sound log); a few still go down.
            if records.len() % 3 != 0 {
                records.sort_by_key(|r| r.0);
            }
            Seg {
                records,
                shift,
                flip,
                cut,
            }
        })
}

fn write_dir(dir: &std::path::Path, segs: &[Seg], stray: bool) {
    let mut lsn = 0i64;
    for s in segs {
        lsn = (lsn + s.shift).max(0);
        let datas: Vec<(i32, Vec<u8>)> = s
            .records
            .iter()
            .map(|&(t, n)| (t, (0..n).map(|i| (i * 7 + n) as u8).collect()))
            .collect();
        let refs: Vec<(i32, &[u8])> = datas.iter().map(|(t, d)| (*t, d.as_slice())).collect();
        let mut bytes = hand_segment(&refs);
        if let Some(f) = s.flip {
            let at = bytes.len() * f as usize / 1000;
            bytes[at] ^= 0x5A;
        }
        if let Some(c) = s.cut {
            bytes.truncate(bytes.len() * c as usize / 1000);
        }
        std::fs::write(dir.join(seg_name(lsn)), bytes).unwrap();
        lsn += s.records.len() as i64;
    }
    if stray {
        std::fs::write(dir.join("notes.txt"), b"x").unwrap();
    }
}

fn seen(scan: &LogScan) -> String {
    let infos: Vec<_> = scan
        .files
        .iter()
        .map(|f| (&f.info, f.segment.as_ref().map(|s| s.len())))
        .collect();
    format!(
        "{:?}\n{:?}\n{:?}\n{:?}\n{} {:?} {}",
        scan.findings,
        infos,
        scan.listed,
        scan.ignored,
        scan.records(),
        scan.last_entry(),
        scan.last_index()
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 150, .. ProptestConfig::default() })]

    #[test]
    fn every_core_finds_what_one_core_finds(
        segs in prop::collection::vec(seg(), 0..9),
        stray in any::<bool>(),
        empty_entries in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        write_dir(dir.path(), &segs, stray);
        for mode in [
            RecoveryMode::Strict,
            RecoveryMode::TolerateTornTail,
            RecoveryMode::Repair,
            RecoveryMode::ReportOnly,
        ] {
            let scan_with = |parallelism, keep, steps| {
                let options = ScanOptions { mode, empty_entries, parallelism, keep, steps, dialect: None, progress: None, storage: tflux_core::io::storage::real() };
                scan_dir(dir.path(), options, &tflux_core::io::storage::real()).map(|s| seen(&s))
            };
            let scan = |parallelism, keep| scan_with(parallelism, keep, false);
            let one = scan(Parallelism::OneCore, Keep::Reads).map_err(|e| e.to_string());
            let all = scan(Parallelism::AllCores, Keep::Reads).map_err(|e| e.to_string());
            prop_assert_eq!(&one, &all);
            // A scan that also writes replay steps (a restore's) finds the same.
            let stepping = scan_with(Parallelism::AllCores, Keep::Reads, true);
            prop_assert_eq!(&one, &stepping.map_err(|e| e.to_string()));
            // A scan for a report (verify's) finds, counts and ends the same.
            for parallelism in [Parallelism::OneCore, Parallelism::AllCores] {
                let report = scan(parallelism, Keep::Report).map_err(|e| e.to_string());
                prop_assert_eq!(&one, &report);
            }
        }
    }
}
