//! Deltas: the data of each log record (spec section 6).
//!
//! ```text
//! CreateQueue  'C' | QueueName | Int32 implementation | Int32 max queue size
//!                  | Int32 max message size | Nullable<Pair<Int64,Int64>> key range
//! DeleteQueue  'D' | QueueName
//! AddRecord    'A' | QueueName | Int64 priority (key) | Buffer message
//! RemoveRecord 'R' | QueueName | UInt64 record id
//! QueueName    Byte length N (0..255) | N ASCII bytes in 0x21..0x7E   (empty = default queue)
//!
//! Task-queue deltas (spec section 12, spec dialect only; docs/format.md "Task-queue deltas"):
//! QueueRules   'Q' | QueueName | RulesChange              (format::rules: only named rules change)
//! AddLater     'L' | QueueName | Int64 priority (key) | Int64 not before (unix ms) | Buffer message
//! Delivered    'V' | QueueName | UInt64 record id         (a counted delivery)
//! Failed       'F' | QueueName | UInt64 record id | Int64 due (unix ms)   (ready again at `due`)
//! Purge        'P' | QueueName | Array<UInt64> kept ids   (every other record of the queue goes)
//! ```
//! A delta must consume its bytes exactly. Decoding is structural: it checks every length, the
//! name bytes, the Bool and the marker, but not the queue semantics (implementation codes,
//! `min <= max`, size limits), which replay checks against the state (spec 7.1).

use super::cursor::{put_buffer, put_key_range, put_name, Cursor};
pub use super::cursor::{validate_queue_name, DecodeError};
use super::rules::{decode_change, RulesChange};

/// Where (byte offset in the delta) and why a delta could not be decoded.
pub type DeltaError = DecodeError;

pub const CREATE_QUEUE: u8 = b'C';
pub const DELETE_QUEUE: u8 = b'D';
pub const ADD_RECORD: u8 = b'A';
pub const REMOVE_RECORD: u8 = b'R';
pub const QUEUE_RULES: u8 = b'Q';
pub const ADD_LATER: u8 = b'L';
pub const DELIVERED: u8 = b'V';
pub const FAILED: u8 = b'F';
pub const PURGE: u8 = b'P';
/// `-1` in a size field: no limit.
pub const NO_LIMIT: i32 = -1;

/// A decoded delta borrowing from the record's bytes (replay decodes millions of these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeltaRef<'a> {
    CreateQueue {
        name: &'a [u8],
        implementation: i32,
        max_queue_size: i32,
        max_message_size: i32,
        key_range: Option<(i64, i64)>,
    },
    DeleteQueue {
        name: &'a [u8],
    },
    AddRecord {
        name: &'a [u8],
        key: i64,
        message: &'a [u8],
    },
    RemoveRecord {
        name: &'a [u8],
        id: u64,
    },
    QueueRules {
        name: &'a [u8],
        change: RulesChange<&'a [u8]>,
    },
    AddLater {
        name: &'a [u8],
        key: i64,
        not_before: i64,
        message: &'a [u8],
    },
    Delivered {
        name: &'a [u8],
        id: u64,
    },
    Failed {
        name: &'a [u8],
        id: u64,
        due: i64,
    },
    Purge {
        name: &'a [u8],
        kept: Ids<'a>,
    },
}

