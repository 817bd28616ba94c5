//! Record framing inside a log segment, in either dialect (spec sections 3 and 11).
//!
//! ```text
//! spec:      { marker AA F5 34 C4 | term Int32 | crc UInt32 | len Int32 | data[len] | 0..3 zero bytes }
//! taskflux:  { marker AA F5 34 C4 | term Int64 | crc UInt32 | len Int32 | data[len] }
//! ```
//! The checksum covers the data bytes only: CRC-32 (zlib's) in the spec dialect, CRC-32/MPEG-2
//! in TaskFlux's. A spec record starts on a 4-byte boundary and occupies `16 + len + pad(len)`
//! bytes; a taskflux record `20 + len`. A zero word where a record could start is the end
//! marker in both.
//!
//! [`Framing`] is the one seam: each dialect is a type whose constants and two small functions
//! say its layout, and every walker is generic over it, so the hot loops are compiled once per
//! dialect with the layout folded in (no per-record branch on the dialect).

use super::dialect::Dialect;
use crate::codec::{be_i32, be_u32, crc32, crc32_mpeg2, Mpeg2Run};

pub const RECORD_MARKER: [u8; 4] = [0xAA, 0xF5, 0x34, 0xC4];
pub const END_MARKER: [u8; 4] = [0; 4];
/// The spec dialect's header length (kept for code that only ever reads the spec dialect:
/// channels).
pub const HEADER_LEN: usize = Spec::HEADER_LEN;
const TERM_AT: usize = 4;

/// The largest term a record can carry in tflux. The spec's term field is an Int32; TaskFlux's
/// is an Int64, of which tflux reads terms up to this value (docs/format.md, "taskflux terms"):
/// a larger one is reported as a bad record, never narrowed.
pub const MAX_TERM: i64 = i32::MAX as i64;

/// One dialect's record layout.
pub trait Framing: Send + Sync + 'static {
    const DIALECT: Dialect;
    /// Bytes before the data.
    const HEADER_LEN: usize;
    const CRC_AT: usize;
    const LEN_AT: usize;
    /// Whether records are zero-padded to a 4-byte boundary.
    const PADDED: bool;
    /// Whether an empty record's checksum is zero (CRC-32 of nothing), so that a header torn
    /// after its term is indistinguishable from an empty record (spec's "torn header" rule).
    const EMPTY_CHECKSUM_IS_ZERO: bool;

    /// The checksum of a record's data.
    fn checksum(data: &[u8]) -> u32;

    /// Checksums of the records of one buffer, asked for in order (the scan's).
    type Run<'a>: ChecksumRun;

    /// A [`ChecksumRun`] over `buf`.
    fn checksum_run(buf: &[u8]) -> Self::Run<'_>;

    /// The term of a whole header (at least `HEADER_LEN` bytes); `Err` when out of range for
    /// this dialect (the spec's negative terms are the scan's term rule, not framing).
    fn term(header: &[u8]) -> Result<i32, BadRecord>;

    /// Appends the term field.
    fn put_term(out: &mut Vec<u8>, term: i32);

    /// Zero bytes that follow `len` data bytes.
    #[inline(always)]
    fn padding(len: usize) -> usize {
        if Self::PADDED {
            padding(len)
        } else {
            0
        }
    }

    /// Bytes occupied on disk by a record carrying `len` data bytes.
    #[inline(always)]
    fn record_len(len: usize) -> usize {
        Self::HEADER_LEN + len + Self::padding(len)
    }

    /// Appends one framed record to `out`; returns its checksum.
    fn encode(out: &mut Vec<u8>, term: i32, data: &[u8]) -> u32 {
        debug_assert!(term >= 0 && data.len() <= i32::MAX as usize);
        let checksum = Self::checksum(data);
        out.extend_from_slice(&RECORD_MARKER);
        Self::put_term(out, term);
        out.extend_from_slice(&checksum.to_be_bytes());
        out.extend_from_slice(&(data.len() as i32).to_be_bytes());
        out.extend_from_slice(data);
        out.extend_from_slice(&[0u8; 3][..Self::padding(data.len())]);
        checksum
    }

    /// The data length of a record whose header starts `header` (already validated by a scan).
    #[inline]
    fn data_len(header: &[u8]) -> usize {
        be_i32(header, Self::LEN_AT).unwrap_or_default().max(0) as usize
    }

    /// The stored checksum of a record whose header starts `header`.
    #[inline]
    fn stored_checksum(header: &[u8]) -> u32 {
        be_u32(header, Self::CRC_AT).unwrap_or_default()
    }

    /// `Err(BadChecksum)` unless `data` has the checksum `stored`.
    #[inline]
    fn check(stored: u32, data: &[u8]) -> Result<(), BadRecord> {
        let computed = Self::checksum(data);
        if computed == stored {
            Ok(())
        } else {
            Err(BadRecord::BadChecksum { stored, computed })
        }
    }
}

