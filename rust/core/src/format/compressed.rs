//! Compressed sealed segments `NNNNNNNNNNNNNNNNNNN.log.z` (spec section 9).
//!
//! ```text
//! offset  field            type      value
//!      0  file marker      Byte[4]   12 76 AD 5A
//!      4  version          Int32     1
//!      8  first LSN        Int64     as in the name
//!     16  last LSN         Int64     of the last record inside
//!     24  method           Byte      1 = zstd, 2 = lz4 (frame format)
//!     25  original length  Int64     bytes of the uncompressed segment, header through end marker
//!     33  original CRC     UInt32    CRC-32 of those uncompressed bytes
//!     37  payload          the compressed bytes of the whole original segment, to end of file
//! ```
//! `{ marker | version | first | last | method | length | crc | payload }`
//!
//! Pure bytes: no files. Decoding never allocates by the header's length beyond what the
//! payload actually produces (the output grows as it is decompressed, and stops one byte past
//! the declared length), and checks the length and CRC of what came out.

use std::io::Read;

use super::record::END_MARKER;
use super::segment::HEADER_LEN as SEGMENT_HEADER_LEN;

pub const FILE_MARKER: [u8; 4] = [0x12, 0x76, 0xAD, 0x5A];
pub const VERSION: i32 = 1;
pub const HEADER_LEN: usize = 37;
/// Suffix of a compressed segment's name (after the 19 digits).
pub const NAME_SUFFIX: &str = ".log.z";

const OFF_VERSION: usize = 4;
const OFF_FIRST_LSN: usize = 8;
const OFF_LAST_LSN: usize = 16;
const OFF_METHOD: usize = 24;
const OFF_ORIGINAL_LEN: usize = 25;
const OFF_ORIGINAL_CRC: usize = 33;

/// The smallest original: a segment header and its end marker (no records).
pub const MIN_ORIGINAL_LEN: u64 = (SEGMENT_HEADER_LEN + END_MARKER.len()) as u64;
/// The largest original a `.z` may hold (2 GiB: a sealed segment is at most its hard limit
/// plus one record, and a larger one is not compressed). A reader refuses a header declaring
/// more before it decodes anything (docs/format.md, compressed segments).
pub const MAX_ORIGINAL_LEN: u64 = 1 << 31;
/// Decompression reserves at most this much up front; beyond it the output grows with the data.
const MAX_RESERVE: u64 = 32 << 20;
/// zstd level used when writing (zstd's own default: fast, and most of the ratio).
pub const ZSTD_LEVEL: i32 = 3;

/// A compression method (the header's method byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    Zstd,
    Lz4,
}

impl Method {
    pub fn byte(self) -> u8 {
        match self {
            Method::Zstd => 1,
            Method::Lz4 => 2,
        }
    }

    pub fn from_byte(b: u8) -> Option<Method> {
        match b {
            1 => Some(Method::Zstd),
            2 => Some(Method::Lz4),
            _ => None,
        }
    }

    /// The name settings, the CLI and Python use.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Zstd => "zstd",
            Method::Lz4 => "lz4",
        }
    }

    /// Parses `"zstd"` or `"lz4"`.
    pub fn parse(s: &str) -> Option<Method> {
        match s {
            "zstd" => Some(Method::Zstd),
            "lz4" => Some(Method::Lz4),
            _ => None,
        }
    }
}

/// The fixed fields of a `.log.z` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub first_lsn: i64,
    pub last_lsn: i64,
    pub method: Method,
    pub original_len: u64,
    pub original_crc: u32,
}

