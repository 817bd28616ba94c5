//! The frames an owner and its clients exchange over the owner's socket (docs/format.md,
//! "Several processes"): a little-endian `u32` body length, then the body. Every length read
//! from a peer is checked against the bytes actually received before anything is allocated
//! for it, and a frame's body never exceeds [`MAX_FRAME`].

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::format::queue::QueueConfig;
use crate::state::{QueueInfo, Record};

/// The largest body of one frame (a request or a reply). An `enqueue_many` larger than this
/// is refused by the client before anything is sent.
pub const MAX_FRAME: usize = 256 << 20;
/// The first bytes of a client's hello.
pub const MAGIC: &[u8; 4] = b"TFLX";
/// Bumped on any change to a frame's layout; an owner refuses a client of another version.
pub const VERSION: u32 = 1;

/// Requests, by their first byte.
pub mod op {
    pub const CREATE_QUEUE: u8 = 1;
    pub const DELETE_QUEUE: u8 = 2;
    pub const ENQUEUE_MANY: u8 = 3;
    pub const DEQUEUE: u8 = 4;
    pub const WAIT_READY: u8 = 5;
    pub const ACK_MANY: u8 = 6;
    pub const NACK: u8 = 7;
    pub const COUNT: u8 = 8;
    pub const PEEK: u8 = 9;
    pub const PEEK_ALL: u8 = 10;
    pub const QUEUES: u8 = 11;
    pub const SNAPSHOT: u8 = 12;
    pub const INFO: u8 = 13;
    // A channel's owner.
    pub const SEND_MANY: u8 = 32;
    pub const CHANNEL_SYNC: u8 = 33;
    pub const DROP_RECEIVER: u8 = 34;
    pub const COLLECT: u8 = 35;
    pub const DISK_FULL: u8 = 36;
}

/// Replies, by their first byte.
pub const OK: u8 = 0;
pub const FAILED: u8 = 1;

/// A frame that is not one (a peer's mistake or malice).
pub fn malformed(what: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("malformed frame: {}", what.into()))
}

/// Builds a body.
#[derive(Default)]
pub struct Out(pub Vec<u8>);

impl Out {
    pub fn new(first: u8) -> Out {
        // Room for the length, filled in by `frame`.
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0, 0, 0, 0, first]);
        Out(v)
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(v) => self.u8(1).u64(v),
        }
    }
    pub fn opt_i64(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            None => self.u8(0),
            Some(v) => self.u8(1).i64(v),
        }
    }
    pub fn record(&mut self, r: &Record, receipt: u64) -> &mut Self {
        self.u64(r.id).i64(r.key).bytes(&r.data).u64(receipt)
    }
    pub fn config(&mut self, c: &QueueConfig) -> &mut Self {
        self.u32(c.implementation as u32)
            .opt_u64(c.max_queue_size.map(u64::from))
            .opt_u64(c.max_message_size.map(u64::from));
        match c.key_range {
            None => self.u8(0),
            Some((lo, hi)) => self.u8(1).i64(lo).i64(hi),
        }
    }
    pub fn info(&mut self, q: &QueueInfo) -> &mut Self {
        self.bytes(q.name.as_bytes())
            .config(&q.config)
            .u64(q.last_id)
            .u64(q.count)
            .u64(q.in_flight)
    }
    /// The finished frame: length prefix and body. Fails for a body over [`MAX_FRAME`].
    pub fn frame(mut self) -> Result<Vec<u8>> {
        let body = self.0.len() - 4;
        if body > MAX_FRAME {
            return Err(Error::InvalidArgument(format!(
                "a frame of {body} bytes is larger than an owner and its clients exchange \
                 ({MAX_FRAME} bytes): send or read fewer records at a time"
            )));
        }
        self.0[..4].copy_from_slice(&(body as u32).to_le_bytes());
        Ok(self.0)
    }
}

/// Reads a body; every read is bounds-checked against the body.
pub struct In<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> In<'a> {
    pub fn new(buf: &'a [u8]) -> In<'a> {
        In { buf, pos: 0 }
    }
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                malformed(format!(
                    "{what} needs {n} bytes at offset {}, the frame has {}",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    pub fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(i64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    pub fn str(&mut self, what: &str) -> Result<&'a str> {
        std::str::from_utf8(self.bytes(what)?).map_err(|_| malformed(format!("{what}: not UTF-8")))
    }
    pub fn flag(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(malformed(format!("{what}: flag byte {b}"))),
        }
    }
    pub fn opt_u64(&mut self, what: &str) -> Result<Option<u64>> {
        Ok(if self.flag(what)? {
            Some(self.u64(what)?)
        } else {
            None
        })
    }
    pub fn opt_i64(&mut self, what: &str) -> Result<Option<i64>> {
        Ok(if self.flag(what)? {
            Some(self.i64(what)?)
        } else {
            None
        })
    }
    /// A count of items that each take at least `min_size` bytes: refused when the rest of
    /// the frame cannot hold them, so no vector is sized by a peer's number alone.
    pub fn count(&mut self, min_size: usize, what: &str) -> Result<usize> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_size.max(1)) > self.buf.len() - self.pos {
            return Err(malformed(format!(
                "{what}: {n} items cannot fit in the frame"
            )));
        }
        Ok(n)
    }
    pub fn record(&mut self) -> Result<(Record, u64)> {
        let id = self.u64("record id")?;
        let key = self.i64("record key")?;
        let data = self.bytes("record payload")?.to_vec();
        let receipt = self.u64("receipt")?;
        Ok((
            Record {
                id,
                key,
                data: data.into(),
            },
            receipt,
        ))
    }
    pub fn config(&mut self) -> Result<QueueConfig> {
        let implementation = self.u32("implementation")? as i32;
        let size = |v: Option<u64>, what: &str| -> Result<Option<u32>> {
            v.map(|v| u32::try_from(v).map_err(|_| malformed(format!("{what} {v}"))))
                .transpose()
        };
        let max_queue_size = size(self.opt_u64("max size")?, "max size")?;
        let max_message_size = size(self.opt_u64("max message size")?, "max message size")?;
        let key_range = if self.flag("key range")? {
            Some((self.i64("key range")?, self.i64("key range")?))
        } else {
            None
        };
        Ok(QueueConfig {
            implementation,
            max_queue_size,
            max_message_size,
            key_range,
        })
    }
    pub fn info(&mut self) -> Result<QueueInfo> {
        Ok(QueueInfo {
            name: self.str("queue name")?.to_string(),
            config: self.config()?,
            last_id: self.u64("last id")?,
            count: self.u64("count")?,
            in_flight: self.u64("in flight")?,
        })
    }
    /// Refuses bytes left over (a frame of another layout).
    pub fn end(&self) -> Result<()> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(malformed(format!(
                "{} bytes after the last field",
                self.buf.len() - self.pos
            )))
        }
    }
}

