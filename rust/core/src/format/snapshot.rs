//! The snapshot file `data/tflux.snapshot` (spec sections 4 and 4.1). Pure bytes: reading and
//! writing the file is `crate::base::files`.
//!
//! ```text
//! narrow: Marker B6 38 0F C9 | Int32 last index | Int32 last term | Buffer state | UInt32 CRC(state bytes)
//! wide:   Marker B6 38 0F CA | Int64 last index | Int64 last term | Buffer state
//!         | UInt32 CRC(16 index/term bytes, then the state bytes)
//! state       = Array<QueueData>
//! QueueData   = QueueName | Int32 implementation | UInt64 last id | Int32 max queue size
//!               | Int32 max message size | Nullable<Pair<Int64,Int64>> key range | Array<QueueRecord>
//! QueueRecord = UInt64 id | Int64 priority | Buffer data
//! ```
//! The narrow layout is written whenever index and term fit Int32 (byte-identical to the seed);
//! the wide one only when they do not. Readers accept both. Nothing may follow the checksum.
//!
//! The taskflux dialect (spec section 11) has one layout, TaskFlux's:
//! ```text
//! taskflux: Marker B6 38 0F C9 | Int64 last index | Int64 last term | Buffer state
//!           | UInt32 CRC-32/MPEG-2(state bytes)
//! ```
//!
//! Every rule a restore enforces (spec 4 and 7) lives in [`Snapshot::check`]: [`decode`] reports
//! a violation as corruption at the offending field's offset, [`encode`] refuses it, and
//! `QueueState::from_snapshot` refuses it too, so whatever one accepts the others accept.
//! Records come back from [`decode`] sorted by ascending id (the order they are re-inserted in).

use std::fmt;
use std::path::Path;

use super::cursor::{put_buffer, put_key_range, put_name, validate_queue_name, Cursor, Decoded};
use super::dialect::Dialect;
use super::queue::QueueConfig;
use crate::codec::{crc32_mpeg2, crc32_of};
use crate::error::{Error, Result};

/// Marker of the narrow layout (Int32 index and term, spec 4).
pub const MARKER: [u8; 4] = [0xB6, 0x38, 0x0F, 0xC9];
/// Marker of the wide layout (Int64 index and term, spec 4.1).
pub const WIDE_MARKER: [u8; 4] = [0xB6, 0x38, 0x0F, 0xCA];
/// Marker of the task layout (the wide layout plus the queues' task-queue state, spec 12).
pub const TASK_MARKER: [u8; 4] = [0xB6, 0x38, 0x0F, 0xCB];
const LAST_INDEX_AT: usize = 4;
const CRC_LEN: usize = 4;
/// The longest file the format allows: the wide header, an Int32-long state, the checksum.
/// Readers never read more than this.
pub const MAX_FILE_LEN: u64 = Layout::Wide.state_at() as u64 + i32::MAX as u64 + CRC_LEN as u64;
/// Smallest QueueData: empty name, no range, no records.
const MIN_QUEUE_LEN: usize = 1 + 4 + 8 + 4 + 4 + 1 + 4;
/// Smallest QueueRecord: empty data.
const MIN_RECORD_LEN: usize = 8 + 8 + 4;

/// The header layouts (spec 4 and 4.1, and TaskFlux's, section 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Int32 index and term: the seed's layout.
    Narrow,
    /// Int64 index and term, checksummed with the state.
    Wide,
    /// TaskFlux's: the narrow marker, Int64 index and term, CRC-32/MPEG-2 of the state.
    Taskflux,
    /// The wide layout with a second Buffer after the state: the queues' rules, delayed
    /// records and delivery counts (spec 12, [`encode_with_tasks`]). Written only when some
    /// queue has any of them.
    Tasks,
}