/// The checksums of ranges of one buffer, asked for in increasing order: what a scan computes,
/// with whatever the dialect's checksum gains from seeing the records one after another.
pub trait ChecksumRun {
    /// The checksum of `range` of the run's buffer.
    fn checksum(&mut self, range: std::ops::Range<usize>) -> u32;

    /// `Err(BadChecksum)` unless `range` of the run's buffer has the checksum `stored`.
    #[inline(always)]
    fn check(&mut self, range: std::ops::Range<usize>, stored: u32) -> Result<(), BadRecord> {
        let computed = self.checksum(range);
        if computed == stored {
            Ok(())
        } else {
            Err(BadRecord::BadChecksum { stored, computed })
        }
    }
}

/// The spec dialect's [`ChecksumRun`]: crc32fast range by range (nothing to gain from order).
pub struct Crc32Run<'a>(&'a [u8]);

impl ChecksumRun for Crc32Run<'_> {
    #[inline(always)]
    fn checksum(&mut self, range: std::ops::Range<usize>) -> u32 {
        crc32(&self.0[range])
    }
}

impl ChecksumRun for Mpeg2Run<'_> {
    #[inline(always)]
    fn checksum(&mut self, range: std::ops::Range<usize>) -> u32 {
        Mpeg2Run::checksum(self, range)
    }

    #[inline(always)]
    fn check(&mut self, range: std::ops::Range<usize>, stored: u32) -> Result<(), BadRecord> {
        if self.matches(range.clone(), stored) {
            Ok(())
        } else {
            let computed = self.checksum(range);
            Err(BadRecord::BadChecksum { stored, computed })
        }
    }
}

/// The format document's framing (sections 1-10).
#[derive(Debug)]
pub enum Spec {}

/// TaskFlux's framing (section 11).
#[derive(Debug)]
pub enum Taskflux {}

impl Framing for Spec {
    const DIALECT: Dialect = Dialect::Spec;
    const HEADER_LEN: usize = 16;
    const CRC_AT: usize = 8;
    const LEN_AT: usize = 12;
    const PADDED: bool = true;
    const EMPTY_CHECKSUM_IS_ZERO: bool = true;

    #[inline(always)]
    fn checksum(data: &[u8]) -> u32 {
        crc32(data)
    }

    type Run<'a> = Crc32Run<'a>;

    #[inline(always)]
    fn checksum_run(buf: &[u8]) -> Crc32Run<'_> {
        Crc32Run(buf)
    }

    #[inline(always)]
    fn term(header: &[u8]) -> Result<i32, BadRecord> {
        Ok(be_i32(header, TERM_AT).unwrap_or_default())
    }

    fn put_term(out: &mut Vec<u8>, term: i32) {
        out.extend_from_slice(&term.to_be_bytes());
    }
}

impl Framing for Taskflux {
    const DIALECT: Dialect = Dialect::Taskflux;
    const HEADER_LEN: usize = 20;
    const CRC_AT: usize = 12;
    const LEN_AT: usize = 16;
    const PADDED: bool = false;
    const EMPTY_CHECKSUM_IS_ZERO: bool = false;

    #[inline(always)]
    fn checksum(data: &[u8]) -> u32 {
        crc32_mpeg2(data)
    }