/// Record ids of a Purge: the Array's bytes as decoded (big-endian UInt64s) or a list.
#[derive(Debug, Clone, Copy)]
pub enum Ids<'a> {
    Raw(&'a [u8]),
    List(&'a [u64]),
}

impl<'a> Ids<'a> {
    pub fn len(&self) -> usize {
        match self {
            Ids::Raw(b) => b.len() / 8,
            Ids::List(l) => l.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let (raw, list): (&'a [u8], &'a [u64]) = match *self {
            Ids::Raw(b) => (b, &[]),
            Ids::List(l) => (&[], l),
        };
        raw.chunks_exact(8)
            .map(|c| u64::from_be_bytes(c.try_into().expect("8 bytes")))
            .chain(list.iter().copied())
    }

    pub fn to_vec(&self) -> Vec<u64> {
        self.iter().collect()
    }
}

impl PartialEq for Ids<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for Ids<'_> {}

/// An owned delta, for building deltas to append (and for tests).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Delta {
    CreateQueue {
        name: Vec<u8>,
        implementation: i32,
        max_queue_size: i32,
        max_message_size: i32,
        key_range: Option<(i64, i64)>,
    },
    DeleteQueue {
        name: Vec<u8>,
    },
    AddRecord {
        name: Vec<u8>,
        key: i64,
        message: Vec<u8>,
    },
    RemoveRecord {
        name: Vec<u8>,
        id: u64,
    },
    QueueRules {
        name: Vec<u8>,
        change: RulesChange<Vec<u8>>,
    },
    AddLater {
        name: Vec<u8>,
        key: i64,
        not_before: i64,
        message: Vec<u8>,
    },
    Delivered {
        name: Vec<u8>,
        id: u64,
    },
    Failed {
        name: Vec<u8>,
        id: u64,
        due: i64,
    },
    Purge {
        name: Vec<u8>,
        kept: Vec<u64>,
    },
}

/// Decodes one delta without allocating (except to describe an error).
pub fn decode(data: &[u8]) -> Result<DeltaRef<'_>, DeltaError> {
    let mut c = Cursor::new(data);
    let marker = c.u8("delta marker")?;
    let (delta, kind) = match marker {
        CREATE_QUEUE => (
            DeltaRef::CreateQueue {
                name: c.queue_name()?,
                implementation: c.i32("implementation")?,
                max_queue_size: c.i32("max queue size")?,
                max_message_size: c.i32("max message size")?,
                key_range: c.key_range()?,
            },
            "CreateQueue",
        ),
        DELETE_QUEUE => (
            DeltaRef::DeleteQueue {
                name: c.queue_name()?,
            },
            "DeleteQueue",
        ),
        ADD_RECORD => (
            DeltaRef::AddRecord {
                name: c.queue_name()?,
                key: c.i64("key")?,
                message: c.buffer("message length")?,
            },
            "AddRecord",
        ),
        REMOVE_RECORD => (
            DeltaRef::RemoveRecord {
                name: c.queue_name()?,
                id: c.u64("record id")?,
            },
            "RemoveRecord",
        ),
        QUEUE_RULES => (
            DeltaRef::QueueRules {
                name: c.queue_name()?,
                change: decode_change(&mut c)?,
            },
            "QueueRules",
        ),
        ADD_LATER => (
            DeltaRef::AddLater {
                name: c.queue_name()?,
                key: c.i64("key")?,
                not_before: c.i64("not before")?,
                message: c.buffer("message length")?,
            },
            "AddLater",
        ),
        DELIVERED => (
            DeltaRef::Delivered {
                name: c.queue_name()?,
                id: c.u64("record id")?,
            },
            "Delivered",
        ),
        FAILED => (
            DeltaRef::Failed {
                name: c.queue_name()?,
                id: c.u64("record id")?,
                due: c.i64("due")?,
            },
            "Failed",
        ),
        PURGE => {
            let name = c.queue_name()?;
            let n = c.len("kept id count", 8)?;
            let kept = Ids::Raw(c.take(n * 8, "kept ids")?);
            (DeltaRef::Purge { name, kept }, "Purge")
        }
        other => return c.fail(0, format!("unknown delta marker {other:#04X}")),
    };
    if c.left() != 0 {
        return c.fail(c.pos(), format!("{} trailing bytes after {kind}", c.left()));
    }
    Ok(delta)
}

/// Field access for a delta that [`decode`] accepted, without decoding it again: the bulk
/// column decoder (`columns.rs`) decodes each delta once, then fills each column in its own
/// pass over millions of them. The positions are the ones `decode` reads; the property test
/// below holds the two together. Calling one on bytes `decode` refused, or on a delta of
/// another kind, returns garbage or panics (never undefined behaviour).
pub mod fields {
    use super::DeltaRef;