impl Layout {
    /// The layout a spec writer uses: narrow whenever both values fit Int32, wide otherwise.
    pub fn for_header(last_index: i64, last_term: i64) -> Layout {
        let fits = |v: i64| i32::try_from(v).is_ok();
        if fits(last_index) && fits(last_term) {
            Layout::Narrow
        } else {
            Layout::Wide
        }
    }

    /// The layout a writer of `dialect` uses for this header.
    pub fn for_dialect(dialect: Dialect, last_index: i64, last_term: i64) -> Layout {
        match dialect {
            Dialect::Spec => Layout::for_header(last_index, last_term),
            Dialect::Taskflux => Layout::Taskflux,
        }
    }

    /// The layout of a file of `dialect` that starts with `marker`, if any.
    fn of_marker(dialect: Dialect, marker: &[u8]) -> Option<Layout> {
        match dialect {
            Dialect::Spec if marker == MARKER => Some(Layout::Narrow),
            Dialect::Spec if marker == WIDE_MARKER => Some(Layout::Wide),
            Dialect::Spec if marker == TASK_MARKER => Some(Layout::Tasks),
            Dialect::Taskflux if marker == MARKER => Some(Layout::Taskflux),
            _ => None,
        }
    }

    const fn width(self) -> usize {
        match self {
            Layout::Narrow => 4,
            Layout::Wide | Layout::Taskflux | Layout::Tasks => 8,
        }
    }

    const fn marker(self) -> [u8; 4] {
        match self {
            Layout::Narrow | Layout::Taskflux => MARKER,
            Layout::Wide => WIDE_MARKER,
            Layout::Tasks => TASK_MARKER,
        }
    }

    const fn term_at(self) -> usize {
        LAST_INDEX_AT + self.width()
    }

    const fn state_len_at(self) -> usize {
        LAST_INDEX_AT + 2 * self.width()
    }

    /// Offset of the state bytes (the queue count is their first field).
    pub const fn state_at(self) -> usize {
        self.state_len_at() + 4
    }
}

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

/// Which field breaks a rule (so [`decode`] can name its offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    LastIndex,
    LastTerm,
    /// The queue count (too many queues, or no default queue among them).
    Queues,
    QueueName(usize),
    /// The queue's settings (implementation, size limits, key range).
    QueueConfig(usize),
    RecordCount(usize),
    RecordId(usize, usize),
    RecordKey(usize, usize),
    RecordData(usize, usize),
}

/// A rule of spec sections 4 and 7 that a snapshot breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: Field,
    pub reason: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

fn violation<T>(field: Field, reason: String) -> Result<T, Violation> {
    Err(Violation { field, reason })
}

fn shown(name: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(name))
}

impl QueueData {
    /// The queue's settings, checked (spec 7: implementation code, an array needs a range,
    /// limits -1 or 0..2^31-1, range min <= max).
    pub fn config(&self) -> Result<QueueConfig, String> {
        QueueConfig::from_raw(
            self.implementation,
            self.max_queue_size,
            self.max_message_size,
            self.key_range,
        )
    }

    /// Every rule one queue obeys (`q` is its index, for [`Field`]): its name, its settings,
    /// each record's id (at most `last_id`, no duplicates), key (inside an array queue's range)
    /// and data length, the record count.
    pub fn check(&self, q: usize) -> Result<(), Violation> {
        validate_queue_name(&self.name).or_else(|r| violation(Field::QueueName(q), r))?;
        let name = shown(&self.name);
        let config = self
            .config()
            .or_else(|r| violation(Field::QueueConfig(q), format!("queue {name}: {r}")))?;
        if i32::try_from(self.records.len()).is_err() {
            return violation(
                Field::RecordCount(q),
                format!("too many records in queue {name}"),
            );
        }
        for (i, (id, key, data)) in self.records.iter().enumerate() {
            if *id > self.last_id {
                return violation(
                    Field::RecordId(q, i),
                    format!(
                        "record id {id} in queue {name} is above its last id {}",
                        self.last_id
                    ),
                );
            }
            config.check_stored_key(*key).or_else(|r| {
                violation(
                    Field::RecordKey(q, i),
                    format!("queue {name} record {id}: {r}"),
                )
            })?;
            if i32::try_from(data.len()).is_err() {
                return violation(
                    Field::RecordData(q, i),
                    format!(
                        "record {id} in queue {name} is {} bytes long (at most 2147483647)",
                        data.len()
                    ),
                );
            }
        }
        if let Some(i) = first_repeat(&self.records) {
            let id = self.records[i].0;
            return violation(
                Field::RecordId(q, i),
                format!("duplicate record id {id} in queue {name}"),
            );
        }
        Ok(())
    }