/// Why a `.log.z` file is not valid; each names the field (and its offset).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadCompressed {
    #[error("compressed segment shorter than its {HEADER_LEN}-byte header ({0} bytes)")]
    Short(usize),
    #[error("bad file marker at offset 0 (expected 12 76 AD 5A)")]
    Marker,
    #[error("unknown compressed segment version {0} at offset {OFF_VERSION} (expected 1)")]
    Version(i32),
    #[error("first LSN {0} at offset {OFF_FIRST_LSN} is negative")]
    FirstLsn(i64),
    #[error("first LSN {found} at offset {OFF_FIRST_LSN} does not match the file name ({named})")]
    FirstLsnName { found: i64, named: i64 },
    #[error("last LSN {last} at offset {OFF_LAST_LSN} is before the first LSN {first} - 1")]
    LastLsn { first: i64, last: i64 },
    #[error(
        "unknown compression method {0} at offset {OFF_METHOD} (expected 1 = zstd or 2 = lz4)"
    )]
    Method(u8),
    #[error("original length {0} at offset {OFF_ORIGINAL_LEN} is outside [{MIN_ORIGINAL_LEN}, {MAX_ORIGINAL_LEN}]")]
    OriginalLen(i64),
    #[error("payload at offset {HEADER_LEN} does not decode ({0})")]
    Payload(String),
    #[error(
        "payload decodes to {found} bytes, the header at offset {OFF_ORIGINAL_LEN} says {expected}"
    )]
    Length { expected: u64, found: u64 },
    #[error("decoded bytes have CRC {found:08x}, the header at offset {OFF_ORIGINAL_CRC} says {expected:08x}")]
    Crc { expected: u32, found: u32 },
    #[error("last LSN {found} at offset {OFF_LAST_LSN} does not match the records inside (last LSN {counted})")]
    LastLsnRecords { found: i64, counted: i64 },
    #[error("the file is {len} bytes long, more than any compression of the {original}-byte original its header declares at offset {OFF_ORIGINAL_LEN} can take ({max} bytes)")]
    FileLen { len: u64, original: u64, max: u64 },
    #[error(
        "no memory for the {0}-byte original the header declares at offset {OFF_ORIGINAL_LEN}"
    )]
    Memory(u64),
}

impl BadCompressed {
    /// Offset in the file of the field at fault.
    pub fn offset(&self) -> u64 {
        (match self {
            BadCompressed::Short(_) | BadCompressed::Marker => 0,
            BadCompressed::Version(_) => OFF_VERSION,
            BadCompressed::FirstLsn(_) | BadCompressed::FirstLsnName { .. } => OFF_FIRST_LSN,
            BadCompressed::LastLsn { .. } | BadCompressed::LastLsnRecords { .. } => OFF_LAST_LSN,
            BadCompressed::Method(_) => OFF_METHOD,
            BadCompressed::OriginalLen(_)
            | BadCompressed::Length { .. }
            | BadCompressed::FileLen { .. }
            | BadCompressed::Memory(_) => OFF_ORIGINAL_LEN,
            BadCompressed::Crc { .. } => OFF_ORIGINAL_CRC,
            BadCompressed::Payload(_) => HEADER_LEN,
        }) as u64
    }
}

/// The longest `.z` file an original of `original_len` bytes can give: the header, then the
/// worst case of either method (incompressible data grows by well under 1% in zstd and lz4
/// frames) with room for their frame and block headers. A longer file is refused before it is
/// read (a sparse file, or a payload padded to make a reader allocate).
pub fn max_file_len(original_len: u64) -> u64 {
    HEADER_LEN as u64 + original_len + original_len / 128 + (1 << 20)
}

/// File name of the compressed segment whose first record has `lsn`.
pub fn file_name(lsn: i64) -> String {
    format!("{lsn:019}{NAME_SUFFIX}")
}

/// Whether `path` names a compressed segment (`NNN.log.z`): the one answer to "is this a
/// `.z`?" that the listing, the scan, the readers and the dialect detection share.
pub fn is_compressed_path(path: &std::path::Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(NAME_SUFFIX))
}

/// The first LSN of a segment file of either kind, plain (`NNN.log`) or compressed
/// (`NNN.log.z`), from its name; `None` for any other name.
pub fn parse_any_file_name(name: &str) -> Option<i64> {
    super::segment::parse_file_name(name).or_else(|| parse_file_name(name))
}

/// Parses a compressed segment's name: exactly a segment name plus `.z`.
pub fn parse_file_name(name: &str) -> Option<i64> {
    super::segment::parse_file_name(name.strip_suffix(".z")?)
}

