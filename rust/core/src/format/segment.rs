//! Segment file names and headers (spec section 3).
//!
//! ```text
//! name   = LSN of the first record, 19 decimal digits, zero padded, + ".log"
//! header = { file marker 12 76 AD 55 | version Int32 = 1 }   then records, then the end marker
//! ```

pub const FILE_MARKER: [u8; 4] = [0x12, 0x76, 0xAD, 0x55];
pub const VERSION: i32 = 1;
pub const HEADER_LEN: usize = 8;
const NAME_DIGITS: usize = 19;

/// The largest LSN an entry can have. `i64::MAX` itself is kept as the exclusive end past such
/// an entry (the next LSN, the start of a log emptied after it), so that every LSN the log
/// computes fits an i64 (docs/format.md, log decision "LSN limit"). Here, below the log, so
/// that a snapshot's last index (which names an entry) is checked against the same limit.
pub const MAX_ENTRY_LSN: i64 = i64::MAX - 1;
const NAME_SUFFIX: &str = ".log";

/// The 8 header bytes of a version-1 segment.
pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&FILE_MARKER);
    h[4..].copy_from_slice(&VERSION.to_be_bytes());
    h
}

/// File name of the segment whose first record has `lsn`.
pub fn file_name(lsn: i64) -> String {
    format!("{lsn:019}{NAME_SUFFIX}")
}

/// Parses a segment file name; anything but exactly 19 digits + ".log" (and a value that fits
/// Int64) is not a segment.
pub fn parse_file_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(NAME_SUFFIX)?;
    if digits.len() != NAME_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<i64>().ok()
}

/// What the first bytes of a segment file say.
#[derive(Debug, PartialEq, Eq)]
pub enum Header {
    Valid,
    /// Shorter than a header, or a (possibly partly written) header followed by zeros only: a
    /// crash during segment creation. Safe to initialise in place when it is the last segment.
    Uninitialised,
    BadMarker,
    UnknownVersion(i32),
}

/// Classifies the start of a segment file; `rest_is_zero` says whether every byte after the
/// header is zero (only then can a damaged header be a crash during creation).
pub fn check_header(buf: &[u8], rest_is_zero: bool) -> Header {
    if buf.len() < HEADER_LEN {
        let is_prefix = header().starts_with(buf) || buf.iter().all(|&b| b == 0);
        return if is_prefix {
            Header::Uninitialised
        } else {
            Header::BadMarker
        };
    }
    let h = &buf[..HEADER_LEN];
    if h == header() {
        return Header::Valid;
    }
    if rest_is_zero && is_torn_header(h) {
        return Header::Uninitialised;
    }
    if h[..4] != FILE_MARKER {
        return Header::BadMarker;
    }
    Header::UnknownVersion(i32::from_be_bytes([h[4], h[5], h[6], h[7]]))
}

/// A header whose written bytes are a prefix of the valid header, the rest still zero.
fn is_torn_header(h: &[u8]) -> bool {
    let valid = header();
    let written = h.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    h[..written] == valid[..written]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_nineteen_digits() {
        assert_eq!(file_name(0), "0000000000000000000.log");
        assert_eq!(file_name(645261357), "0000000000645261357.log");
        assert_eq!(parse_file_name("0000000000645261357.log"), Some(645261357));
        for bad in [
            "000000000000000000.log",
            "00000000000000000000.log",
            "000000000000000000a.log",
            "0000000000000000000.LOG",
            "0000000000000000000.log.bak",
            "9999999999999999999.log", // exceeds Int64
            "+000000000000000001.log",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn headers_are_classified() {
        assert_eq!(check_header(&header(), true), Header::Valid);
        assert_eq!(check_header(&[], true), Header::Uninitialised);
        assert_eq!(check_header(&[0x12, 0x76], true), Header::Uninitialised);
        assert_eq!(check_header(&[0; 8], true), Header::Uninitialised);
        assert_eq!(
            check_header(&[0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 0], true),
            Header::Uninitialised
        );
        assert_eq!(
            check_header(&[0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 0], false),
            Header::UnknownVersion(0)
        );
        assert_eq!(
            check_header(&[0x12, 0x76, 0xAD, 0x55, 0, 0, 0, 2], true),
            Header::UnknownVersion(2)
        );
        assert_eq!(check_header(&[1; 8], true), Header::BadMarker);
    }
}
