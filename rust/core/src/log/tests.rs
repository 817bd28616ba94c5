//! Unit tests of the log: which reads build a segment's full offsets.

use crate::durability::policy::SyncPolicy;
use crate::segment::reads_before_full_offsets;

use super::{Log, LogOptions};

fn indexed(log: &Log) -> Vec<bool> {
    log.segments
        .iter()
        .map(|s| s.indexes_every_record())
        .collect()
}

/// The full offsets (4 B per record) are built for the segment small reads land in, once
/// they are worth a walk of it, and only then: opening, replaying, reading in large batches
/// and a few random reads leave every sealed segment with its sparse index.
#[test]
fn only_enough_random_reads_build_a_segments_full_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let opts = LogOptions {
        soft_limit: 4096,
        hard_limit: 8192,
        sync: SyncPolicy::Never,
        ..LogOptions::default()
    };
    let mut log = Log::open(dir.path(), opts.clone()).unwrap();
    for i in 0..1000u32 {
        let lsn = log.append(1, &i.to_be_bytes().repeat(3)).unwrap();
        log.commit(lsn).unwrap(); // segments roll at a commit
    }
    drop(log);
    for readonly in [false, true] {
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                readonly,
                ..opts.clone()
            },
        )
        .unwrap();
        let segments = log.segments.len();
        assert!(segments > 4);
        let mut lsn = 0;
        while lsn <= log.last_index() {
            lsn += log.read_batch(lsn, i64::MAX, 4 << 20).unwrap().len() as i64;
        }
        log.scan(0, i64::MAX, |_, _, _| true).unwrap();
        assert_eq!(log.read(0, None).unwrap().len(), 1000);
        assert!(indexed(&log).iter().all(|&b| !b));

        let k = log.segment_of(503);
        let need = reads_before_full_offsets(log.segments[k].len());
        assert!(need > 1, "a segment of this test must need several reads");
        for _ in 1..need {
            let one = log.read(503, Some(1)).unwrap();
            assert_eq!(one[0].data, 503u32.to_be_bytes().repeat(3));
        }
        assert!(indexed(&log).iter().all(|&b| !b));
        assert_eq!(
            log.read(503, Some(1)).unwrap()[0].data,
            503u32.to_be_bytes().repeat(3)
        );
        let want: Vec<bool> = (0..segments).map(|i| i == k).collect();
        assert_eq!(indexed(&log), want);
        for _ in 0..reads_before_full_offsets(log.segments[0].len()) {
            let batch = log.read_batch(7, 8, 4 << 20).unwrap();
            assert_eq!(batch.data, 7u32.to_be_bytes().repeat(3));
        }
        assert!(log.segments[0].indexes_every_record());
    }
}
