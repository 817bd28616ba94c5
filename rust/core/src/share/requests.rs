//! What the owner does for one request of a client: decode it, carry it out on what it serves
//! ([`Store::execute_logged`](crate::store::Store::execute_logged), or a channel's), and keep
//! the client's session in step with what it holds. Where it runs is the server's choice
//! ([`super::server`]), by the request's [`Pace`]: on the loop when it cannot wait, off the
//! loop when it may.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::channel_request::ChannelRequest;
use super::serving::{lock, Served, Shared};
use super::wire::LONGEST_WAIT;
use crate::error::Result;
use crate::store::request::Pace;
use crate::store::{Delivery, Reply, Request, Store};

/// How long a wait asked of a draining owner sleeps before it answers "nothing" (so that a
/// client asking again at once does not spin).
const DRAINING_PAUSE: Duration = Duration::from_millis(200);

/// What carrying out a request gave.
pub(super) enum Outcome {
    /// The reply, to send now.
    Reply(Reply),
    /// The reply, to send once `Logged` is durable: the loop waits once for every request of
    /// a batch (one group commit for all the clients), a thread off the loop at once.
    Durable(Reply, crate::durability::Logged),
    /// Only asked of the loop: the request may wait (a dequeue of an empty queue, any request
    /// while the owner drains) or take long (a snapshot, an fsync of its own): it is carried
    /// out again off the loop, where blocking holds up nobody else.
    Blocking,
}

/// Whether a request waits for records: while the owner drains, such a request takes nothing
/// and a drain need not wait for it.
pub(super) fn waits(shared: &Shared, body: &[u8]) -> bool {
    match shared.served {
        Served::Store(_) => Request::decode(body).is_ok_and(|r| r.pace() == Pace::Waits),
        Served::Channel(_) => false,
    }
}

/// Carries out one request of `session`. With `may_block` false (the loop) nothing here waits
/// for records, a lock held long or an fsync: such requests come back as
/// [`Outcome::Blocking`], having changed nothing.
pub(super) fn handle(
    shared: &Shared,
    session: u64,
    body: &[u8],
    may_block: bool,
) -> Result<Outcome> {
    match &shared.served {
        Served::Store(store) => serve(shared, store, session, &Request::decode(body)?, may_block),
        Served::Channel(channel) => {
            let request = ChannelRequest::decode(body)?;
            if !may_block && request.pace() != Pace::Quick {
                return Ok(Outcome::Blocking);
            }
            let (reply, logged) = request.execute_logged(channel)?;
            Ok(match logged.lsn() {
                None => Outcome::Reply(reply),
                Some(_) => Outcome::Durable(reply, logged),
            })
        }
    }
}

fn serve(
    shared: &Shared,
    store: &Store,
    session: u64,
    request: &Request<'_>,
    may_block: bool,
) -> Result<Outcome> {
    let (reply, logged) = match request.pace() {
        Pace::Long if !may_block => return Ok(Outcome::Blocking),
        Pace::Quick | Pace::Long => store.execute_logged(request)?,
        Pace::Waits => {
            let wait = request.timeout().flatten().unwrap_or(LONGEST_WAIT);
            let waiting = !wait.is_zero();
            // Counted as busy (by the server) before the drain flag is read, so a drain that
            // saw no request in progress and no delivery open cannot miss this one.
            if shared.draining.load(Ordering::SeqCst) {
                if !may_block && waiting {
                    return Ok(Outcome::Blocking);
                }
                if waiting {
                    std::thread::sleep(wait.min(LONGEST_WAIT).min(DRAINING_PAUSE));
                }
                return Ok(Outcome::Reply(request.nothing()));
            }
            let bound = if may_block {
                LONGEST_WAIT
            } else {
                Duration::ZERO
            };
            let got = store.execute_logged(&request.waiting(bound))?;
            if !may_block && waiting && got.0.is_nothing() {
                return Ok(Outcome::Blocking);
            }
            got
        }
    };
    keep_sessions(shared, session, request, &reply);
    Ok(match logged.lsn() {
        None => Outcome::Reply(reply),
        Some(_) => Outcome::Durable(reply, logged),
    })
}

/// Keeps the session's deliveries in step: a record delivered to it is held for it before
/// the reply leaves (a client that dies before reading the reply still gives the record
/// back); one acked or nacked over it (in the log and applied, whatever the wait for
/// durability says) is no longer its to give back.
fn keep_sessions(shared: &Shared, session: u64, request: &Request<'_>, reply: &Reply) {
    match (request, reply) {
        (Request::Dequeue { queue, .. }, Reply::Delivery(Some((record, receipt))))
        | (
            Request::Deliver { queue, .. },
            Reply::Task(Some(Delivery {
                record, receipt, ..
            })),
        ) => {
            let mut sessions = lock(&shared.sessions);
            let held = &mut sessions.entry(session).or_default().in_flight;
            held.insert((queue.to_vec(), record.id, *receipt));
        }
        (Request::DequeueMany { queue, .. }, Reply::Tasks(got)) if !got.is_empty() => {
            let mut sessions = lock(&shared.sessions);
            let held = &mut sessions.entry(session).or_default().in_flight;
            for d in got {
                held.insert((queue.to_vec(), d.record.id, d.receipt));
            }
        }
        (Request::Ack { items }, _) => {
            if let Some(s) = lock(&shared.sessions).get_mut(&session) {
                for (queue, id, receipt) in items {
                    s.settle(queue, *id, *receipt);
                }
            }
        }
        (Request::Nack { queue, id, receipt }, _)
        | (
            Request::NackDelayed {
                queue, id, receipt, ..
            },
            _,
        ) => {
            if let Some(s) = lock(&shared.sessions).get_mut(&session) {
                s.settle(queue, *id, *receipt);
            }
        }
        _ => {}
    }
}
