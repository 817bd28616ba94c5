//! Which sealed segments a channel may delete (garbage collection and retention; spec section
//! 10 and `docs/format.md`). Pure: the channel gathers the facts, this decides, and
//! `Log::compact` deletes.
//!
//! Front first, stopping at the first segment that must stay (the log stays contiguous). A
//! segment may go only when every receiver's cursor has passed its last LSN, and
//! - no retention is set (the File Channel rule: gone once every receiver has acknowledged it),
//! - or a retention limit is breached (Kafka's rules): it is older than `retention_ms` (its
//!   file's modification time is when its last record was written), or the log still holds at
//!   least `retention_bytes` without it,
//! - or collection is forced (the disk is above the cleaning ratio): retention is ignored.
//!
//! With no receivers at all nothing has been acknowledged, so nothing goes unless a retention
//! is set (then retention alone decides, as in Kafka).

/// Retention limits (Kafka's `retention.bytes` / `retention.ms`); `None` = no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    pub bytes: Option<u64>,
    pub ms: Option<u64>,
}

impl Retention {
    pub fn is_set(&self) -> bool {
        self.bytes.is_some() || self.ms.is_some()
    }
}

/// What the rule needs to know about one sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentFacts {
    pub last_lsn: i64,
    /// Bytes of the segment (its records and header).
    pub bytes: u64,
    /// When its last record was written (Unix milliseconds).
    pub modified_ms: u64,
}

/// How many leading segments of `sealed` may be deleted. `total_bytes` is the size of the
/// whole log (active segment included); `cursors` the next LSN of every receiver.
pub fn collectable(
    sealed: &[SegmentFacts],
    total_bytes: u64,
    cursors: &[i64],
    retention: Retention,
    now_ms: u64,
    force: bool,
) -> usize {
    let slowest = cursors.iter().copied().min();
    let mut remaining = total_bytes;
    let mut n = 0;
    for seg in sealed {
        let acknowledged = match slowest {
            Some(next) => next > seg.last_lsn,
            None => retention.is_set(),
        };
        let breached = retention
            .ms
            .is_some_and(|ms| now_ms.saturating_sub(seg.modified_ms) >= ms)
            || retention
                .bytes
                .is_some_and(|b| remaining.saturating_sub(seg.bytes) >= b);
        if !(acknowledged && (force || !retention.is_set() || breached)) {
            break;
        }
        remaining = remaining.saturating_sub(seg.bytes);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn segs(sizes: &[(i64, u64, u64)]) -> Vec<SegmentFacts> {
        sizes
            .iter()
            .map(|&(last_lsn, bytes, modified_ms)| SegmentFacts {
                last_lsn,
                bytes,
                modified_ms,
            })
            .collect()
    }

    #[test]
    fn plain_gc_waits_for_every_receiver() {
        let s = segs(&[(9, 100, 0), (19, 100, 0), (29, 100, 0)]);
        let none = Retention::default();
        assert_eq!(collectable(&s, 400, &[20, 35], none, 0, false), 2);
        assert_eq!(collectable(&s, 400, &[10, 35], none, 0, false), 1);
        assert_eq!(collectable(&s, 400, &[0], none, 0, false), 0);
        // No receivers, no retention: nothing was read by anyone, nothing goes.
        assert_eq!(collectable(&s, 400, &[], none, 0, false), 0);
        assert_eq!(collectable(&s, 400, &[], none, 0, true), 0);
    }

    #[test]
    fn retention_keeps_history_but_never_unacknowledged() {
        let s = segs(&[(9, 100, 1_000), (19, 100, 5_000), (29, 100, 9_000)]);
        let by_time = Retention {
            ms: Some(3_000),
            bytes: None,
        };
        // At 8_000 the first two are older than 3 s.
        assert_eq!(collectable(&s, 400, &[30], by_time, 8_000, false), 2);
        // Unacknowledged wins over age.
        assert_eq!(collectable(&s, 400, &[5], by_time, 1 << 40, false), 0);
        let by_size = Retention {
            ms: None,
            bytes: Some(250),
        };
        // 400 bytes: dropping the first leaves 300 >= 250, the second would leave 200.
        assert_eq!(collectable(&s, 400, &[30], by_size, 0, false), 1);
        assert_eq!(collectable(&s, 400, &[], by_size, 0, false), 1);
        assert_eq!(collectable(&s, 400, &[30], by_size, 0, true), 3);
    }

    proptest! {
        /// Against a model written the other way round: the set of deletable prefixes.
        #[test]
        fn never_deletes_unacknowledged(
            sizes in proptest::collection::vec((1u64..500, 0u64..10_000), 0..8),
            cursors in proptest::collection::vec(0i64..100, 0..4),
            bytes in proptest::option::of(0u64..3000),
            ms in proptest::option::of(0u64..10_000),
            now in 0u64..20_000,
            force: bool,
        ) {
            let mut last = -1i64;
            let s: Vec<SegmentFacts> = sizes.iter().enumerate().map(|(i, &(b, m))| {
                last += 1 + (i as i64 * 7) % 13;
                SegmentFacts { last_lsn: last, bytes: b, modified_ms: m }
            }).collect();
            let active = 64u64;
            let total: u64 = s.iter().map(|x| x.bytes).sum::<u64>() + active;
            let r = Retention { bytes, ms };
            let n = collectable(&s, total, &cursors, r, now, force);
            prop_assert!(n <= s.len());
            for (i, seg) in s[..n].iter().enumerate() {
                // Every cursor passed it.
                prop_assert!(cursors.iter().all(|&c| c > seg.last_lsn));
                if cursors.is_empty() {
                    prop_assert!(r.is_set());
                }
                if r.is_set() && !force {
                    let left: u64 = total - s[..=i].iter().map(|x| x.bytes).sum::<u64>();
                    let old = ms.is_some_and(|m| now.saturating_sub(seg.modified_ms) >= m);
                    let big = bytes.is_some_and(|b| left >= b);
                    prop_assert!(old || big);
                }
            }
            // Maximal: the next one is held back by some rule.
            if let Some(seg) = s.get(n) {
                let acked = if cursors.is_empty() { r.is_set() } else { cursors.iter().all(|&c| c > seg.last_lsn) };
                let left: u64 = total - s[..=n].iter().map(|x| x.bytes).sum::<u64>();
                let old = ms.is_some_and(|m| now.saturating_sub(seg.modified_ms) >= m);
                let big = bytes.is_some_and(|b| left >= b);
                prop_assert!(!(acked && (force || !r.is_set() || old || big)));
            }
        }
    }
}
