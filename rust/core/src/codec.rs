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

/// CRC-32/MPEG-2 of `data`: the taskflux dialect's checksum (spec section 11; poly 0x04C11DB7,
/// init 0xFFFFFFFF, no reflection, no final xor). Check values: `b"123456789"` gives
/// `0x0376_E6E7`, the empty input `0xFFFF_FFFF`.
#[inline]
pub fn crc32_mpeg2(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Mpeg2, data) as u32
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
    fn crc32_mpeg2_has_the_check_values_of_the_catalogue() {
        assert_eq!(crc32_mpeg2(b"123456789"), 0x0376_E6E7);
        assert_eq!(crc32_mpeg2(b""), 0xFFFF_FFFF);
        // A bit-at-a-time reference over lengths that cross every SIMD block size.
        let reference = |data: &[u8]| {
            let mut crc = 0xFFFF_FFFFu32;
            for &b in data {
                crc ^= (b as u32) << 24;
                for _ in 0..8 {
                    crc = if crc & 0x8000_0000 != 0 {
                        (crc << 1) ^ 0x04C1_1DB7
                    } else {
                        crc << 1
                    };
                }
            }
            crc
        };
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 3) as u8).collect();
        for len in [
            0, 1, 3, 15, 16, 17, 31, 63, 64, 65, 127, 128, 255, 256, 257, 999, 1000,
        ] {
            assert_eq!(
                crc32_mpeg2(&data[..len]),
                reference(&data[..len]),
                "len {len}"
            );
        }
    }

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
