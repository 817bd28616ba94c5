//! Log entries decoded into columns (Arrow's memory layout: values, int32 offsets for
//! variable-width columns, LSB-first validity bitmaps). The Spark source and Parquet export hand
//! these buffers to pyarrow without a per-record Python object.
//!
//! Columns: lsn, term, kind, queue, key, record_id, message, implementation, max_queue_size,
//! max_message_size, key_min, key_max (and the raw data when asked). Fields that a delta kind
//! does not carry are null.

use crate::error::{Error, Result};
use crate::format::delta::{self, DeltaRef};
use crate::log::Log;

/// A nullable fixed-width column.
#[derive(Debug, Default, Clone)]
pub struct Nullable<T> {
    pub values: Vec<T>,
    pub validity: Bitmap,
}

impl<T: Default + Copy> Nullable<T> {
    fn reserve(&mut self, n: usize) {
        self.values.reserve(n);
        self.validity.bytes.reserve(n / 8 + 1);
    }

    fn push(&mut self, v: Option<T>) {
        self.validity.push(v.is_some());
        self.values.push(v.unwrap_or_default());
    }
}

/// LSB-first validity bits (1 = present).
#[derive(Debug, Default, Clone)]
pub struct Bitmap {
    pub bytes: Vec<u8>,
    pub len: usize,
    pub nulls: usize,
}

impl Bitmap {
    fn push(&mut self, valid: bool) {
        if self.len.is_multiple_of(8) {
            self.bytes.push(0);
        }
        if valid {
            *self.bytes.last_mut().expect("pushed above") |= 1 << (self.len % 8);
        } else {
            self.nulls += 1;
        }
        self.len += 1;
    }
}

/// A variable-width column (utf8 or binary) with int32 offsets.
#[derive(Debug, Clone)]
pub struct Binary {
    pub offsets: Vec<i32>,
    pub data: Vec<u8>,
    pub validity: Bitmap,
}

impl Default for Binary {
    fn default() -> Self {
        Binary {
            offsets: vec![0],
            data: Vec::new(),
            validity: Bitmap::default(),
        }
    }
}

impl Binary {
    fn reserve(&mut self, n: usize, bytes: usize) {
        self.offsets.reserve(n);
        self.data.reserve(bytes);
        self.validity.bytes.reserve(n / 8 + 1);
    }

    fn push(&mut self, v: Option<&[u8]>) -> Result<()> {
        self.validity.push(v.is_some());
        if let Some(bytes) = v {
            self.data.extend_from_slice(bytes);
        }
        let end = i32::try_from(self.data.len())
            .map_err(|_| Error::InvalidArgument("column batch exceeds 2 GiB".into()))?;
        self.offsets.push(end);
        Ok(())
    }
}

pub const KIND_NAMES: [&str; 4] = [
    "create_queue",
    "delete_queue",
    "add_record",
    "remove_record",
];

/// Decoded entries in columns.
#[derive(Debug, Default, Clone)]
pub struct DeltaColumns {
    pub lsn: Vec<i64>,
    pub term: Vec<i32>,
    pub kind: Binary,
    pub queue: Binary,
    pub key: Nullable<i64>,
    /// Record ids are UInt64 on disk; Spark has no unsigned type, ids past 2^63 - 1 are refused.
    pub record_id: Nullable<i64>,
    pub message: Binary,
    pub implementation: Nullable<i32>,
    pub max_queue_size: Nullable<i32>,
    pub max_message_size: Nullable<i32>,
    pub key_min: Nullable<i64>,
    pub key_max: Nullable<i64>,
    /// The undecoded record data, when asked for.
    pub raw: Option<Binary>,
}

impl DeltaColumns {
    pub fn len(&self) -> usize {
        self.lsn.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lsn.is_empty()
    }

