//! What tflux tells the people who run it: owner changes and takeovers, lease expiries,
//! dead-letter moves, torn-tail cuts, repairs and stopped writes, through the `log` crate. The
//! Python module hands them to the standard `logging` module (logger `tflux`, children
//! `tflux.share`, `tflux.store`, `tflux.log`: the targets below); a Rust program sees them
//! through whatever `log` implementation it installs.
//!
//! Never one line per record: what can happen to many records at once or in a busy loop (a
//! lease expiry, a dead-letter move) is a [`tally`]. The tallies of one [`gather`] (a sweep of
//! expired leases, one delivery) make one line per kind; and of a kind reported less than
//! [`QUIET`] ago, the next ones are summed and reported as one line when the quiet time ends
//! (by a thread of this module), or at [`flush`]. One-off events (an owner change, a cut) are
//! plain `log` calls where their rule lives.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

use ::log::Level;

use crate::fork::PerProcess;

/// Owners and clients: who owns a base directory, takeovers, owners gone.
pub const SHARE: &str = "tflux::share";
/// A store's deliveries (lease expiries, dead-letter moves) and its stopped writes.
pub const STORE: &str = "tflux::store";
/// A log directory: torn-tail cuts, repairs, stopped writes.
pub const LOG: &str = "tflux::log";

/// How long after a line of a kind the next ones of that kind are summed instead of reported.
pub const QUIET: Duration = Duration::from_secs(10);
/// How many record ids a line names.
const SAMPLE: usize = 5;

/// What a tally line sums: how many events, a few of their record ids, and the least and
/// largest of a number they carry (a dead-letter move's delivery count).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sum {
    pub count: u64,
    pub ids: Vec<u64>,
    pub least: u64,
    pub most: u64,
}

impl Sum {
    fn one(id: u64, value: u64) -> Sum {
        Sum {
            count: 1,
            ids: vec![id],
            least: value,
            most: value,
        }
    }

    fn add(&mut self, other: &Sum) {
        if self.count == 0 {
            *self = other.clone();
            return;
        }
        self.count += other.count;
        let room = SAMPLE.saturating_sub(self.ids.len());
        self.ids.extend(other.ids.iter().take(room));
        self.least = self.least.min(other.least);
        self.most = self.most.max(other.most);
    }

    /// `id 7`, or `ids 1, 2, 3, 4, 5 and 9995 more`.
    pub fn ids_text(&self) -> String {
        let listed: Vec<String> = self.ids.iter().map(u64::to_string).collect();
        let more = self.count.saturating_sub(self.ids.len() as u64);
        match (listed.len(), more) {
            (1, 0) => format!("id {}", listed[0]),
            (_, 0) => format!("ids {}", listed.join(", ")),
            _ => format!("ids {} and {more} more", listed.join(", ")),
        }
    }

    /// `5`, or `5 to 7` when the values differ.
    pub fn values_text(&self) -> String {
        if self.least == self.most {
            self.least.to_string()
        } else {
            format!("{} to {}", self.least, self.most)
        }
    }
}

/// Words a tally's line from its sum.
pub type Say = Box<dyn Fn(&Sum) -> String + Send>;

/// One kind of event a line sums.
pub struct Tally {
    pub target: &'static str,
    pub level: Level,
    /// Events with the same key are summed into one line (the base directory, the queue...).
    pub key: String,
    pub say: Say,
}

/// A line to hand to `log`.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    target: &'static str,
    level: Level,
    text: String,
}

struct Kind {
    target: &'static str,
    level: Level,
    say: Say,
    /// When the last line of this kind was reported.
    last: Instant,
    /// What happened since (not reported yet).
    pending: Sum,
}

impl Kind {
    fn line(&mut self, now: Instant, summed: bool) -> Line {
        let mut text = (self.say)(&self.pending);
        if summed {
            text.push_str(&format!(
                " (in the last {:.0} s)",
                now.duration_since(self.last).as_secs_f64()
            ));
        }
        self.pending = Sum {
            count: 0,
            ids: Vec::new(),
            least: 0,
            most: 0,
        };
        self.last = now;
        Line {
            target: self.target,
            level: self.level,
            text,
        }
    }
}