    /// The delta's kind as a small code (the index into `columns::KIND_NAMES`): 0 CreateQueue, 1 DeleteQueue,
    /// 2 AddRecord, 3 RemoveRecord, then the task-queue kinds: 4 QueueRules, 5 AddLater,
    /// 6 Delivered, 7 Failed, 8 Purge.
    pub fn kind_code(d: &DeltaRef<'_>) -> u8 {
        match d {
            DeltaRef::CreateQueue { .. } => 0,
            DeltaRef::DeleteQueue { .. } => 1,
            DeltaRef::AddRecord { .. } => 2,
            DeltaRef::RemoveRecord { .. } => 3,
            DeltaRef::QueueRules { .. } => 4,
            DeltaRef::AddLater { .. } => 5,
            DeltaRef::Delivered { .. } => 6,
            DeltaRef::Failed { .. } => 7,
            DeltaRef::Purge { .. } => 8,
        }
    }

    /// Where the fields after the queue name start.
    #[inline]
    fn body(data: &[u8]) -> usize {
        body_checked(data).expect("a delta has a name length byte")
    }

    /// [`body`], or `None` when `data` is too short to hold the name's length.
    #[inline]
    fn body_checked(data: &[u8]) -> Option<usize> {
        data.get(1).map(|&len| body_after(usize::from(len)))
    }

    /// Where the fields after a queue name of `name_len` bytes start: after the kind byte,
    /// the name's length byte and the name.
    #[inline(always)]
    fn body_after(name_len: usize) -> usize {
        2 + name_len
    }

    /// Bytes of an AddRecord between its body and its message: the key (8) and the Buffer's
    /// length (4).
    const ADD_MESSAGE_AT: usize = 12;

    #[inline]
    fn be8(data: &[u8], at: usize) -> [u8; 8] {
        data[at..at + 8].try_into().expect("8 bytes")
    }

    #[inline]
    fn be4(data: &[u8], at: usize) -> [u8; 4] {
        data[at..at + 4].try_into().expect("4 bytes")
    }

    /// Whether `a` and `b` (of equal lengths) hold the same bytes: words of 8 (or 4) bytes
    /// compared, the last one overlapping the one before, no early exit. For the names of a
    /// few bytes that queues have, cheaper than `memcmp` (a call) and than a byte loop (a
    /// fifth of the instructions a restore spent per delta on the queue's 5-byte name).
    #[inline]
    pub(super) fn same_bytes(a: &[u8], b: &[u8]) -> bool {
        debug_assert_eq!(a.len(), b.len());
        let n = a.len().min(b.len());
        let w8 = |s: &[u8], at: usize| u64::from_le_bytes(be8(s, at));
        let w4 = |s: &[u8], at: usize| u32::from_le_bytes(be4(s, at));
        if n >= 8 {
            let mut differ = w8(a, n - 8) ^ w8(b, n - 8);
            let mut at = 0;
            while at + 8 < n {
                differ |= w8(a, at) ^ w8(b, at);
                at += 8;
            }
            differ == 0
        } else if n >= 4 {
            (w4(a, 0) ^ w4(b, 0)) | (w4(a, n - 4) ^ w4(b, n - 4)) == 0
        } else {
            a[..n].iter().zip(&b[..n]).fold(0, |d, (x, y)| d | (x ^ y)) == 0
        }
    }

    /// The kind code of `data` when it is a DeleteQueue, AddRecord or RemoveRecord of queue
    /// `name` that [`decode`](super::decode) accepts, `name` being a name it accepted before
    /// (so its bytes need no check again); `None` when that is not known here (`decode`
    /// decides). The bulk decoder's path for the runs of deltas of one queue that make up most
    /// logs: a length compare and the lengths instead of the whole decode. The property test
    /// below holds the two together.
    #[inline(always)]
    pub fn code_in_queue(data: &[u8], name: &[u8]) -> Option<u8> {
        let body = body_after(name.len());
        if data.len() < body || data[1] as usize != name.len() {
            return None;
        }
        if !same_bytes(&data[2..body], name) {
            return None;
        }
        let rest = data.len() - body;
        match data[0] {
            super::DELETE_QUEUE if rest == 0 => Some(1),
            super::REMOVE_RECORD if rest == 8 => Some(3),
            super::ADD_RECORD if rest >= 12 => {
                let len = i32::from_be_bytes(be4(data, body + 8));
                (len >= 0 && len as usize == rest - 12).then_some(2)
            }
            _ => None,
        }
    }

