//! The 20-byte checked file shared by the metadata file (spec section 5) and receiver cursor
//! files (spec section 10):
//!
//! ```text
//! Marker (4 bytes) | Int32 version = 1 | 8 bytes of fields | UInt32 CRC(version, fields)
//! ```
//!
//! One place owns the frame (length, marker, version, checksum) so the two file kinds cannot
//! drift apart; each kind only says what its 8 bytes of fields mean.

use std::path::Path;

use crate::codec::{be_i32, be_u32, crc32};
use crate::error::{Error, Result};

/// Every framed file is exactly this long.
pub const LEN: usize = 20;
/// The only version either file kind has.
pub const VERSION: i32 = 1;
const VERSION_AT: usize = 4;
/// Where the 8 bytes of fields start.
pub const FIELDS_AT: usize = 8;
const CRC_AT: usize = 16;

/// One kind of framed file: the word its errors use and its marker.
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    pub what: &'static str,
    pub marker: [u8; 4],
}

impl Frame {
    /// The file's 20 bytes around `fields`.
    pub fn encode(&self, fields: [u8; 8]) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..VERSION_AT].copy_from_slice(&self.marker);
        out[VERSION_AT..FIELDS_AT].copy_from_slice(&VERSION.to_be_bytes());
        out[FIELDS_AT..CRC_AT].copy_from_slice(&fields);
        let crc = crc32(&out[VERSION_AT..CRC_AT]);
        out[CRC_AT..].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// Checks the frame of a file's bytes (length, marker, version, checksum, in that order)
    /// and returns its 8 bytes of fields; errors name `path` and the offending offset.
    pub fn decode(&self, bytes: &[u8], path: &Path) -> Result<[u8; 8]> {
        let what = self.what;
        if bytes.len() != LEN {
            return Err(self.too_long_or_short(path, bytes.len() as u64));
        }
        if bytes[..VERSION_AT] != self.marker {
            let [a, b, c, d] = self.marker;
            return Err(Error::corruption(
                path,
                Some(0),
                format!("bad {what} marker (expected {a:02X} {b:02X} {c:02X} {d:02X})"),
            ));
        }
        let version = be_i32(bytes, VERSION_AT).unwrap_or_default();
        if version != VERSION {
            return Err(Error::corruption(
                path,
                Some(VERSION_AT as u64),
                format!("unknown {what} version {version} (expected {VERSION})"),
            ));
        }
        let stored = be_u32(bytes, CRC_AT).unwrap_or_default();
        let computed = crc32(&bytes[VERSION_AT..CRC_AT]);
        if stored != computed {
            return Err(Error::corruption(
                path,
                Some(CRC_AT as u64),
                format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
            ));
        }
        let mut fields = [0u8; 8];
        fields.copy_from_slice(&bytes[FIELDS_AT..CRC_AT]);
        Ok(fields)
    }

    /// The error for a file of `len` bytes; the offset is where the 20 bytes end or stopped.
    pub fn too_long_or_short(&self, path: &Path, len: u64) -> Error {
        Error::corruption(
            path,
            Some(len.min(LEN as u64)),
            format!(
                "{} file is {len} bytes long (expected exactly {LEN})",
                self.what
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FRAME: Frame = Frame {
        what: "test",
        marker: [0xAB, 0x01, 0x02, 0x03],
    };

    fn offset_of(bytes: &[u8]) -> Option<u64> {
        match FRAME.decode(bytes, Path::new("f")) {
            Err(Error::Corruption { offset, .. }) => offset,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_frame_is_marker_version_fields_and_the_zlib_crc_of_version_and_fields() {
        let fields = [1, 2, 3, 4, 5, 6, 7, 8];
        let bytes = FRAME.encode(fields);
        let mut covered = vec![0, 0, 0, 1];
        covered.extend_from_slice(&fields);
        let mut expected = vec![0xAB, 0x01, 0x02, 0x03];
        expected.extend_from_slice(&covered);
        expected.extend_from_slice(&crc32fast::hash(&covered).to_be_bytes());
        assert_eq!(bytes.to_vec(), expected);
        assert_eq!(FRAME.decode(&bytes, Path::new("f")).unwrap(), fields);
    }

    #[test]
    fn each_damage_names_the_offset_of_its_field() {
        let good = FRAME.encode([9; 8]);
        assert_eq!(offset_of(&good[..7]), Some(7));
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(offset_of(&long), Some(20));
        let mut marker = good;
        marker[3] ^= 1;
        assert_eq!(offset_of(&marker), Some(0));
        // A different version with a matching checksum is still refused, at the version.
        let mut version = good;
        version[7] = 2;
        let crc = crc32(&version[4..16]);
        version[16..].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(offset_of(&version), Some(4));
        let mut field = good;
        field[10] ^= 0x40;
        assert_eq!(offset_of(&field), Some(16));
    }
}