    /// Room for `n` entries carrying `bytes` of record data, so that the columns are written
    /// once instead of regrown and copied.
    fn reserve(&mut self, n: usize, bytes: usize) {
        self.lsn.reserve(n);
        self.term.reserve(n);
        self.kind.reserve(n, n * 12);
        self.queue.reserve(n, n * 8);
        for c in [
            &mut self.key,
            &mut self.record_id,
            &mut self.key_min,
            &mut self.key_max,
        ] {
            c.reserve(n);
        }
        self.message.reserve(n, bytes);
        for c in [
            &mut self.implementation,
            &mut self.max_queue_size,
            &mut self.max_message_size,
        ] {
            c.reserve(n);
        }
        if let Some(raw) = &mut self.raw {
            raw.reserve(n, bytes);
        }
    }

    fn push(&mut self, lsn: i64, term: i32, data: &[u8]) -> Result<()> {
        let d = delta::decode(data).map_err(|e| {
            Error::corruption(
                std::path::Path::new(&format!("<delta at LSN {lsn}>")),
                Some(e.offset as u64),
                format!("undecodable delta at LSN {lsn}: {}", e.reason),
            )
        })?;
        self.lsn.push(lsn);
        self.term.push(term);
        if let Some(raw) = &mut self.raw {
            raw.push(Some(data))?;
        }
        let (kind, name) = match &d {
            DeltaRef::CreateQueue { name, .. } => (0, *name),
            DeltaRef::DeleteQueue { name } => (1, *name),
            DeltaRef::AddRecord { name, .. } => (2, *name),
            DeltaRef::RemoveRecord { name, .. } => (3, *name),
        };
        self.kind.push(Some(KIND_NAMES[kind].as_bytes()))?;
        self.queue.push(Some(name))?;
        let (mut key, mut record_id, mut message) = (None, None, None);
        let (mut implementation, mut max_q, mut max_m, mut range) = (None, None, None, None);
        match d {
            DeltaRef::CreateQueue {
                implementation: i,
                max_queue_size,
                max_message_size,
                key_range,
                ..
            } => {
                implementation = Some(i);
                max_q = Some(max_queue_size);
                max_m = Some(max_message_size);
                range = key_range;
            }
            DeltaRef::DeleteQueue { .. } => {}
            DeltaRef::AddRecord {
                key: k, message: m, ..
            } => {
                key = Some(k);
                message = Some(m);
            }
            DeltaRef::RemoveRecord { id, .. } => {
                let id = i64::try_from(id).map_err(|_| {
                    Error::InvalidArgument(format!("record id {id} at LSN {lsn} exceeds Int64"))
                })?;
                record_id = Some(id);
            }
        }
        self.key.push(key);
        self.record_id.push(record_id);
        self.message.push(message)?;
        self.implementation.push(implementation);
        self.max_queue_size.push(max_q);
        self.max_message_size.push(max_m);
        self.key_min.push(range.map(|r| r.0));
        self.key_max.push(range.map(|r| r.1));
        Ok(())
    }
}

