//! The frames an owner and its clients exchange over the owner's socket (docs/format.md,
//! "Several processes"): a little-endian `u32` body length, then the body. Every length read
//! from a peer is checked against the bytes actually received before anything is allocated
//! for it, and a frame's body never exceeds [`MAX_FRAME`].
//!
//! The bodies are the client's hello and the owner's welcome (here: the version check), then
//! requests and their replies: a request is a [`Request`] (or a
//! channel's request) as its codec spells it, a reply a status byte and then the
//! [`Reply`] or the [`ErrorReport`] of the failure.

use std::io::{self, Read, Write};
use std::time::{Duration, Instant};

use super::channel_request::ChannelRequest;
use crate::error::{Error, ErrorReport, Result};
pub use crate::store::request::codec::malformed;
use crate::store::request::codec::{self, In, Out};
use crate::store::{Reply, Request};

/// The largest body of one frame (a request or a reply). An `enqueue_many` larger than this
/// is refused by the client before anything is sent.
pub const MAX_FRAME: usize = 256 << 20;
/// The largest request an owner takes (a client refuses to send more: send fewer records at a
/// time). Smaller than [`MAX_FRAME`], which bounds replies too (a copy of a large queue), so
/// what a peer's unfinished request may make the owner hold is bounded ([`UNFINISHED_BUDGET`]).
pub const MAX_REQUEST: usize = 64 << 20;
/// What the owner holds for the unfinished requests larger than [`SMALL_REQUEST`] of all its
/// connections together: past it, such connections are read again only once others finished
/// (or overran their deadline). Room for two of the largest.
pub const UNFINISHED_BUDGET: usize = 2 * MAX_REQUEST;
/// Requests up to this size are read whatever the budget (every usual request is one).
pub const SMALL_REQUEST: usize = 64 << 10;
/// The longest a single dequeue or wait request holds the owner (clients ask in slices).
pub const LONGEST_WAIT: Duration = Duration::from_secs(1);
/// The first bytes of a client's hello.
pub const MAGIC: &[u8; 4] = b"TFLX";
/// The protocol's version: a fingerprint of every request and reply as declared and of the
/// codec's spellings, so any change to a body's layout changes it (by itself) and an owner
/// refuses a client of another build at its hello, saying so, rather than misread its requests.
pub const VERSION: u32 = codec::fingerprint(&[
    codec::SPELLING,
    Request::SHAPE,
    Reply::SHAPE,
    ChannelRequest::SHAPE,
]);

/// A reply's first byte.
const OK: u8 = 0;
const FAILED: u8 = 1;