    type Run<'a> = Mpeg2Run<'a>;

    #[inline(always)]
    fn checksum_run(buf: &[u8]) -> Mpeg2Run<'_> {
        Mpeg2Run::new(buf)
    }

    #[inline(always)]
    fn term(header: &[u8]) -> Result<i32, BadRecord> {
        let term = header
            .get(TERM_AT..TERM_AT + 8)
            .map_or(0, |b| i64::from_be_bytes(b.try_into().expect("8 bytes")));
        if (1..=MAX_TERM).contains(&term) {
            Ok(term as i32)
        } else {
            Err(BadRecord::TermOutOfRange { term })
        }
    }

    fn put_term(out: &mut Vec<u8>, term: i32) {
        out.extend_from_slice(&i64::from(term).to_be_bytes());
    }
}

/// Runs `$body` with `$F` naming the [`Framing`] of `$dialect`: the one place a run-time
/// dialect becomes a compile-time layout.
macro_rules! with_framing {
    ($dialect:expr, $F:ident => $body:expr) => {
        match $dialect {
            $crate::format::dialect::Dialect::Spec => {
                #[allow(unused_imports)]
                use $crate::format::record::Framing as _;
                type $F = $crate::format::record::Spec;
                $body
            }
            $crate::format::dialect::Dialect::Taskflux => {
                #[allow(unused_imports)]
                use $crate::format::record::Framing as _;
                type $F = $crate::format::record::Taskflux;
                $body
            }
        }
    };
}
pub(crate) use with_framing;

/// Zero bytes that follow `len` data bytes so the next spec record is 4-byte aligned.
#[inline]
pub fn padding(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// Bytes occupied on disk by a spec record carrying `len` data bytes.
#[inline]
pub fn record_len(len: usize) -> usize {
    Spec::record_len(len)
}

/// Appends one spec-framed record to `out`.
pub fn encode(out: &mut Vec<u8>, term: i32, data: &[u8]) {
    Spec::encode(out, term, data);
}

/// [`encode`] with any term, negative ones included (what a damaged or hostile file may hold;
/// `encode` refuses them in debug builds): for tests of the readers' term rule.
#[cfg(test)]
pub(crate) fn encode_any_term(out: &mut Vec<u8>, term: i32, data: &[u8]) {
    let start = out.len();
    encode(out, term.max(0), data);
    out[start + TERM_AT..start + TERM_AT + 4].copy_from_slice(&term.to_be_bytes());
}

/// Why a record could not be read. Every variant can come from a torn write, so in the last
/// segment it ends the valid data; in a sealed segment it is corruption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRecord {
    /// Fewer bytes than a record header (or than a marker word) before the end of the file.
    ShortHeader {
        available: usize,
    },
    BadMarker {
        found: [u8; 4],
    },
    NegativeLength {
        len: i32,
    },
    /// The length field points past the end of the file (padding included).
    PastEnd {
        len: usize,
        available: usize,
    },
    NonZeroPadding,
    /// An empty record with nothing but zeros after its term, in a log that holds no empty
    /// entries: a header torn after the term.
    TornHeader,
    BadChecksum {
        stored: u32,
        computed: u32,
    },
    /// A taskflux record whose Int64 term is below 1 (TaskFlux's own rule) or above
    /// [`MAX_TERM`].
    TermOutOfRange {
        term: i64,
    },
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadRecord::ShortHeader { available } => {
                write!(f, "incomplete record header ({available} bytes before end of file)")
            }
            BadRecord::BadMarker { found } => write!(
                f,
                "bad record marker {:02X} {:02X} {:02X} {:02X} (expected AA F5 34 C4 or end marker)",
                found[0], found[1], found[2], found[3]
            ),
            BadRecord::NegativeLength { len } => write!(f, "negative data length field {len}"),
            BadRecord::PastEnd { len, available } => write!(
                f,
                "data length field {len} runs past end of file ({available} bytes available)"
            ),
            BadRecord::NonZeroPadding => write!(f, "non-zero padding byte"),
            BadRecord::TornHeader => write!(f, "record header torn after its term"),
            BadRecord::BadChecksum { stored, computed } => write!(
                f,
                "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ),
            BadRecord::TermOutOfRange { term } if *term < 1 => {
                write!(f, "term {term} below 1 (a taskflux record's term is at least 1)")
            }
            BadRecord::TermOutOfRange { term } => write!(
                f,
                "term {term} above {MAX_TERM}, the largest term tflux supports"
            ),
        }
    }
}

