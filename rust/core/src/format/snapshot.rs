//! The snapshot file `data/tflux.snapshot` (spec section 4).
//!
//! ```text
//! Marker B6 38 0F C9 | Int32 last index | Int32 last term | Buffer state | UInt32 CRC(state bytes)
//! state       = Array<QueueData>
//! QueueData   = QueueName | Int32 implementation | UInt64 last id | Int32 max queue size
//!               | Int32 max message size | Nullable<Pair<Int64,Int64>> key range | Array<QueueRecord>
//! QueueRecord = UInt64 id | Int64 priority | Buffer data
//! ```
//! The CRC covers the state bytes only (not their length). Nothing may follow the checksum.
//! Validation on read (spec 7.1): duplicate queue names, duplicate record ids, a record id above
//! its queue's last id and a missing default queue are corruption. Records come back sorted by
//! ascending id (the order they are re-inserted in). Writing refuses what reading would refuse.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;

use super::cursor::{put_buffer, put_key_range, put_name, validate_queue_name, Cursor, Decoded};
use crate::codec::crc32;
use crate::error::{Error, Result};

pub const MARKER: [u8; 4] = [0xB6, 0x38, 0x0F, 0xC9];
const LAST_INDEX_AT: usize = 4;
const LAST_TERM_AT: usize = 8;
const STATE_LEN_AT: usize = 12;
/// Offset of the state bytes (the queue count is their first field).
pub const STATE_AT: usize = 16;
const CRC_LEN: usize = 4;
/// Smallest QueueData: empty name, no range, no records.
const MIN_QUEUE_LEN: usize = 1 + 4 + 8 + 4 + 4 + 1 + 4;
/// Smallest QueueRecord: empty data.
const MIN_RECORD_LEN: usize = 8 + 8 + 4;

/// One queue as stored in a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueueData {
    pub name: Vec<u8>,
    pub implementation: i32,
    pub last_id: u64,
    pub max_queue_size: i32,
    pub max_message_size: i32,
    pub key_range: Option<(i64, i64)>,
    /// `(id, key, data)`; any order on disk, ascending id after [`decode`].
    pub records: Vec<(u64, i64, Vec<u8>)>,
}

/// A whole snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub last_index: i64,
    pub last_term: i64,
    pub queues: Vec<QueueData>,
}

fn invalid(reason: String) -> Error {
    Error::InvalidArgument(reason)
}

fn to_int32(value: i64, field: &str) -> Result<i32> {
    i32::try_from(value)
        .ok()
        .filter(|v| *v >= 0)
        .ok_or_else(|| {
            invalid(format!(
                "snapshot {field} {value} is outside 0..=2147483647"
            ))
        })
}

