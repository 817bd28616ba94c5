//! One client connection as the owner's loop sees it: a non-blocking socket, the bytes of the
//! request still arriving, the reply still leaving, and the deadlines that keep a slow or
//! hostile peer from holding anything: a frame must arrive whole within [`FRAME_DEADLINE`]
//! of its first byte, a reply must be read within [`SEND_DEADLINE`].

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use super::wire::{MAX_REQUEST, SMALL_REQUEST};
use crate::fork::ParentOnly;

/// A peer that starts a frame must finish it within this time.
pub const FRAME_DEADLINE: Duration = Duration::from_secs(10);
/// A reply the peer does not read within this time drops the connection.
pub const SEND_DEADLINE: Duration = Duration::from_secs(10);

/// Reads of one connection per turn of the loop (so one large frame does not hold up the
/// others for long).
const READS_PER_TURN: usize = 16;
/// Receive room a connection keeps between frames.
const KEPT_CAPACITY: usize = 64 << 10;

pub(super) struct Connection {
    pub id: u64,
    pub stream: ParentOnly<UnixStream>,
    /// The client process's session, once its hello was answered.
    pub session: Option<u64>,
    /// Counted in the server's requests in progress (until its reply is sent).
    pub counted: bool,
    /// Bytes received and not yet taken as a frame: they grow only by what arrived, so a
    /// length alone reserves nothing.
    received: Vec<u8>,
    /// When the first byte of the frame now arriving came.
    frame_started: Option<Instant>,
    reply: Vec<u8>,
    replied: usize,
    /// Since when the reply has waited for the peer to read.
    stalled_since: Option<Instant>,
    /// Shut for reading (the server closes): what arrived before is still read.
    read_shut: bool,
}

impl Connection {
    pub fn new(id: u64, stream: ParentOnly<UnixStream>) -> Connection {
        Connection {
            id,
            stream,
            session: None,
            counted: false,
            received: Vec::new(),
            frame_started: None,
            reply: Vec::new(),
            replied: 0,
            stalled_since: None,
            read_shut: false,
        }
    }

    /// Takes no more requests: the peer's later writes fail (`EPIPE`), so it knows they
    /// never arrived; the bytes that did arrive are still read, then the read sees the end.
    pub fn stop_reading(&mut self) {
        if !std::mem::replace(&mut self.read_shut, true) {
            let _ = self.stream.shutdown(std::net::Shutdown::Read);
        }
    }

    pub fn fd(&self) -> i32 {
        self.stream.as_raw_fd()
    }

    /// Whether the loop should read: no reply is leaving (requests and replies alternate,
    /// so a peer that does not read its replies is not read either) and no whole frame
    /// waits to be taken.
    pub fn wants_read(&self) -> bool {
        !self.is_replying() && !self.has_frame()
    }

    pub fn is_replying(&self) -> bool {
        self.replied < self.reply.len()
    }

    /// Reads what arrived: until the socket has no more, a whole frame is in, or
    /// [`READS_PER_TURN`] reads of `scratch.len()` bytes. False when the peer closed.
    pub fn receive(&mut self, scratch: &mut [u8]) -> io::Result<bool> {
        let mut reads = 0;
        while reads < READS_PER_TURN && !self.has_frame() {
            match (&*self.stream).read(scratch) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    reads += 1;
                    if self.received.is_empty() {
                        self.frame_started = Some(Instant::now());
                    }
                    self.grow_for(n);
                    self.received.extend_from_slice(&scratch[..n]);
                    if n < scratch.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Room for `n` more bytes. A large request's room is reserved to its end once its first
    /// bytes after the length arrived: address space only, the pages are the kernel's until the
    /// bytes are written, so it holds what arrived and is never moved (a vector's doubling
    /// made a 200 MiB frame hold 256 MiB, and each move copied it).
    fn grow_for(&mut self, n: usize) {
        let needed = self.received.len() + n;
        if needed <= self.received.capacity() {
            return;
        }
        let target = match self.frame_len() {
            Some(len) if len > SMALL_REQUEST && len <= MAX_REQUEST => (4 + len).max(needed),
            _ => needed.max(self.received.capacity() * 2),
        };
        self.received.reserve_exact(target - self.received.len());
    }

    /// The bytes this connection holds for a large request not yet taken (small ones are
    /// not counted: they are read whatever the budget).
    pub fn holds(&self) -> usize {
        if self.frame_is_small() {
            0
        } else {
            self.received.capacity()
        }
    }

    /// Whether the frame now arriving (if any) is small enough to be read whatever the
    /// owner's budget for unfinished requests.
    pub fn frame_is_small(&self) -> bool {
        self.frame_len().is_none_or(|len| len <= SMALL_REQUEST)
    }

    fn frame_len(&self) -> Option<usize> {
        let head = self.received.get(..4)?;
        Some(u32::from_le_bytes(head.try_into().unwrap()) as usize)
    }

    fn has_frame(&self) -> bool {
        self.frame_len()
            .is_some_and(|len| len > MAX_REQUEST || self.received.len() >= 4 + len)
    }

    /// The body of the next whole frame, if one has arrived; an error for a length over
    /// [`MAX_REQUEST`] (the connection then ends: it can no longer be kept in step).
    pub fn take_frame(&mut self) -> io::Result<Option<Vec<u8>>> {
        let Some(len) = self.frame_len() else {
            return Ok(None);
        };
        if len > MAX_REQUEST {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a request of {len} bytes (the most is {MAX_REQUEST})"),
            ));
        }
        if self.received.len() < 4 + len {
            return Ok(None);
        }
        let body = if self.received.len() == 4 + len && len > SMALL_REQUEST {
            // The frame alone: its room becomes the body (no copy of a large request).
            let mut body = std::mem::take(&mut self.received);
            body.drain(..4);
            body
        } else {
            let body = self.received[4..4 + len].to_vec();
            self.received.drain(..4 + len);
            body
        };
        if self.received.is_empty() && self.received.capacity() > KEPT_CAPACITY {
            // A large frame's room goes with it.
            self.received = Vec::new();
        }
        self.frame_started = (!self.received.is_empty()).then(Instant::now);
        Ok(Some(body))
    }

