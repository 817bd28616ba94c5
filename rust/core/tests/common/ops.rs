//! The operations of the replay property tests (`restore_online_model`, `overlapped_restore`,
//! `borrowed`): queues named by their index in the test's names, the delta of each operation
//! against the online model, and the strategy of the operations a model accepts.

use proptest::prelude::*;
use tflux_core::format::delta::Delta;
use tflux_core::state::QueueState;

#[derive(Debug, Clone)]
pub enum Op {
    /// A CreateQueue (an array queue with keys 0..=7 when `true`, else a heap).
    Create(usize, bool),
    Delete(usize),
    /// An AddRecord with this key, its message `m % 70` bytes of `m`.
    Add(usize, i64, u8),
    /// Removes the `n`-th present record (by id) of the queue.
    Remove(usize, usize),
    /// A removal of an id never added (a delta the state refuses).
    RemoveAbsent(usize),
    /// An AddRecord with a key outside an array queue's range (accepted by a heap queue).
    FarKey(usize),
    /// An AddRecord of the queue whose bytes do not decode (one byte too many).
    Undecodable(usize),
    /// An AddRecord of a queue never created.
    Missing,
}

/// Creates, deletes, adds and removes on `queues` queues (queue 0 is never created or
/// deleted), weighted by `weights` in that order; removals pick among the first `nth` present
/// records.
pub fn valid(queues: usize, weights: [u32; 4], nth: usize) -> impl Strategy<Value = Op> {
    let [create, delete, add, remove] = weights;
    prop_oneof![
        create => (1..queues, any::<bool>()).prop_map(|(q, a)| Op::Create(q, a)),
        delete => (1..queues).prop_map(Op::Delete),
        add => (0..queues, 0i64..8, any::<u8>()).prop_map(|(q, k, m)| Op::Add(q, k, m)),
        remove => (0..queues, 0..nth).prop_map(|(q, n)| Op::Remove(q, n)),
    ]
}

pub fn add(name: &[u8], key: i64, message: Vec<u8>) -> Vec<u8> {
    Delta::AddRecord {
        name: name.to_vec(),
        key,
        message,
    }
    .encode()
}

pub fn remove(name: &[u8], id: u64) -> Vec<u8> {
    Delta::RemoveRecord {
        name: name.to_vec(),
        id,
    }
    .encode()
}

/// The delta of `op` on the queues `names`, a removal picking its id in `model`.
pub fn delta(op: &Op, names: &[&[u8]], model: &QueueState) -> Vec<u8> {
    match *op {
        Op::Create(q, array) => super::create_queue(names[q], array),
        Op::Delete(q) => Delta::DeleteQueue {
            name: names[q].to_vec(),
        }
        .encode(),
        Op::Add(q, key, m) => add(names[q], key, vec![m; (m % 70) as usize]),
        Op::Remove(q, n) => remove(names[q], super::nth_live_id(model, names[q], n)),
        Op::RemoveAbsent(q) => remove(names[q], 1 << 40),
        Op::FarKey(q) => add(names[q], 1000, b"far".to_vec()),
        Op::Undecodable(q) => {
            let mut d = add(names[q], 1, b"odd".to_vec());
            d.push(0);
            d
        }
        Op::Missing => add(b"never", 1, b"lost".to_vec()),
    }
}
