//! The queue state machine (spec section 7): the collection of queues that the log's deltas
//! build. Replay applies deltas with [`QueueState::apply`]; a live store checks a client's
//! request first ([`QueueState::check_create`], [`QueueState::check_enqueue`]), logs the delta,
//! then applies it the same way, so live state and replayed state cannot diverge.
//!
//! Removal by id (RemoveRecord) is lazy: a record that is not at the front of its queue is only
//! marked dead (`tombstones`) and skipped when it reaches the front. `alive` holds the ids of
//! every present record (ready or in flight) in a compressed bitmap, which validates removals
//! for about a bit per record.

mod batch;
mod heap4;
mod keyed;
pub mod payload;
mod queues;
mod tasks;

use rustc_hash::FxHashMap as HashMap;

use roaring::RoaringTreemap;

use crate::error::{Error, Result};
use crate::format::delta::{self, display_name, fields, DeltaRef};
pub use crate::format::queue::{QueueConfig, IMPL_ARRAY, IMPL_HEAP};
pub use crate::format::rules::QueueRules;
use crate::format::snapshot::{QueueData, Snapshot};
pub use crate::format::tasks::QueueTasks;
pub use crate::state::payload::Payload;
use crate::state::payload::{Lender, Lent};

pub use batch::Batch;
use batch::Pending;
pub use heap4::Heap4;
pub use keyed::KeyedFifos;
use queues::Queues;
use tasks::{Delayed, Flight};

/// One queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: u64,
    pub key: i64,
    /// Its own bytes, or (after a restore) bytes borrowed from a sealed segment.
    pub data: Payload,
}

/// Records waiting to be dequeued, in the queue's implementation.
#[derive(Debug)]
enum Ready {
    Heap(Heap4),
    Array(KeyedFifos),
}

impl Ready {
    fn push(&mut self, r: Record) {
        match self {
            Ready::Heap(h) => h.push(r),
            Ready::Array(a) => a.push(r),
        }
    }
    fn pop(&mut self) -> Option<Record> {
        match self {
            Ready::Heap(h) => h.pop(),
            Ready::Array(a) => a.pop(),
        }
    }
    fn peek(&self) -> Option<&Record> {
        match self {
            Ready::Heap(h) => h.peek(),
            Ready::Array(a) => a.peek(),
        }
    }
    fn shrink_to_fit(&mut self) {
        match self {
            Ready::Heap(h) => h.shrink_to_fit(),
            Ready::Array(a) => a.shrink_to_fit(),
        }
    }
    fn iter(&self) -> Box<dyn Iterator<Item = &Record> + '_> {
        match self {
            Ready::Heap(h) => Box::new(h.iter()),
            Ready::Array(a) => Box::new(a.iter()),
        }
    }
    /// Adds many records at once (ascending ids): one O(n) heap build instead of n pushes.
    fn extend(&mut self, records: Vec<Record>) {
        match self {
            Ready::Heap(h) => h.extend(records),
            Ready::Array(a) => records.into_iter().for_each(|r| a.push(r)),
        }
    }
}

/// A number unique across processes: identifies one life of one queue, and one delivery of a
/// record (its receipt, `crate::store::deliveries`): a record handed out by a queue that was since
/// deleted and re-created, by a store that was since reopened, by another owner, or in an
/// earlier delivery, cannot settle a delivery of the new one. A counter copied by `fork()`
/// plus the process's random key (`fork::process_key`, drawn anew in each child): two workers
/// forked from one parent never hand out the same numbers (issue 43: they did, and a record
/// from a dead owner acked the next owner's delivery).
pub(crate) fn next_incarnation() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
        .wrapping_add(crate::fork::process_key())
}