    /// [`QueueData::check`] as an `InvalidArgument` error.
    pub fn validate(&self) -> Result<()> {
        self.check(0).map_err(|v| Error::InvalidArgument(v.reason))
    }

    /// Puts the records in ascending id order (the order [`decode`] returns them in).
    pub fn sort_records(&mut self) {
        if !self.records.is_sorted_by_key(|r| r.0) {
            self.records.sort_by_key(|r| r.0);
        }
    }
}

/// The index of the first record whose id an earlier record already has.
fn first_repeat(records: &[(u64, i64, Vec<u8>)]) -> Option<usize> {
    if records.windows(2).all(|w| w[0].0 < w[1].0) {
        return None;
    }
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_unstable_by_key(|&i| (records[i].0, i));
    order
        .windows(2)
        .filter(|w| records[w[0]].0 == records[w[1]].0)
        .map(|w| w[1])
        .min()
}

impl Snapshot {
    /// Every rule a restore enforces (spec 4, 4.1, 7, 7.1): index and term >= 0, the index at
    /// most the largest LSN an entry can have (`MAX_ENTRY_LSN`), at most
    /// Int32::MAX queues, unique queue names, the default queue present, and each queue's
    /// [`QueueData::check`]. The one place these rules live.
    pub fn check(&self) -> Result<(), Violation> {
        for (value, field, what) in [
            (self.last_index, Field::LastIndex, "last index"),
            (self.last_term, Field::LastTerm, "last term"),
        ] {
            if value < 0 {
                return violation(field, format!("negative {what} {value}"));
            }
        }
        if self.last_index > super::segment::MAX_ENTRY_LSN {
            // The log restarts after a snapshot ahead of it, at last index + 1: past the
            // largest LSN there is no such start (it would wrap to a negative LSN).
            return violation(
                Field::LastIndex,
                format!(
                    "last index {} is past the largest LSN an entry can have ({})",
                    self.last_index,
                    super::segment::MAX_ENTRY_LSN
                ),
            );
        }
        if i32::try_from(self.queues.len()).is_err() {
            return violation(Field::Queues, "too many queues for one snapshot".into());
        }
        let mut names = std::collections::HashSet::with_capacity(self.queues.len());
        for (i, q) in self.queues.iter().enumerate() {
            q.check(i)?;
            if !names.insert(q.name.as_slice()) {
                return violation(
                    Field::QueueName(i),
                    format!("duplicate queue {}", shown(&q.name)),
                );
            }
        }
        if !names.contains(&b""[..]) {
            return violation(
                Field::Queues,
                "no default queue (empty name) in the snapshot".into(),
            );
        }
        Ok(())
    }

    /// [`Snapshot::check`] as an `InvalidArgument` error.
    pub fn validate(&self) -> Result<()> {
        self.check().map_err(|v| Error::InvalidArgument(v.reason))
    }

    /// The layout [`encode`] writes this snapshot in.
    pub fn layout(&self) -> Layout {
        Layout::for_header(self.last_index, self.last_term)
    }
}

/// The file's bytes, narrow or wide by [`Layout::for_header`]. Queues are written in the given
/// order, records in ascending id order. Refuses (with `InvalidArgument`) whatever
/// [`Snapshot::check`] refuses, and a state longer than Int32::MAX bytes.
pub fn encode(s: &Snapshot) -> Result<Vec<u8>> {
    encode_in(s, Dialect::Spec)
}

