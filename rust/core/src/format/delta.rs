//! Deltas: the data of each log record (spec section 6).
//!
//! ```text
//! CreateQueue  'C' | QueueName | Int32 implementation | Int32 max queue size
//!                  | Int32 max message size | Nullable<Pair<Int64,Int64>> key range
//! DeleteQueue  'D' | QueueName
//! AddRecord    'A' | QueueName | Int64 priority (key) | Buffer message
//! RemoveRecord 'R' | QueueName | UInt64 record id
//! QueueName    Byte length N (0..255) | N ASCII bytes in 0x21..0x7E   (empty = default queue)
//! ```
//! A delta must consume its bytes exactly. Decoding is structural: it checks every length, the
//! name bytes, the Bool and the marker, but not the queue semantics (implementation codes,
//! `min <= max`, size limits), which replay checks against the state (spec 7.1).

use super::cursor::{put_buffer, put_key_range, put_name, Cursor};
pub use super::cursor::{validate_queue_name, DecodeError};

/// Where (byte offset in the delta) and why a delta could not be decoded.
pub type DeltaError = DecodeError;

pub const CREATE_QUEUE: u8 = b'C';
pub const DELETE_QUEUE: u8 = b'D';
pub const ADD_RECORD: u8 = b'A';
pub const REMOVE_RECORD: u8 = b'R';
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
}

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
    /// 2 AddRecord, 3 RemoveRecord.
    pub fn kind_code(d: &DeltaRef<'_>) -> u8 {
        match d {
            DeltaRef::CreateQueue { .. } => 0,
            DeltaRef::DeleteQueue { .. } => 1,
            DeltaRef::AddRecord { .. } => 2,
            DeltaRef::RemoveRecord { .. } => 3,
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
            | DeltaRef::RemoveRecord { name, .. } => name,
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
        }
    }

    /// Checks what encoding needs: a valid queue name and a message that fits a Buffer.
    /// Queue semantics (implementation code, limits, range order) are the state machine's.
    pub fn validate(&self) -> Result<(), String> {
        let d = self.as_ref();
        validate_queue_name(d.name())?;
        if let DeltaRef::AddRecord { message, .. } = d {
            if message.len() > i32::MAX as usize {
                return Err(format!(
                    "message is {} bytes long (at most 2147483647)",
                    message.len()
                ));
            }
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

/// How a queue name is shown in messages (errors, replay failures): quoted, or "(default)".
pub fn display_name(name: &[u8]) -> String {
    if name.is_empty() {
        "(default)".to_string()
    } else {
        format!("{:?}", String::from_utf8_lossy(name))
    }
}

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
