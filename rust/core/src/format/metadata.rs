//! The metadata file `data/tflux.metadata` (spec section 5).
//!
//! ```text
//! Marker 5A 6E A0 12 | Int32 version = 1 | Int32 term | Int32 vote (-1 = none) | UInt32 CRC(version, term, vote)
//! ```
//! Exactly 20 bytes. Absent or empty means term 1, no vote. Term >= 0; a vote is -1 or >= 0.
//! Pure bytes: reading and writing the file is `crate::base::files`.
//!
//! The taskflux dialect (spec section 11) writes 24 bytes:
//! ```text
//! Marker 5A 6E A0 12 | Int32 version = 1 | Int64 term | Int32 vote | UInt32 CRC-32/MPEG-2(bytes 4..19)
//! ```
//! tflux keeps terms as Int32 (docs/format.md, "taskflux terms"): a larger stored term is
//! reported as corruption of the term field, never narrowed.

use std::path::Path;

use super::dialect::Dialect;
use crate::codec::{be_i32, be_u32, crc32_mpeg2};
use crate::error::{Error, Result};
use crate::format::framed::{Frame, FIELDS_AT};
pub use crate::format::framed::{LEN, VERSION};

pub const MARKER: [u8; 4] = [0x5A, 0x6E, 0xA0, 0x12];
/// The frame (length, marker, version, checksum) this file shares with receiver cursors.
pub const FRAME: Frame = Frame {
    what: "metadata",
    marker: MARKER,
};
const TERM_AT: usize = 8;
const VOTE_AT: usize = 12;
/// The vote field's "no vote".
pub const NO_VOTE: i32 = -1;

/// Raft term and vote of this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Metadata {
    pub term: i32,
    pub voted_for: Option<i32>,
}

impl Default for Metadata {
    /// Absent or empty file: term 1, no vote.
    fn default() -> Self {
        Metadata {
            term: 1,
            voted_for: None,
        }
    }
}

impl Metadata {
    /// Checks the values a file may hold: term >= 0, vote None, -1 (no vote) or >= 0.
    pub fn validate(&self) -> Result<()> {
        if self.term < 0 {
            return Err(Error::InvalidArgument(format!(
                "term must be >= 0 (got {})",
                self.term
            )));
        }
        match self.voted_for {
            Some(v) if v < NO_VOTE => Err(Error::InvalidArgument(format!(
                "voted_for must be a node id >= 0, -1 or None (got {v})"
            ))),
            _ => Ok(()),
        }
    }
}

/// The file's 20 bytes (`voted_for` None or `Some(-1)` is written as -1).
pub fn encode(m: &Metadata) -> [u8; LEN] {
    let mut fields = [0u8; 8];
    fields[..4].copy_from_slice(&m.term.to_be_bytes());
    fields[4..].copy_from_slice(&m.voted_for.unwrap_or(NO_VOTE).to_be_bytes());
    FRAME.encode(fields)
}

/// Length of a taskflux metadata file.
pub const TASKFLUX_LEN: usize = 24;
const TASKFLUX_VOTE_AT: usize = 16;
const TASKFLUX_CRC_AT: usize = 20;

/// The file's bytes in `dialect` (20 or 24).
pub fn encode_in(m: &Metadata, dialect: Dialect) -> Vec<u8> {
    match dialect {
        Dialect::Spec => encode(m).to_vec(),
        Dialect::Taskflux => {
            let mut out = MARKER.to_vec();
            out.extend_from_slice(&VERSION.to_be_bytes());
            out.extend_from_slice(&i64::from(m.term).to_be_bytes());
            out.extend_from_slice(&m.voted_for.unwrap_or(NO_VOTE).to_be_bytes());
            let crc = crc32_mpeg2(&out[4..]);
            out.extend_from_slice(&crc.to_be_bytes());
            out
        }
    }
}

/// Decodes a metadata file's bytes in `dialect`; errors name `path` and the offending field's
/// offset.
pub fn decode_in(bytes: &[u8], path: &Path, dialect: Dialect) -> Result<Metadata> {
    match dialect {
        Dialect::Spec => decode(bytes, path),
        Dialect::Taskflux => decode_taskflux(bytes, path),
    }
}

/// [`decode_in`] of TaskFlux's 24 bytes: length, marker, version, checksum, then the fields.
fn decode_taskflux(bytes: &[u8], path: &Path) -> Result<Metadata> {
    if bytes.len() != TASKFLUX_LEN {
        return Err(Error::corruption(
            path,
            Some((bytes.len() as u64).min(TASKFLUX_LEN as u64)),
            format!(
                "metadata file is {} bytes long (expected exactly {TASKFLUX_LEN} in the taskflux dialect)",
                bytes.len()
            ),
        ));
    }
    if bytes[..4] != MARKER {
        return Err(Error::corruption(
            path,
            Some(0),
            "bad metadata marker (expected 5A 6E A0 12)".to_string(),
        ));
    }
    let version = be_i32(bytes, 4).unwrap_or_default();
    if version != VERSION {
        return Err(Error::corruption(
            path,
            Some(4),
            format!("unknown metadata version {version} (expected {VERSION})"),
        ));
    }
    let stored = be_u32(bytes, TASKFLUX_CRC_AT).unwrap_or_default();
    let computed = crc32_mpeg2(&bytes[4..TASKFLUX_CRC_AT]);
    if stored != computed {
        return Err(Error::corruption(
            path,
            Some(TASKFLUX_CRC_AT as u64),
            format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
        ));
    }
    let high = be_u32(bytes, TERM_AT).unwrap_or_default();
    let low = be_u32(bytes, TERM_AT + 4).unwrap_or_default();
    let wide = (u64::from(high) << 32 | u64::from(low)) as i64;
    let term = i32::try_from(wide).map_err(|_| {
        Error::corruption(
            path,
            Some(TERM_AT as u64),
            format!(
                "term {wide} outside 0..={} (the terms tflux supports)",
                i32::MAX
            ),
        )
    })?;
    fields_checked(
        term,
        be_i32(bytes, TASKFLUX_VOTE_AT).unwrap_or_default(),
        path,
        TASKFLUX_VOTE_AT,
    )
}

/// Decodes a metadata file's bytes; errors name `path` and the offending field's offset.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Metadata> {
    let fields = FRAME.decode(bytes, path)?;
    let field = |at: usize| be_i32(&fields, at - FIELDS_AT).unwrap_or_default();
    fields_checked(field(TERM_AT), field(VOTE_AT), path, VOTE_AT)
}

/// The rules of the two fields (either dialect): term >= 0, vote -1 or a node id.
fn fields_checked(term: i32, vote: i32, path: &Path, vote_at: usize) -> Result<Metadata> {
    if term < 0 {
        return Err(Error::corruption(
            path,
            Some(TERM_AT as u64),
            format!("negative term {term}"),
        ));
    }
    if vote < NO_VOTE {
        return Err(Error::corruption(
            path,
            Some(vote_at as u64),
            format!("invalid vote {vote} (expected -1 or a node id >= 0)"),
        ));
    }
    Ok(Metadata {
        term,
        voted_for: (vote != NO_VOTE).then_some(vote),
    })
}
