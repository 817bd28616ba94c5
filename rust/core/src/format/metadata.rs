//! The metadata file `data/tflux.metadata` (spec section 5).
//!
//! ```text
//! Marker 5A 6E A0 12 | Int32 version = 1 | Int32 term | Int32 vote (-1 = none) | UInt32 CRC(version, term, vote)
//! ```
//! Exactly 20 bytes. Absent or empty means term 1, no vote. Term >= 0; a vote is -1 or >= 0.
//! Pure bytes: reading and writing the file is `crate::files`.

use std::path::Path;

use crate::codec::{be_i32, be_u32, crc32};
use crate::error::{Error, Result};

pub const MARKER: [u8; 4] = [0x5A, 0x6E, 0xA0, 0x12];
pub const VERSION: i32 = 1;
pub const LEN: usize = 20;
const VERSION_AT: usize = 4;
const TERM_AT: usize = 8;
const VOTE_AT: usize = 12;
const CRC_AT: usize = 16;
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
    let mut out = [0u8; LEN];
    out[..VERSION_AT].copy_from_slice(&MARKER);
    out[VERSION_AT..TERM_AT].copy_from_slice(&VERSION.to_be_bytes());
    out[TERM_AT..VOTE_AT].copy_from_slice(&m.term.to_be_bytes());
    out[VOTE_AT..CRC_AT].copy_from_slice(&m.voted_for.unwrap_or(NO_VOTE).to_be_bytes());
    let crc = crc32(&out[VERSION_AT..CRC_AT]);
    out[CRC_AT..].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Decodes a metadata file's bytes; errors name `path` and the offending field's offset.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Metadata> {
    let bad =
        |offset: usize, reason: String| Err(Error::corruption(path, Some(offset as u64), reason));
    if bytes.len() != LEN {
        return bad(
            bytes.len().min(LEN),
            format!(
                "metadata file is {} bytes long (expected exactly 20)",
                bytes.len()
            ),
        );
    }
    if bytes[..VERSION_AT] != MARKER {
        return bad(0, "bad metadata marker (expected 5A 6E A0 12)".into());
    }
    let field = |at| be_i32(bytes, at).unwrap_or_default();
    let version = field(VERSION_AT);
    if version != VERSION {
        return bad(
            VERSION_AT,
            format!("unknown metadata version {version} (expected 1)"),
        );
    }
    let stored = be_u32(bytes, CRC_AT).unwrap_or_default();
    let computed = crc32(&bytes[VERSION_AT..CRC_AT]);
    if stored != computed {
        return bad(
            CRC_AT,
            format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
        );
    }
    let term = field(TERM_AT);
    if term < 0 {
        return bad(TERM_AT, format!("negative term {term}"));
    }
    let vote = field(VOTE_AT);
    if vote < NO_VOTE {
        return bad(
            VOTE_AT,
            format!("invalid vote {vote} (expected -1 or a node id >= 0)"),
        );
    }
    Ok(Metadata {
        term,
        voted_for: (vote != NO_VOTE).then_some(vote),
    })
}