/// The finished frame of `body`: its length filled in. Fails for a body over [`MAX_FRAME`].
pub fn frame(mut body: Out) -> Result<Vec<u8>> {
    let len = body.len();
    if len > MAX_FRAME {
        return Err(Error::InvalidArgument(format!(
            "a frame of {len} bytes is larger than an owner and its clients exchange \
             ({MAX_FRAME} bytes): send or read fewer records at a time"
        )));
    }
    body.0[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(body.0)
}

/// A client's hello: magic, version, the session it belongs to.
pub fn hello(session: u64) -> Result<Vec<u8>> {
    let mut out = Out::new();
    out.raw(MAGIC).put(&VERSION).put(&session);
    frame(out)
}

/// The session a client's hello names; a hello of another build is refused, saying so.
pub fn read_hello(body: &[u8]) -> Result<u64> {
    let mut r = In::new(body);
    if r.take(4, "magic")? != MAGIC {
        return Err(malformed("not a tflux client"));
    }
    let version: u32 = r.get("version")?;
    if version != VERSION {
        return Err(Error::InvalidArgument(format!(
            "the owner speaks version {VERSION} of the protocol, the client {version}: use the \
             same tflux in every process that shares a base directory"
        )));
    }
    let session = r.get("session")?;
    r.end()?;
    Ok(session)
}

/// The owner's answer to a hello: the protocol version, its process id, the dialect.
pub fn welcome(dialect: &str) -> Result<Vec<u8>> {
    let mut out = Out::new();
    out.u8(OK)
        .put(&VERSION)
        .put(&std::process::id())
        .put(dialect);
    frame(out)
}

/// The owner's process id and dialect from its welcome (or the refusal it sent instead).
pub fn read_welcome(body: &[u8]) -> Result<(u32, String)> {
    let mut r = In::new(body);
    if r.get::<u8>("status")? != OK {
        return Err(read_error(&mut r));
    }
    let _version: u32 = r.get("version")?;
    let pid = r.get("pid")?;
    let dialect = r.get("dialect")?;
    Ok((pid, dialect))
}

/// A request's frame: `encode` writes its body. Fails for a body over [`MAX_REQUEST`].
pub fn request(encode: impl FnOnce(&mut Out)) -> Result<Vec<u8>> {
    let mut out = Out::new();
    encode(&mut out);
    let len = out.len();
    if len > MAX_REQUEST {
        return Err(Error::InvalidArgument(format!(
            "a request of {len} bytes is larger than an owner takes ({MAX_REQUEST} bytes): \
             send fewer records at a time"
        )));
    }
    frame(out)
}

/// The frame of a failed request (or of a refused connection).
pub fn error_frame(err: &Error) -> Result<Vec<u8>> {
    let mut out = Out::new();
    out.u8(FAILED).put(&err.report());
    frame(out)
}

/// The frame to send for a request's result: its reply, or the error's (a reply too large
/// for a frame is an error too); `None` when not even that could be built.
pub fn reply_frame(result: Result<Reply>) -> Option<Vec<u8>> {
    let framed = result.and_then(|reply| {
        let mut out = Out::new();
        out.u8(OK);
        reply.encode(&mut out);
        frame(out)
    });
    match framed {
        Ok(frame) => Some(frame),
        Err(e) => error_frame(&e).ok(),
    }
}

/// A reply's body: the reply, or the owner's error as it raised it.
pub fn read_reply(body: &[u8]) -> Result<Reply> {
    let mut r = In::new(body);
    if r.get::<u8>("status")? != OK {
        return Err(read_error(&mut r));
    }
    let reply = Reply::decode(&mut r)?;
    r.end()?;
    Ok(reply)
}

fn read_error(r: &mut In<'_>) -> Error {
    match r
        .get::<ErrorReport>("error")
        .and_then(|e| r.end().map(|()| e))
    {
        Ok(report) => Error::Remote(Box::new(report)),
        Err(e) => e,
    }
}

/// Writes a finished frame ([`frame`]).
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
    fn a_frame_round_trips() {
        let frame = request(|out| {
            crate::store::Request::Count { queue: b"jobs" }.encode(out);
        })
        .unwrap();
        let mut cursor = std::io::Cursor::new(frame);
        let Received::Frame(body) = receive(&mut cursor, Duration::from_secs(1), || true).unwrap()
        else {
            panic!("closed")
        };
        assert_eq!(
            crate::store::Request::decode(&body).unwrap(),
            crate::store::Request::Count { queue: b"jobs" }
        );
    }

    #[test]
    fn a_huge_length_is_refused_before_any_allocation() {
        let mut frame = (u32::MAX).to_le_bytes().to_vec();
        frame.push(1);
        let mut cursor = std::io::Cursor::new(frame);
        let err = receive(&mut cursor, Duration::from_secs(1), || true).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
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

    #[test]
    fn a_hello_of_another_version_is_refused_saying_so() {
        let mut out = Out::new();
        out.raw(MAGIC).put(&(VERSION + 1)).put(&1u64);
        let body = &frame(out).unwrap()[4..];
        let err = read_hello(body).unwrap_err();
        assert!(err.to_string().contains("version"), "{err}");
        assert_eq!(read_hello(&hello(7).unwrap()[4..]).unwrap(), 7);
    }

    #[test]
    fn an_error_reply_comes_back_as_the_error_the_owner_raised() {
        let err = Error::NoSuchQueue { name: "q".into() };
        let frame = error_frame(&err).unwrap();
        let back = read_reply(&frame[4..]).unwrap_err();
        assert_eq!(back.report(), err.report());
        let ok = reply_frame(Ok(Reply::Count(3))).unwrap();
        assert_eq!(read_reply(&ok[4..]).unwrap(), Reply::Count(3));
    }
}