/// Decodes every record of one segment file (named by its first LSN) without opening the log
/// it belongs to: the recovery scanner classifies it ([`crate::recovery::scan_segment`]), so a
/// torn tail ends the records of the last segment (`Position::Last`) and anything else the
/// scanner finds fatal is a `CorruptionError`. Entries outside `from..=to` are skipped.
pub fn read_segment_deltas(
    path: &std::path::Path,
    position: crate::recovery::Position,
    from: Option<i64>,
    to: Option<i64>,
    raw: bool,
) -> Result<DeltaColumns> {
    use crate::format::record::{self, Frame};
    use crate::format::segment as seg_format;
    use crate::recovery::{scan_segment, ScanOptions};
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let first_lsn = seg_format::parse_file_name(name)
        .or_else(|| crate::format::compressed::parse_file_name(name))
        .ok_or_else(|| {
            Error::InvalidArgument(format!("{} is not named like a segment", path.display()))
        })?;
    // Readers look for the `.z` first (spec section 9): a segment listed as `.log` may have
    // been compressed since.
    let zpath = path.with_file_name(crate::format::compressed::file_name(first_lsn));
    let owned_path;
    let path = if zpath.is_file() {
        owned_path = zpath;
        owned_path.as_path()
    } else {
        path
    };
    let meta = std::fs::metadata(path).map_err(|e| Error::io("stat segment", path, e))?;
    if !meta.is_file() {
        // Never opened: a FIFO would block, a device would never end.
        return Err(Error::corruption(
            path,
            None,
            "named like a segment but is not a regular file: its records cannot be read",
        ));
    }
    // Deltas are never empty: a trailing empty record is a torn header (as the store opens).
    let options = ScanOptions {
        empty_entries: false,
        ..ScanOptions::default()
    };
    let (scan, finding) = scan_segment(path, position, 0, &options)?;
    if let Some(f) = finding.filter(|f| f.fatal) {
        return Err(f.to_error());
    }
    let mut cols = DeltaColumns {
        raw: raw.then(Binary::default),
        ..DeltaColumns::default()
    };
    let (from, to) = (from.unwrap_or(i64::MIN), to.unwrap_or(i64::MAX));
    cols.reserve(scan.index.len(), scan.bytes.len());
    // The records one after another (a sealed segment's index keeps only every few offsets).
    let mut at = seg_format::HEADER_LEN;
    for i in 0..scan.index.len() {
        let lsn = first_lsn.saturating_add(i as i64);
        // Checked by the scan just now: framing only.
        match record::parse_with::<false>(&scan.bytes, at) {
            Frame::Record { term, data, next } => {
                if lsn >= from && lsn <= to {
                    cols.push(lsn, term, data)?;
                }
                at = next;
            }
            _ => {
                return Err(Error::corruption(
                    path,
                    Some(at as u64),
                    "record changed while it was read",
                ))
            }
        }
    }
    Ok(cols)
}

/// Decodes entries `start..end` of `log` (clamped to the log) into columns, stopping after
/// `max_bytes` of record data (at least one entry). Undecodable data is a `CorruptionError`
/// naming the LSN.
pub fn read_deltas(
    log: &mut Log,
    start: i64,
    end: i64,
    max_bytes: u64,
    raw: bool,
) -> Result<DeltaColumns> {
    let mut cols = DeltaColumns {
        raw: raw.then(Binary::default),
        ..DeltaColumns::default()
    };
    // No early return for an empty range: the scan checks the start first (a start past the
    // end or compacted away is `OutOfRange`, as for `read_batch`).
    let (n, bytes) = log.estimate(start, end.min(log.last_index() + 1), max_bytes);
    cols.reserve(n, bytes);
    let mut used = 0u64;
    let mut failure = None;
    log.scan(start, end, |lsn, term, data| {
        if lsn != start && used + data.len() as u64 > max_bytes {
            return false;
        }
        used += data.len() as u64;
        match cols.push(lsn, term, data) {
            Ok(()) => true,
            Err(e) => {
                failure = Some(e);
                false
            }
        }
    })?;
    match failure {
        Some(e) => Err(e),
        None => Ok(cols),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::delta::Delta;
    use crate::{LogOptions, SyncPolicy};

    #[test]
    fn every_kind_lands_in_its_columns_with_nulls_elsewhere() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                sync: SyncPolicy::Never,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let deltas = [
            Delta::CreateQueue {
                name: b"q".to_vec(),
                implementation: 2,
                max_queue_size: 5,
                max_message_size: -1,
                key_range: Some((-3, 3)),
            },
            Delta::AddRecord {
                name: b"q".to_vec(),
                key: -2,
                message: b"hi".to_vec(),
            },
            Delta::RemoveRecord {
                name: b"q".to_vec(),
                id: 1,
            },
            Delta::DeleteQueue {
                name: b"q".to_vec(),
            },
        ];
        let bytes: Vec<Vec<u8>> = deltas.iter().map(|d| d.encode()).collect();
        log.append_many(1, &bytes).unwrap();
        let c = read_deltas(&mut log, 0, 10, u64::MAX, true).unwrap();
        assert_eq!(c.lsn, vec![0, 1, 2, 3]);
        assert_eq!(
            c.kind.data,
            b"create_queueadd_recordremove_recorddelete_queue"
        );
        assert_eq!(c.key.values, vec![0, -2, 0, 0]);
        assert_eq!(c.key.validity.bytes, vec![0b0010]);
        assert_eq!(c.record_id.validity.bytes, vec![0b0100]);
        assert_eq!(c.key_min.values[0], -3);
        assert_eq!(c.key_max.validity.nulls, 3);
        assert_eq!(c.message.offsets, vec![0, 0, 2, 2, 2]);
        assert_eq!(
            c.raw.unwrap().data.len(),
            bytes.iter().map(Vec::len).sum::<usize>()
        );
        // A budget of one byte still returns the first entry.
        assert_eq!(read_deltas(&mut log, 1, 10, 1, false).unwrap().lsn, vec![1]);
    }

    #[test]
    fn a_sealed_segment_decodes_alone_every_record_and_any_range() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                sync: SyncPolicy::Never,
                soft_limit: 512,
                hard_limit: 1024,
                ..LogOptions::default()
            },
        )
        .unwrap();
        let add = |k: i64| {
            Delta::AddRecord {
                name: b"q".to_vec(),
                key: k,
                message: vec![b'm'; k as usize % 7],
            }
            .encode()
        };
        for k in 0..40 {
            log.append_many(1, &[add(k)]).unwrap();
        }
        let sealed: Vec<_> = log.segments().into_iter().filter(|s| s.sealed).collect();
        // More records than a sealed segment's index remembers offsets for.
        let seg = sealed
            .iter()
            .find(|s| s.count > 9)
            .expect("a long sealed segment");
        let position = crate::recovery::Position::Sealed;
        let all = read_segment_deltas(&seg.path, position, None, None, false).unwrap();
        let lsns: Vec<i64> = (seg.start_lsn..seg.start_lsn + seg.count as i64).collect();
        assert_eq!(all.lsn, lsns);
        assert_eq!(all.key.values, lsns);
        let (from, to) = (seg.start_lsn + 3, seg.start_lsn + 8);
        let some = read_segment_deltas(&seg.path, position, Some(from), Some(to), false).unwrap();
        assert_eq!(some.lsn, (from..=to).collect::<Vec<_>>());
        assert_eq!(some.key.values, (from..=to).collect::<Vec<_>>());
    }

    #[test]
    fn undecodable_data_names_the_lsn() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(
            dir.path(),
            LogOptions {
                sync: SyncPolicy::Never,
                ..LogOptions::default()
            },
        )
        .unwrap();
        log.append_many(1, &[b"Z".to_vec()]).unwrap();
        let e = read_deltas(&mut log, 0, 1, u64::MAX, false).unwrap_err();
        assert!(e.to_string().contains("LSN 0"), "{e}");
    }
}

