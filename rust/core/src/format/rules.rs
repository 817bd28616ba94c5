//! A queue's task-queue rules (spec section 12): dead letter, retry delay and backoff, default
//! lease. As a QueueRules delta carries a change of them and as a snapshot carries them whole.
//!
//! ```text
//! Change<T>   Nullable<Nullable<T>>: absent = the rule is unchanged; present and null = the rule
//!             is cleared; present with a value = the rule is set to it
//! RulesChange Change<Pair<QueueName,Int32>> dead letter (queue, deliveries N >= 1)
//!             | Change<Int64> retry delay (ms >= 0) | Change<Int64> retry backoff (millionths,
//!             >= 1000000) | Change<Int64> retry max delay (ms >= 0) | Change<Int64> lease (ms > 0)
//! Rules       the same five fields as Nullable<T> each (the rules in force; a snapshot's)
//! ```
//! Decoding is structural (lengths, Bools, names); [`QueueRules::check`] holds the value rules
//! (one place: the store's argument checks, replay and the snapshot all call it).

use super::cursor::{put_name, Cursor, Decoded};

/// A retry backoff of 1.0 in the stored unit (millionths).
pub const BACKOFF_ONE: i64 = 1_000_000;

/// A change of one rule: `None` keeps it, `Some(None)` clears it, `Some(Some(v))` sets it.
pub type Change<T> = Option<Option<T>>;

/// A change of a queue's rules; `N` is a queue name (borrowed when decoded, owned to build).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct RulesChange<N> {
    /// The dead-letter queue and the deliveries after which a failed record moves there.
    pub dead_letter: Change<(N, i32)>,
    pub retry_delay_ms: Change<i64>,
    /// Millionths: 1500000 is x1.5.
    pub retry_backoff: Change<i64>,
    pub retry_max_delay_ms: Change<i64>,
    pub lease_ms: Change<i64>,
}

/// A queue's rules in force (`None`: no such rule).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct QueueRules {
    pub dead_letter: Option<(Vec<u8>, i32)>,
    pub retry_delay_ms: Option<i64>,
    pub retry_backoff: Option<i64>,
    pub retry_max_delay_ms: Option<i64>,
    pub lease_ms: Option<i64>,
}

impl<N: AsRef<[u8]>> RulesChange<N> {
    /// An owned copy.
    pub fn to_owned_change(&self) -> RulesChange<Vec<u8>> {
        RulesChange {
            dead_letter: self
                .dead_letter
                .as_ref()
                .map(|d| d.as_ref().map(|(n, k)| (n.as_ref().to_vec(), *k))),
            retry_delay_ms: self.retry_delay_ms,
            retry_backoff: self.retry_backoff,
            retry_max_delay_ms: self.retry_max_delay_ms,
            lease_ms: self.lease_ms,
        }
    }

    /// A view borrowing the names.
    pub fn as_borrowed(&self) -> RulesChange<&[u8]> {
        RulesChange {
            dead_letter: self
                .dead_letter
                .as_ref()
                .map(|d| d.as_ref().map(|(n, k)| (n.as_ref(), *k))),
            retry_delay_ms: self.retry_delay_ms,
            retry_backoff: self.retry_backoff,
            retry_max_delay_ms: self.retry_max_delay_ms,
            lease_ms: self.lease_ms,
        }
    }

    /// Whether the change changes nothing.
    pub fn is_empty(&self) -> bool {
        self.dead_letter.is_none()
            && self.retry_delay_ms.is_none()
            && self.retry_backoff.is_none()
            && self.retry_max_delay_ms.is_none()
            && self.lease_ms.is_none()
    }

    /// Bytes [`RulesChange::encode`] appends.
    pub fn encoded_len(&self) -> usize {
        let int = |c: &Change<i64>| match c {
            None => 1,
            Some(None) => 2,
            Some(Some(_)) => 10,
        };
        let dead = match &self.dead_letter {
            None => 1,
            Some(None) => 2,
            Some(Some((n, _))) => 2 + 1 + n.as_ref().len() + 4,
        };
        dead + int(&self.retry_delay_ms)
            + int(&self.retry_backoff)
            + int(&self.retry_max_delay_ms)
            + int(&self.lease_ms)
    }

