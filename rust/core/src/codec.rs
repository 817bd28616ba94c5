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
///
/// Computed by crc32fast through the identity between the two checksums: CRC-32/MPEG-2 is
/// CRC-32's polynomial unreflected, so it is the bit-reversed raw CRC-32 (init all ones, no
/// final xor) of the bytes with their bits reversed. The bytes are reversed `BLOCK` (2 KiB) at a
/// time into a buffer on the stack (one table shuffle per 16 bytes, SSSE3) and checked by
/// crc32fast's carry-less multiply kernel. crc-fast's own CRC-32/MPEG-2 costs about 27 ns per
/// call before its first byte and byte-swaps every block (64-byte records: 35 ns against
/// crc32fast's 8 for CRC-32), which made a taskflux `verify` 1.7x slower than a spec one
/// (`examples/crc_dialects.rs`; benchmark-notes.md, "Dialects"). Without SSSE3, crc-fast. The
/// tests hold every path to crc-fast's result ([`crc32_mpeg2_reference`]). From `LONG` (2 KiB)
/// bytes on, crc-fast itself (as fast as crc32fast there).
#[inline]
pub fn crc32_mpeg2(data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < LONG && std::arch::is_x86_feature_detected!("ssse3") {
        let mut h = hasher();
        // Not zeroed first: that memset cost more than a short record's checksum.
        let mut reversed = std::mem::MaybeUninit::<[u8; BLOCK]>::uninit();
        for chunk in data.chunks(BLOCK) {
            let out = reversed.as_mut_ptr().cast::<u8>();
            // SAFETY: SSSE3 is present (checked above); the buffer holds BLOCK >= chunk.len()
            // bytes, and its first chunk.len() bytes are written before they are read.
            let out = unsafe {
                bits::reverse_each_byte(chunk, out);
                std::slice::from_raw_parts(out, chunk.len())
            };
            h.update(out);
        }
        return (!h.finalize()).reverse_bits();
    }
    crc32_mpeg2_reference(data)
}

/// Bytes reversed at a time by [`crc32_mpeg2`] (a stack buffer that stays in L1).
const BLOCK: usize = 2048;

/// From this length on crc-fast's own kernel is as fast as crc32fast (its cost per call no
/// longer counts, and the identity's second pass over the bytes does): it takes the data.
/// Measured crossover: 1-4 KiB (`examples/crc_dialects.rs`).
const LONG: usize = 2048;

#[cfg(target_arch = "x86_64")]
mod bits {
    use std::arch::x86_64::{
        __m128i, _mm512_gf2p8affine_epi64_epi8, _mm512_loadu_si512, _mm512_mask_storeu_epi8,
        _mm512_maskz_loadu_epi8, _mm512_set1_epi64, _mm512_storeu_si512, _mm_and_si128,
        _mm_loadu_si128, _mm_or_si128, _mm_set1_epi8, _mm_shuffle_epi8, _mm_srli_epi16,
        _mm_storeu_si128,
    };

    /// Whether [`reverse_into`] has a vector kernel here (else the caller takes crc-fast).
    #[inline]
    pub fn can_reverse() -> bool {
        std::arch::is_x86_feature_detected!("ssse3")
    }

    /// Replaces `out` with `data`, each byte's bits reversed: GFNI's bit-matrix multiply (one
    /// instruction per 64 bytes) where the CPU has it with AVX-512, else SSSE3's nibble shuffle.
    /// Callers check [`can_reverse`] first.
    pub fn reverse_into(data: &[u8], out: &mut Vec<u8>) {
        out.clear();
        out.reserve(data.len());
        let gfni = std::arch::is_x86_feature_detected!("gfni")
            && std::arch::is_x86_feature_detected!("avx512bw");
        // SAFETY: the features each kernel needs were detected (SSSE3 by the caller, through
        // `can_reverse`); `out` has room for `data.len()` bytes, all written before `set_len`.
        unsafe {
            if gfni {
                reverse_each_byte_gfni(data, out.as_mut_ptr());
            } else {
                reverse_each_byte(data, out.as_mut_ptr());
            }
            out.set_len(data.len());
        }
    }

    /// `out[i] = data[i].reverse_bits()`, 64 bytes per GF(2) affine transform by the matrix that
    /// reverses a byte's bits; the last 0-63 bytes through a masked load and store.
    ///
    /// # Safety
    /// The CPU has GFNI and AVX-512 (F, BW); `out` is valid for writes of `data.len()` bytes.
    #[target_feature(enable = "gfni,avx512f,avx512bw")]
    unsafe fn reverse_each_byte_gfni(data: &[u8], out: *mut u8) {
        const REVERSE: i64 = 0x8040_2010_0804_0201_u64 as i64;
        let matrix = _mm512_set1_epi64(REVERSE);
        let whole = data.len() / 64 * 64;
        let mut i = 0;
        while i < whole {
            let x = _mm512_loadu_si512(data.as_ptr().add(i).cast());
            let y = _mm512_gf2p8affine_epi64_epi8::<0>(x, matrix);
            _mm512_storeu_si512(out.add(i).cast(), y);
            i += 64;
        }
        let rest = data.len() - whole;
        if rest > 0 {
            let mask = (1u64 << rest) - 1;
            let x = _mm512_maskz_loadu_epi8(mask, data.as_ptr().add(whole).cast());
            let y = _mm512_gf2p8affine_epi64_epi8::<0>(x, matrix);
            _mm512_mask_storeu_epi8(out.add(whole).cast(), mask, y);
        }
    }

