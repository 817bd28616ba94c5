//! Record framing inside a log segment (spec section 3).
//!
//! ```text
//! { marker AA F5 34 C4 | term Int32 | crc UInt32 | len Int32 | data[len] | 0..3 zero bytes }
//! ```
//! The CRC covers the data bytes only. Every record starts on a 4-byte boundary and occupies
//! `16 + len + pad(len)` bytes. A zero word where a record could start is the end marker.

use crate::codec::{be_i32, be_u32, crc32};

pub const RECORD_MARKER: [u8; 4] = [0xAA, 0xF5, 0x34, 0xC4];
pub const END_MARKER: [u8; 4] = [0; 4];
pub const HEADER_LEN: usize = 16;
const TERM_AT: usize = 4;
const CRC_AT: usize = 8;
const LEN_AT: usize = 12;

/// Zero bytes that follow `len` data bytes so the next record is 4-byte aligned.
#[inline]
pub fn padding(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// Bytes occupied on disk by a record carrying `len` data bytes.
#[inline]
pub fn record_len(len: usize) -> usize {
    HEADER_LEN + len + padding(len)
}

/// Appends one framed record to `out`.
pub fn encode(out: &mut Vec<u8>, term: i32, data: &[u8]) {
    debug_assert!(term >= 0 && data.len() <= i32::MAX as usize);
    out.extend_from_slice(&RECORD_MARKER);
    out.extend_from_slice(&term.to_be_bytes());
    out.extend_from_slice(&crc32(data).to_be_bytes());
    out.extend_from_slice(&(data.len() as i32).to_be_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&[0u8; 3][..padding(data.len())]);
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

/// Parses the frame at `at` in `buf` (a whole segment, or a window ending at the file's end).
/// Never trusts the length field: it is checked against the bytes actually present.
#[inline]
pub fn parse(buf: &[u8], at: usize) -> Frame<'_> {
    parse_with::<true>(buf, at)
}

/// Like [`parse`], with the checksum check optional: replay re-reads records that the scan at
/// open (or this process's own write) has already checked, and skips the second CRC.
/// Always inlined: left to itself the compiler called it from the scan's walk, and returning
/// each `Frame` through memory cost 27 instructions per record (`verify` 1.16x less CPU).
#[inline(always)]
pub fn parse_with<const CHECK_CRC: bool>(buf: &[u8], at: usize) -> Frame<'_> {
    parse_checking::<CHECK_CRC, true>(buf, at)
}

/// Like [`parse`], checking only what walking needs (marker, length within the bytes), not
/// the padding nor the CRC: for bytes a scan already accepted whole, as the replay right after
/// open reads them (`Log::replay_rechecks_crc` has the argument). Reading each record's last
/// word for its padding was a second cache line per record at 1 KiB.
#[inline]
pub fn parse_framing(buf: &[u8], at: usize) -> Frame<'_> {
    parse_checking::<false, false>(buf, at)
}

#[inline(always)]
fn parse_checking<const CHECK_CRC: bool, const PADDING: bool>(buf: &[u8], at: usize) -> Frame<'_> {
    // The common case, a whole header in place, with one bounds check for all of it.
    let Some((header, _)) = buf
        .get(at..)
        .and_then(|b| b.split_first_chunk::<HEADER_LEN>())
    else {
        return parse_short(buf, at, buf.len().saturating_sub(at));
    };
    let word =
        |k: usize| u32::from_be_bytes([header[k], header[k + 1], header[k + 2], header[k + 3]]);
    let marker = word(0);
    if marker != u32::from_be_bytes(RECORD_MARKER) {
        return end_or_bad_marker(marker);
    }
    let len = word(LEN_AT) as i32;
    if len < 0 {
        return Frame::Bad(BadRecord::NegativeLength { len });
    }
    let len = len as usize;
    // The record's bytes, padding included, sliced once: every later index is inside them.
    let rest = &buf[at..];
    let Some(record) = rest.get(..record_len(len)) else {
        let available = rest.len();
        return Frame::Bad(BadRecord::PastEnd { len, available });
    };
    let term = word(TERM_AT) as i32;
    let next = at + record.len();
    let data = &record[HEADER_LEN..HEADER_LEN + len];
    if !PADDING {
        return Frame::Record { term, data, next };
    }
    // The padding is the low `padding(len)` bytes of the record's last (big-endian) word; a
    // record is at least a header long, so that word is in place. Shifting it left by the
    // other bytes' width leaves only the padding (a shift of 32 leaves nothing: no padding).
    let last = &record[record.len() - 4..];
    let last = u64::from(u32::from_be_bytes([last[0], last[1], last[2], last[3]]));
    if (last << (32 - 8 * padding(len))) as u32 != 0 {
        return Frame::Bad(BadRecord::NonZeroPadding);
    }
    if CHECK_CRC {
        if let Err(bad) = check_crc(word(CRC_AT), data) {
            return Frame::Bad(bad);
        }
    }
    Frame::Record { term, data, next }
}

/// [`parse_with`] where fewer than a header's bytes are left: the end, or a short header.
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

/// Reads the data length of a record whose header starts at `at` (already validated by a scan).
#[inline]
pub fn data_len(header: &[u8]) -> usize {
    be_i32(header, LEN_AT).unwrap_or_default().max(0) as usize
}

/// Reads the stored checksum of a record whose header starts at the beginning of `header`.
#[inline]
pub fn stored_crc(header: &[u8]) -> u32 {
    be_u32(header, CRC_AT).unwrap_or_default()
}

/// `Err(BadChecksum)` unless `data` has the checksum `stored`.
#[inline]
pub fn check_crc(stored: u32, data: &[u8]) -> Result<(), BadRecord> {
    let computed = crc32(data);
    if computed == stored {
        Ok(())
    } else {
        Err(BadRecord::BadChecksum { stored, computed })
    }
}

/// Reads the term of a record whose header starts at the beginning of `header`.
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
        let len = int(LEN_AT);
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
        let stored = int(CRC_AT) as u32;
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
                buf[start + LEN_AT..start + LEN_AT + 4].copy_from_slice(&len.to_be_bytes());
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
