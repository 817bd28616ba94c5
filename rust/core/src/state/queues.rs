//! The queues of a state by name: a vector with a name index, which remembers the queue the
//! last mutable look-up found. A replay's deltas mostly name the queue the delta before named,
//! so most look-ups compare one name instead of hashing it and probing the index.

use rustc_hash::FxHashMap as HashMap;

use super::Queue;

#[derive(Debug, Default)]
pub(super) struct Queues {
    list: Vec<Queue>,
    index: HashMap<Vec<u8>, usize>,
    /// Position in `list` of the queue the last `get_mut` found (may be stale: checked).
    last: usize,
}

impl Queues {
    fn position(&self, name: &[u8]) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub(super) fn get(&self, name: &[u8]) -> Option<&Queue> {
        self.position(name).map(|at| &self.list[at])
    }

    pub(super) fn get_mut(&mut self, name: &[u8]) -> Option<&mut Queue> {
        let at = match self.list.get(self.last) {
            Some(q) if q.name == name => self.last,
            _ => {
                let at = self.position(name)?;
                self.last = at;
                at
            }
        };
        Some(&mut self.list[at])
    }

    /// The queue the last `get_mut` found, if there still is one at its position (its name is
    /// for the caller to check).
    #[inline]
    pub(super) fn last_mut(&mut self) -> Option<&mut Queue> {
        self.list.get_mut(self.last)
    }

    pub(super) fn contains_key(&self, name: &[u8]) -> bool {
        self.index.contains_key(name)
    }

    /// Adds a queue whose name is not taken (callers check first).
    pub(super) fn insert(&mut self, queue: Queue) {
        debug_assert!(!self.contains_key(&queue.name));
        self.index.insert(queue.name.clone(), self.list.len());
        self.list.push(queue);
    }

    pub(super) fn remove(&mut self, name: &[u8]) -> Option<Queue> {
        let at = self.index.remove(name)?;
        let queue = self.list.swap_remove(at);
        if let Some(moved) = self.list.get(at) {
            self.index.insert(moved.name.clone(), at);
        }
        Some(queue)
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Queue> {
        self.list.iter()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Queue> {
        self.list.iter_mut()
    }
}
