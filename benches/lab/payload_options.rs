//! Issue 11, "payloads without fresh pages": what keeping N queued payloads costs, three ways,
//! measured in isolation over the same source bytes (a log's records already in memory, as a
//! mapped segment would be):
//!   box     one heap allocation per payload (what a restore does today: `Box<[u8]>`),
//!   arena   one buffer per queue sized up front, payloads appended (`Vec<u8>` + offsets),
//!   borrow  no copy: (offset, len) into the source, as a record borrowing from the map would.
//! Prints time per payload and the anonymous memory (RssAnon) each way adds per payload.
//!
//!   rustc -O -o /tmp/payload_options benches/lab/payload_options.rs
//!   /tmp/payload_options 3333333 64; /tmp/payload_options 333333 1024
//! (a fresh process per size; each way runs in a forked child so RssAnon is its own).

use std::time::Instant;

fn rss_anon_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args[1].parse().unwrap();
    let size: usize = args[2].parse().unwrap();
    let way = args.get(3).cloned();
    let Some(way) = way else {
        for w in ["box", "arena", "borrow"] {
            let st = std::process::Command::new(&args[0])
                .args([&args[1], &args[2], w])
                .status()
                .unwrap();
            assert!(st.success());
        }
        return;
    };
    // The source: one record every 3 deltas survives (Add, Add, Remove), so the payloads kept
    // are spread over a buffer 1.5x their size (the removed ones in between).
    let stride = size + size / 2 + 16;
    let source: Vec<u8> = (0..n * stride).map(|i| (i * 31 % 251) as u8).collect();
    let before = rss_anon_kib();
    let t = Instant::now();
    let checksum: u64 = match way.as_str() {
        "box" => {
            let v: Vec<Box<[u8]>> = (0..n)
                .map(|i| source[i * stride..i * stride + size].into())
                .collect();
            let c = v.iter().map(|b| b[size / 2] as u64).sum();
            print_line(&way, n, size, t, before);
            std::mem::forget(v);
            c
        }
        "arena" => {
            let mut arena: Vec<u8> = Vec::with_capacity(n * size);
            let mut offsets: Vec<u32> = Vec::with_capacity(n);
            for i in 0..n {
                offsets.push(arena.len() as u32);
                arena.extend_from_slice(&source[i * stride..i * stride + size]);
            }
            let c = offsets.iter().map(|&o| arena[o as usize + size / 2] as u64).sum();
            print_line(&way, n, size, t, before);
            std::mem::forget((arena, offsets));
            c
        }
        _ => {
            let v: Vec<(u32, u32)> = (0..n).map(|i| ((i * stride) as u32, size as u32)).collect();
            let c = v.iter().map(|&(o, l)| source[(o + l / 2) as usize] as u64).sum();
            print_line(&way, n, size, t, before);
            std::mem::forget(v);
            c
        }
    };
    assert!(checksum > 0);
}

fn print_line(way: &str, n: usize, size: usize, t: Instant, before: u64) {
    let secs = t.elapsed().as_secs_f64();
    let anon = (rss_anon_kib() - before) as f64 * 1024.0 / n as f64;
    println!(
        "{way:>6} n={n} payload={size} B: {:.1} ns/payload, RssAnon +{:.1} B/payload ({:.1} B beyond the payload)",
        secs * 1e9 / n as f64,
        anon,
        anon - if way == "borrow" { 0.0 } else { size as f64 },
    );
}