    /// The queue name (every kind).
    #[inline]
    pub fn name(data: &[u8]) -> &[u8] {
        &data[2..body(data)]
    }

    /// [`name`], or `None` when `data` is too short for it: for bytes nobody decoded (a
    /// replay step's scan looks at a record's shape before the applying thread decodes it).
    #[inline]
    pub fn name_checked(data: &[u8]) -> Option<&[u8]> {
        data.get(2..body_checked(data)?)
    }

    /// AddRecord: the key (priority).
    #[inline]
    pub fn add_key(data: &[u8]) -> i64 {
        i64::from_be_bytes(be8(data, body(data)))
    }

    /// AddRecord: the message (the Buffer's length is the rest of the delta).
    #[inline]
    pub fn add_message(data: &[u8]) -> &[u8] {
        &data[add_message_at(usize::from(data[1]))..]
    }

    /// Where the message of an AddRecord of a queue whose name has `name_len` bytes starts in
    /// its data: for a caller that knows the queue (a replay step of the queue the record
    /// before named) and need not read the record's bytes to find the message.
    #[inline]
    pub fn add_message_at(name_len: usize) -> usize {
        body_after(name_len) + ADD_MESSAGE_AT
    }

    /// RemoveRecord: the record id.
    #[inline]
    pub fn remove_id(data: &[u8]) -> u64 {
        u64::from_be_bytes(be8(data, body(data)))
    }

    /// CreateQueue: implementation, max queue size, max message size.
    #[inline]
    pub fn create_settings(data: &[u8]) -> [i32; 3] {
        let at = body(data);
        [0, 4, 8].map(|k| i32::from_be_bytes(be4(data, at + k)))
    }

    /// CreateQueue: the key range, if any.
    #[inline]
    pub fn create_range(data: &[u8]) -> Option<(i64, i64)> {
        let at = body(data) + 12;
        (data[at] == 1).then(|| {
            (
                i64::from_be_bytes(be8(data, at + 1)),
                i64::from_be_bytes(be8(data, at + 9)),
            )
        })
    }
}