/// The 37 header bytes, in spec order, big-endian.
pub fn encode_header(h: &Header) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..4].copy_from_slice(&FILE_MARKER);
    out[OFF_VERSION..OFF_FIRST_LSN].copy_from_slice(&VERSION.to_be_bytes());
    out[OFF_FIRST_LSN..OFF_LAST_LSN].copy_from_slice(&h.first_lsn.to_be_bytes());
    out[OFF_LAST_LSN..OFF_METHOD].copy_from_slice(&h.last_lsn.to_be_bytes());
    out[OFF_METHOD] = h.method.byte();
    out[OFF_ORIGINAL_LEN..OFF_ORIGINAL_CRC].copy_from_slice(&(h.original_len as i64).to_be_bytes());
    out[OFF_ORIGINAL_CRC..HEADER_LEN].copy_from_slice(&h.original_crc.to_be_bytes());
    out
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Reads and checks the header fields (not the payload).
pub fn decode_header(buf: &[u8]) -> Result<Header, BadCompressed> {
    if buf.len() < HEADER_LEN {
        return Err(BadCompressed::Short(buf.len()));
    }
    if buf[..4] != FILE_MARKER {
        return Err(BadCompressed::Marker);
    }
    let version = i32::from_be_bytes(buf[OFF_VERSION..OFF_FIRST_LSN].try_into().expect("4"));
    if version != VERSION {
        return Err(BadCompressed::Version(version));
    }
    let first_lsn = be_i64(buf, OFF_FIRST_LSN);
    if first_lsn < 0 {
        return Err(BadCompressed::FirstLsn(first_lsn));
    }
    let last_lsn = be_i64(buf, OFF_LAST_LSN);
    if last_lsn < first_lsn - 1 {
        return Err(BadCompressed::LastLsn {
            first: first_lsn,
            last: last_lsn,
        });
    }
    let method =
        Method::from_byte(buf[OFF_METHOD]).ok_or(BadCompressed::Method(buf[OFF_METHOD]))?;
    let original = be_i64(buf, OFF_ORIGINAL_LEN);
    if original < MIN_ORIGINAL_LEN as i64 || original as u64 > MAX_ORIGINAL_LEN {
        return Err(BadCompressed::OriginalLen(original));
    }
    let original_crc = u32::from_be_bytes(buf[OFF_ORIGINAL_CRC..HEADER_LEN].try_into().expect("4"));
    Ok(Header {
        first_lsn,
        last_lsn,
        method,
        original_len: original as u64,
        original_crc,
    })
}

/// The whole `.log.z` file for `original` (a sealed segment, header through end marker).
pub fn encode(method: Method, first_lsn: i64, last_lsn: i64, original: &[u8]) -> Vec<u8> {
    let header = Header {
        first_lsn,
        last_lsn,
        method,
        original_len: original.len() as u64,
        original_crc: crc32fast::hash(original),
    };
    let mut out = encode_header(&header).to_vec();
    match method {
        Method::Zstd => {
            // Writing into a Vec cannot fail; the content size goes into the frame header.
            let mut enc = zstd::stream::write::Encoder::new(out, ZSTD_LEVEL).expect("zstd level");
            enc.set_pledged_src_size(Some(original.len() as u64))
                .expect("before any data");
            enc.include_contentsize(true).expect("zstd parameter");
            std::io::Write::write_all(&mut enc, original).expect("write to a Vec");
            out = enc.finish().expect("write to a Vec");
        }
        Method::Lz4 => {
            let info = lz4_flex::frame::FrameInfo::new().content_size(Some(original.len() as u64));
            let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
            std::io::Write::write_all(&mut enc, original).expect("write to a Vec");
            out = enc.finish().expect("write to a Vec");
        }
    }
    out
}