/// Writes a finished frame ([`Out::frame`]).
pub fn send(stream: &mut impl Write, frame: &[u8]) -> io::Result<()> {
    stream.write_all(frame)
}

/// How a peer's frame ended.
#[derive(Debug)]
pub enum Received {
    Frame(Vec<u8>),
    /// The peer closed the connection between frames.
    Closed,
}

/// Reads one frame. `idle` is called whenever the socket's read timeout passes before the
/// frame starts (return false to give up); once a frame has started it must be complete by
/// `frame_deadline` (a peer that sends half a frame, or trickles it, is dropped, never waited
/// on). The body grows only by the bytes that arrived: a length alone reserves nothing.
pub fn receive(
    stream: &mut impl Read,
    frame_deadline: Duration,
    mut idle: impl FnMut() -> bool,
) -> io::Result<Received> {
    let mut started: Option<Instant> = None;
    // Reads into `buf` (at most its length); 0 only at the end of the stream.
    let mut read_some = |buf: &mut [u8], started: &mut Option<Instant>| -> io::Result<usize> {
        loop {
            if let Some(t) = started {
                if t.elapsed() > frame_deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the peer did not finish a frame in time",
                    ));
                }
            }
            match stream.read(buf) {
                Ok(n) => {
                    if n > 0 {
                        started.get_or_insert_with(Instant::now);
                    }
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if started.is_none() && !idle() {
                        return Err(io::ErrorKind::ConnectionAborted.into());
                    }
                }
                Err(e) => return Err(e),
            }
        }
    };
    let mut head = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match read_some(&mut head[got..], &mut started)? {
            0 if got == 0 => return Ok(Received::Closed),
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => got += n,
        }
    }
    let len = u32::from_le_bytes(head) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes (the most is {MAX_FRAME})"),
        ));
    }
    // Grown by at most a chunk ahead of what arrived (zeroing only that much).
    const CHUNK: usize = 16 << 10;
    let mut body = Vec::new();
    while body.len() < len {
        let got = body.len();
        let want = (len - got).min(CHUNK);
        body.resize(got + want, 0);
        match read_some(&mut body[got..], &mut started) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => body.truncate(got + n),
            Err(e) => return Err(e),
        }
    }
    Ok(Received::Frame(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_round_trips_and_every_short_read_is_an_error() {
        let mut out = Out::new(op::ENQUEUE_MANY);
        out.bytes(b"jobs").u32(1).i64(-5).bytes(b"payload");
        let frame = out.frame().unwrap();
        let mut cursor = std::io::Cursor::new(frame.clone());
        let Received::Frame(body) = receive(&mut cursor, Duration::from_secs(1), || true).unwrap()
        else {
            panic!("closed")
        };
        let mut r = In::new(&body);
        assert_eq!(r.u8("op").unwrap(), op::ENQUEUE_MANY);
        assert_eq!(r.bytes("q").unwrap(), b"jobs");
        assert_eq!(r.count(12, "n").unwrap(), 1);
        assert_eq!(r.i64("k").unwrap(), -5);
        assert_eq!(r.bytes("p").unwrap(), b"payload");
        r.end().unwrap();
        for cut in 0..body.len() {
            let mut r = In::new(&body[..cut]);
            let all = (|| -> Result<()> {
                r.u8("op")?;
                r.bytes("q")?;
                r.count(12, "n")?;
                r.i64("k")?;
                r.bytes("p")?;
                Ok(())
            })();
            assert!(all.is_err(), "a body cut at {cut} was read");
        }
    }

    #[test]
    fn a_huge_length_is_refused_before_any_allocation() {
        let mut frame = (u32::MAX).to_le_bytes().to_vec();
        frame.push(1);
        let mut cursor = std::io::Cursor::new(frame);
        let err = receive(&mut cursor, Duration::from_secs(1), || true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        // A count larger than the frame could hold.
        let body = [0xff, 0xff, 0xff, 0x0f];
        assert!(In::new(&body).count(1, "n").is_err());
    }

    #[test]
    fn a_frame_cut_short_is_an_error_and_a_clean_close_is_not() {
        let mut cursor = std::io::Cursor::new(Vec::new());
        assert!(matches!(
            receive(&mut cursor, Duration::from_secs(1), || true).unwrap(),
            Received::Closed
        ));
        let mut cursor = std::io::Cursor::new(vec![10, 0, 0, 0, 1, 2]);
        assert!(receive(&mut cursor, Duration::from_secs(1), || true).is_err());
    }
}