/// What starts at a given offset.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A complete, checksummed record; the next frame starts at `next`.
    Record {
        term: i32,
        data: &'a [u8],
        next: usize,
    },
    /// End marker, or the physical end of the file exactly at a record boundary.
    End,
    Bad(BadRecord),
}

/// Parses the spec frame at `at` in `buf` (a whole segment, or a window ending at the file's
/// end). Never trusts the length field: it is checked against the bytes actually present.
#[inline]
pub fn parse(buf: &[u8], at: usize) -> Frame<'_> {
    parse_in::<Spec, true>(buf, at)
}

/// Like [`parse`], with the checksum check optional: replay re-reads records that the scan at
/// open (or this process's own write) has already checked, and skips the second CRC.
#[inline(always)]
pub fn parse_with<const CHECK_CRC: bool>(buf: &[u8], at: usize) -> Frame<'_> {
    parse_in::<Spec, CHECK_CRC>(buf, at)
}

/// Parses the frame of dialect `F` at `at`, checking the checksum when `CHECK_CRC`.
/// Always inlined: left to itself the compiler called it from the scan's walk, and returning
/// each `Frame` through memory cost 27 instructions per record (`verify` 1.16x less CPU).
#[inline(always)]
pub fn parse_in<F: Framing, const CHECK_CRC: bool>(buf: &[u8], at: usize) -> Frame<'_> {
    parse_checking::<F, CHECK_CRC, true>(buf, at)
}

/// Like [`parse_in`], checking only what walking needs (marker, length within the bytes, the
/// term's range), not the padding nor the checksum: for bytes a scan already accepted whole,
/// as the replay right after open reads them (`Log::replay_rechecks_crc` has the argument).
/// Reading each record's last word for its padding was a second cache line per record at 1 KiB.
#[inline]
pub fn parse_framing_in<F: Framing>(buf: &[u8], at: usize) -> Frame<'_> {
    parse_checking::<F, false, false>(buf, at)
}

/// [`parse_framing_in`] of the spec dialect.
#[inline]
pub fn parse_framing(buf: &[u8], at: usize) -> Frame<'_> {
    parse_framing_in::<Spec>(buf, at)
}

#[inline(always)]
fn parse_checking<F: Framing, const CHECK_CRC: bool, const PADDING: bool>(
    buf: &[u8],
    at: usize,
) -> Frame<'_> {
    // The common case, a whole header in place, with one bounds check for all of it.
    let Some(header) = buf.get(at..).and_then(|b| b.get(..F::HEADER_LEN)) else {
        return parse_short(buf, at, buf.len().saturating_sub(at));
    };
    let word =
        |k: usize| u32::from_be_bytes([header[k], header[k + 1], header[k + 2], header[k + 3]]);
    let marker = word(0);
    if marker != u32::from_be_bytes(RECORD_MARKER) {
        return end_or_bad_marker(marker);
    }
    let len = word(F::LEN_AT) as i32;
    if len < 0 {
        return Frame::Bad(BadRecord::NegativeLength { len });
    }
    let len = len as usize;
    // The record's bytes, padding included, sliced once: every later index is inside them.
    let rest = &buf[at..];
    let Some(record) = rest.get(..F::record_len(len)) else {
        let available = rest.len();
        return Frame::Bad(BadRecord::PastEnd { len, available });
    };
    let term = match F::term(header) {
        Ok(term) => term,
        Err(bad) => return Frame::Bad(bad),
    };
    let next = at + record.len();
    let data = &record[F::HEADER_LEN..F::HEADER_LEN + len];
    if !PADDING {
        return Frame::Record { term, data, next };
    }
    if F::PADDED {
        // The padding is the low `padding(len)` bytes of the record's last (big-endian) word;
        // a record is at least a header long, so that word is in place. Shifting it left by
        // the other bytes' width leaves only the padding (a shift of 32 leaves nothing).
        let last = &record[record.len() - 4..];
        let last = u64::from(u32::from_be_bytes([last[0], last[1], last[2], last[3]]));
        if (last << (32 - 8 * padding(len))) as u32 != 0 {
            return Frame::Bad(BadRecord::NonZeroPadding);
        }
    }
    if CHECK_CRC {
        if let Err(bad) = F::check(word(F::CRC_AT), data) {
            return Frame::Bad(bad);
        }
    }
    Frame::Record { term, data, next }
}