/// The file's bytes in `dialect` ([`encode`] for the spec; TaskFlux's one layout for taskflux).
pub fn encode_in(s: &Snapshot, dialect: Dialect) -> Result<Vec<u8>> {
    s.validate()?;
    let layout = Layout::for_dialect(dialect, s.last_index, s.last_term);
    let state_at = layout.state_at();
    let mut out = Vec::with_capacity(state_at + CRC_LEN + state_len_hint(s));
    out.extend_from_slice(&layout.marker());
    match layout {
        Layout::Narrow => {
            out.extend_from_slice(&(s.last_index as i32).to_be_bytes());
            out.extend_from_slice(&(s.last_term as i32).to_be_bytes());
        }
        Layout::Wide | Layout::Taskflux | Layout::Tasks => {
            out.extend_from_slice(&s.last_index.to_be_bytes());
            out.extend_from_slice(&s.last_term.to_be_bytes());
        }
    }
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
    let state_len = out.len() - state_at;
    let state_len = i32::try_from(state_len).map_err(|_| {
        Error::InvalidArgument(format!(
            "snapshot state is {state_len} bytes (at most 2147483647)"
        ))
    })?;
    out[layout.state_len_at()..state_at].copy_from_slice(&state_len.to_be_bytes());
    let crc = checksum(
        layout,
        &out[LAST_INDEX_AT..layout.state_len_at()],
        &out[state_at..],
    );
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// What the checksum covers: the state bytes, preceded in the wide layout by index and term.
fn checksum(layout: Layout, header: &[u8], state: &[u8]) -> u32 {
    match layout {
        Layout::Narrow => crc32_of(&[state]),
        Layout::Wide | Layout::Tasks => crc32_of(&[header, state]),
        Layout::Taskflux => crc32_mpeg2(state),
    }
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

/// Decodes and checks a whole snapshot file (either layout); errors name `path` and the
/// offending offset.
pub fn decode(bytes: &[u8], path: &Path) -> Result<Snapshot> {
    decode_in(bytes, path, Dialect::Spec)
}

/// Decodes and checks a whole snapshot file of `dialect`; errors name `path` and the
/// offending offset.
pub fn decode_in(bytes: &[u8], path: &Path, dialect: Dialect) -> Result<Snapshot> {
    decode_full(bytes, path, dialect).map(|(s, _)| s)
}

/// [`decode_in`], with the queues' task-queue state of a task layout (empty for the others).
pub fn decode_full(
    bytes: &[u8],
    path: &Path,
    dialect: Dialect,
) -> Result<(Snapshot, Vec<QueueTasks>)> {
    let at =
        |e: super::cursor::DecodeError| Error::corruption(path, Some(e.offset as u64), e.reason);
    let mut c = Cursor::new(bytes);
    let marker = c.take(4, "snapshot marker").map_err(at)?;
    let Some(layout) = Layout::of_marker(dialect, marker) else {
        let expected = match dialect {
            Dialect::Spec => {
                "B6 38 0F C9, or B6 38 0F CA for the wide layout, or B6 38 0F CB with tasks"
            }
            Dialect::Taskflux => "B6 38 0F C9 in the taskflux dialect",
        };
        return Err(Error::corruption(
            path,
            Some(0),
            format!(
                "bad snapshot marker {} (expected {expected})",
                hex_words(marker)
            ),
        ));
    };
    let (last_index, last_term) = match layout {
        Layout::Narrow => (
            c.i32("last index").map_err(at)?.into(),
            c.i32("last term").map_err(at)?.into(),
        ),
        Layout::Wide | Layout::Taskflux | Layout::Tasks => (
            c.i64("last index").map_err(at)?,
            c.i64("last term").map_err(at)?,
        ),
    };
    let state = c.buffer("state length").map_err(at)?;
    let tasks_at = c.pos() + 4;
    let tasks = match layout {
        Layout::Tasks => c.buffer("tasks length").map_err(at)?,
        _ => &[],
    };
    let crc_at = c.pos();
    let stored = c.u32("checksum").map_err(at)?;
    if c.left() != 0 {
        return Err(Error::corruption(
            path,
            Some(c.pos() as u64),
            format!("{} trailing bytes after the checksum", c.left()),
        ));
    }
    let computed = match layout {
        Layout::Tasks => crc32_of(&[&bytes[LAST_INDEX_AT..layout.state_len_at()], state, tasks]),
        _ => checksum(layout, &bytes[LAST_INDEX_AT..layout.state_len_at()], state),
    };
    if stored != computed {
        return Err(Error::corruption(
            path,
            Some(crc_at as u64),
            format!("checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
        ));
    }
    let state_at = layout.state_at();
    let (queues, spans) = decode_state(state, state_at).map_err(at)?;
    let mut s = Snapshot {
        last_index,
        last_term,
        queues,
    };
    if let Err(v) = s.check() {
        let offset = offset_of(v.field, layout, &spans, &s.queues);
        return Err(Error::corruption(path, Some(offset as u64), v.reason));
    }
    for q in &mut s.queues {
        q.sort_records();
    }
    let tasks = match layout {
        Layout::Tasks => {
            super::tasks::decode(tasks, tasks_at, |q, before| check_tasks(q, &s, before))
                .map_err(at)?
        }
        _ => Vec::new(),
    };
    Ok((s, tasks))
}

/// The file's bytes with the queues' task-queue state (spec 12): [`encode`] when `tasks` is
/// empty (so a base that uses none of it writes exactly what it wrote before), else the task
/// layout: the wide header with marker `B6 38 0F CB`, the state Buffer, the tasks Buffer, and
/// the CRC of index, term, state bytes and tasks bytes.
pub fn encode_with_tasks(s: &Snapshot, tasks: &[QueueTasks]) -> Result<Vec<u8>> {
    if tasks.is_empty() {
        return encode(s);
    }
    let wide = encode_wide(s)?;
    let mut out = Vec::with_capacity(wide.len() + 64);
    out.extend_from_slice(&TASK_MARKER);
    out.extend_from_slice(&wide[LAST_INDEX_AT..wide.len() - CRC_LEN]);
    let tasks_bytes = super::tasks::encode(tasks)?;
    let len = i32::try_from(tasks_bytes.len()).map_err(|_| {
        Error::InvalidArgument(format!(
            "snapshot task state is {} bytes (at most 2147483647)",
            tasks_bytes.len()
        ))
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&tasks_bytes);
    let (state_at, state_end) = (Layout::Tasks.state_at(), wide.len() - CRC_LEN);
    let crc = crc32_of(&[
        &out[LAST_INDEX_AT..Layout::Tasks.state_len_at()],
        &out[state_at..state_end],
        &tasks_bytes,
    ]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// `s` in the wide layout whatever its index and term (the base of the task layout).
fn encode_wide(s: &Snapshot) -> Result<Vec<u8>> {
    if s.layout() == Layout::Wide {
        return encode(s);
    }
    // Narrow values fit Int64 as they are: write them wide by hand.
    let narrow = encode(s)?;
    let mut out = Vec::with_capacity(narrow.len() + 8);
    out.extend_from_slice(&WIDE_MARKER);
    out.extend_from_slice(&s.last_index.to_be_bytes());
    out.extend_from_slice(&s.last_term.to_be_bytes());
    out.extend_from_slice(&narrow[Layout::Narrow.state_len_at()..narrow.len() - CRC_LEN]);
    let state_at = Layout::Wide.state_at();
    let crc = crc32_of(&[
        &out[LAST_INDEX_AT..Layout::Wide.state_len_at()],
        &out[state_at..],
    ]);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

pub use super::tasks::QueueTasks;

fn hex_words(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02X}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where one queue's fields start in the file.
struct Span {
    name: usize,
    config: usize,
    record_count: usize,
}

/// Decodes `Array<QueueData>` (the state bytes start at `state_at` in the file): the structure
/// only; the rules are [`Snapshot::check`]'s.
fn decode_state(state: &[u8], state_at: usize) -> Decoded<(Vec<QueueData>, Vec<Span>)> {
    let mut c = Cursor::at_base(state, state_at);
    let count = c.len("queue count", MIN_QUEUE_LEN)?;
    let mut queues = Vec::with_capacity(count);
    let mut spans = Vec::with_capacity(count);
    for _ in 0..count {
        let name_at = c.pos();
        let name = c.queue_name()?;
        let config_at = c.pos();
        let implementation = c.i32("implementation")?;
        let last_id = c.u64("last id")?;
        let max_queue_size = c.i32("max queue size")?;
        let max_message_size = c.i32("max message size")?;
        let key_range = c.key_range()?;
        let count_at = c.pos();
        let n = c.len("record count", MIN_RECORD_LEN)?;
        let mut records = Vec::with_capacity(n);
        for _ in 0..n {
            let id = c.u64("record id")?;
            let key = c.i64("record priority")?;
            let data = c.buffer("record data length")?;
            records.push((id, key, data.to_vec()));
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
        spans.push(Span {
            name: state_at + name_at,
            config: state_at + config_at,
            record_count: state_at + count_at,
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
    Ok((queues, spans))
}

/// The file offset of `field` (records are back to back after their count, in file order).
fn offset_of(field: Field, layout: Layout, spans: &[Span], queues: &[QueueData]) -> usize {
    let record_at = |q: usize, r: usize| {
        spans[q].record_count
            + 4
            + queues[q].records[..r]
                .iter()
                .map(|x| MIN_RECORD_LEN + x.2.len())
                .sum::<usize>()
    };
    match field {
        Field::LastIndex => LAST_INDEX_AT,
        Field::LastTerm => layout.term_at(),
        Field::Queues => layout.state_at(),
        Field::QueueName(q) => spans[q].name,
        Field::QueueConfig(q) => spans[q].config,
        Field::RecordCount(q) => spans[q].record_count,
        Field::RecordId(q, r) => record_at(q, r),
        Field::RecordKey(q, r) => record_at(q, r) + 8,
        Field::RecordData(q, r) => record_at(q, r) + 16,
    }
}

/// Whether queue `t`'s task entry fits the state `s` and the entries `before` it: one entry per
/// queue, of a queue the state holds, valid rules, ascending ids of its own records.
fn check_tasks(
    t: &super::tasks::QueueTasks,
    s: &Snapshot,
    before: &[super::tasks::QueueTasks],
) -> std::result::Result<(), String> {
    let shown = crate::error::display_name(&t.name);
    if before.iter().any(|b| b.name == t.name) {
        return Err(format!("queue {shown} has two task entries"));
    }
    let q = s
        .queues
        .iter()
        .find(|q| q.name == t.name)
        .ok_or_else(|| format!("task entry of queue {shown}, which the state does not hold"))?;
    t.rules
        .check(&t.name)
        .map_err(|r| format!("queue {shown}: {r}"))?;
    // Records are sorted by id after decode.
    let present = |id: u64| q.records.binary_search_by_key(&id, |r| r.0).is_ok();
    for (what, ids) in [
        ("delayed", t.delayed.iter().map(|d| d.0).collect::<Vec<_>>()),
        ("attempts", t.attempts.iter().map(|d| d.0).collect()),
    ] {
        if !ids.windows(2).all(|w| w[0] < w[1]) {
            return Err(format!(
                "queue {shown}: {what} ids are not strictly ascending"
            ));
        }
        if let Some(id) = ids.iter().find(|&&id| !present(id)) {
            return Err(format!(
                "queue {shown}: {what} id {id} is not one of its records"
            ));
        }
    }
    Ok(())
}