    /// `reverse4(i) << 4` and `reverse4(i)` for each nibble `i`.
    const LOW_TO_HIGH: [u8; 16] = [
        0x00, 0x80, 0x40, 0xC0, 0x20, 0xA0, 0x60, 0xE0, 0x10, 0x90, 0x50, 0xD0, 0x30, 0xB0, 0x70,
        0xF0,
    ];
    const HIGH_TO_LOW: [u8; 16] = [
        0x0, 0x8, 0x4, 0xC, 0x2, 0xA, 0x6, 0xE, 0x1, 0x9, 0x5, 0xD, 0x3, 0xB, 0x7, 0xF,
    ];

    /// `out[i] = data[i].reverse_bits()`: each byte's two nibbles looked up in a 16-entry
    /// table of reversed nibbles, 16 bytes per shuffle.
    ///
    /// # Safety
    /// The CPU has SSSE3; `out` is valid for writes of `data.len()` bytes.
    #[target_feature(enable = "ssse3")]
    pub unsafe fn reverse_each_byte(data: &[u8], out: *mut u8) {
        let low_to_high = _mm_loadu_si128(LOW_TO_HIGH.as_ptr().cast::<__m128i>());
        let high_to_low = _mm_loadu_si128(HIGH_TO_LOW.as_ptr().cast::<__m128i>());
        let nibble = _mm_set1_epi8(0x0F);
        let reverse = |x: __m128i| {
            let low = _mm_and_si128(x, nibble);
            let high = _mm_and_si128(_mm_srli_epi16(x, 4), nibble);
            _mm_or_si128(
                _mm_shuffle_epi8(low_to_high, low),
                _mm_shuffle_epi8(high_to_low, high),
            )
        };
        let whole = data.len() / 16 * 16;
        let mut i = 0;
        while i < whole {
            let x = _mm_loadu_si128(data.as_ptr().add(i).cast::<__m128i>());
            _mm_storeu_si128(out.add(i).cast::<__m128i>(), reverse(x));
            i += 16;
        }
        // The last 1-15 bytes: the vector of the last 16 bytes again (overlapping what is
        // done, with the same result), rather than a scalar bit reversal (a dozen instructions
        // per byte) or a copy through a buffer (a store-forwarding stall).
        if whole < data.len() {
            if data.len() >= 16 {
                let at = data.len() - 16;
                let x = _mm_loadu_si128(data.as_ptr().add(at).cast::<__m128i>());
                _mm_storeu_si128(out.add(at).cast::<__m128i>(), reverse(x));
            } else {
                for (k, b) in data.iter().enumerate() {
                    out.add(k).write(b.reverse_bits());
                }
            }
        }
    }
}

/// CRC-32/MPEG-2 of ranges of one buffer asked for in increasing order (a scan's records): the
/// identity of [`crc32_mpeg2`] with the bytes reversed `FILL` at a time, ahead of the ranges,
/// instead of once per range. Per range, [`crc32_mpeg2`] writes the reversed bytes and reads
/// them straight back (a taskflux verify of 64-byte records ran at 0.75-0.8x a spec verify's
/// throughput); here one pass (64 bytes per instruction with GFNI) reverses a kilobyte the scan's
/// prefetch hints have already asked for, and each record's checksum reads bytes reversed
/// earlier. benchmark-notes.md, "Dialects".
///
/// Tied to its buffer by its lifetime, so a window can never be reused for other bytes.
pub struct Mpeg2Run<'a> {
    buf: &'a [u8],
    /// `buf[start..start + reversed.len()]` with each byte's bits reversed.
    reversed: Vec<u8>,
    start: usize,
    /// Whether the bytes can be reversed here (detected once per run, not per range).
    vector: bool,
    fresh: crc32fast::Hasher,
}