/// One queue: its settings, its ready records and its in-flight (dequeued, un-acked) records.
#[derive(Debug)]
pub struct Queue {
    name: Vec<u8>,
    incarnation: u64,
    config: QueueConfig,
    last_id: u64,
    ready: Ready,
    alive: RoaringTreemap,
    tombstones: RoaringTreemap,
    /// In-flight records with their deliveries so far (this one included).
    in_flight: HashMap<u64, Flight>,
    /// The queue's task-queue rules (spec 12; empty for a queue that has none).
    rules: QueueRules,
    /// Records that are present but not ready before their due time (spec 12), by due time.
    delayed: Delayed,
    /// Ready-heap records a replayed Failed made delayed without taking them out of the heap
    /// (id -> due): see `tasks.rs`. Made by a replay only, but a restore's stay until due.
    deferred: HashMap<u64, i64>,
    /// No deferred record is due before this (a lower bound, `i64::MAX` for none), so that a
    /// promotion, run before every delivery and read, scans them only when one may be due.
    deferred_due: i64,
    /// How many promotions scanned `deferred` (tests check that one below `deferred_due` does
    /// not).
    deferred_scans: u64,
    /// Deliveries so far of present records that are not in flight (absent: none).
    attempts: HashMap<u64, u32>,
    /// Records added by a [`Batch`] and not yet in `ready`/`alive` (ascending ids, all above
    /// every id in `ready`); empty outside a batch.
    pending: Pending,
}

/// A summary of one queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    pub name: String,
    pub config: QueueConfig,
    pub last_id: u64,
    /// Ready records (what the max queue size policy compares).
    pub count: u64,
    pub in_flight: u64,
}

impl Queue {
    /// `name` is one the codecs accept (`QueueState::apply_in_last_queue` relies on it).
    fn new(name: &[u8], config: QueueConfig) -> Queue {
        debug_assert!(delta::validate_queue_name(name).is_ok());
        let ready = match config.implementation {
            IMPL_ARRAY => Ready::Array(KeyedFifos::default()),
            _ => Ready::Heap(Heap4::default()),
        };
        Queue {
            name: name.to_vec(),
            incarnation: next_incarnation(),
            config,
            last_id: 0,
            ready,
            alive: RoaringTreemap::new(),
            tombstones: RoaringTreemap::new(),
            in_flight: HashMap::default(),
            rules: QueueRules::default(),
            delayed: Delayed::default(),
            deferred: HashMap::default(),
            deferred_due: i64::MAX,
            deferred_scans: 0,
            attempts: HashMap::default(),
            pending: Pending::default(),
        }
    }