/// [`parse_checking`] where fewer than a header's bytes are left: the end, or a short header.
#[cold]
fn parse_short(buf: &[u8], at: usize, available: usize) -> Frame<'_> {
    if available == 0 {
        return Frame::End;
    }
    match buf.get(at..at + 4) {
        Some(word) if word == END_MARKER => Frame::End,
        Some(word) if word != RECORD_MARKER => Frame::Bad(BadRecord::BadMarker {
            found: [word[0], word[1], word[2], word[3]],
        }),
        _ => Frame::Bad(BadRecord::ShortHeader { available }),
    }
}

/// What a word that is not a record marker means where a record could start.
#[cold]
fn end_or_bad_marker(word: u32) -> Frame<'static> {
    if word.to_be_bytes() == END_MARKER {
        Frame::End
    } else {
        Frame::Bad(BadRecord::BadMarker {
            found: word.to_be_bytes(),
        })
    }
}

/// Reads the data length of a spec record whose header starts at `at` (validated by a scan).
#[inline]
pub fn data_len(header: &[u8]) -> usize {
    Spec::data_len(header)
}

/// Reads the stored checksum of a spec record whose header starts `header`.
#[inline]
pub fn stored_crc(header: &[u8]) -> u32 {
    Spec::stored_checksum(header)
}

/// `Err(BadChecksum)` unless `data` has the spec checksum `stored`.
#[inline]
pub fn check_crc(stored: u32, data: &[u8]) -> Result<(), BadRecord> {
    Spec::check(stored, data)
}

