//! Writes that change queues: creating and deleting them, and enqueueing records (logged,
//! applied, then durable per the sync policy).

use crate::durability::group_commit::Logged;
use crate::error::{Error, Result};
use crate::format::delta::DeltaRef;
use crate::format::queue::QueueConfig;
use crate::state::{raw_name, Applied};

use super::Store;

/// The CreateQueue delta of queue `name` with `config`: every way the store creates a queue
/// (plain, with rules, a missing dead-letter queue) logs the one this builds.
pub(super) fn create_delta(name: &[u8], config: QueueConfig) -> DeltaRef<'_> {
    DeltaRef::CreateQueue {
        name,
        implementation: config.implementation,
        max_queue_size: QueueConfig::raw_size(config.max_queue_size),
        max_message_size: QueueConfig::raw_size(config.max_message_size),
        key_range: config.key_range,
    }
}

impl Store {
    // ----- client operations -----

    pub fn create_queue(&self, name: &[u8], config: QueueConfig) -> Result<()> {
        self.create_queue_as(name, config, false).map(|_| ())
    }

    /// [`Store::create_queue`]; with `exist_ok`, a queue of that name and the same settings is
    /// not an error (nothing is written; `Ok(false)`), one with other settings still is.
    pub fn create_queue_as(
        &self,
        name: &[u8],
        config: QueueConfig,
        exist_ok: bool,
    ) -> Result<bool> {
        let lsn = {
            let mut inner = self.writable()?;
            if exist_ok && inner.state.queue(name).is_ok_and(|q| q.config() == config) {
                return Ok(false);
            }
            inner.state.check_create(name, &config)?;
            let delta = create_delta(name, config);
            // A `DeadLetter` setting for this queue becomes its logged rule, in the same write.
            let routed = self.dead_letter_setting(name);
            let rule = routed.as_ref().map(|(to, n)| DeltaRef::QueueRules {
                name,
                change: crate::format::rules::RulesChange {
                    dead_letter: Some(Some((to.as_slice(), *n))),
                    ..Default::default()
                },
            });
            let deltas: Vec<DeltaRef<'_>> = std::iter::once(delta).chain(rule).collect();
            self.log_and_apply(&mut inner, &deltas)?.1
        };
        self.after_write(lsn).map(|()| true)
    }

    pub fn delete_queue(&self, name: &[u8]) -> Result<()> {
        let lsn = {
            let mut inner = self.writable()?;
            inner.state.check_delete(name)?;
            let lsn = self
                .log_and_apply(&mut inner, &[DeltaRef::DeleteQueue { name }])?
                .1;
            inner.deliveries.drop_queue(name);
            lsn
        };
        self.ready.notify_all();
        self.after_write(lsn)
    }

    /// Enqueues records (one log write, one fsync); returns their ids. All are checked against
    /// the queue's policies first: either all are enqueued or none.
    pub fn enqueue_many(&self, name: &[u8], items: &[(i64, &[u8])]) -> Result<Vec<u64>> {
        let (ids, logged) = self.enqueue_many_logged(name, items)?;
        self.make_durable(logged)?;
        Ok(ids)
    }

    /// [`Store::enqueue_many`] without the wait for durability: the records are logged,
    /// applied and ready; [`Store::make_durable`] (for this call, or one covering several)
    /// is what makes them durable per the sync policy.
    pub fn enqueue_many_logged(
        &self,
        name: &[u8],
        items: &[(i64, &[u8])],
    ) -> Result<(Vec<u64>, Logged)> {
        self.enqueue_many_in(name, items, None)
    }

    /// [`Store::enqueue_many_logged`], the records delayed until `not_before` (unix ms) when
    /// given (AddLater deltas; the caller checked the dialect).
    pub(super) fn enqueue_many_in(
        &self,
        name: &[u8],
        items: &[(i64, &[u8])],
        not_before: Option<i64>,
    ) -> Result<(Vec<u64>, Logged)> {
        let (ids, lsn) = {
            let mut inner = self.writable()?;
            let q = inner.state.queue(name)?;
            if items.is_empty() {
                return Ok((Vec::new(), Logged::NOTHING));
            }
            for (key, message) in items {
                inner.state.check_enqueue(name, *key, message.len())?;
            }
            if q.last_id().checked_add(items.len() as u64).is_none() {
                return Err(Error::Policy {
                    queue: raw_name(name),
                    policy: "ids",
                    reason: format!(
                        "{} records would exhaust the queue's record ids",
                        items.len()
                    ),
                });
            }
            if let Some(max) = q.config().max_queue_size {
                if q.count() + items.len() as u64 > max as u64 {
                    return Err(Error::Policy {
                        queue: raw_name(name),
                        policy: "max_queue_size",
                        reason: format!(
                            "{} records do not fit ({} of {max} used)",
                            items.len(),
                            q.count()
                        ),
                    });
                }
            }
            let deltas: Vec<DeltaRef<'_>> = items
                .iter()
                .map(|&(key, message)| match not_before {
                    None => DeltaRef::AddRecord { name, key, message },
                    Some(not_before) => DeltaRef::AddLater {
                        name,
                        key,
                        not_before,
                        message,
                    },
                })
                .collect();
            let (applied, lsn) = self.log_and_apply(&mut inner, &deltas)?;
            let ids = applied
                .into_iter()
                .filter_map(|a| match a {
                    Applied::Added(id) => Some(id),
                    _ => None,
                })
                .collect::<Vec<u64>>();
            inner.deliveries.count_enqueued(name, ids.len() as u64);
            (ids, lsn)
        };
        self.ready.notify_all();
        Ok((ids, Logged::at(lsn)))
    }

    pub fn enqueue(&self, name: &[u8], key: i64, message: &[u8]) -> Result<u64> {
        Ok(self.enqueue_many(name, &[(key, message)])?[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_create_delta_carries_every_setting_of_the_config() {
        for config in [
            QueueConfig::default(),
            QueueConfig {
                implementation: crate::format::queue::IMPL_ARRAY,
                max_queue_size: Some(7),
                max_message_size: Some(0),
                key_range: Some((-3, 9)),
            },
        ] {
            let DeltaRef::CreateQueue {
                name,
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
            } = create_delta(b"q", config)
            else {
                panic!("not a CreateQueue");
            };
            assert_eq!(name, b"q");
            let back =
                QueueConfig::from_raw(implementation, max_queue_size, max_message_size, key_range);
            assert_eq!(back, Ok(config));
        }
    }
}
