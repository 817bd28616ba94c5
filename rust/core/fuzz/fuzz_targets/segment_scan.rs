//! The segment scanner on arbitrary bytes after a valid header: never panics, and every record it
//! reports is re-checked here against the spec (marker, length, CRC, zero padding, 4-byte
//! alignment, non-decreasing terms), so a scanner that returned a wrong record would fail.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tflux_core::segment::{scan_records, ScanStop};

const HEADER: [u8; 8] = [0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 1];
const MARKER: [u8; 4] = [0xAA, 0xF5, 0x34, 0xC4];

fn be_i32(b: &[u8]) -> i32 {
    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fuzz_target!(|input: &[u8]| {
    let (previous_term, body) = match input.split_first() {
        Some((t, rest)) => (i32::from(*t % 4), rest),
        None => (0, input),
    };
    let mut buf = HEADER.to_vec();
    buf.extend_from_slice(body);
    let mut expected_at = 8u64;
    let mut last_term = previous_term;
    let (end, stop) = scan_records(&buf, previous_term, |at, term, data| {
        assert_eq!(at, expected_at, "records must be back to back");
        let at = at as usize;
        assert_eq!(at % 4, 0);
        assert_eq!(buf[at..at + 4], MARKER);
        assert_eq!(be_i32(&buf[at + 4..]), term);
        assert!(term >= last_term, "terms must not decrease");
        let crc = u32::from_be_bytes(buf[at + 8..at + 12].try_into().unwrap());
        let len = be_i32(&buf[at + 12..]);
        assert!(len >= 0);
        assert_eq!(len as usize, data.len());
        assert_eq!(&buf[at + 16..at + 16 + data.len()], data);
        assert_eq!(
            crc32fast::hash(data),
            crc,
            "a record with a bad CRC was returned"
        );
        let pad = (4 - data.len() % 4) % 4;
        let pad_at = at + 16 + data.len();
        assert!(buf[pad_at..pad_at + pad].iter().all(|b| *b == 0));
        last_term = term;
        expected_at = (pad_at + pad) as u64;
    });
    assert_eq!(
        end, expected_at,
        "the scan end is just past the last good record"
    );
    assert!(end as usize <= buf.len());
    match stop {
        ScanStop::Clean => {
            let rest = &buf[end as usize..];
            assert!(rest.is_empty() || (rest.len() >= 4 && rest[..4] == [0; 4]));
        }
        ScanStop::Bad { offset, .. } | ScanStop::Term { offset, .. } => assert_eq!(offset, end),
    }
});