fn shown(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

impl QueueData {
    /// Checks what [`decode`] would refuse in one queue: its name, duplicate record ids, an id
    /// above `last_id`, record data too long for a Buffer, too many records for an Array.
    pub fn validate(&self) -> Result<()> {
        validate_queue_name(&self.name).map_err(invalid)?;
        let name = shown(&self.name);
        if i32::try_from(self.records.len()).is_err() {
            return Err(invalid(format!("too many records in queue {name:?}")));
        }
        let mut ids = HashSet::with_capacity(self.records.len());
        for (id, _, data) in &self.records {
            if *id > self.last_id {
                return Err(invalid(format!(
                    "record id {id} in queue {name:?} is above its last id {}",
                    self.last_id
                )));
            }
            if !ids.insert(*id) {
                return Err(invalid(format!(
                    "duplicate record id {id} in queue {name:?}"
                )));
            }
            if i32::try_from(data.len()).is_err() {
                return Err(invalid(format!(
                    "record {id} in queue {name:?} is {} bytes long (at most 2147483647)",
                    data.len()
                )));
            }
        }
        Ok(())
    }

    /// Puts the records in ascending id order (the order [`decode`] returns them in).
    pub fn sort_records(&mut self) {
        if !self.records.is_sorted_by_key(|r| r.0) {
            self.records.sort_by_key(|r| r.0);
        }
    }
}

impl Snapshot {
    /// Checks everything [`decode`] would refuse, so that [`encode`] never writes a file that
    /// cannot be read back: an index or term outside 0..=Int32::MAX, invalid or duplicate queue
    /// names, a missing default queue, and each queue's [`QueueData::validate`].
    pub fn validate(&self) -> Result<()> {
        self.header().map(|_| ())
    }

    fn header(&self) -> Result<(i32, i32)> {
        let index = to_int32(self.last_index, "last index")?;
        let term = to_int32(self.last_term, "last term")?;
        if i32::try_from(self.queues.len()).is_err() {
            return Err(invalid("too many queues for one snapshot".into()));
        }
        let mut names = HashSet::with_capacity(self.queues.len());
        for q in &self.queues {
            q.validate()?;
            if !names.insert(q.name.as_slice()) {
                return Err(invalid(format!("duplicate queue {:?}", shown(&q.name))));
            }
        }
        if !names.contains(&b""[..]) {
            return Err(invalid(
                "a snapshot must hold the default queue (empty name)".into(),
            ));
        }
        Ok((index, term))
    }
}

/// The file's bytes. Queues are written in the given order, records in ascending id order.
/// Refuses (with `InvalidArgument`) an index or term outside Int32 (or negative), invalid or
/// duplicate queue names, duplicate ids, an id above its queue's last id, a missing default queue.
pub fn encode(s: &Snapshot) -> Result<Vec<u8>> {
    let (index, term) = s.header()?;
    let mut out = Vec::with_capacity(STATE_AT + CRC_LEN + state_len_hint(s));
    out.extend_from_slice(&MARKER);
    out.extend_from_slice(&index.to_be_bytes());
    out.extend_from_slice(&term.to_be_bytes());
    out.extend_from_slice(&[0; 4]); // state length, filled in below
    out.extend_from_slice(&(s.queues.len() as i32).to_be_bytes());
    for q in &s.queues {
        put_name(&mut out, &q.name);
        out.extend_from_slice(&q.implementation.to_be_bytes());
        out.extend_from_slice(&q.last_id.to_be_bytes());
        out.extend_from_slice(&q.max_queue_size.to_be_bytes());
        out.extend_from_slice(&q.max_message_size.to_be_bytes());
        put_key_range(&mut out, q.key_range);
        out.extend_from_slice(&(q.records.len() as i32).to_be_bytes());
        let mut records: Vec<&(u64, i64, Vec<u8>)> = q.records.iter().collect();
        if !records.is_sorted_by_key(|r| r.0) {
            records.sort_unstable_by_key(|r| r.0);
        }
        for (id, key, data) in records {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&key.to_be_bytes());
            put_buffer(&mut out, data);
        }
    }
    let state_len = out.len() - STATE_AT;
    let state_len = i32::try_from(state_len).map_err(|_| {
        invalid(format!(
            "snapshot state is {state_len} bytes (at most 2147483647)"
        ))
    })?;
    out[STATE_LEN_AT..STATE_AT].copy_from_slice(&state_len.to_be_bytes());
    let crc = crc32(&out[STATE_AT..]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

fn state_len_hint(s: &Snapshot) -> usize {
    4 + s
        .queues
        .iter()
        .map(|q| {
            MIN_QUEUE_LEN
                + q.name.len()
                + 16
                + q.records
                    .iter()
                    .map(|r| MIN_RECORD_LEN + r.2.len())
                    .sum::<usize>()
        })
        .sum::<usize>()
}

/// Decodes and validates a whole snapshot file; errors name `path` and the offending offset.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Snapshot> {
    let at =
        |e: super::cursor::DecodeError| Error::corruption(path, Some(e.offset as u64), e.reason);
    let mut c = Cursor::new(bytes);
    let marker = c.take(4, "snapshot marker").map_err(at)?;
    if marker != MARKER {
        return Err(Error::corruption(
            path,
            Some(0),
            format!(
                "bad snapshot marker {} (expected B6 38 0F C9)",
                hex_words(marker)
            ),
        ));
    }
    let last_index = c.i32("last index").map_err(at)?;
    let last_term = c.i32("last term").map_err(at)?;
    for (value, field, offset) in [
        (last_index, "last index", LAST_INDEX_AT),
        (last_term, "last term", LAST_TERM_AT),
    ] {
        if value < 0 {
            return Err(Error::corruption(
                path,
                Some(offset as u64),
                format!("negative {field} {value}"),
            ));
        }
    }
    let state = c.buffer("state length").map_err(at)?;
    let crc_at = c.pos();
    let stored = c.u32("checksum").map_err(at)?;
    if c.left() != 0 {
        return Err(Error::corruption(
            path,
            Some(c.pos() as u64),
            format!("{} trailing bytes after the checksum", c.left()),
        ));
    }
    let computed = crc32(state);
    if stored != computed {
        return Err(Error::corruption(
            path,
            Some(crc_at as u64),
            format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
        ));
    }
    let queues = decode_state(state).map_err(at)?;
    Ok(Snapshot {
        last_index: last_index.into(),
        last_term: last_term.into(),
        queues,
    })
}

fn hex_words(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02X}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Decodes `Array<QueueData>` (the state bytes start at [`STATE_AT`] in the file).
fn decode_state(state: &[u8]) -> Decoded<Vec<QueueData>> {
    let mut c = Cursor::at_base(state, STATE_AT);
    let count = c.len("queue count", MIN_QUEUE_LEN)?;
    let mut queues = Vec::with_capacity(count);
    let mut names: HashSet<&[u8]> = HashSet::with_capacity(count);
    for _ in 0..count {
        let name_at = c.pos();
        let name = c.queue_name()?;
        if !names.insert(name) {
            return c.fail(name_at, format!("duplicate queue {:?}", shown(name)));
        }
        let implementation = c.i32("implementation")?;
        let last_id = c.u64("last id")?;
        let max_queue_size = c.i32("max queue size")?;
        let max_message_size = c.i32("max message size")?;
        let key_range = c.key_range()?;
        let n = c.len("record count", MIN_RECORD_LEN)?;
        let mut records = Vec::with_capacity(n);
        let mut sorted = true;
        let mut offsets = Vec::new(); // id field offsets, kept only for out-of-order queues
        for _ in 0..n {
            let id_at = c.pos();
            let id = c.u64("record id")?;
            if id > last_id {
                return c.fail(
                    id_at,
                    format!(
                        "record id {id} in queue {:?} is above its last id {last_id}",
                        shown(name)
                    ),
                );
            }
            if let Some(&(prev, _, _)) = records.last() {
                if id == prev {
                    return c.fail(
                        id_at,
                        format!("duplicate record id {id} in queue {:?}", shown(name)),
                    );
                }
                if sorted && id < prev {
                    sorted = false;
                    offsets.reserve(n);
                    offsets.extend(record_offsets(id_at, &records));
                }
            }
            if !sorted {
                offsets.push(id_at);
            }
            let key = c.i64("record priority")?;
            let data = c.buffer("record data length")?;
            records.push((id, key, data.to_vec()));
        }
        if !sorted {
            let mut order: Vec<usize> = (0..records.len()).collect();
            order.sort_unstable_by_key(|&i| (records[i].0, offsets[i]));
            if let Some(w) = order
                .windows(2)
                .find(|w| records[w[0]].0 == records[w[1]].0)
            {
                let id = records[w[1]].0;
                return c.fail(
                    offsets[w[1]],
                    format!("duplicate record id {id} in queue {:?}", shown(name)),
                );
            }
            records.sort_unstable_by_key(|r| r.0);
        }
        queues.push(QueueData {
            name: name.to_vec(),
            implementation,
            last_id,
            max_queue_size,
            max_message_size,
            key_range,
            records,
        });
    }
    if c.left() != 0 {
        return c.fail(
            c.pos(),
            format!(
                "{} trailing bytes in the state after the last queue",
                c.left()
            ),
        );
    }
    if !names.contains(&b""[..]) {
        return c.fail(0, "no default queue (empty name) in the snapshot".into());
    }
    Ok(queues)
}

/// Offsets of the id fields of `records`, all read before the record at `next_at`. Records are
/// back to back, so they are recomputed from their sizes (walking back from `next_at`).
fn record_offsets(next_at: usize, records: &[(u64, i64, Vec<u8>)]) -> Vec<usize> {
    let mut offsets = vec![0; records.len()];
    let mut at = next_at;
    for (i, r) in records.iter().enumerate().rev() {
        at -= MIN_RECORD_LEN + r.2.len();
        offsets[i] = at;
    }
    offsets
}

/// Reads the snapshot at `path`: `None` when the file is absent or empty (nothing written yet).
pub fn read(path: &Path) -> Result<Option<Snapshot>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("read snapshot", path, e)),
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    decode(&bytes, path).map(Some)
}

/// Writes the snapshot atomically (temp file under `<parent>/temp/`, fsync, rename, fsync parent).
pub fn write(path: &Path, s: &Snapshot) -> Result<()> {
    let bytes = encode(s)?;
    crate::fsutil::atomic_write(&crate::storage::RealStorage, path, &bytes)
}