    /// Appends the change's fields in spec order (names valid: [`QueueRules::check`] or
    /// `Delta::validate` first).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match &self.dead_letter {
            None => out.push(0),
            Some(None) => out.extend_from_slice(&[1, 0]),
            Some(Some((n, k))) => {
                out.extend_from_slice(&[1, 1]);
                put_name(out, n.as_ref());
                out.extend_from_slice(&k.to_be_bytes());
            }
        }
        for c in [
            self.retry_delay_ms,
            self.retry_backoff,
            self.retry_max_delay_ms,
            self.lease_ms,
        ] {
            match c {
                None => out.push(0),
                Some(None) => out.extend_from_slice(&[1, 0]),
                Some(Some(v)) => {
                    out.extend_from_slice(&[1, 1]);
                    out.extend_from_slice(&v.to_be_bytes());
                }
            }
        }
    }
}

/// Reads a [`RulesChange`] (structural checks only).
pub(crate) fn decode_change<'a>(c: &mut Cursor<'a>) -> Decoded<RulesChange<&'a [u8]>> {
    let dead_letter = if c.bool("dead letter change flag")? {
        if c.bool("dead letter flag")? {
            Some(Some((c.queue_name()?, c.i32("dead letter deliveries")?)))
        } else {
            Some(None)
        }
    } else {
        None
    };
    let mut int = |flag: &'static str, null: &'static str, field: &'static str| {
        Ok::<_, super::cursor::DecodeError>(if c.bool(flag)? {
            if c.bool(null)? {
                Some(Some(c.i64(field)?))
            } else {
                Some(None)
            }
        } else {
            None
        })
    };
    Ok(RulesChange {
        dead_letter,
        retry_delay_ms: int("retry delay change flag", "retry delay flag", "retry delay")?,
        retry_backoff: int(
            "retry backoff change flag",
            "retry backoff flag",
            "retry backoff",
        )?,
        retry_max_delay_ms: int(
            "retry max delay change flag",
            "retry max delay flag",
            "retry max delay",
        )?,
        lease_ms: int("lease change flag", "lease flag", "lease")?,
    })
}

impl QueueRules {
    /// Whether the queue has no rule at all.
    pub fn is_empty(&self) -> bool {
        *self == QueueRules::default()
    }

    /// The rules after `change` (only the rules it names change).
    pub fn changed<N: AsRef<[u8]>>(&self, change: &RulesChange<N>) -> QueueRules {
        fn pick<T: Clone>(old: &Option<T>, c: &Change<T>) -> Option<T> {
            match c {
                None => old.clone(),
                Some(v) => v.clone(),
            }
        }
        QueueRules {
            dead_letter: match &change.dead_letter {
                None => self.dead_letter.clone(),
                Some(d) => d.as_ref().map(|(n, k)| (n.as_ref().to_vec(), *k)),
            },
            retry_delay_ms: pick(&self.retry_delay_ms, &change.retry_delay_ms),
            retry_backoff: pick(&self.retry_backoff, &change.retry_backoff),
            retry_max_delay_ms: pick(&self.retry_max_delay_ms, &change.retry_max_delay_ms),
            lease_ms: pick(&self.lease_ms, &change.lease_ms),
        }
    }

    /// The value rules, for the rules of queue `queue` (the one place they are stated): a
    /// dead-letter queue with a valid name other than the queue itself and N >= 1, delays >= 0,
    /// backoff >= 1 (1000000 millionths), a lease > 0.
    pub fn check(&self, queue: &[u8]) -> Result<(), String> {
        if let Some((to, n)) = &self.dead_letter {
            super::cursor::validate_queue_name(to).map_err(|r| format!("dead letter: {r}"))?;
            if to == queue {
                return Err("dead letter: a queue cannot dead-letter to itself".into());
            }
            if *n < 1 {
                return Err(format!("dead letter: deliveries {n} is below 1"));
            }
        }
        for (what, v) in [
            ("retry delay", self.retry_delay_ms),
            ("retry max delay", self.retry_max_delay_ms),
        ] {
            if let Some(v) = v.filter(|v| *v < 0) {
                return Err(format!("{what} {v} ms is negative"));
            }
        }
        if let Some(b) = self.retry_backoff.filter(|b| *b < BACKOFF_ONE) {
            return Err(format!(
                "retry backoff {} is below 1",
                b as f64 / BACKOFF_ONE as f64
            ));
        }
        if let Some(l) = self.lease_ms.filter(|l| *l <= 0) {
            return Err(format!("lease {l} ms is not positive"));
        }
        Ok(())
    }