impl<'a> DeltaRef<'a> {
    /// The queue the delta applies to.
    pub fn name(&self) -> &'a [u8] {
        match *self {
            DeltaRef::CreateQueue { name, .. }
            | DeltaRef::DeleteQueue { name }
            | DeltaRef::AddRecord { name, .. }
            | DeltaRef::RemoveRecord { name, .. }
            | DeltaRef::QueueRules { name, .. }
            | DeltaRef::AddLater { name, .. }
            | DeltaRef::Delivered { name, .. }
            | DeltaRef::Failed { name, .. }
            | DeltaRef::Purge { name, .. } => name,
        }
    }

    /// Whether the delta is one of the task-queue kinds (spec 12), which only the spec
    /// dialect holds.
    pub fn is_task_queue(&self) -> bool {
        !matches!(
            self,
            DeltaRef::CreateQueue { .. }
                | DeltaRef::DeleteQueue { .. }
                | DeltaRef::AddRecord { .. }
                | DeltaRef::RemoveRecord { .. }
        )
    }

    /// The delta's kind as its name in the spec ("AddLater").
    pub fn kind_name(&self) -> &'static str {
        match self {
            DeltaRef::CreateQueue { .. } => "CreateQueue",
            DeltaRef::DeleteQueue { .. } => "DeleteQueue",
            DeltaRef::AddRecord { .. } => "AddRecord",
            DeltaRef::RemoveRecord { .. } => "RemoveRecord",
            DeltaRef::QueueRules { .. } => "QueueRules",
            DeltaRef::AddLater { .. } => "AddLater",
            DeltaRef::Delivered { .. } => "Delivered",
            DeltaRef::Failed { .. } => "Failed",
            DeltaRef::Purge { .. } => "Purge",
        }
    }

    /// Bytes [`encode`](Self::encode) appends.
    pub fn encoded_len(&self) -> usize {
        let name = 2 + self.name().len();
        name + match self {
            DeltaRef::CreateQueue { key_range, .. } => 12 + 1 + key_range.map_or(0, |_| 16),
            DeltaRef::DeleteQueue { .. } => 0,
            DeltaRef::AddRecord { message, .. } => 8 + 4 + message.len(),
            DeltaRef::RemoveRecord { .. } => 8,
            DeltaRef::QueueRules { change, .. } => change.encoded_len(),
            DeltaRef::AddLater { message, .. } => 8 + 8 + 4 + message.len(),
            DeltaRef::Delivered { .. } => 8,
            DeltaRef::Failed { .. } => 16,
            DeltaRef::Purge { kept, .. } => 4 + 8 * kept.len(),
        }
    }

    /// Appends the delta's bytes to `out`, fields in spec order, big-endian. The name must be
    /// valid and the message shorter than 2^31 bytes (see [`Delta::validate`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        match *self {
            DeltaRef::CreateQueue {
                name,
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
            } => {
                out.push(CREATE_QUEUE);
                put_name(out, name);
                out.extend_from_slice(&implementation.to_be_bytes());
                out.extend_from_slice(&max_queue_size.to_be_bytes());
                out.extend_from_slice(&max_message_size.to_be_bytes());
                put_key_range(out, key_range);
            }
            DeltaRef::DeleteQueue { name } => {
                out.push(DELETE_QUEUE);
                put_name(out, name);
            }
            DeltaRef::AddRecord { name, key, message } => {
                out.push(ADD_RECORD);
                put_name(out, name);
                out.extend_from_slice(&key.to_be_bytes());
                put_buffer(out, message);
            }
            DeltaRef::RemoveRecord { name, id } => {
                out.push(REMOVE_RECORD);
                put_name(out, name);
                out.extend_from_slice(&id.to_be_bytes());
            }
            DeltaRef::QueueRules { name, ref change } => {
                out.push(QUEUE_RULES);
                put_name(out, name);
                change.encode(out);
            }
            DeltaRef::AddLater {
                name,
                key,
                not_before,
                message,
            } => {
                out.push(ADD_LATER);
                put_name(out, name);
                out.extend_from_slice(&key.to_be_bytes());
                out.extend_from_slice(&not_before.to_be_bytes());
                put_buffer(out, message);
            }
            DeltaRef::Delivered { name, id } => {
                out.push(DELIVERED);
                put_name(out, name);
                out.extend_from_slice(&id.to_be_bytes());
            }
            DeltaRef::Failed { name, id, due } => {
                out.push(FAILED);
                put_name(out, name);
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&due.to_be_bytes());
            }
            DeltaRef::Purge { name, kept } => {
                out.push(PURGE);
                put_name(out, name);
                out.extend_from_slice(&(kept.len() as i32).to_be_bytes());
                kept.iter()
                    .for_each(|id| out.extend_from_slice(&id.to_be_bytes()));
            }
        }
    }

    /// The delta's bytes in a new buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }

    /// An owned copy.
    pub fn to_delta(&self) -> Delta {
        match *self {
            DeltaRef::CreateQueue {
                name,
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
            } => Delta::CreateQueue {
                name: name.to_vec(),
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
            },
            DeltaRef::DeleteQueue { name } => Delta::DeleteQueue {
                name: name.to_vec(),
            },
            DeltaRef::AddRecord { name, key, message } => Delta::AddRecord {
                name: name.to_vec(),
                key,
                message: message.to_vec(),
            },
            DeltaRef::RemoveRecord { name, id } => Delta::RemoveRecord {
                name: name.to_vec(),
                id,
            },
            DeltaRef::QueueRules { name, ref change } => Delta::QueueRules {
                name: name.to_vec(),
                change: change.to_owned_change(),
            },
            DeltaRef::AddLater {
                name,
                key,
                not_before,
                message,
            } => Delta::AddLater {
                name: name.to_vec(),
                key,
                not_before,
                message: message.to_vec(),
            },
            DeltaRef::Delivered { name, id } => Delta::Delivered {
                name: name.to_vec(),
                id,
            },
            DeltaRef::Failed { name, id, due } => Delta::Failed {
                name: name.to_vec(),
                id,
                due,
            },
            DeltaRef::Purge { name, kept } => Delta::Purge {
                name: name.to_vec(),
                kept: kept.to_vec(),
            },
        }
    }
}

