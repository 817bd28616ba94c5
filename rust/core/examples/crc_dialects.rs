//! The two dialects' checksums per record (spec section 11): CRC-32 (crc32fast, the spec) and
//! CRC-32/MPEG-2 (crc-fast, TaskFlux's) over records of one length, one call per record, and
//! each dialect's whole scan (framing, checksum, terms) of a 16 MiB segment of such records.
//!
//! ```sh
//! cargo run -r -p tflux-core --example crc_dialects [DATA_LEN] [ROUNDS]
//! ```
//! Every variant runs once per round, interleaved; the best round counts.

use std::hint::black_box;
use std::time::Instant;

use tflux_core::codec::{crc32, crc32_mpeg2};
use tflux_core::format::record::{Framing, Spec, Taskflux};
use tflux_core::format::segment;
use tflux_core::log::dialect::Dialect;
use tflux_core::segment::scan_records_from;

fn synthetic<F: Framing>(len: usize) -> Vec<u8> {
    let mut buf = segment::header().to_vec();
    let mut k = 0u32;
    while buf.len() < 16 << 20 {
        let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ k) as u8).collect();
        F::encode(&mut buf, 1, &data);
        k = k.wrapping_add(1);
    }
    buf
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let len: usize = args.first().map_or(64, |a| a.parse().unwrap());
    let rounds: usize = args.get(1).map_or(50, |r| r.parse().unwrap());
    let spec = synthetic::<Spec>(len);
    let taskflux = synthetic::<Taskflux>(len);
    let records: Vec<&[u8]> = spec[8..]
        .chunks(16 + len + (4 - len % 4) % 4)
        .map(|r| &r[16..16 + len.min(r.len() - 16)])
        .collect();
    // The taskflux records' data, in the taskflux segment (each variant reads its own
    // dialect's bytes: a buffer another variant just read would be warmer in cache).
    let taskflux_records: Vec<&[u8]> = taskflux[8..]
        .chunks(20 + len)
        .filter(|r| r.len() == 20 + len)
        .map(|r| &r[20..])
        .collect();
    type Variant<'a> = (&'a str, Box<dyn Fn() -> u64 + 'a>);
    let variants: Vec<Variant> = vec![
        (
            "crc32 per record (spec)",
            Box::new(|| records.iter().map(|r| u64::from(crc32(r))).sum()),
        ),
        (
            "crc32_mpeg2 per record (taskflux)",
            Box::new(|| {
                taskflux_records
                    .iter()
                    .map(|r| u64::from(crc32_mpeg2(r)))
                    .sum()
            }),
        ),
        (
            "crc-fast per record (reference)",
            Box::new(|| {
                taskflux_records
                    .iter()
                    .map(|r| u64::from(tflux_core::codec::crc32_mpeg2_reference(r)))
                    .sum()
            }),
        ),
        (
            "scan, taskflux",
            Box::new(|| scan_records_from(Dialect::Taskflux, &taskflux, 8, 0, |_, _, _| {}).0),
        ),
        (
            "scan, spec",
            Box::new(|| scan_records_from(Dialect::Spec, &spec, 8, 0, |_, _, _| {}).0),
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
    println!(
        "{} records of {len} data bytes; best of {rounds} rounds",
        records.len()
    );
    for ((name, _), t) in variants.iter().zip(&best) {
        println!(
            "{name:<36} {:>8.3} ms  {:>7.1} ns/record",
            t * 1e3,
            t * 1e9 / records.len() as f64
        );
    }
}
