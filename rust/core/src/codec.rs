//! Big-endian primitives and the checksum shared by every tflux file.
//!
//! All integers on disk are big-endian (spec section 2). The checksum is CRC-32 ISO-HDLC as
//! computed by `crc32fast` (identical to Python's `zlib.crc32`).

/// CRC-32 of `data` (check value: `crc32(b"123456789") == 0xCBF4_3926`).
///
/// Starts from a hasher whose CPU kernel was chosen once: `crc32fast::hash` detects the CPU's
/// features on every call, which cost a scan of 64-byte records about as much as the
/// carry-less multiplies themselves (`examples/crc_floor.rs`).
#[inline]
pub fn crc32(data: &[u8]) -> u32 {
    let mut h = hasher();
    h.update(data);
    h.finalize()
}

/// A fresh hasher, its kernel detected once per process.
#[inline]
fn hasher() -> crc32fast::Hasher {
    static FRESH: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    FRESH.get_or_init(crc32fast::Hasher::new).clone()
}

/// CRC-32 of `parts` laid end to end (for checksums over bytes that are not contiguous on disk).
#[inline]
pub fn crc32_of(parts: &[&[u8]]) -> u32 {
    let mut h = hasher();
    for p in parts {
        h.update(p);
    }
    h.finalize()
}

/// Reads a big-endian `u32` at `at`; `None` when fewer than 4 bytes are available.
#[inline]
pub fn be_u32(buf: &[u8], at: usize) -> Option<u32> {
    let bytes = buf.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes(bytes.try_into().ok()?))
}

/// Reads a big-endian `i32` at `at`; `None` when fewer than 4 bytes are available.
#[inline]
pub fn be_i32(buf: &[u8], at: usize) -> Option<i32> {
    be_u32(buf, at).map(|v| v as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_matches_the_iso_hdlc_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn reads_refuse_short_buffers() {
        assert_eq!(be_u32(&[1, 2, 3], 0), None);
        assert_eq!(be_u32(&[0, 0, 1, 2], 0), Some(0x0102));
        assert_eq!(be_i32(&[0xff, 0xff, 0xff, 0xfe], 0), Some(-2));
        assert_eq!(be_u32(&[0, 0, 0, 0], usize::MAX), None);
    }
}
