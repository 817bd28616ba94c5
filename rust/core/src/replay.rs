//! Replay: the deltas of a log applied to a queue state (restore = snapshot + replay). It sits
//! above both the state machine and the log, so neither knows the other; the base-directory
//! checks and the store call it.

use crate::error::Result;
use crate::log::Log;
use crate::state::QueueState;

/// Applies every entry of `log` from `start` (default: the log's start) to its end to `state`,
/// without copying entries, as one [`crate::state::Batch`] (the state is built once at the
/// end). Messages read from sealed plain segments are borrowed from their maps, not copied
/// ([`crate::payload::Payload`]). Returns the number of deltas applied; the first delta that cannot be applied stops it
/// with its [`crate::Error::Replay`], leaving the state as the deltas before it built it.
pub fn replay(state: &mut QueueState, log: &mut Log, start: Option<i64>) -> Result<u64> {
    let start = start.unwrap_or(log.start_index());
    let end = log.last_index() + 1;
    let mut applied = 0u64;
    let mut failure = None;
    let mut batch = state.batch();
    log.scan_checked_at_open(start, end, |lsn, _term, data, source| {
        match batch.apply_in_source(Some(lsn), data, source) {
            Ok(_) => {
                applied += 1;
                true
            }
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })?;
    batch.finish();
    match failure {
        Some(e) => Err(e),
        None => Ok(applied),
    }
}