impl<'a> Mpeg2Run<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Mpeg2Run {
            buf,
            reversed: Vec::new(),
            start: 0,
            vector: bits::can_reverse(),
            fresh: hasher(),
        }
    }

    /// CRC-32/MPEG-2 of `buf[range]` (panics, like slicing, when `range` is not inside `buf`).
    #[inline]
    pub fn checksum(&mut self, range: std::ops::Range<usize>) -> u32 {
        match self.reversed_raw(range.clone()) {
            Some(raw) => (!raw).reverse_bits(),
            None => crc32_mpeg2(&self.buf[range]),
        }
    }

    /// Whether `buf[range]` has the CRC-32/MPEG-2 `expected`: compared in the reflected
    /// checksum's terms, so the comparison does not wait on a bit reversal of the result.
    #[inline(always)]
    pub fn matches(&mut self, range: std::ops::Range<usize>, expected: u32) -> bool {
        match self.reversed_raw(range.clone()) {
            Some(raw) => raw == !expected.reverse_bits(),
            None => crc32_mpeg2(&self.buf[range]) == expected,
        }
    }

    /// crc32fast's checksum of the reversed bytes of `range` (the identity's middle step), or
    /// `None` where the range is longer than a window or nothing reverses bytes here.
    #[inline(always)]
    fn reversed_raw(&mut self, range: std::ops::Range<usize>) -> Option<u32> {
        if range.len() > WINDOW || !self.vector || range.end > self.buf.len() {
            return None;
        }
        let end = self.start + self.reversed.len();
        if range.start < self.start || range.end > end {
            self.refill(range.start, range.len());
        }
        let mut h = self.fresh.clone();
        h.update(&self.reversed[range.start - self.start..range.end - self.start]);
        Some(h.finalize())
    }

    /// Reverses the window that starts at `from`, at least `at_least` bytes long (once per
    /// `FILL` bytes: kept out of line, so that the per-record path inlines into the scan).
    #[inline(never)]
    fn refill(&mut self, from: usize, at_least: usize) {
        let upto = self.buf.len().min(from + FILL.max(at_least));
        bits::reverse_into(&self.buf[from..upto], &mut self.reversed);
        self.start = from;
    }
}

/// Where no vector kernel exists, [`Mpeg2Run`] hands every range to [`crc32_mpeg2`].
#[cfg(not(target_arch = "x86_64"))]
mod bits {
    pub fn can_reverse() -> bool {
        false
    }

    pub fn reverse_into(_data: &[u8], _out: &mut Vec<u8>) {
        unreachable!("can_reverse() is false")
    }
}

/// The longest range [`Mpeg2Run`] reverses (longer ones go to [`crc32_mpeg2`], where crc-fast
/// takes them): a third of a 48 KiB L1 data cache.
const WINDOW: usize = 16 * 1024;

/// Bytes reversed at a time by [`Mpeg2Run`] (or the range, if longer): the distance the scan's
/// prefetch hints run ahead (`segment::PREFETCH_DISTANCE`), so the window's bytes are on their
/// way when it is reversed. 16 KiB windows made a taskflux verify of 64-byte records 1.09x
/// slower, 512 B and 2 KiB 1.06x and 1.02x (`farm-bench`, benchmark-notes.md, "Dialects").
const FILL: usize = 1024;

/// CRC-32/MPEG-2 as crc-fast computes it: the reference [`crc32_mpeg2`] is held to.
pub fn crc32_mpeg2_reference(data: &[u8]) -> u32 {
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

    proptest::proptest! {
        /// The crc32fast identity equals crc-fast's own CRC-32/MPEG-2 on any bytes, at any
        /// length (the 256-byte chunks' edges included).
        #[test]
        fn crc32_mpeg2_equals_crc_fasts(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..2000)) {
            proptest::prop_assert_eq!(crc32_mpeg2(&data), crc32_mpeg2_reference(&data));
        }
    }

    proptest::proptest! {
        /// A run gives every range [`crc32_mpeg2`]'s checksum, and `matches` agrees with it,
        /// whatever the ranges: in order or not, crossing a window's end, longer than a window.
        #[test]
        fn mpeg2_runs_equal_crc32_mpeg2(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3 * WINDOW),
            cuts in proptest::collection::vec((0.0..1.0f64, 0.0..1.0f64), 1..40),
            bad in proptest::prelude::any::<u32>(),
        ) {
            let mut run = Mpeg2Run::new(&data);
            for (a, b) in cuts {
                let (a, b) = ((a * data.len() as f64) as usize, (b * data.len() as f64) as usize);
                let range = a.min(b)..a.max(b);
                let want = crc32_mpeg2(&data[range.clone()]);
                proptest::prop_assert_eq!(run.checksum(range.clone()), want);
                proptest::prop_assert!(run.matches(range.clone(), want));
                proptest::prop_assert_eq!(run.matches(range, bad), bad == want);
            }
        }

        /// Both byte-reversal kernels reverse every byte, at every length and alignment.
        #[test]
        fn reversal_kernels_reverse_each_byte(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            skip in 0usize..64,
        ) {
            let data = &data[skip.min(data.len())..];
            let want: Vec<u8> = data.iter().map(|b| b.reverse_bits()).collect();
            if bits::can_reverse() {
                let mut out = vec![0xA5; 3];
                bits::reverse_into(data, &mut out);
                proptest::prop_assert_eq!(&out, &want);
            }
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("ssse3") {
                let mut out = vec![0u8; data.len()];
                // SAFETY: SSSE3 is present and `out` holds data.len() bytes.
                unsafe { bits::reverse_each_byte(data, out.as_mut_ptr()) };
                proptest::prop_assert_eq!(&out, &want);
            }
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