    /// The delay before a record that failed its `failures`-th delivery is ready again, by the
    /// retry rule: delay x backoff^(failures-1), capped by the max delay; 0 without a rule.
    pub fn retry_delay_after(&self, failures: u32) -> i64 {
        let Some(delay) = self.retry_delay_ms else {
            return 0;
        };
        let backoff = self.retry_backoff.unwrap_or(BACKOFF_ONE) as f64 / BACKOFF_ONE as f64;
        let exp = failures.saturating_sub(1).min(i32::MAX as u32) as i32;
        let raw = delay as f64 * backoff.powi(exp);
        let cap = self.retry_max_delay_ms.unwrap_or(i64::MAX) as f64;
        // `as` saturates (and NaN cannot arise from finite, non-negative factors).
        raw.min(cap) as i64
    }

    /// The rules as a change that sets every one of them (what a snapshot stores).
    pub fn as_change(&self) -> RulesChange<&[u8]> {
        RulesChange {
            dead_letter: Some(self.dead_letter.as_ref().map(|(n, k)| (n.as_slice(), *k))),
            retry_delay_ms: Some(self.retry_delay_ms),
            retry_backoff: Some(self.retry_backoff),
            retry_max_delay_ms: Some(self.retry_max_delay_ms),
            lease_ms: Some(self.lease_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_rule_multiplies_by_the_backoff_per_further_failure_and_caps() {
        let r = QueueRules {
            retry_delay_ms: Some(100),
            retry_backoff: Some(2 * BACKOFF_ONE),
            retry_max_delay_ms: Some(500),
            ..QueueRules::default()
        };
        assert_eq!(
            (1..=5).map(|f| r.retry_delay_after(f)).collect::<Vec<_>>(),
            [100, 200, 400, 500, 500]
        );
        assert_eq!(QueueRules::default().retry_delay_after(3), 0);
        assert_eq!(r.retry_delay_after(u32::MAX), 500);
    }

    #[test]
    fn bad_rules_are_refused_naming_the_rule() {
        let bad = [
            (
                QueueRules {
                    dead_letter: Some((b"q".to_vec(), 1)),
                    ..Default::default()
                },
                "itself",
            ),
            (
                QueueRules {
                    dead_letter: Some((b"d".to_vec(), 0)),
                    ..Default::default()
                },
                "below 1",
            ),
            (
                QueueRules {
                    retry_delay_ms: Some(-1),
                    ..Default::default()
                },
                "retry delay -1 ms is negative",
            ),
            (
                QueueRules {
                    retry_backoff: Some(999_999),
                    ..Default::default()
                },
                "retry backoff",
            ),
            (
                QueueRules {
                    lease_ms: Some(0),
                    ..Default::default()
                },
                "lease",
            ),
        ];
        for (rules, what) in bad {
            let e = rules.check(b"q").unwrap_err();
            assert!(e.contains(what), "{e}");
        }
        assert!(QueueRules::default().check(b"q").is_ok());
    }

    #[test]
    fn a_change_touches_only_the_rules_it_names() {
        let r = QueueRules {
            dead_letter: Some((b"d".to_vec(), 3)),
            lease_ms: Some(1000),
            ..Default::default()
        };
        let c: RulesChange<&[u8]> = RulesChange {
            lease_ms: Some(Some(2000)),
            dead_letter: Some(None),
            ..Default::default()
        };
        assert_eq!(
            r.changed(&c),
            QueueRules {
                lease_ms: Some(2000),
                ..Default::default()
            }
        );
    }
}