/// The kinds reported in the last [`QUIET`], and what they sum since.
#[derive(Default)]
struct Tallies {
    kinds: HashMap<String, Kind>,
}

impl Tallies {
    /// Adds `sum` to its kind: the line to report now, when none of the kind was reported in
    /// the last [`QUIET`].
    fn add(&mut self, now: Instant, tally: Tally, sum: &Sum) -> Option<Line> {
        self.kinds
            .retain(|_, k| k.pending.count > 0 || now.duration_since(k.last) < QUIET);
        match self.kinds.get_mut(&tally.key) {
            Some(kind) => {
                kind.pending.add(sum);
                kind.say = tally.say;
                None
            }
            None => {
                let mut kind = Kind {
                    target: tally.target,
                    level: tally.level,
                    say: tally.say,
                    last: now,
                    pending: sum.clone(),
                };
                let line = kind.line(now, false);
                self.kinds.insert(tally.key, kind);
                Some(line)
            }
        }
    }

    /// The summed lines whose quiet time ended by `now` (every one, with `all`), and when the
    /// next one ends.
    fn due(&mut self, now: Instant, all: bool) -> (Vec<Line>, Option<Instant>) {
        let mut lines = Vec::new();
        let mut next: Option<Instant> = None;
        for kind in self.kinds.values_mut() {
            if kind.pending.count == 0 {
                continue;
            }
            let ends = kind.last + QUIET;
            if all || ends <= now {
                lines.push(kind.line(now, true));
            } else {
                next = Some(next.map_or(ends, |n| n.min(ends)));
            }
        }
        (lines, next)
    }
}

/// This process's tallies and the thread that reports summed lines when their quiet time ends.
struct Reporter {
    tallies: Mutex<Tallies>,
    changed: Condvar,
    thread: Once,
}

static REPORTER: PerProcess<Reporter> = PerProcess::new(|| Reporter {
    tallies: Mutex::new(Tallies::default()),
    changed: Condvar::new(),
    thread: Once::new(),
});

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn emit(lines: Vec<Line>) {
    for line in lines {
        ::log::log!(target: line.target, line.level, "{}", line.text);
    }
}

impl Reporter {
    fn submit(&'static self, tally: Tally, sum: &Sum) {
        let line = lock(&self.tallies).add(Instant::now(), tally, sum);
        match line {
            Some(line) => emit(vec![line]),
            None => {
                self.thread.call_once(|| self.start());
                self.changed.notify_all();
            }
        }
    }

    /// Starts the thread that reports summed lines (it runs as long as the process; should it
    /// fail to start, they wait for the next [`flush`]).
    fn start(&'static self) {
        let _ = std::thread::Builder::new()
            .name("tflux-events".into())
            .spawn(move || {
                let mut tallies = lock(&self.tallies);
                loop {
                    let now = Instant::now();
                    let (lines, next) = tallies.due(now, false);
                    if !lines.is_empty() {
                        drop(tallies);
                        emit(lines);
                        tallies = lock(&self.tallies);
                        continue;
                    }
                    tallies = match next {
                        Some(at) => {
                            let wait = at.saturating_duration_since(now);
                            self.changed
                                .wait_timeout(tallies, wait)
                                .unwrap_or_else(|e| e.into_inner())
                                .0
                        }
                        None => self
                            .changed
                            .wait(tallies)
                            .unwrap_or_else(|e| e.into_inner()),
                    };
                }
            });
    }
}

thread_local! {
    /// The tallies of the innermost [`gather`] running on this thread.
    static GATHERED: RefCell<Option<Vec<(Tally, Sum)>>> = const { RefCell::new(None) };
}

/// One event of the kind `tally` about record `id`, carrying `value` (see [`Sum`]).
pub fn tally(tally: Tally, id: u64, value: u64) {
    if !::log::log_enabled!(target: tally.target, tally.level) {
        return;
    }
    let sum = Sum::one(id, value);
    let gathered = GATHERED.with(|g| match g.borrow_mut().as_mut() {
        Some(list) => {
            match list.iter_mut().find(|(t, _)| t.key == tally.key) {
                Some((_, s)) => s.add(&sum),
                None => list.push((tally, sum.clone())),
            }
            None
        }
        None => Some(tally),
    });
    if let Some(tally) = gathered {
        REPORTER.get().submit(tally, &sum);
    }
}

