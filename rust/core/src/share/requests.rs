//! What the owner does for one request of a client: decode it, carry it out on what it serves,
//! build the reply. Where it runs is the server's choice ([`super::server`]): on the loop when
//! it cannot wait, off the loop when it may.

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::serving::{lock, Served, Shared};
use super::wire::{self, op, In, Out};
use crate::channel::Channel;
use crate::durability::Logged;
use crate::error::{Error, Result};
use crate::state::QueueConfig;

/// The longest a single dequeue or wait request holds a thread (clients ask in slices).
const LONGEST_WAIT: Duration = Duration::from_secs(1);
/// How long a wait asked of a draining owner sleeps before it answers "nothing" (so that a
/// client asking again at once does not spin).
const DRAINING_PAUSE: Duration = Duration::from_millis(200);

/// What carrying out a request gave.
pub(super) enum Outcome {
    /// The reply, to send now.
    Reply(Out),
    /// The reply, to send once `Logged` is durable: the loop waits once for every request of
    /// a batch (one group commit for all the clients), a thread off the loop at once.
    Durable(Out, Logged),
    /// Only asked of the loop: the request may wait (a dequeue of an empty queue, any request
    /// while the owner drains) or take long (a snapshot, an fsync of its own): it is carried
    /// out again off the loop, where blocking holds up nobody else.
    Blocking,
}

/// Whether a request waits for records: while the owner drains, such a request takes nothing
/// and a drain need not wait for it.
pub(super) fn waits(body: &[u8]) -> bool {
    matches!(body.first().copied(), Some(op::DEQUEUE | op::WAIT_READY))
}