    /// Queues a reply (the one before it was sent: requests and replies alternate).
    pub fn reply(&mut self, frame: Vec<u8>) {
        debug_assert!(!self.is_replying());
        self.reply = frame;
        self.replied = 0;
    }

    /// Sends what the socket takes of the reply; true once all of it is sent.
    pub fn flush(&mut self) -> io::Result<bool> {
        while self.is_replying() {
            match (&*self.stream).write(&self.reply[self.replied..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.replied += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stalled_since.get_or_insert_with(Instant::now);
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        self.reply = Vec::new();
        self.replied = 0;
        self.stalled_since = None;
        Ok(true)
    }

    /// Whether the peer overran a deadline: a frame begun and not finished, a reply unread.
    pub fn overdue(&self, now: Instant) -> bool {
        let late = |since: Option<Instant>, limit: Duration| {
            since.is_some_and(|t| now.saturating_duration_since(t) > limit)
        };
        late(self.frame_started, FRAME_DEADLINE) || late(self.stalled_since, SEND_DEADLINE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Connection, UnixStream) {
        let (ours, peer) = UnixStream::pair().unwrap();
        ours.set_nonblocking(true).unwrap();
        (Connection::new(0, ParentOnly::new(ours)), peer)
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn a_frame_is_taken_only_once_whole_and_frames_come_out_in_order() {
        let (mut c, mut peer) = pair();
        let mut scratch = vec![0; 64];
        let (a, b) = (frame(b"first"), frame(b"second"));
        peer.write_all(&a[..3]).unwrap();
        assert!(c.receive(&mut scratch).unwrap());
        assert!(c.take_frame().unwrap().is_none());
        assert!(c.wants_read());
        let mut rest = a[3..].to_vec();
        rest.extend_from_slice(&b);
        peer.write_all(&rest).unwrap();
        assert!(c.receive(&mut scratch).unwrap());
        assert_eq!(c.take_frame().unwrap().as_deref(), Some(&b"first"[..]));
        assert_eq!(c.take_frame().unwrap().as_deref(), Some(&b"second"[..]));
        assert!(c.take_frame().unwrap().is_none());
        drop(peer);
        assert!(
            !c.receive(&mut scratch).unwrap(),
            "the peer's close is seen"
        );
    }

    #[test]
    fn a_length_alone_reserves_nothing_and_an_oversized_one_is_refused() {
        let (mut c, mut peer) = pair();
        let mut scratch = vec![0; 1024];
        peer.write_all(&(60u32 << 20).to_le_bytes()).unwrap();
        peer.write_all(b"x").unwrap();
        c.receive(&mut scratch).unwrap();
        assert!(c.take_frame().unwrap().is_none());
        assert!(c.received.capacity() < 4096, "sized by what arrived");
        let (mut c, mut peer) = pair();
        peer.write_all(&u32::MAX.to_le_bytes()).unwrap();
        c.receive(&mut scratch).unwrap();
        assert!(
            !c.wants_read(),
            "nothing more is read of a peer that announced too much"
        );
        assert!(c.take_frame().is_err());
    }

    #[test]
    fn a_large_request_holds_its_own_size_and_is_taken_without_a_copy() {
        let (mut c, peer) = pair();
        let len = (1 << 20) + 3;
        let mut scratch = vec![0; 64 << 10];
        let sender = std::thread::spawn(move || {
            let mut peer = peer;
            peer.write_all(&frame(&vec![5; len])).unwrap();
            peer
        });
        let body = loop {
            c.receive(&mut scratch).unwrap();
            assert!(
                c.holds() <= 4 + len,
                "{} held for a frame of {len}",
                c.holds()
            );
            if let Some(body) = c.take_frame().unwrap() {
                break body;
            }
        };
        assert_eq!(body.len(), len);
        assert!(body.capacity() <= 4 + len);
        assert!(c.received.capacity() <= KEPT_CAPACITY);
        drop(sender.join().unwrap());
        let (mut c, mut peer) = pair();
        peer.write_all(&((MAX_REQUEST + 1) as u32).to_le_bytes())
            .unwrap();
        c.receive(&mut scratch).unwrap();
        assert!(
            c.take_frame().is_err(),
            "a request over the most an owner takes"
        );
    }

    #[test]
    fn a_peer_that_does_not_read_its_reply_overruns_the_send_deadline_only() {
        let (mut c, _peer) = pair();
        c.reply(vec![7; 8 << 20]);
        assert!(!c.flush().unwrap(), "the socket takes only part of 8 MiB");
        assert!(c.is_replying() && !c.wants_read());
        let now = Instant::now();
        assert!(!c.overdue(now));
        assert!(c.overdue(now + SEND_DEADLINE + Duration::from_secs(1)));
    }
}