    pub fn name(&self) -> &str {
        std::str::from_utf8(&self.name).unwrap_or_default()
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub fn config(&self) -> QueueConfig {
        self.config
    }

    pub fn last_id(&self) -> u64 {
        self.last_id
    }

    /// Ready records.
    pub fn count(&self) -> u64 {
        self.alive.len() - self.in_flight.len() as u64 - self.delayed_count()
    }

    pub fn in_flight_count(&self) -> u64 {
        self.in_flight.len() as u64
    }

    pub fn info(&self) -> QueueInfo {
        QueueInfo {
            name: self.name().to_string(),
            config: self.config,
            last_id: self.last_id,
            count: self.count(),
            in_flight: self.in_flight_count(),
        }
    }

    fn insert(&mut self, record: Record) {
        self.alive.insert(record.id);
        self.ready.push(record);
    }

    /// Adds a record with the next id; `None` when the queue's ids are exhausted (ids are never
    /// reused, so after id 2^64 - 1 the queue takes no more records).
    fn add(&mut self, key: i64, data: &[u8]) -> Option<u64> {
        self.last_id = self.last_id.checked_add(1)?;
        let id = self.last_id;
        self.insert(Record {
            id,
            key,
            data: data.into(),
        });
        Some(id)
    }

    /// A batch's AddRecord of this queue, when the rules of [`QueueState::apply_delta_in`]
    /// accept it (the short path of [`QueueState::apply_in_last_queue`]); `None`, with
    /// nothing changed, for the general way to refuse it.
    #[inline(always)]
    fn add_short(
        &mut self,
        source: Option<&Lender>,
        room: usize,
        key: i64,
        message: &[u8],
    ) -> Option<Applied> {
        self.config.check_stored_key(key).ok()?;
        let message = Lent::lent_or_copied(source, message);
        self.add_pending(key, message, room).map(Applied::Added)
    }

    /// A batch's RemoveRecord of this queue, as [`Queue::add_short`].
    #[inline(always)]
    fn remove_short(&mut self, id: u64) -> Option<Applied> {
        self.remove_pending(id).ok().map(|()| Applied::Removed)
    }

    fn not_present(&self, id: u64) -> String {
        format!(
            "record id {id} is not in queue {}",
            display_name(&self.name)
        )
    }

    fn remove(&mut self, id: u64) -> std::result::Result<(), String> {
        if !self.alive.remove(id) {
            return Err(self.not_present(id));
        }
        if !self.attempts.is_empty() {
            self.attempts.remove(&id);
        }
        if self.in_flight.remove(&id).is_some() {
            return Ok(());
        }
        if self.delayed.remove(id).is_some() {
            return Ok(());
        }
        if !self.deferred.is_empty() {
            self.deferred.remove(&id);
        }
        if self.ready.peek().is_some_and(|r| r.id == id) {
            self.ready.pop();
        } else {
            self.tombstones.insert(id);
        }
        Ok(())
    }

    /// Takes the next ready record (skipping removed ones, and moving deferred ones to the
    /// delayed records).
    fn pop_ready(&mut self) -> Option<Record> {
        loop {
            let r = self.ready.pop()?;
            if self.tombstones.remove(r.id) {
                continue;
            }
            if !self.deferred.is_empty() {
                if let Some(due) = self.deferred.remove(&r.id) {
                    self.delayed.push(due, r);
                    continue;
                }
            }
            return Some(r);
        }
    }

    /// The next ready record without taking it (removed records at the front are dropped).
    pub fn peek(&mut self) -> Option<&Record> {
        while let Some(id) = self.ready.peek().map(|r| r.id) {
            if self.tombstones.remove(id) {
                self.ready.pop();
            } else if let Some(due) = (!self.deferred.is_empty())
                .then(|| self.deferred.remove(&id))
                .flatten()
            {
                let r = self.ready.pop().expect("peeked");
                self.delayed.push(due, r);
            } else {
                break;
            }
        }
        self.ready.peek()
    }

    /// The next ready record, moved to in flight, its delivery counted (in memory).
    pub fn dequeue(&mut self) -> Option<&Record> {
        self.deliver_next(true).map(|(r, _)| r)
    }

    /// The next ready record, moved to in flight, with its deliveries so far; `count` adds
    /// this delivery to them (a queue whose deliveries are logged counts them when its
    /// Delivered delta is applied instead).
    pub fn deliver_next(&mut self, count: bool) -> Option<(&Record, u32)> {
        let record = self.pop_ready()?;
        let id = record.id;
        let before = if self.attempts.is_empty() {
            0
        } else {
            self.attempts.remove(&id).unwrap_or(0)
        };
        let attempts = before.saturating_add(u32::from(count));
        let f = self
            .in_flight
            .entry(id)
            .insert_entry(Flight { record, attempts })
            .into_mut();
        Some((&f.record, f.attempts))
    }

    pub fn is_in_flight(&self, id: u64) -> bool {
        self.in_flight.contains_key(&id)
    }

    /// The in-flight record `id`, if it is one.
    pub fn in_flight_record(&self, id: u64) -> Option<&Record> {
        self.in_flight.get(&id).map(|f| &f.record)
    }

    /// Puts an in-flight record back where it was (same id, so before later equal keys).
    pub fn nack(&mut self, id: u64) -> bool {
        match self.in_flight.remove(&id) {
            Some(f) => {
                if f.attempts > 0 {
                    self.attempts.insert(id, f.attempts);
                }
                self.ready.push(f.record);
                true
            }
            None => false,
        }
    }

    /// Every present record (ready, delayed and in flight), in no particular order.
    pub fn records(&self) -> impl Iterator<Item = &Record> {
        self.ready
            .iter()
            .filter(|r| !self.tombstones.contains(r.id))
            .chain(self.delayed.records())
            .chain(self.in_flight.values().map(|f| &f.record))
    }

    /// Ready records in dequeue order (for inspection; costs a sort).
    pub fn ready_in_order(&self) -> Vec<&Record> {
        let mut out: Vec<&Record> = self
            .ready
            .iter()
            .filter(|r| !self.tombstones.contains(r.id) && !self.deferred.contains_key(&r.id))
            .collect();
        out.sort_by_key(|r| (r.key, r.id));
        out
    }
}

/// A queue name as a string (names are ASCII; anything else was refused earlier).
pub fn raw_name(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

/// What applying a delta did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Created,
    Deleted,
    Added(u64),
    Removed,
    /// A queue's rules changed (QueueRules).
    RulesSet,
    /// A delivery was counted (Delivered).
    Delivered,
    /// A record is delayed after a failed delivery (Failed).
    Failed,
    /// This many records were purged (Purge).
    Purged(u64),
}

/// All queues. Always holds the default queue (empty name).
#[derive(Debug)]
pub struct QueueState {
    queues: Queues,
}

impl Default for QueueState {
    fn default() -> Self {
        let mut queues = Queues::default();
        queues.insert(Queue::new(b"", QueueConfig::default()));
        QueueState { queues }
    }
}

fn replay_error(lsn: Option<i64>, reason: impl Into<String>, source: Option<Error>) -> Error {
    Error::Replay {
        lsn,
        reason: reason.into(),
        source: source.map(Box::new),
    }
}

impl QueueState {
    pub fn new() -> QueueState {
        QueueState::default()
    }

