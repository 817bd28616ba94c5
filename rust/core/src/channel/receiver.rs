//! A named receiver: reads a channel's messages in LSN order from its durable cursor, waits
//! for new ones, acknowledges the oldest it received (cursor file replaced atomically).
//!
//! Delivery is ordered and gap-free; after a restart (or a kill) a receiver resumes at its
//! first unacknowledged message (at-least-once). `position` is the next LSN to deliver,
//! `acked` the first unacknowledged one; messages in between are received, not acknowledged.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::format::receiver::validate_name;
use crate::log::follow::{Messages, Tail};

use super::cursor::{self, NameLock};
use super::{lock, Shared};

/// Where a new receiver starts (ignored when its cursor exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The first message the channel still holds.
    Earliest,
    /// The next message sent.
    Latest,
    /// This LSN (between the first held and the next to be sent).
    Lsn(i64),
}

/// How often a waiting receiver looks at the files when the sender may be another process
/// (a read-only channel). A receiver of the writing channel is woken by the send itself.
const POLL_READONLY: Duration = Duration::from_millis(1);
const POLL_WRITER: Duration = Duration::from_millis(50);

struct State {
    tail: Tail,
    acked: i64,
}

/// The lock of a receiver's name, None once released: by the receiver's `close` or by its
/// channel's (the channel keeps a weak reference, see [`Shared::names`]).
pub(crate) type HeldName = Mutex<Option<NameLock>>;

pub struct Receiver {
    shared: Arc<Shared>,
    name: String,
    path: std::path::PathBuf,
    state: Mutex<State>,
    held: Arc<HeldName>,
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("name", &self.name)
            .finish()
    }
}

impl Receiver {
    pub(crate) fn open(shared: Arc<Shared>, name: &str, start: Start) -> Result<Receiver> {
        validate_name(name)?;
        let layout = &shared.layout;
        let storage = &*shared.opts.storage;
        if !layout.cursors.is_dir() {
            // A read-only channel whose writer has not created the layout yet.
            crate::io::fsutil::create_dir_durable(storage, &layout.cursors)?;
        }
        let held = cursor::lock(storage, &layout.cursors, name)?;
        let path = cursor::cursor_path(&layout.cursors, name);
        let (acked, created) = match cursor::read(&path)? {
            Some(next) => (next, None),
            None => {
                let (first, end) = shared.bounds()?;
                let next = match start {
                    Start::Earliest => first,
                    Start::Latest => end,
                    Start::Lsn(lsn) if (first..=end).contains(&lsn) => lsn,
                    Start::Lsn(lsn) => {
                        return Err(Error::OutOfRange(format!(
                            "start LSN {lsn} is outside the channel [{first}, {end}]"
                        )))
                    }
                };
                // Written before the first read, so that collection sees it from now on.
                (next, Some(start))
            }
        };
        let located = (|| {
            if created.is_some() {
                cursor::write(storage, &path, acked)?;
            }
            let mut tail = Tail::new(&layout.log, acked);
            let acked = match tail.locate_now() {
                Ok(_) => tail.next_lsn().min(acked),
                // Collected between reading the bounds and writing the cursor (a collection
                // that had not seen the new cursor): a new receiver starts at what is left.
                Err(Error::OutOfRange(_)) if created == Some(Start::Earliest) => {
                    let (first, _) = shared.bounds()?;
                    cursor::write(storage, &path, first)?;
                    tail = Tail::new(&layout.log, first);
                    tail.locate_now()?;
                    first
                }
                Err(e) => return Err(e),
            };
            Ok((tail, acked))
        })();
        // A refused creation leaves nothing behind: its cursor would hold back collection for
        // good under a name nobody holds (issue 30 item 8). Best effort: the error that
        // refused it is the one to report.
        let refuse = |e: Error| {
            if created.is_some() && storage.remove_file(&path).is_ok() {
                let _ = crate::io::fsutil::sync_dir(storage, &layout.cursors);
            }
            Err(e)
        };
        let (tail, acked) = match located {
            Ok(found) => found,
            Err(e) => return refuse(e),
        };
        let held = Arc::new(Mutex::new(Some(held)));
        {
            let mut names = lock(&shared.names);
            names.retain(|w| w.strong_count() > 0);
            names.push(Arc::downgrade(&held));
        }
        // Closed meanwhile: its close may have released the names before this one was listed.
        if shared.closed.load(Ordering::Acquire) {
            return refuse(Error::Closed("channel"));
        }
        Ok(Receiver {
            shared,
            name: name.to_string(),
            path,
            state: Mutex::new(State { tail, acked }),
            held,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The next LSN to deliver.
    pub fn position(&self) -> i64 {
        lock(&self.state).tail.next_lsn()
    }

    /// The first unacknowledged LSN (what the cursor file holds).
    pub fn acked(&self) -> i64 {
        lock(&self.state).acked
    }

    fn check_open(&self) -> Result<()> {
        self.shared.check_open()?;
        if lock(&self.held).is_none() {
            return Err(Error::Closed("receiver"));
        }
        Ok(())
    }

    /// Up to `max_messages` messages (and, after the first, at most `max_bytes` of data),
    /// waiting up to `wait` (None = forever) for the first. Empty when the wait ran out.
    pub fn recv_many(
        &self,
        max_messages: usize,
        max_bytes: u64,
        wait: Option<Duration>,
    ) -> Result<Messages> {
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let poll = if self.shared.opts.readonly {
            POLL_READONLY
        } else {
            POLL_WRITER
        };
        loop {
            let seen = *lock(&self.shared.sent);
            {
                let mut st = lock(&self.state);
                self.check_open()?;
                let mut out = Messages::new(st.tail.next_lsn());
                if max_messages == 0 {
                    return Ok(out);
                }
                let got = st.tail.read(&mut out, max_messages, max_bytes)?;
                if got > 0 || wait == Some(Duration::ZERO) {
                    return Ok(out);
                }
            }
            let left = match deadline {
                None if wait.is_some() => poll, // too long to add to now: forever
                None => poll,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(poll),
                    _ => {
                        let st = lock(&self.state);
                        return Ok(Messages::new(st.tail.next_lsn()));
                    }
                },
            };
            let sent = lock(&self.shared.sent);
            if *sent == seen && !self.shared.closed.load(Ordering::Acquire) {
                let _ = self.shared.wake.wait_timeout(sent, left);
            }
        }
    }

    /// Acknowledges the `n` oldest received messages: the cursor file is replaced atomically
    /// before this returns, so they are never delivered again.
    pub fn ack(&self, n: u64) -> Result<()> {
        let mut st = lock(&self.state);
        // Held through the write: a close (the receiver's or the channel's) waits for it, so
        // no other owner of the name writes the cursor meanwhile.
        let held = lock(&self.held);
        self.shared.check_open()?;
        if held.is_none() {
            return Err(Error::Closed("receiver"));
        }
        let pending = (st.tail.next_lsn() - st.acked) as u64;
        if n > pending {
            return Err(Error::InvalidArgument(format!(
                "cannot acknowledge {n} messages: {pending} received message(s) are unacknowledged"
            )));
        }
        if n == 0 {
            return Ok(());
        }
        let next = st.acked + n as i64;
        cursor::write(&*self.shared.opts.storage, &self.path, next)?;
        st.acked = next;
        Ok(())
    }

    /// Releases the name (another process may open it); later calls raise `Closed`.
    pub fn close(&self) {
        *lock(&self.held) = None;
    }

    pub fn closed(&self) -> bool {
        lock(&self.held).is_none() || self.shared.closed.load(Ordering::Acquire)
    }
}