impl From<DeltaRef<'_>> for Delta {
    fn from(d: DeltaRef<'_>) -> Self {
        d.to_delta()
    }
}

impl Delta {
    /// A borrowed view, for encoding or comparing with decoded deltas.
    #[allow(clippy::should_implement_trait)]
    pub fn as_ref(&self) -> DeltaRef<'_> {
        match self {
            Delta::CreateQueue {
                name,
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
            } => DeltaRef::CreateQueue {
                name,
                implementation: *implementation,
                max_queue_size: *max_queue_size,
                max_message_size: *max_message_size,
                key_range: *key_range,
            },
            Delta::DeleteQueue { name } => DeltaRef::DeleteQueue { name },
            Delta::AddRecord { name, key, message } => DeltaRef::AddRecord {
                name,
                key: *key,
                message,
            },
            Delta::RemoveRecord { name, id } => DeltaRef::RemoveRecord { name, id: *id },
            Delta::QueueRules { name, change } => DeltaRef::QueueRules {
                name,
                change: change.as_borrowed(),
            },
            Delta::AddLater {
                name,
                key,
                not_before,
                message,
            } => DeltaRef::AddLater {
                name,
                key: *key,
                not_before: *not_before,
                message,
            },
            Delta::Delivered { name, id } => DeltaRef::Delivered { name, id: *id },
            Delta::Failed { name, id, due } => DeltaRef::Failed {
                name,
                id: *id,
                due: *due,
            },
            Delta::Purge { name, kept } => DeltaRef::Purge {
                name,
                kept: Ids::List(kept),
            },
        }
    }

    /// Checks what encoding needs: a valid queue name and a message that fits a Buffer.
    /// Queue semantics (implementation code, limits, range order) are the state machine's.
    pub fn validate(&self) -> Result<(), String> {
        let d = self.as_ref();
        validate_queue_name(d.name())?;
        match d {
            DeltaRef::AddRecord { message, .. } | DeltaRef::AddLater { message, .. }
                if message.len() > i32::MAX as usize =>
            {
                return Err(format!(
                    "message is {} bytes long (at most 2147483647)",
                    message.len()
                ));
            }
            DeltaRef::QueueRules { change, .. } => {
                if let Some(Some((to, _))) = change.dead_letter {
                    validate_queue_name(to).map_err(|r| format!("dead letter: {r}"))?;
                }
            }
            DeltaRef::Purge { kept, .. } if kept.len() > i32::MAX as usize => {
                return Err(format!("{} kept ids (at most 2147483647)", kept.len()));
            }
            _ => {}
        }
        Ok(())
    }

    /// The delta's bytes.
    pub fn encode(&self) -> Vec<u8> {
        self.as_ref().to_bytes()
    }

    /// Decodes an owned delta.
    pub fn decode(data: &[u8]) -> Result<Delta, DeltaError> {
        decode(data).map(|d| d.to_delta())
    }
}

/// How a queue name is shown in messages; defined with the errors that show it.
pub use crate::error::display_name;

#[cfg(test)]
mod tests {
    use super::*;