    /// Rebuilds the state a snapshot describes (records re-inserted in id order).
    pub fn from_snapshot(snapshot: &Snapshot) -> Result<QueueState> {
        QueueState::from_snapshot_with_tasks(snapshot, &[])
    }

    /// [`QueueState::from_snapshot`] with the queues' task-queue state (spec 12: rules,
    /// delayed records, delivery counts) of a task-layout snapshot.
    pub fn from_snapshot_with_tasks(
        snapshot: &Snapshot,
        tasks: &[QueueTasks],
    ) -> Result<QueueState> {
        // The snapshot's rules (spec 4 and 7) live in `Snapshot::check`, shared with the codec.
        snapshot.validate()?;
        let mut queues = Queues::default();
        for q in &snapshot.queues {
            let config = q.config().map_err(Error::InvalidArgument)?;
            let mut queue = Queue::new(&q.name, config);
            queue.last_id = q.last_id;
            let task = tasks.iter().find(|t| t.name == q.name);
            let due_of: HashMap<u64, i64> = task
                .map(|t| t.delayed.iter().copied().collect())
                .unwrap_or_default();
            if let Some(t) = task {
                t.rules.check(&q.name).map_err(Error::InvalidArgument)?;
                queue.set_rules(t.rules.clone());
                queue.attempts = t.attempts.iter().copied().collect();
            }
            let mut records: Vec<Record> = q
                .records
                .iter()
                .filter_map(|(id, key, data)| {
                    let r = Record {
                        id: *id,
                        key: *key,
                        data: data.as_slice().into(),
                    };
                    match due_of.get(id) {
                        Some(&due) => {
                            queue.alive.insert(*id);
                            queue.delayed.push(due, r);
                            None
                        }
                        None => Some(r),
                    }
                })
                .collect();
            if !records.is_sorted_by_key(|r| r.id) {
                records.sort_by_key(|r| r.id);
            }
            // Ids are unique (checked above) and the queue is empty: one O(n) build.
            queue.extend_ready(records);
            queues.insert(queue);
        }
        Ok(QueueState { queues })
    }

    /// The state as snapshot data (in-flight records included, sorted by name and id).
    pub fn to_snapshot(&self, last_index: i64, last_term: i64) -> Snapshot {
        let mut sorted: Vec<&Queue> = self.queues.values().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let queues = sorted
            .into_iter()
            .map(|q| {
                let name = &q.name;
                let mut records: Vec<(u64, i64, Vec<u8>)> = q
                    .records()
                    .map(|r| (r.id, r.key, r.data.to_vec()))
                    .collect();
                records.sort_by_key(|r| r.0);
                QueueData {
                    name: name.clone(),
                    implementation: q.config.implementation,
                    last_id: q.last_id,
                    max_queue_size: QueueConfig::raw_size(q.config.max_queue_size),
                    max_message_size: QueueConfig::raw_size(q.config.max_message_size),
                    key_range: q.config.key_range,
                    records,
                }
            })
            .collect();
        Snapshot {
            last_index,
            last_term,
            queues,
        }
    }