fn wait_arg(ms: u64) -> Option<Duration> {
    Some(Duration::from_millis(ms).min(LONGEST_WAIT))
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
    let mut r = In::new(body);
    let code = r.u8("op")?;
    let mut out = Out::new(wire::OK);
    let store = match &shared.served {
        Served::Store(store) => &**store,
        Served::Channel(channel) => return handle_channel(channel, code, &mut r, out, may_block),
    };
    let draining = || shared.draining.load(Ordering::SeqCst);
    match code {
        op::CREATE_QUEUE | op::DELETE_QUEUE | op::PEEK_ALL | op::SNAPSHOT if !may_block => {
            return Ok(Outcome::Blocking)
        }
        op::CREATE_QUEUE => {
            let name = r.bytes("queue")?;
            let config: QueueConfig = r.config()?;
            let exist_ok = r.flag("exist_ok")?;
            r.end()?;
            let created = store.create_queue_as(name, config, exist_ok)?;
            out.u8(created as u8);
        }
        op::DELETE_QUEUE => {
            let name = r.bytes("queue")?;
            r.end()?;
            store.delete_queue(name)?;
        }
        op::ENQUEUE_MANY => {
            let name = r.bytes("queue")?;
            let n = r.count(12, "records")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push((r.i64("key")?, r.bytes("payload")?));
            }
            r.end()?;
            let (ids, logged) = store.enqueue_many_logged(name, &items)?;
            out.u32(ids.len() as u32);
            for id in ids {
                out.u64(id);
            }
            return Ok(Outcome::Durable(out, logged));
        }
        op::DEQUEUE => {
            let name = r.bytes("queue")?;
            let wait = wait_arg(r.u64("timeout")?);
            let lease = r.opt_u64("lease")?.map(Duration::from_millis);
            r.end()?;
            let waiting = wait != Some(Duration::ZERO);
            // Counted as busy (by the server) before the drain flag is read, so a drain that
            // saw no request in progress and no delivery open cannot miss this one.
            if draining() {
                if !may_block && waiting {
                    return Ok(Outcome::Blocking);
                }
                if waiting {
                    std::thread::sleep(wait.unwrap_or(LONGEST_WAIT).min(DRAINING_PAUSE));
                }
                out.u8(0);
                return Ok(Outcome::Reply(out));
            }
            let timeout = if may_block {
                wait
            } else {
                Some(Duration::ZERO)
            };
            let got = store.dequeue_leased(name, timeout, lease);
            match &got {
                Ok(None) if !may_block && waiting => return Ok(Outcome::Blocking),
                Ok(Some((record, receipt))) => {
                    // Held for the session before the reply leaves: a client that dies
                    // before reading it still gives the record back.
                    let mut sessions = lock(&shared.sessions);
                    let held = &mut sessions.entry(session).or_default().in_flight;
                    held.insert((name.to_vec(), record.id, *receipt));
                }
                _ => {}
            }
            match got? {
                None => out.u8(0),
                Some((record, receipt)) => out.u8(1).record(&record, receipt),
            };
        }
        op::WAIT_READY => {
            let name = r.bytes("queue")?;
            let wait = wait_arg(r.u64("timeout")?);
            r.end()?;
            let waiting = wait != Some(Duration::ZERO);
            let ready = if draining() {
                if !may_block && waiting {
                    return Ok(Outcome::Blocking);
                }
                if waiting {
                    std::thread::sleep(wait.unwrap_or(LONGEST_WAIT).min(DRAINING_PAUSE));
                }
                false
            } else {
                let timeout = if may_block {
                    wait
                } else {
                    Some(Duration::ZERO)
                };
                let ready = store.wait_ready(name, timeout)?;
                if !ready && !may_block && waiting {
                    return Ok(Outcome::Blocking);
                }
                ready
            };
            out.u8(ready as u8);
        }
        op::ACK_MANY => {
            // The smallest item: an empty queue name, an id, no receipt.
            let n = r.count(13, "records")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let queue = r.bytes("queue")?;
                let id = r.u64("id")?;
                let receipt = r.opt_u64("receipt")?;
                items.push((queue, id, receipt));
            }
            r.end()?;
            let logged = store.ack_many_logged(&items)?;
            // Acked (in the log and applied): no longer the session's to give back, whatever
            // the wait for durability says.
            settle(
                shared,
                session,
                items.iter().map(|(q, id, rc)| (*q, *id, *rc)),
            );
            return Ok(Outcome::Durable(out, logged));
        }
        op::NACK => {
            let queue = r.bytes("queue")?;
            let id = r.u64("id")?;
            let receipt = r.opt_u64("receipt")?;
            r.end()?;
            let logged = store.nack_logged(queue, id, receipt)?;
            settle(shared, session, [(queue, id, receipt)].into_iter());
            return Ok(Outcome::Durable(out, logged));
        }
        op::COUNT => {
            let name = r.bytes("queue")?;
            r.end()?;
            out.u64(store.count(name)?);
        }
        op::PEEK => {
            let name = r.bytes("queue")?;
            r.end()?;
            match store.peek(name)? {
                None => out.u8(0),
                Some(rec) => out.u8(1).record(&rec, 0),
            };
        }
        op::PEEK_ALL => {
            let name = r.bytes("queue")?;
            r.end()?;
            let records = store.peek_all(name)?;
            out.u32(records.len() as u32);
            for rec in &records {
                out.record(rec, 0);
            }
        }
        op::QUEUES => {
            r.end()?;
            let queues = store.queues()?;
            out.u32(queues.len() as u32);
            for q in &queues {
                out.info(q);
            }
        }
        op::SNAPSHOT => {
            r.end()?;
            out.u8(store.snapshot()? as u8);
        }
        op::INFO => {
            r.end()?;
            let (start, last, snap) = store.log_bounds()?;
            let term = store.metadata()?.term;
            out.i64(start)
                .i64(last)
                .i64(snap)
                .i64(i64::from(term))
                .bytes(store.settings().to_json().as_bytes());
        }
        other => return Err(wire::malformed(format!("unknown request {other}"))),
    }
    Ok(Outcome::Reply(out))
}