    /// `fields::same_bytes` against `==`: every length up to 40 (the word, half-word and byte
    /// paths, overlapping tails), equal slices and slices differing in any one bit.
    #[test]
    fn same_bytes_agrees_with_slice_equality() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            assert!(fields::same_bytes(&a, &a.clone()), "{n}");
            for at in 0..n {
                for bit in 0..8 {
                    let mut b = a.clone();
                    b[at] ^= 1 << bit;
                    assert!(!fields::same_bytes(&a, &b), "{n} {at} {bit}");
                }
            }
        }
    }

    fn err(data: &[u8]) -> DeltaError {
        decode(data).unwrap_err()
    }

    #[test]
    fn errors_name_the_field_and_offset() {
        assert_eq!(
            err(b"Z"),
            DeltaError {
                offset: 0,
                reason: "unknown delta marker 0x5A".into()
            }
        );
        assert_eq!(
            err(b"D\x03ab c"),
            DeltaError {
                offset: 4,
                reason: "queue name byte 0x20 at offset 4 is not in '!'..'~'".into()
            }
        );
        let mut add = vec![b'A', 0];
        add.extend_from_slice(&1i64.to_be_bytes());
        add.extend_from_slice(&i32::MAX.to_be_bytes());
        add.extend_from_slice(b"hello");
        assert_eq!(
            err(&add),
            DeltaError {
                offset: 10,
                reason: "message length 2147483647 runs past the end (5 bytes left)".into()
            }
        );
        let mut rm = vec![b'R', 0];
        rm.extend_from_slice(&7u64.to_be_bytes());
        rm.extend_from_slice(&[1, 2, 3]);
        assert_eq!(
            err(&rm),
            DeltaError {
                offset: 10,
                reason: "3 trailing bytes after RemoveRecord".into()
            }
        );
        assert_eq!(err(b"").offset, 0);
        assert_eq!(err(b"D\x05ab").offset, 1);
    }

    fn any_delta() -> impl proptest::strategy::Strategy<Value = Delta> {
        use proptest::prelude::*;
        let name = proptest::collection::vec(0x21u8..=0x7E, 0..20);
        prop_oneof![
            (
                name.clone(),
                any::<i32>(),
                any::<i32>(),
                any::<i32>(),
                any::<Option<(i64, i64)>>()
            )
                .prop_map(|(name, i, q, m, r)| Delta::CreateQueue {
                    name,
                    implementation: i,
                    max_queue_size: q,
                    max_message_size: m,
                    key_range: r,
                }),
            name.clone().prop_map(|name| Delta::DeleteQueue { name }),
            (
                name.clone(),
                any::<i64>(),
                proptest::collection::vec(any::<u8>(), 0..40)
            )
                .prop_map(|(name, key, message)| Delta::AddRecord {
                    name,
                    key,
                    message
                }),
            (name, any::<u64>()).prop_map(|(name, id)| Delta::RemoveRecord { name, id }),
        ]
    }

    /// The task-queue deltas (spec 12), every change form of every rule.
    fn any_task_delta() -> impl proptest::strategy::Strategy<Value = Delta> {
        use proptest::prelude::*;
        let name = || proptest::collection::vec(0x21u8..=0x7E, 0..20);
        let change = || any::<Option<Option<i64>>>();
        let rules = (
            proptest::option::of(proptest::option::of((name(), any::<i32>()))),
            change(),
            change(),
            change(),
            change(),
        )
            .prop_map(|(dead_letter, d, b, m, l)| RulesChange {
                dead_letter,
                retry_delay_ms: d,
                retry_backoff: b,
                retry_max_delay_ms: m,
                lease_ms: l,
            });
        prop_oneof![
            (name(), rules).prop_map(|(name, change)| Delta::QueueRules { name, change }),
            (
                name(),
                any::<i64>(),
                any::<i64>(),
                proptest::collection::vec(any::<u8>(), 0..40)
            )
                .prop_map(|(name, key, not_before, message)| Delta::AddLater {
                    name,
                    key,
                    not_before,
                    message
                }),
            (name(), any::<u64>()).prop_map(|(name, id)| Delta::Delivered { name, id }),
            (name(), any::<u64>(), any::<i64>()).prop_map(|(name, id, due)| Delta::Failed {
                name,
                id,
                due
            }),
            (name(), proptest::collection::vec(any::<u64>(), 0..10))
                .prop_map(|(name, kept)| Delta::Purge { name, kept }),
        ]
    }

    proptest::proptest! {
        /// Every delta, old kinds and task-queue kinds, decodes to itself, with its exact
        /// length; a cut anywhere, or a byte added at the end, is refused (a delta consumes
        /// its data exactly).
        #[test]
        fn every_delta_round_trips_and_consumes_its_bytes_exactly(
            d in proptest::prop_oneof![any_delta(), any_task_delta()],
            cut in proptest::prelude::any::<usize>(),
        ) {
            let bytes = d.encode();
            proptest::prop_assert_eq!(bytes.len(), d.as_ref().encoded_len());
            proptest::prop_assert_eq!(Delta::decode(&bytes).unwrap(), d.clone());
            proptest::prop_assert_eq!(decode(&bytes).unwrap(), d.as_ref());
            let cut = cut % bytes.len();
            proptest::prop_assert!(decode(&bytes[..cut]).is_err());
            let mut longer = bytes.clone();
            longer.push(0);
            proptest::prop_assert!(decode(&longer).is_err());
        }
    }

    proptest::proptest! {
        /// The field accessors read what `decode` decodes.
        #[test]
        fn fields_agree_with_decode(d in any_delta()) {
            let bytes = d.encode();
            let r = decode(&bytes).unwrap();
            proptest::prop_assert_eq!(fields::name(&bytes), r.name());
            match r {
                DeltaRef::CreateQueue { implementation, max_queue_size, max_message_size, key_range, .. } => {
                    proptest::prop_assert_eq!(fields::kind_code(&r), 0);
                    proptest::prop_assert_eq!(
                        fields::create_settings(&bytes),
                        [implementation, max_queue_size, max_message_size]
                    );
                    proptest::prop_assert_eq!(fields::create_range(&bytes), key_range);
                }
                DeltaRef::DeleteQueue { .. } => proptest::prop_assert_eq!(fields::kind_code(&r), 1),
                DeltaRef::AddRecord { key, message, .. } => {
                    proptest::prop_assert_eq!(fields::kind_code(&r), 2);
                    proptest::prop_assert_eq!(fields::add_key(&bytes), key);
                    proptest::prop_assert_eq!(fields::add_message(&bytes), message);
                }
                DeltaRef::RemoveRecord { id, .. } => {
                    proptest::prop_assert_eq!(fields::kind_code(&r), 3);
                    proptest::prop_assert_eq!(fields::remove_id(&bytes), id);
                }
                other => proptest::prop_assert!(fields::kind_code(&other) > 3),
            }
        }
    }

    proptest::proptest! {
        /// `fields::code_in_queue` accepts only what `decode` accepts, with the same kind and
        /// queue, and every DeleteQueue, AddRecord and RemoveRecord of the queue it is given:
        /// bytes of valid deltas changed at one place, cut or lengthened.
        #[test]
        fn code_in_queue_agrees_with_decode(
            d in any_delta(),
            other in proptest::collection::vec(0x21u8..=0x7E, 0..6),
            at in proptest::prelude::any::<usize>(),
            byte in proptest::prelude::any::<u8>(),
            change in 0u8..4,
        ) {
            let clean = d.encode();
            let name = d.as_ref().name().to_vec();
            if !matches!(d, Delta::CreateQueue { .. }) {
                let r = decode(&clean).unwrap();
                proptest::prop_assert_eq!(
                    fields::code_in_queue(&clean, &name),
                    Some(fields::kind_code(&r))
                );
            }
            let mut bytes = clean.clone();
            let at = at % (bytes.len() + 1);
            match change {
                0 if at < bytes.len() => bytes[at] = byte,
                1 => bytes.truncate(at),
                2 => bytes.insert(at, byte),
                _ => {}
            }
            for queue in [&name, &other] {
                if let Some(code) = fields::code_in_queue(&bytes, queue) {
                    let r = decode(&bytes);
                    proptest::prop_assert!(r.is_ok(), "{:?} accepted, decode: {:?}", bytes, r);
                    let r = r.unwrap();
                    proptest::prop_assert_eq!(fields::kind_code(&r), code);
                    proptest::prop_assert_eq!(r.name(), &queue[..]);
                }
            }
        }
    }

    #[test]
    fn encoded_len_is_exact() {
        for d in [
            Delta::CreateQueue {
                name: b"q".to_vec(),
                implementation: 2,
                max_queue_size: 1,
                max_message_size: -1,
                key_range: Some((1, 2)),
            },
            Delta::AddRecord {
                name: vec![],
                key: 1,
                message: b"xyz".to_vec(),
            },
        ] {
            let r = d.as_ref();
            assert_eq!(r.to_bytes().len(), r.encoded_len());
        }
    }
}
