//! The metadata file `data/tflux.metadata` (spec section 5).
//!
//! ```text
//! Marker 5A 6E A0 12 | Int32 version = 1 | Int32 term | Int32 vote (-1 = none) | UInt32 CRC(version, term, vote)
//! ```
//! Exactly 20 bytes. Absent or empty means term 1, no vote. Term >= 0; a vote is -1 or >= 0.
//! Pure bytes: reading and writing the file is `crate::files`.

use std::path::Path;

use crate::codec::be_i32;
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

/// Decodes a metadata file's bytes; errors name `path` and the offending field's offset.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Metadata> {
    let fields = FRAME.decode(bytes, path)?;
    let field = |at: usize| be_i32(&fields, at - FIELDS_AT).unwrap_or_default();
    let term = field(TERM_AT);
    if term < 0 {
        return Err(Error::corruption(
            path,
            Some(TERM_AT as u64),
            format!("negative term {term}"),
        ));
    }
    let vote = field(VOTE_AT);
    if vote < NO_VOTE {
        return Err(Error::corruption(
            path,
            Some(VOTE_AT as u64),
            format!("invalid vote {vote} (expected -1 or a node id >= 0)"),
        ));
    }
    Ok(Metadata {
        term,
        voted_for: (vote != NO_VOTE).then_some(vote),
    })
}
