//! The metadata file `data/tflux.metadata` (spec section 5).
//!
//! ```text
//! Marker 5A 6E A0 12 | Int32 version = 1 | Int32 term | Int32 vote (-1 = none) | UInt32 CRC(version, term, vote)
//! ```

/// Raft term and vote of this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
