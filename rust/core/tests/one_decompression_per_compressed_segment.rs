//! The decompressed-segment cache is process-wide, so its one test has a binary of its own:
//! reads decompress each compressed segment once, not once per read, also across two logs.

use tflux_core::format::compressed::{self, Method};
use tflux_core::segment::bytes as segbytes;
use tflux_core::{Log, LogOptions};

#[test]
fn reads_decompress_each_segment_once_shared_by_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    // Build a plain log with several sealed segments, then compress them by the format module.
    {
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                soft_limit: 4096,
                hard_limit: 8192,
                preallocate: false,
                ..LogOptions::default()
            },
        )
        .unwrap();
        for i in 0..200u32 {
            log.append(1, format!("entry {i} {}", "x".repeat(100)).as_bytes())
                .unwrap();
            log.commit(i as i64).unwrap();
        }
    }
    let mut sealed = 0;
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let last = names.pop().unwrap();
    for path in names {
        let log = Log::open(
            dir.path(),
            LogOptions {
                readonly: true,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let info = log.segments().into_iter().find(|s| s.path == path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let mut original = bytes[..info.size as usize].to_vec();
        original.extend_from_slice(&[0; 4]);
        let last_lsn = info.start_lsn + info.count as i64 - 1;
        let z = compressed::encode(Method::Zstd, info.start_lsn, last_lsn, &original);
        std::fs::write(
            path.with_file_name(compressed::file_name(info.start_lsn)),
            z,
        )
        .unwrap();
        std::fs::remove_file(&path).unwrap();
        sealed += 1;
    }
    assert!(sealed >= 3, "{sealed}");
    assert!(last.exists());
    // Empty the cache (the opens above decompressed the segments already compressed).
    segbytes::set_cache_limit(0);
    segbytes::set_cache_limit(segbytes::DEFAULT_CACHE_BYTES);
    let before = segbytes::decompressions();
    let ro = || {
        Log::open(
            dir.path(),
            LogOptions {
                readonly: true,
                ..LogOptions::default()
            },
        )
        .unwrap()
    };
    let (mut a, mut b) = (ro(), ro());
    for log in [&mut a, &mut b] {
        for lsn in 0..=log.last_index() {
            assert_eq!(log.read(lsn, Some(1)).unwrap().len(), 1);
            log.term_at(lsn).unwrap();
        }
    }
    assert_eq!(segbytes::decompressions() - before, sealed);
    // A cache too small for any segment decompresses on every fresh map (still correct).
    segbytes::set_cache_limit(0);
    a.unmap_sealed();
    assert_eq!(a.read(0, None).unwrap().len(), 200);
    assert_eq!(segbytes::decompressions() - before, 2 * sealed);
}