/// Reads the term of a spec record whose header starts at the beginning of `header`.
#[inline]
pub fn term(header: &[u8]) -> i32 {
    be_i32(header, TERM_AT).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_aligns_to_four_bytes() {
        let pads: Vec<usize> = [0, 1, 2, 3, 4, 34, 1024, 2051]
            .iter()
            .map(|&n| padding(n))
            .collect();
        assert_eq!(pads, vec![0, 3, 2, 1, 0, 2, 0, 1]);
    }

    #[test]
    fn encoded_records_parse_back() {
        let mut buf = Vec::new();
        encode(&mut buf, 7, b"hello");
        assert_eq!(buf.len(), 16 + 5 + 3);
        assert_eq!(
            parse(&buf, 0),
            Frame::Record {
                term: 7,
                data: b"hello",
                next: 24
            }
        );
        assert_eq!(parse(&buf, 24), Frame::End);
    }

    /// `parse_framing` frames exactly as `parse_with::<false>` does, over records of every
    /// padding and any byte of them changed, except that a non-zero padding byte (which the
    /// scan at open refused before any replay) does not stop it.
    #[test]
    fn parse_framing_frames_as_parse_does_but_for_padding() {
        use proptest::prelude::*;
        let records = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6);
        proptest!(|(records in records, hit in any::<prop::sample::Index>(), byte in any::<u8>(),
                    at in any::<prop::sample::Index>())| {
            let mut buf = Vec::new();
            for (term, data) in records.iter().enumerate() {
                encode(&mut buf, term as i32, data);
            }
            let clean = buf.clone();
            let hit = hit.index(buf.len());
            buf[hit] = byte;
            for bytes in [&clean, &buf] {
                let at = at.index(bytes.len() + 1) & !3;
                let full = parse_with::<false>(bytes, at);
                let framed = parse_framing(bytes, at);
                match full {
                    Frame::Bad(BadRecord::NonZeroPadding) => {
                        let is_record = matches!(framed, Frame::Record { .. });
                        prop_assert!(is_record, "{:?}", framed);
                    }
                    full => prop_assert_eq!(framed, full),
                }
            }
        });
    }

    /// The spec's reading of one frame, written plainly (byte by byte, wide arithmetic), for
    /// holding `parse` to it.
    fn spec_parse(buf: &[u8], at: usize) -> Frame<'_> {
        let available = buf.len().saturating_sub(at);
        let byte = |k: usize| buf[at + k];
        let int = |k: usize| {
            i64::from(u32::from_be_bytes([
                byte(k),
                byte(k + 1),
                byte(k + 2),
                byte(k + 3),
            ]))
        };
        if available == 0 {
            return Frame::End;
        }
        if available >= 4 && (0..4).all(|k| byte(k) == 0) {
            return Frame::End;
        }
        if available >= 4 && (0..4).any(|k| byte(k) != RECORD_MARKER[k]) {
            let found = [byte(0), byte(1), byte(2), byte(3)];
            return Frame::Bad(BadRecord::BadMarker { found });
        }
        if available < HEADER_LEN {
            return Frame::Bad(BadRecord::ShortHeader { available });
        }
        let len = int(Spec::LEN_AT);
        if len >= 1 << 31 {
            let len = (len - (1 << 32)) as i32;
            return Frame::Bad(BadRecord::NegativeLength { len });
        }
        let padded = (len + 3) / 4 * 4;
        if 16 + padded > available as i64 {
            let len = len as usize;
            return Frame::Bad(BadRecord::PastEnd { len, available });
        }
        let (len, padded) = (len as usize, padded as usize);
        if (16 + len..16 + padded).any(|k| byte(k) != 0) {
            return Frame::Bad(BadRecord::NonZeroPadding);
        }
        let data = &buf[at + 16..at + 16 + len];
        let stored = int(Spec::CRC_AT) as u32;
        let computed = crc32fast::hash(data);
        if stored != computed {
            return Frame::Bad(BadRecord::BadChecksum { stored, computed });
        }
        let term = int(TERM_AT) as u32 as i32;
        let next = at + 16 + padded;
        Frame::Record { term, data, next }
    }

    /// `parse` (with and without the checksum) finds what the spec's plain reading finds, at
    /// any offset of records of every padding with any byte changed, a length field rewritten
    /// (negative, past the end, off by a few) or the bytes cut short.
    #[test]
    fn parse_reads_each_frame_as_the_spec_does() {
        use proptest::prelude::*;
        let records = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6);
        let length = prop_oneof![
            Just(None),
            any::<i32>().prop_map(Some),
            (-3i32..80).prop_map(Some)
        ];
        proptest!(ProptestConfig::with_cases(2000), |(records in records,
                    hit in any::<prop::sample::Index>(), byte in any::<u8>(),
                    length in length, cut in any::<prop::sample::Index>(),
                    at in any::<prop::sample::Index>(), aligned in any::<bool>())| {
            let mut buf = Vec::new();
            let mut starts = Vec::new();
            for (term, data) in records.iter().enumerate() {
                starts.push(buf.len());
                encode_any_term(&mut buf, term as i32 - 1, data);
            }
            let hit = hit.index(buf.len());
            buf[hit] = byte;
            if let Some(len) = length {
                let start = starts[hit % starts.len()];
                buf[start + Spec::LEN_AT..start + Spec::LEN_AT + 4].copy_from_slice(&len.to_be_bytes());
            }
            buf.truncate(buf.len() - cut.index(buf.len() + 1) / 3);
            let at = at.index(buf.len() + 2);
            let at = if aligned { at & !3 } else { at };
            let spec = spec_parse(&buf, at);
            prop_assert_eq!(parse(&buf, at), spec_parse(&buf, at));
            let framing_only = match spec {
                Frame::Bad(BadRecord::BadChecksum { .. }) => None,
                other => Some(other),
            };
            if let Some(framed) = framing_only {
                prop_assert_eq!(parse_with::<false>(&buf, at), framed);
            } else {
                let is_record = matches!(parse_with::<false>(&buf, at), Frame::Record { .. });
                prop_assert!(is_record);
            }
        });
    }

    /// TaskFlux's reading of one frame, written plainly from section 11 (byte by byte, wide
    /// arithmetic, a bitwise CRC-32/MPEG-2), for holding `parse_in::<Taskflux>` to it.
    fn taskflux_parse(buf: &[u8], at: usize) -> Frame<'_> {
        let available = buf.len().saturating_sub(at);
        let byte = |k: usize| buf[at + k];
        let int = |k: usize, n: usize| (0..n).fold(0u64, |v, i| v << 8 | u64::from(byte(k + i)));
        if available == 0 || (available >= 4 && int(0, 4) == 0) {
            return Frame::End;
        }
        if available >= 4 && (0..4).any(|k| byte(k) != RECORD_MARKER[k]) {
            let found = [byte(0), byte(1), byte(2), byte(3)];
            return Frame::Bad(BadRecord::BadMarker { found });
        }
        if available < 20 {
            return Frame::Bad(BadRecord::ShortHeader { available });
        }
        let len = int(16, 4) as u32 as i32;
        if len < 0 {
            return Frame::Bad(BadRecord::NegativeLength { len });
        }
        let len = len as usize;
        if 20 + len > available {
            return Frame::Bad(BadRecord::PastEnd { len, available });
        }
        let term = int(4, 8) as i64;
        if !(1..=MAX_TERM).contains(&term) {
            return Frame::Bad(BadRecord::TermOutOfRange { term });
        }
        let data = &buf[at + 20..at + 20 + len];
        let mut computed = 0xFFFF_FFFFu32;
        for &b in data {
            computed ^= u32::from(b) << 24;
            for _ in 0..8 {
                computed = if computed & 0x8000_0000 != 0 {
                    computed << 1 ^ 0x04C1_1DB7
                } else {
                    computed << 1
                };
            }
        }
        let stored = int(12, 4) as u32;
        if stored != computed {
            return Frame::Bad(BadRecord::BadChecksum { stored, computed });
        }
        Frame::Record {
            term: term as i32,
            data,
            next: at + 20 + len,
        }
    }

    #[test]
    fn taskflux_records_are_unpadded_with_an_int64_term_and_the_mpeg2_checksum() {
        let mut buf = Vec::new();
        Taskflux::encode(&mut buf, 7, b"hello");
        let mut want = RECORD_MARKER.to_vec();
        want.extend(7i64.to_be_bytes());
        want.extend(crate::codec::crc32_mpeg2(b"hello").to_be_bytes());
        want.extend(5i32.to_be_bytes());
        want.extend(b"hello");
        assert_eq!(buf, want);
        assert_eq!(
            parse_in::<Taskflux, true>(&buf, 0),
            Frame::Record {
                term: 7,
                data: b"hello",
                next: 25
            }
        );
        // An empty record's checksum is 0xFFFFFFFF: a zeroed header never reads as one.
        let mut empty = Vec::new();
        Taskflux::encode(&mut empty, 1, b"");
        assert_eq!(&empty[12..16], &[0xFF; 4]);
        let torn = [&RECORD_MARKER[..], &[0u8; 16]].concat();
        assert_eq!(
            parse_in::<Taskflux, true>(&torn, 0),
            Frame::Bad(BadRecord::TermOutOfRange { term: 0 })
        );
    }

    /// `parse_in::<Taskflux>` finds what TaskFlux's plain reading finds, at any offset of
    /// records with any byte changed, a length rewritten, a term out of range or the bytes cut.
    #[test]
    fn taskflux_parse_reads_each_frame_as_section_11_does() {
        use proptest::prelude::*;
        let records = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 1..6);
        let length = prop_oneof![
            Just(None),
            any::<i32>().prop_map(Some),
            (-3i32..80).prop_map(Some)
        ];
        let term = prop_oneof![
            Just(None),
            any::<i64>().prop_map(Some),
            (-2i64..3).prop_map(Some)
        ];
        proptest!(ProptestConfig::with_cases(2000), |(records in records,
                    hit in any::<prop::sample::Index>(), byte in any::<u8>(),
                    length in length, term in term, cut in any::<prop::sample::Index>(),
                    at in any::<prop::sample::Index>())| {
            let mut buf = Vec::new();
            let mut starts = Vec::new();
            for (t, data) in records.iter().enumerate() {
                starts.push(buf.len());
                Taskflux::encode(&mut buf, t as i32 + 1, data);
            }
            let hit = hit.index(buf.len());
            buf[hit] = byte;
            let start = starts[hit % starts.len()];
            if let Some(len) = length {
                buf[start + 16..start + 20].copy_from_slice(&len.to_be_bytes());
            }
            if let Some(t) = term {
                buf[start + 4..start + 12].copy_from_slice(&t.to_be_bytes());
            }
            buf.truncate(buf.len() - cut.index(buf.len() + 1) / 3);
            let at = at.index(buf.len() + 2);
            prop_assert_eq!(parse_in::<Taskflux, true>(&buf, at), taskflux_parse(&buf, at));
        });
    }

    #[test]
    fn absurd_length_is_refused_without_allocating() {
        let mut buf = Vec::new();
        buf.extend_from_slice(&RECORD_MARKER);
        buf.extend_from_slice(&1i32.to_be_bytes());
        buf.extend_from_slice(&0u32.to_be_bytes());
        buf.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            parse(&buf, 0),
            Frame::Bad(BadRecord::PastEnd { .. })
        ));
    }

    #[test]
    fn every_padding_byte_is_checked_and_no_data_byte_is() {
        for len in 0..8usize {
            let data: Vec<u8> = (0..len).map(|i| 0xF0 | i as u8).collect();
            let mut buf = Vec::new();
            encode(&mut buf, 1, &data);
            assert!(matches!(parse(&buf, 0), Frame::Record { .. }), "len {len}");
            for at in HEADER_LEN + len..buf.len() {
                let mut bad = buf.clone();
                bad[at] = 1;
                assert_eq!(
                    parse(&bad, 0),
                    Frame::Bad(BadRecord::NonZeroPadding),
                    "len {len}, byte {at}"
                );
            }
        }
    }

    #[test]
    fn short_remainders_are_ends_or_short_headers() {
        let mut buf = vec![0xAA; 8];
        buf.extend_from_slice(&RECORD_MARKER);
        buf.extend_from_slice(&[0, 0, 0, 1, 0]);
        assert_eq!(
            parse(&buf, 8),
            Frame::Bad(BadRecord::ShortHeader { available: 9 })
        );
        assert_eq!(
            parse(&buf, 10),
            Frame::Bad(BadRecord::BadMarker {
                found: [0x34, 0xC4, 0, 0]
            })
        );
        assert_eq!(
            parse(&buf, 4),
            Frame::Bad(BadRecord::BadMarker { found: [0xAA; 4] })
        );
        assert_eq!(
            parse(&buf, 13),
            Frame::Bad(BadRecord::BadMarker {
                found: [0, 0, 1, 0]
            })
        );
        assert_eq!(parse(&[0; 6], 0), Frame::End);
        assert_eq!(parse(&buf, buf.len()), Frame::End);
        assert_eq!(parse(&buf, buf.len() + 5), Frame::End);
        assert_eq!(
            parse(&[0, 0, 0], 0),
            Frame::Bad(BadRecord::ShortHeader { available: 3 })
        );
    }

    #[test]
    fn torn_padding_is_a_torn_record() {
        let mut buf = Vec::new();
        encode(&mut buf, 1, b"x");
        buf.truncate(buf.len() - 1);
        assert!(matches!(
            parse(&buf, 0),
            Frame::Bad(BadRecord::PastEnd { .. })
        ));
    }
}