/// The records of a snapshot in columns: queue, implementation, record_id, key, message.
#[derive(Debug, Default, Clone)]
pub struct SnapshotColumns {
    pub last_index: i64,
    pub last_term: i64,
    pub queue: Binary,
    pub implementation: Vec<i32>,
    pub record_id: Vec<i64>,
    pub key: Vec<i64>,
    pub message: Binary,
    /// Every queue's settings and last id (queues with no records included), by name.
    pub queues: Vec<crate::format::snapshot::QueueData>,
}

impl SnapshotColumns {
    pub fn len(&self) -> usize {
        self.key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key.is_empty()
    }

    /// One row per record of every queue (queues by name, records by id).
    pub fn from_snapshot(s: &crate::format::snapshot::Snapshot) -> Result<SnapshotColumns> {
        let mut cols = SnapshotColumns {
            last_index: s.last_index,
            last_term: s.last_term,
            ..SnapshotColumns::default()
        };
        let mut queues: Vec<_> = s.queues.iter().collect();
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        for q in queues {
            cols.queues.push(crate::format::snapshot::QueueData {
                records: Vec::new(),
                ..q.clone()
            });
            let mut records: Vec<_> = q.records.iter().collect();
            records.sort_by_key(|r| r.0);
            for (id, key, data) in records {
                let id = i64::try_from(*id)
                    .map_err(|_| Error::InvalidArgument(format!("record id {id} exceeds Int64")))?;
                cols.queue.push(Some(&q.name))?;
                cols.implementation.push(q.implementation);
                cols.record_id.push(id);
                cols.key.push(*key);
                cols.message.push(Some(data))?;
            }
        }
        Ok(cols)
    }
}
