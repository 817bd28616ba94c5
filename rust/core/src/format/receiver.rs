//! Receiver cursor files `data/cursors/NAME.cursor` (spec section 10).
//!
//! ```text
//! Marker C3 52 5F 01 | Int32 version = 1 | Int64 next LSN | UInt32 CRC(version, next LSN)
//! ```
//! Exactly 20 bytes. NAME follows the QueueName character rules except `/`, 1..248 characters.
//! Pure bytes: reading and writing the file is `crate::channel::cursor`.

use std::path::Path;

use crate::error::{Error, Result};
use crate::format::cursor::{NAME_MAX, NAME_MIN};
use crate::format::framed::{Frame, FIELDS_AT};
pub use crate::format::framed::{LEN, VERSION};

pub const MARKER: [u8; 4] = [0xC3, 0x52, 0x5F, 0x01];
/// The frame (length, marker, version, checksum) this file shares with the metadata file.
pub const FRAME: Frame = Frame {
    what: "cursor",
    marker: MARKER,
};
/// Longest receiver name: `NAME.cursor` must fit a 255-byte file name.
pub const MAX_NAME_LEN: usize = 248;
/// What follows NAME in the file name.
pub const SUFFIX: &str = ".cursor";

/// Checks a receiver name (spec section 10): 1..248 bytes in '!'..'~', no '/'. A name that
/// passes can never leave `data/cursors/` (no '/', and "." or ".." are not names either).
pub fn validate_name(name: &str) -> Result<()> {
    let bad = |why: String| {
        Err(Error::InvalidArgument(format!(
            "receiver name {name:?}: {why}"
        )))
    };
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return bad(format!(
            "must be 1..{MAX_NAME_LEN} characters (got {})",
            name.len()
        ));
    }
    if let Some(b) = name
        .bytes()
        .find(|b| !(NAME_MIN..=NAME_MAX).contains(b) || *b == b'/')
    {
        return bad(format!(
            "byte {b:#04X} is not allowed (printable ASCII without space or '/')"
        ));
    }
    if name == "." || name == ".." {
        return bad("is not a file name".into());
    }
    Ok(())
}

/// The receiver name of a cursor file name (`None` for any other file).
pub fn parse_file_name(file_name: &str) -> Option<&str> {
    let name = file_name.strip_suffix(SUFFIX)?;
    validate_name(name).ok().map(|()| name)
}

/// The file's 20 bytes.
pub fn encode(next_lsn: i64) -> [u8; LEN] {
    FRAME.encode(next_lsn.to_be_bytes())
}

/// Decodes a cursor file's bytes into its next LSN; errors name `path` and the field's offset.
pub fn decode(bytes: &[u8], path: &Path) -> Result<i64> {
    let next = i64::from_be_bytes(FRAME.decode(bytes, path)?);
    if next < 0 {
        return Err(Error::corruption(
            path,
            Some(FIELDS_AT as u64),
            format!("negative next LSN {next}"),
        ));
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn golden_bytes() {
        // Marker, version 1, next LSN 5, CRC-32 of the 12 bytes in between (zlib.crc32).
        let expected_crc = crc32fast::hash(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5]);
        let mut golden = vec![0xC3, 0x52, 0x5F, 0x01, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 5];
        golden.extend_from_slice(&expected_crc.to_be_bytes());
        assert_eq!(encode(5).to_vec(), golden);
        assert_eq!(decode(&golden, Path::new("x")).unwrap(), 5);
    }

    #[test]
    fn damage_is_corruption_with_offset() {
        let p = Path::new("r.cursor");
        let good = encode(7);
        let offset_of = |b: &[u8]| match decode(b, p) {
            Err(Error::Corruption { offset, .. }) => offset,
            other => panic!("{other:?}"),
        };
        assert_eq!(offset_of(&good[..19]), Some(19));
        let mut m = good;
        m[0] ^= 1;
        assert_eq!(offset_of(&m), Some(0));
        let mut c = good;
        c[12] ^= 1;
        assert_eq!(offset_of(&c), Some(16));
        assert_eq!(offset_of(&encode(-1)), Some(8));
    }

    #[test]
    fn names() {
        for ok in ["a", "billing", "x.y-z_1", &"n".repeat(248)] {
            assert!(validate_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "a b", ".", "..", "é", &"n".repeat(249)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_file_name("billing.cursor"), Some("billing"));
        assert_eq!(parse_file_name("billing.cursor.tmp"), None);
        assert_eq!(parse_file_name(".cursor"), None);
    }

    proptest! {
        #[test]
        fn round_trip(next in 0i64..=i64::MAX) {
            prop_assert_eq!(decode(&encode(next), Path::new("p")).unwrap(), next);
        }
    }
}