/// A channel's requests: what a sender in another process needs of the owner.
fn handle_channel(
    channel: &Channel,
    code: u8,
    r: &mut In<'_>,
    mut out: Out,
    may_block: bool,
) -> Result<Outcome> {
    match code {
        op::CHANNEL_SYNC | op::DROP_RECEIVER | op::COLLECT if !may_block => {
            return Ok(Outcome::Blocking)
        }
        op::SEND_MANY => {
            let n = r.count(4, "messages")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(r.bytes("message")?);
            }
            r.end()?;
            let (first, logged) = channel.send_many_logged(&items)?;
            out.i64(first);
            return Ok(Outcome::Durable(out, logged));
        }
        op::CHANNEL_SYNC => {
            r.end()?;
            channel.sync()?;
        }
        op::DROP_RECEIVER => {
            let name = r.str("receiver")?;
            r.end()?;
            out.u8(channel.drop_receiver(name)? as u8);
        }
        op::COLLECT => {
            r.end()?;
            out.u64(channel.collect()? as u64);
        }
        op::DISK_FULL => {
            r.end()?;
            out.u8(channel.disk_full() as u8);
        }
        other => return Err(wire::malformed(format!("unknown channel request {other}"))),
    }
    Ok(Outcome::Reply(out))
}

/// Records acked or nacked over this session are no longer its to return.
fn settle<'a>(
    shared: &Shared,
    session: u64,
    items: impl Iterator<Item = (&'a [u8], u64, Option<u64>)>,
) {
    let mut sessions = lock(&shared.sessions);
    let Some(s) = sessions.get_mut(&session) else {
        return;
    };
    for (queue, id, receipt) in items {
        match receipt {
            Some(receipt) => {
                s.in_flight.remove(&(queue.to_vec(), id, receipt));
            }
            None => s.in_flight.retain(|(q, i, _)| !(q == queue && *i == id)),
        }
    }
}

/// A client's hello: magic, version, session. The session it names.
pub(super) fn hello(body: &[u8]) -> Result<u64> {
    let mut r = In::new(body);
    let magic = r.u32("magic")?.to_le_bytes();
    if &magic != wire::MAGIC {
        return Err(wire::malformed("not a tflux client"));
    }
    let version = r.u32("version")?;
    if version != wire::VERSION {
        return Err(Error::InvalidArgument(format!(
            "the owner speaks version {} of the protocol, the client {version}: use the same \
             tflux in every process that shares a base directory",
            wire::VERSION
        )));
    }
    let session = r.u64("session")?;
    r.end()?;
    Ok(session)
}

/// The owner's answer to a hello: the protocol version, its process id, the dialect.
pub(super) fn welcome(served: &Served) -> Result<Vec<u8>> {
    let mut reply = Out::new(wire::OK);
    reply
        .u32(wire::VERSION)
        .u32(std::process::id())
        .bytes(match served {
            Served::Store(store) => store.layout().dialect.name().as_bytes(),
            Served::Channel(_) => b"spec",
        });
    reply.frame()
}

/// The reply frame of a failed request.
pub(super) fn error_reply(err: &Error) -> Result<Vec<u8>> {
    let r = err.to_remote();
    let mut out = Out::new(wire::FAILED);
    out.u8(r.kind as u8)
        .bytes(r.message.as_bytes())
        .u8(r.path.is_some() as u8)
        .bytes(r.path.as_deref().unwrap_or("").as_bytes())
        .opt_u64(r.offset)
        .opt_i64(r.errno.map(i64::from))
        .bytes(r.queue.as_bytes())
        .bytes(r.policy.as_bytes())
        .opt_i64(r.lsn);
    out.frame()
}

/// The frame to send for a request's result: its reply, or the error's (a reply too large
/// for a frame is an error too).
pub(super) fn reply_frame(result: Result<Out>) -> Option<Vec<u8>> {
    match result.and_then(Out::frame) {
        Ok(frame) => Some(frame),
        Err(e) => error_reply(&e).ok(),
    }
}