/// Decodes a whole `.log.z` file: its header, and the original bytes after checking their
/// length and CRC against the header.
pub fn decode(buf: &[u8]) -> Result<(Header, Vec<u8>), BadCompressed> {
    let header = decode_header(buf)?;
    let payload = &buf[HEADER_LEN..];
    let limit = header.original_len;
    // One byte more than declared: reading to the end probes past it. The output grows with
    // what the payload really decodes to, and every growth may fail: a header that declares
    // more than the process can hold fails this read, never the process.
    let mut out = Vec::new();
    let read = match header.method {
        Method::Zstd => zstd::stream::read::Decoder::with_buffer(payload)
            .map_err(|e| BadCompressed::Payload(e.to_string()))
            .and_then(|d| read_bounded(d, limit + 1, &mut out)),
        Method::Lz4 => read_bounded(
            lz4_flex::frame::FrameDecoder::new(payload),
            limit + 1,
            &mut out,
        ),
    };
    read?;
    if out.len() as u64 != limit {
        return Err(BadCompressed::Length {
            expected: limit,
            found: out.len() as u64,
        });
    }
    let crc = crc32fast::hash(&out);
    if crc != header.original_crc {
        return Err(BadCompressed::Crc {
            expected: header.original_crc,
            found: crc,
        });
    }
    Ok((header, out))
}

/// Reads at most `limit` bytes of `reader` into `out`: the first reservation at most
/// [`MAX_RESERVE`], then as `read_to_end` grows it, straight into the vector's spare room.
/// `read_to_end` reserves fallibly: an allocation that fails is [`BadCompressed::Memory`],
/// never an abort of the process (`tests/reliability/test_hostile_input.py`, under a 1 GiB limit).
fn read_bounded(reader: impl Read, limit: u64, out: &mut Vec<u8>) -> Result<(), BadCompressed> {
    out.try_reserve_exact(limit.min(MAX_RESERVE) as usize)
        .map_err(|_| BadCompressed::Memory(limit - 1))?;
    match reader.take(limit).read_to_end(out) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
            Err(BadCompressed::Memory(limit - 1))
        }
        Err(e) => Err(BadCompressed::Payload(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn original() -> Vec<u8> {
        let mut seg = super::super::segment::header().to_vec();
        for i in 0..50u8 {
            super::super::record::encode(&mut seg, 1, &[i; 40]);
        }
        seg.extend_from_slice(&END_MARKER);
        seg
    }

    #[test]
    fn names_are_segment_names_plus_z() {
        assert_eq!(file_name(7), "0000000000000000007.log.z");
        assert_eq!(parse_file_name("0000000000000000007.log.z"), Some(7));
        for bad in [
            "0000000000000000007.log",
            "0000000000000000007.log.zz",
            "7.log.z",
        ] {
            assert_eq!(parse_file_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn both_methods_round_trip() {
        let seg = original();
        for method in [Method::Zstd, Method::Lz4] {
            let file = encode(method, 10, 59, &seg);
            assert!(
                file.len() < seg.len(),
                "{method:?} compresses repetitive records"
            );
            let (h, back) = decode(&file).unwrap();
            assert_eq!(back, seg);
            assert_eq!((h.first_lsn, h.last_lsn, h.method), (10, 59, method));
        }
    }

    #[test]
    fn a_lying_length_or_crc_is_refused_without_allocating_it() {
        let seg = original();
        let file = encode(Method::Zstd, 0, 49, &seg);
        let mut long = file.clone();
        long[25..33].copy_from_slice(&((MAX_ORIGINAL_LEN as i64) - 1).to_be_bytes());
        assert!(matches!(decode(&long), Err(BadCompressed::Length { .. })));
        let mut huge = file.clone();
        huge[25..33].copy_from_slice(&i64::MAX.to_be_bytes());
        assert_eq!(
            decode(&huge).unwrap_err(),
            BadCompressed::OriginalLen(i64::MAX)
        );
        let mut short = file.clone();
        short[25..33].copy_from_slice(&(seg.len() as i64 - 4).to_be_bytes());
        assert!(matches!(decode(&short), Err(BadCompressed::Length { .. })));
        let mut crc = file.clone();
        crc[36] ^= 1;
        assert!(matches!(decode(&crc), Err(BadCompressed::Crc { .. })));
        let mut payload = file.clone();
        let last = payload.len() - 3;
        payload[last] ^= 0xFF;
        assert!(decode(&payload).is_err());
        assert!(decode(&file[..file.len() - 1]).is_err());
    }
}