    /// The queues' task-queue state for a snapshot (spec 12): one entry per queue that has
    /// rules, delayed records or counted deliveries, by name; empty when none has any, so the
    /// snapshot keeps its old layout.
    pub fn to_tasks(&self) -> Vec<QueueTasks> {
        let mut out: Vec<QueueTasks> = self
            .queues
            .values()
            .map(|q| QueueTasks {
                name: q.name.clone(),
                rules: q.rules.clone(),
                delayed: q.delayed_dues(),
                // Counts are logged (and so carried) only under a dead-letter rule; a queue
                // without one counts in memory since the owner started.
                attempts: if q.rules.dead_letter.is_some() {
                    q.attempts_list()
                } else {
                    Vec::new()
                },
            })
            .filter(|t| !t.is_empty())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    pub fn queue(&self, name: &[u8]) -> Result<&Queue> {
        self.queues.get(name).ok_or_else(|| no_such_queue(name))
    }

    pub fn queue_mut(&mut self, name: &[u8]) -> Result<&mut Queue> {
        self.queues.get_mut(name).ok_or_else(|| no_such_queue(name))
    }

    /// Queues sorted by name (the default queue first).
    pub fn infos(&self) -> Vec<QueueInfo> {
        let mut out: Vec<QueueInfo> = self.queues.values().map(Queue::info).collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    pub fn len(&self) -> usize {
        self.queues.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    /// Releases the growth slack of every queue (after a restore, the state is usually at its
    /// largest and growth slack is up to half of the record array).
    pub fn shrink_to_fit(&mut self) {
        for q in self.queues.values_mut() {
            q.ready.shrink_to_fit();
        }
    }

    /// Total present records (ready + in flight) in every queue.
    pub fn total_records(&self) -> u64 {
        self.queues.values().map(|q| q.alive.len()).sum()
    }

    // ----- client checks (policies) -----

    /// Checks a client's CreateQueue before it is logged.
    pub fn check_create(&self, name: &[u8], config: &QueueConfig) -> Result<()> {
        delta::validate_queue_name(name).map_err(Error::InvalidArgument)?;
        config.validate().map_err(Error::InvalidArgument)?;
        if self.queues.contains_key(name) {
            return Err(Error::QueueExists {
                name: raw_name(name),
            });
        }
        Ok(())
    }

    /// Checks a client's DeleteQueue before it is logged.
    pub fn check_delete(&self, name: &[u8]) -> Result<()> {
        if name.is_empty() {
            return Err(Error::InvalidArgument(
                "the default queue cannot be deleted".into(),
            ));
        }
        self.queue(name).map(|_| ())
    }

    /// Checks a client's enqueue against the queue's policies (not checked on replay).
    pub fn check_enqueue(&self, name: &[u8], key: i64, message_len: usize) -> Result<()> {
        let q = self.queue(name)?;
        let violation = |policy: &'static str, reason: String| Error::Policy {
            queue: raw_name(name),
            policy,
            reason,
        };
        if q.last_id == u64::MAX {
            return Err(violation(
                "ids",
                "the queue has used every record id (ids are never reused)".into(),
            ));
        }
        if let Some(max) = q.config.max_queue_size {
            if q.count() >= max as u64 {
                return Err(violation(
                    "max_queue_size",
                    format!("queue is full ({} of {max} records)", q.count()),
                ));
            }
        }
        if let Some((min, max)) = q.config.key_range {
            if key < min || key > max {
                return Err(violation(
                    "key_range",
                    format!("key {key} is outside the range [{min}, {max}]"),
                ));
            }
        }
        if let Some(max) = q.config.max_message_size {
            if message_len > max as usize {
                return Err(violation(
                    "max_message_size",
                    format!("message of {message_len} bytes exceeds the limit of {max} bytes"),
                ));
            }
        }
        Ok(())
    }

    // ----- replay -----

    /// Decodes and applies one delta. `lsn` names the entry in errors.
    pub fn apply(&mut self, lsn: Option<i64>, data: &[u8]) -> Result<Applied> {
        self.apply_in(Mode::Online, lsn, data)
    }

    /// Applies a decoded delta by the replay rules (spec 7).
    pub fn apply_delta(&mut self, lsn: Option<i64>, delta: &DeltaRef<'_>) -> Result<Applied> {
        self.apply_delta_in(Mode::Online, lsn, delta)
    }

    /// Decodes and applies one delta, the general way ([`Batch`] first tries
    /// [`QueueState::apply_in_last_queue`]).
    fn apply_in(&mut self, mode: Mode<'_>, lsn: Option<i64>, data: &[u8]) -> Result<Applied> {
        let delta = delta::decode(data).map_err(|e| {
            let cause = Error::Corruption {
                path: format!(
                    "<delta at LSN {}>",
                    lsn.map_or("?".into(), |l| l.to_string())
                )
                .into(),
                offset: Some(e.offset as u64),
                reason: e.reason.clone(),
            };
            replay_error(lsn, format!("undecodable delta: {}", e.reason), Some(cause))
        })?;
        self.apply_delta_in(mode, lsn, &delta)
    }

    /// A batch's AddRecord or RemoveRecord of the queue the last delta named, when `decode`
    /// accepts it (`fields::code_in_queue`: a compare and a length check instead of the whole
    /// decode and a name look-up) and the rules of [`QueueState::apply_delta_in`] accept it
    /// too; `None`, with nothing changed, for any other delta, which then goes the general way
    /// (same state, same error). Most deltas of a replay are these: inlined into the batch's
    /// apply, so they skip the general function's frame.
    #[inline(always)]
    fn apply_in_last_queue(
        &mut self,
        source: Option<&Lender>,
        room: usize,
        data: &[u8],
    ) -> Option<Applied> {
        let q = self.queues.last_mut()?;
        match fields::code_in_queue(data, &q.name)? {
            2 => q.add_short(
                source,
                room,
                fields::add_key(data),
                fields::add_message(data),
            ),
            3 => q.remove_short(fields::remove_id(data)),
            _ => None,
        }
    }

    /// [`QueueState::apply_in_last_queue`] of a replay step ([`crate::format::steps`]): an AddRecord
    /// or RemoveRecord of the queue the delta applied just before named (which is then the
    /// last-found queue), already coded by the scan; `bytes` are the segment's bytes the step
    /// points into. `None`, with nothing changed, for anything the short path does not take
    /// (the caller applies the record's bytes the general way).
    #[inline(always)]
    fn apply_step_in_last_queue(
        &mut self,
        source: Option<&Lender>,
        room: usize,
        step: &crate::format::steps::Step,
        bytes: &[u8],
    ) -> Option<Applied> {
        let q = self.queues.last_mut()?;
        match step.kind() {
            crate::format::steps::ADD => {
                // The scan coded the record as an AddRecord of the queue the record before
                // named, which is this queue, so its message starts after this queue's name:
                // found without reading the record. The applying thread touches no byte of
                // the map (at 1 KiB that read was a cache miss, and often a page-table entry,
                // per record: most of its time). Checked, not asserted: bytes changed since
                // the scan (not by tflux) must not panic here.
                let range = step.range();
                let at = range
                    .start
                    .checked_add(fields::add_message_at(q.name.len()))?;
                let message = bytes.get(at..range.end)?;
                q.add_short(source, room, step.word() as i64, message)
            }
            crate::format::steps::REMOVE => q.remove_short(step.word()),
            _ => None,
        }
    }

    /// The replay rules (spec 7), one place for both modes: they differ only in where an added
    /// record goes and how a removal finds it, never in what is refused.
    fn apply_delta_in(
        &mut self,
        mode: Mode<'_>,
        lsn: Option<i64>,
        delta: &DeltaRef<'_>,
    ) -> Result<Applied> {
        match *delta {
            DeltaRef::CreateQueue {
                name,
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
            } => {
                if self.queues.contains_key(name) {
                    return Err(replay_error(
                        lsn,
                        format!("CreateQueue of existing queue {}", display_name(name)),
                        None,
                    ));
                }
                let config = QueueConfig::from_raw(
                    implementation,
                    max_queue_size,
                    max_message_size,
                    key_range,
                )
                .map_err(|r| {
                    replay_error(
                        lsn,
                        format!("CreateQueue {}: {r}", display_name(name)),
                        None,
                    )
                })?;
                self.queues.insert(Queue::new(name, config));
                Ok(Applied::Created)
            }
            DeltaRef::DeleteQueue { name } => {
                if name.is_empty() {
                    return Err(replay_error(lsn, "DeleteQueue of the default queue", None));
                }
                if self.queues.remove(name).is_none() {
                    return Err(replay_error(
                        lsn,
                        format!("DeleteQueue of missing queue {}", display_name(name)),
                        None,
                    ));
                }
                Ok(Applied::Deleted)
            }
            DeltaRef::AddRecord { name, key, message } => {
                let q = self.queues.get_mut(name).ok_or_else(|| {
                    replay_error(
                        lsn,
                        format!("AddRecord to missing queue {}", display_name(name)),
                        None,
                    )
                })?;
                q.config.check_stored_key(key).map_err(|r| {
                    replay_error(
                        lsn,
                        format!("AddRecord to queue {}: {r}", display_name(name)),
                        None,
                    )
                })?;
                let added = match mode {
                    Mode::Online => q.add(key, message),
                    Mode::Batch(source, room) => {
                        q.add_pending(key, Lent::lent_or_copied(source, message), room)
                    }
                };
                added.map(Applied::Added).ok_or_else(|| {
                    replay_error(
                        lsn,
                        format!("AddRecord: queue {} has used every id", display_name(name)),
                        None,
                    )
                })
            }
            DeltaRef::RemoveRecord { name, id } => {
                let q = self.queues.get_mut(name).ok_or_else(|| {
                    replay_error(
                        lsn,
                        format!("RemoveRecord from missing queue {}", display_name(name)),
                        None,
                    )
                })?;
                match mode {
                    Mode::Online => q.remove(id),
                    Mode::Batch(..) => q.remove_pending(id),
                }
                .map_err(|r| replay_error(lsn, format!("RemoveRecord: {r}"), None))?;
                Ok(Applied::Removed)
            }
            ref task => self.apply_task_delta(mode, lsn, task),
        }
    }

    /// The task-queue deltas (spec 12; `tasks.rs`). In a batch the queue is settled first:
    /// these deltas name records anywhere in the queue, and an AddLater's id must not fall
    /// between pending ids.
    fn apply_task_delta(
        &mut self,
        mode: Mode<'_>,
        lsn: Option<i64>,
        delta: &DeltaRef<'_>,
    ) -> Result<Applied> {
        let name = delta.name();
        let kind = delta.kind_name();
        let q = self.queues.get_mut(name).ok_or_else(|| {
            replay_error(
                lsn,
                format!("{kind} of missing queue {}", display_name(name)),
                None,
            )
        })?;
        if let Mode::Batch(..) = mode {
            // SAFETY: only a `Batch` passes `Mode::Batch`, and it holds a count of every source
            // its pending records borrow from (see `Batch`).
            unsafe { q.settle() };
        }
        let refused = |r: String| {
            replay_error(
                lsn,
                format!("{kind} of queue {}: {r}", display_name(name)),
                None,
            )
        };
        match *delta {
            DeltaRef::QueueRules { ref change, .. } => {
                let rules = q.changed_rules(change).map_err(refused)?;
                q.set_rules(rules);
                Ok(Applied::RulesSet)
            }
            DeltaRef::AddLater {
                key,
                not_before,
                message,
                ..
            } => {
                q.config.check_stored_key(key).map_err(refused)?;
                q.add_later(key, message, not_before)
                    .map(Applied::Added)
                    .ok_or_else(|| refused("the queue has used every id".into()))
            }
            DeltaRef::Delivered { id, .. } => {
                q.count_delivery(id).map_err(refused)?;
                Ok(Applied::Delivered)
            }
            DeltaRef::Failed { id, due, .. } => {
                q.fail(id, due).map_err(refused)?;
                Ok(Applied::Failed)
            }
            DeltaRef::Purge { kept, .. } => {
                let kept = kept.to_vec();
                q.purge(&kept).map(Applied::Purged).map_err(refused)
            }
            _ => unreachable!("apply_delta_in applies the other kinds"),
        }
    }
}

/// How [`QueueState::apply_delta_in`] stores records.
#[derive(Debug, Clone, Copy)]
enum Mode<'s> {
    /// Every delta leaves a state ready to dequeue; payloads are copied.
    Online,
    /// Records collect in `Queue::pending` until the [`Batch`] settles them; a message that
    /// lies inside the given bytes borrows them without a count ([`Lent`]), any other is
    /// copied. Only a [`Batch`] holding a count of those bytes passes them
    /// (`Batch::apply_in_source`). The number bounds the records the batch adds (0: unknown;
    /// [`Batch::expect_adds`]).
    Batch(Option<&'s Lender>, usize),
}

fn no_such_queue(name: &[u8]) -> Error {
    Error::NoSuchQueue {
        name: raw_name(name),
    }
}
