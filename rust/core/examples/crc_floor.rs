//! The floor of a per-record CRC scan: how fast crc32fast checks short records one at a time,
//! beside one stream over the same bytes and the scanner's own walk (`record::parse`).
//!
//! ```sh
//! cargo run -r -p tflux-core --example crc_floor [SEGMENT_FILE | DATA_LEN] [ROUNDS]
//! ```
//! With a segment file (`NNN.log`) its records are used as they are; with a number (default 64)
//! a synthetic segment of 16 MiB holds records of that many data bytes. Every variant runs once
//! per round, interleaved, and the best round counts (the machine is shared: the best round is
//! the one nothing else interrupted).

use std::hint::black_box;
use std::time::Instant;

use tflux_core::format::record::{self, Frame};
use tflux_core::format::segment;
use tflux_core::segment::scan_records;

fn synthetic(len: usize) -> Vec<u8> {
    let mut buf = segment::header().to_vec();
    let mut k = 0u32;
    while buf.len() < 16 << 20 {
        let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ k) as u8).collect();
        record::encode(&mut buf, 1, &data);
        k = k.wrapping_add(1);
    }
    buf
}

/// One way of checking the records (returns something to keep the work alive).
type Variant<'a> = Box<dyn Fn() -> u64 + 'a>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seg = match args.first() {
        Some(a) if a.parse::<usize>().is_err() => std::fs::read(a).expect("read segment"),
        a => synthetic(a.map_or(64, |a| a.parse().unwrap())),
    };
    let rounds: usize = args.get(1).map_or(100, |r| r.parse().unwrap());
    // The records' data slices, found once.
    let mut datas: Vec<(usize, usize)> = Vec::new();
    let (end, _) = scan_records(&seg, 0, |_, _, d| {
        let at = d.as_ptr() as usize - seg.as_ptr() as usize;
        datas.push((at, d.len()));
    });
    let n = datas.len();
    let data_bytes: usize = datas.iter().map(|d| d.1).sum();
    println!(
        "{n} records, {end} bytes of records ({:.1} B per record, {:.1} B of data); best of {rounds} interleaved rounds",
        end as f64 / n as f64,
        data_bytes as f64 / n as f64
    );
    let bytes = &seg[..end as usize];
    let seg = &seg[..];
    let datas = &datas[..];
    let hasher = crc32fast::Hasher::new();
    let each = |f: &dyn Fn(&[u8]) -> u32| {
        let mut x = 0u64;
        for &(at, len) in datas {
            x = x.wrapping_add(f(&seg[at..at + len]) as u64);
        }
        x
    };
    let variants: Vec<(&str, Variant)> = vec![
        (
            "crc32fast::hash over all record bytes, one stream",
            Box::new(|| crc32fast::hash(bytes) as u64),
        ),
        (
            "crc32fast::hash of each record's data",
            Box::new(|| each(&|d| crc32fast::hash(d))),
        ),
        (
            "cloned crc32fast::Hasher per record",
            Box::new(|| {
                each(&|d| {
                    let mut h = hasher.clone();
                    h.update(d);
                    h.finalize()
                })
            }),
        ),
        (
            "tflux_core::codec::crc32 of each record's data",
            Box::new(|| each(&tflux_core::codec::crc32)),
        ),
        (
            "record::parse loop (framing + CRC)",
            Box::new(|| {
                let mut at = segment::HEADER_LEN;
                let mut k = 0u64;
                while let Frame::Record { next, .. } = record::parse(seg, at) {
                    at = next;
                    k += 1;
                }
                k
            }),
        ),
        (
            "record::parse_with::<false> loop (framing only)",
            Box::new(|| {
                let mut at = segment::HEADER_LEN;
                let mut k = 0u64;
                while let Frame::Record { next, .. } = record::parse_with::<false>(seg, at) {
                    at = next;
                    k += 1;
                }
                k
            }),
        ),
        (
            "segment::scan_records (framing + CRC + terms)",
            Box::new(|| scan_records(seg, 0, |_, _, _| {}).0),
        ),
    ];
    let mut best = vec![f64::MAX; variants.len()];
    for _ in 0..rounds {
        for (k, (_, f)) in variants.iter().enumerate() {
            let t = Instant::now();
            black_box(f());
            best[k] = best[k].min(t.elapsed().as_secs_f64());
        }
    }
    for ((what, _), secs) in variants.iter().zip(&best) {
        println!(
            "{what:<50} {:>6.2} ns/record {:>6.2} GB/s of records {:>5.2}x one stream's time",
            secs * 1e9 / n as f64,
            end as f64 / secs / 1e9,
            secs / best[0]
        );
    }
}