/// Until the returned guard goes, the tallies this thread makes are reported as one line per
/// kind (one sweep, one delivery: an operation that may touch many records).
#[must_use = "the tallies are gathered until the guard goes"]
pub fn gather() -> Gather {
    Gather {
        outer: GATHERED.with(|g| g.borrow_mut().replace(Vec::new())),
        _this_thread: std::marker::PhantomData,
    }
}

/// See [`gather`]: reports what it gathered and puts back the enclosing gather's list.
pub struct Gather {
    outer: Option<Vec<(Tally, Sum)>>,
    /// The list is this thread's.
    _this_thread: std::marker::PhantomData<*const ()>,
}

impl Drop for Gather {
    fn drop(&mut self) {
        let outer = self.outer.take();
        let mine = GATHERED.with(|g| std::mem::replace(&mut *g.borrow_mut(), outer));
        for (tally, sum) in mine.into_iter().flatten() {
            REPORTER.get().submit(tally, &sum);
        }
    }
}

/// Reports at once every summed line still waiting for its quiet time to end (at exit).
pub fn flush() {
    let reporter = REPORTER.get();
    let (lines, _) = lock(&reporter.tallies).due(Instant::now(), true);
    emit(lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(key: &str) -> Tally {
        Tally {
            target: STORE,
            level: Level::Warn,
            key: key.to_string(),
            say: Box::new(|s| {
                format!("{} events ({}; {})", s.count, s.ids_text(), s.values_text())
            }),
        }
    }

    fn sum(count: u64, ids: &[u64], least: u64, most: u64) -> Sum {
        Sum {
            count,
            ids: ids.to_vec(),
            least,
            most,
        }
    }

    #[test]
    fn the_first_of_a_kind_is_reported_at_once_and_the_rest_summed_until_the_quiet_time_ends() {
        let mut t = Tallies::default();
        let t0 = Instant::now();
        let first = t.add(t0, tally("a"), &sum(3, &[1, 2, 3], 5, 5)).unwrap();
        assert_eq!(first.text, "3 events (ids 1, 2, 3; 5)");
        assert_eq!(first.level, Level::Warn);
        for i in 0..10_000 {
            assert_eq!(t.add(t0, tally("a"), &Sum::one(10 + i, 5 + i % 2)), None);
        }
        // Another kind is not held back by the first.
        assert!(t.add(t0, tally("b"), &Sum::one(1, 1)).is_some());
        let (lines, next) = t.due(t0 + Duration::from_secs(1), false);
        assert!(lines.is_empty());
        assert_eq!(next, Some(t0 + QUIET));
        let (lines, next) = t.due(t0 + QUIET, false);
        assert_eq!(lines.len(), 1);
        assert_eq!(
            lines[0].text,
            "10000 events (ids 10, 11, 12, 13, 14 and 9995 more; 5 to 6) (in the last 10 s)"
        );
        assert_eq!(next, None);
        // Quiet since: the next one is reported at once again.
        assert!(t.add(t0 + QUIET * 3, tally("a"), &Sum::one(1, 1)).is_some());
    }

    #[test]
    fn a_flush_reports_every_summed_line_at_once() {
        let mut t = Tallies::default();
        let t0 = Instant::now();
        t.add(t0, tally("a"), &Sum::one(1, 1));
        t.add(t0, tally("a"), &Sum::one(2, 1));
        let (lines, _) = t.due(t0, true);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].text.starts_with("1 events (id 2; 1)"));
        assert_eq!(t.due(t0, true).0, Vec::new());
    }

    #[test]
    fn ids_name_a_few_and_count_the_rest() {
        assert_eq!(sum(1, &[7], 0, 0).ids_text(), "id 7");
        assert_eq!(sum(2, &[7, 8], 0, 0).ids_text(), "ids 7, 8");
        assert_eq!(
            sum(9, &[1, 2, 3, 4, 5], 0, 0).ids_text(),
            "ids 1, 2, 3, 4, 5 and 4 more"
        );
        let mut s = Sum::one(1, 4);
        for i in 2..=100 {
            s.add(&Sum::one(i, 4));
        }
        assert_eq!(
            (s.count, s.ids.len(), s.values_text()),
            (100, SAMPLE, "4".into())
        );
    }
}
