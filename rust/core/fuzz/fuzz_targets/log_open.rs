//! Opening a log directory whose segments hold arbitrary bytes (after a valid or fuzzed header):
//! never panics; a read-only open and a writable open (which cuts a torn tail) agree on the
//! records, and a second writable open finds exactly the same records with nothing to cut.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tflux_core::{Log, LogOptions, SyncPolicy};

const HEADER: [u8; 8] = [0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 1];

fn opts(readonly: bool) -> LogOptions {
    LogOptions {
        soft_limit: 1 << 20,
        hard_limit: 1 << 21,
        preallocate: false,
        sync: SyncPolicy::Never,
        readonly,
        ..LogOptions::default()
    }
}

fn all(log: &mut Log) -> Option<Vec<(i64, i32, Vec<u8>)>> {
    let start = log.start_index();
    let entries = log.read(start, None).ok()?;
    Some(
        entries
            .into_iter()
            .map(|e| (e.lsn, e.term, e.data))
            .collect(),
    )
}

fuzz_target!(|input: &[u8]| {
    let Some((&mode, body)) = input.split_first() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log_dir = dir.path().join("log");
    std::fs::create_dir(&log_dir).unwrap();
    let mut bytes = Vec::new();
    if mode & 1 == 0 {
        bytes.extend_from_slice(&HEADER);
    }
    bytes.extend_from_slice(body);
    // mode bit 1: put a clean sealed segment of two records first, so `bytes` is the last one.
    let first_lsn = if mode & 2 != 0 {
        let mut sealed = HEADER.to_vec();
        for d in [&b"ab"[..], &b"cdef"[..]] {
            sealed.extend_from_slice(&[0xAA, 0xF5, 0x34, 0xC4, 0, 0, 0, 1]);
            sealed.extend_from_slice(&crc32fast::hash(d).to_be_bytes());
            sealed.extend_from_slice(&(d.len() as i32).to_be_bytes());
            sealed.extend_from_slice(d);
            sealed.resize(sealed.len().next_multiple_of(4), 0);
        }
        std::fs::write(log_dir.join("0000000000000000000.log"), sealed).unwrap();
        2
    } else {
        0
    };
    std::fs::write(log_dir.join(format!("{first_lsn:019}.log")), &bytes).unwrap();

    let ro = Log::open(&log_dir, opts(true))
        .ok()
        .and_then(|mut l| all(&mut l));
    let rw = match Log::open(&log_dir, opts(false)) {
        Ok(mut log) => {
            let got = all(&mut log);
            drop(log);
            got
        }
        Err(_) => {
            assert!(
                ro.is_none(),
                "read-only open succeeded where the writer failed"
            );
            return;
        }
    };
    if let (Some(ro), Some(rw)) = (&ro, &rw) {
        // A read-only open may hold an empty segment the writer initialises; records must agree.
        assert_eq!(ro, rw, "read-only and writable opens disagree");
    }
    let mut again = Log::open(&log_dir, opts(false)).expect("a log the writer opened must reopen");
    assert!(!again.recovery().truncated(), "a second open cut again");
    assert_eq!(all(&mut again), rw);
});
