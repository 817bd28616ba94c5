//! The bytes of a request or a reply (the body of a frame between an owner and its clients,
//! docs/format.md "Several processes"): each message is its code (`u8`) and then its fields
//! in order, every field spelled by its type's [`Put`] and [`Get`], all little-endian:
//!
//! ```text
//! u8 u32 u64 i64 | bool: u8 0/1 | bytes, str: u32 length, bytes | Option: u8 0/1, value
//! Vec: u32 count, items | Duration: u64 nanoseconds | tuples and records: fields in order
//! ```
//!
//! A message type is declared once with `messages!` (its variants, codes and fields), which
//! writes its encoder and decoder: nothing else spells its bytes. Every length and count read
//! from a peer is checked against the bytes of the body before anything is allocated for it.

use std::time::Duration;

use crate::base::settings::Settings;
use crate::error::{Error, ErrorKind, ErrorReport, Result};
use crate::format::queue::QueueConfig;
use crate::format::rules::{QueueRules, RulesChange};
use crate::state::{QueueInfo, Record};
use crate::store::request::StoreInfo;
use crate::store::{Delivery, Listed, QueueStats};

/// The generation of the spellings below (`Put`/`Get` of every type): bumped when one of them
/// changes. What the message types declare is fingerprinted by itself ([`fingerprint`]).
pub const SPELLING: &str = "1";

/// FNV-1a of `parts`, for the protocol version (`share::wire::VERSION`): every message type
/// gives the text of its declaration (codes, variants, field names and types, as
/// `messages!` and `replies!` see them), so two builds whose requests or replies differ in
/// any of these refuse each other at the hello, without anyone remembering to bump a number.
pub const fn fingerprint(parts: &[&str]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    let mut i = 0;
    while i < parts.len() {
        let bytes = parts[i].as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            hash ^= bytes[j] as u32;
            hash = hash.wrapping_mul(0x0100_0193);
            j += 1;
        }
        // A separator, so that moving text from one part to the next changes the hash.
        hash ^= 0xff;
        hash = hash.wrapping_mul(0x0100_0193);
        i += 1;
    }
    hash
}

/// A body that is not one (a peer's mistake or malice).
pub fn malformed(what: impl Into<String>) -> Error {
    Error::InvalidArgument(format!("malformed frame: {}", what.into()))
}

/// Builds a body. Its first four bytes are room for the frame's length, which the framing
/// (`share::wire::frame`) fills in, so a body is never copied to be framed.
pub struct Out(pub Vec<u8>);

impl Default for Out {
    fn default() -> Out {
        Out::new()
    }
}

impl Out {
    pub fn new() -> Out {
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&[0; 4]);
        Out(v)
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend_from_slice(v);
        self
    }
    /// Appends one value of any type that has a spelling.
    pub fn put<T: Put + ?Sized>(&mut self, v: &T) -> &mut Self {
        v.put(self);
        self
    }
    /// The body's length so far (without the room for the frame's length).
    pub fn len(&self) -> usize {
        self.0.len() - 4
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
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
    /// Reads one value of any type that has a spelling (`what` names it in errors).
    pub fn get<T: Get<'a>>(&mut self, what: &'static str) -> Result<T> {
        T::get(self, what)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Refuses bytes left over (a body of another layout).
    pub fn end(&self) -> Result<()> {
        match self.left() {
            0 => Ok(()),
            n => Err(malformed(format!("{n} bytes after the last field"))),
        }
    }
}

/// How a value is written into a body.
pub trait Put {
    fn put(&self, out: &mut Out);
}

/// How a value is read from a body (borrowing from it where it can).
pub trait Get<'r>: Sized {
    /// The fewest bytes one value takes: a count of values is refused when the rest of the
    /// body cannot hold them, so no vector is sized by a peer's number alone.
    const MIN: usize = 1;
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self>;
}

impl<T: Put + ?Sized> Put for &T {
    fn put(&self, out: &mut Out) {
        (**self).put(out)
    }
}

macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl Put for $t {
            fn put(&self, out: &mut Out) {
                out.0.extend_from_slice(&self.to_le_bytes());
            }
        }
        impl<'r> Get<'r> for $t {
            const MIN: usize = std::mem::size_of::<$t>();
            fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
                Ok(<$t>::from_le_bytes(r.array(what)?))
            }
        }
    )*};
}
numbers!(u8, u32, u64, i32, i64);

impl Put for () {
    fn put(&self, _: &mut Out) {}
}
impl<'r> Get<'r> for () {
    const MIN: usize = 0;
    fn get(_: &mut In<'r>, _: &'static str) -> Result<()> {
        Ok(())
    }
}

impl Put for bool {
    fn put(&self, out: &mut Out) {
        out.u8(*self as u8);
    }
}
impl<'r> Get<'r> for bool {
    fn get(r: &mut In<'r>, what: &'static str) -> Result<bool> {
        match r.get::<u8>(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(malformed(format!("{what}: flag byte {b}"))),
        }
    }
}

/// A length or count as the body spells it; more than `u32` can say is refused by the
/// frame's size limit long before (a frame holds at most 256 MiB).
fn put_len(out: &mut Out, n: usize) {
    out.put(&(u32::try_from(n).unwrap_or(u32::MAX)));
}

impl Put for [u8] {
    fn put(&self, out: &mut Out) {
        put_len(out, self.len());
        out.raw(self);
    }
}
impl<'r: 'a, 'a> Get<'r> for &'a [u8] {
    const MIN: usize = 4;
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        let n = r.get::<u32>(what)? as usize;
        r.take(n, what)
    }
}

impl Put for str {
    fn put(&self, out: &mut Out) {
        self.as_bytes().put(out)
    }
}
impl<'r: 'a, 'a> Get<'r> for &'a str {
    const MIN: usize = 4;
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        std::str::from_utf8(r.get::<&[u8]>(what)?)
            .map_err(|_| malformed(format!("{what}: not UTF-8")))
    }
}
impl Put for String {
    fn put(&self, out: &mut Out) {
        self.as_str().put(out)
    }
}
impl<'r> Get<'r> for String {
    const MIN: usize = 4;
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        Ok(r.get::<&str>(what)?.to_string())
    }
}

impl<T: Put> Put for Option<T> {
    fn put(&self, out: &mut Out) {
        match self {
            None => out.u8(0),
            Some(v) => out.u8(1).put(v),
        };
    }
}
impl<'r, T: Get<'r>> Get<'r> for Option<T> {
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        Ok(if r.get::<bool>(what)? {
            Some(r.get(what)?)
        } else {
            None
        })
    }
}

impl<T: Put> Put for Vec<T> {
    fn put(&self, out: &mut Out) {
        put_len(out, self.len());
        for v in self {
            v.put(out);
        }
    }
}
impl<'r, T: Get<'r>> Get<'r> for Vec<T> {
    const MIN: usize = 4;
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        let n = r.get::<u32>(what)? as usize;
        if n.saturating_mul(T::MIN.max(1)) > r.left() {
            return Err(malformed(format!(
                "{what}: {n} items cannot fit in the frame"
            )));
        }
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            v.push(r.get(what)?);
        }
        Ok(v)
    }
}

macro_rules! tuples {
    ($(($($t:ident $i:tt),+))*) => {$(
        impl<$($t: Put),+> Put for ($($t,)+) {
            fn put(&self, out: &mut Out) {
                $(self.$i.put(out);)+
            }
        }
        impl<'r, $($t: Get<'r>),+> Get<'r> for ($($t,)+) {
            const MIN: usize = 0 $(+ $t::MIN)+;
            fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
                Ok(($(r.get::<$t>(what)?,)+))
            }
        }
    )*};
}
tuples!((A 0, B 1) (A 0, B 1, C 2));

impl Put for Duration {
    fn put(&self, out: &mut Out) {
        out.put(&(self.as_nanos().min(u64::MAX as u128) as u64));
    }
}
impl<'r> Get<'r> for Duration {
    const MIN: usize = 8;
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        Ok(Duration::from_nanos(r.get(what)?))
    }
}

impl Put for QueueConfig {
    fn put(&self, out: &mut Out) {
        out.put(&self.implementation)
            .put(&self.max_queue_size.map(|v| v as u64))
            .put(&self.max_message_size.map(|v| v as u64))
            .put(&self.key_range);
    }
}
impl<'r> Get<'r> for QueueConfig {
    const MIN: usize = 7;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        let size = |v: Option<u64>, what: &str| -> Result<Option<u32>> {
            v.map(|v| u32::try_from(v).map_err(|_| malformed(format!("{what} {v}"))))
                .transpose()
        };
        Ok(QueueConfig {
            implementation: r.get("implementation")?,
            max_queue_size: size(r.get("max size")?, "max size")?,
            max_message_size: size(r.get("max message size")?, "max message size")?,
            key_range: r.get("key range")?,
        })
    }
}

impl Put for Record {
    fn put(&self, out: &mut Out) {
        out.put(&self.id).put(&self.key).put(&*self.data);
    }
}
impl<'r> Get<'r> for Record {
    const MIN: usize = 20;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(Record {
            id: r.get("record id")?,
            key: r.get("record key")?,
            data: r.get::<&[u8]>("record payload")?.to_vec().into(),
        })
    }
}

impl Put for QueueInfo {
    fn put(&self, out: &mut Out) {
        out.put(&self.name)
            .put(&self.config)
            .put(&self.last_id)
            .put(&self.count)
            .put(&self.in_flight);
    }
}
impl<'r> Get<'r> for QueueInfo {
    const MIN: usize = 35;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(QueueInfo {
            name: r.get("queue name")?,
            config: r.get("queue config")?,
            last_id: r.get("last id")?,
            count: r.get("count")?,
            in_flight: r.get("in flight")?,
        })
    }
}

impl Put for QueueRules {
    fn put(&self, out: &mut Out) {
        out.put(&self.dead_letter.as_ref().map(|(q, n)| (q.as_slice(), *n)))
            .put(&self.retry_delay_ms)
            .put(&self.retry_backoff)
            .put(&self.retry_max_delay_ms)
            .put(&self.lease_ms);
    }
}
impl<'r> Get<'r> for QueueRules {
    const MIN: usize = 5;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        let dead: Option<(&[u8], i32)> = r.get("dead letter")?;
        Ok(QueueRules {
            dead_letter: dead.map(|(q, n)| (q.to_vec(), n)),
            retry_delay_ms: r.get("retry delay")?,
            retry_backoff: r.get("retry backoff")?,
            retry_max_delay_ms: r.get("retry max delay")?,
            lease_ms: r.get("lease")?,
        })
    }
}

impl Put for RulesChange<&[u8]> {
    fn put(&self, out: &mut Out) {
        out.put(&self.dead_letter)
            .put(&self.retry_delay_ms)
            .put(&self.retry_backoff)
            .put(&self.retry_max_delay_ms)
            .put(&self.lease_ms);
    }
}
impl<'r> Get<'r> for RulesChange<&'r [u8]> {
    const MIN: usize = 5;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(RulesChange {
            dead_letter: r.get("dead letter")?,
            retry_delay_ms: r.get("retry delay")?,
            retry_backoff: r.get("retry backoff")?,
            retry_max_delay_ms: r.get("retry max delay")?,
            lease_ms: r.get("lease")?,
        })
    }
}

impl Put for QueueStats {
    fn put(&self, out: &mut Out) {
        out.put(&self.ready)
            .put(&self.delayed)
            .put(&self.in_flight)
            .put(&self.dead_lettered)
            .put(&self.oldest_ready_age_ms)
            .put(&self.enqueued)
            .put(&self.acked)
            .put(&self.nacked)
            .put(&self.expired);
    }
}
impl<'r> Get<'r> for QueueStats {
    const MIN: usize = 65;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(QueueStats {
            ready: r.get("ready")?,
            delayed: r.get("delayed")?,
            in_flight: r.get("in flight")?,
            dead_lettered: r.get("dead lettered")?,
            oldest_ready_age_ms: r.get("oldest ready age")?,
            enqueued: r.get("enqueued")?,
            acked: r.get("acked")?,
            nacked: r.get("nacked")?,
            expired: r.get("expired")?,
        })
    }
}

impl Put for Delivery {
    fn put(&self, out: &mut Out) {
        out.put(&self.record)
            .put(&self.receipt)
            .put(&self.attempts)
            .put(&self.enqueued_at);
    }
}
impl<'r> Get<'r> for Delivery {
    const MIN: usize = 33;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(Delivery {
            record: r.get("record")?,
            receipt: r.get("receipt")?,
            attempts: r.get("attempts")?,
            enqueued_at: r.get("enqueued at")?,
        })
    }
}

impl Put for Listed {
    fn put(&self, out: &mut Out) {
        out.put(&self.record)
            .put(&self.attempts)
            .put(&self.enqueued_at);
    }
}
impl<'r> Get<'r> for Listed {
    const MIN: usize = 25;
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(Listed {
            record: r.get("record")?,
            attempts: r.get("attempts")?,
            enqueued_at: r.get("enqueued at")?,
        })
    }
}

impl Put for Settings {
    fn put(&self, out: &mut Out) {
        out.put(&self.to_json());
    }
}
impl<'r> Get<'r> for Settings {
    const MIN: usize = 4;
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        Settings::from_json(r.get(what)?)
    }
}

impl Put for StoreInfo {
    fn put(&self, out: &mut Out) {
        out.put(&self.log_bounds)
            .put(&self.term)
            .put(&self.settings);
    }
}
impl<'r> Get<'r> for StoreInfo {
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(StoreInfo {
            log_bounds: r.get("log bounds")?,
            term: r.get("term")?,
            settings: r.get("settings")?,
        })
    }
}

impl Put for ErrorKind {
    fn put(&self, out: &mut Out) {
        out.u8(*self as u8);
    }
}
impl<'r> Get<'r> for ErrorKind {
    fn get(r: &mut In<'r>, what: &'static str) -> Result<Self> {
        let code = r.get::<u8>(what)?;
        ErrorKind::from_code(code).ok_or_else(|| malformed(format!("error kind {code}")))
    }
}

impl Put for ErrorReport {
    fn put(&self, out: &mut Out) {
        out.put(&self.kind)
            .put(&self.message)
            .put(&self.path)
            .put(&self.offset)
            .put(&self.errno)
            .put(&self.queue)
            .put(&self.policy)
            .put(&self.lsn);
    }
}
impl<'r> Get<'r> for ErrorReport {
    fn get(r: &mut In<'r>, _: &'static str) -> Result<Self> {
        Ok(ErrorReport {
            kind: r.get("error kind")?,
            message: r.get("message")?,
            path: r.get("path")?,
            offset: r.get("offset")?,
            errno: r.get("errno")?,
            queue: r.get("queue")?,
            policy: r.get("policy")?,
            lsn: r.get("lsn")?,
        })
    }
}

/// Declares a message type: an enum whose variants each have a code (the first byte of the
/// body) and named fields, with its encoder (`encode`), decoder (`decode`: the code, every
/// field, and nothing after) and `name` written from that one declaration. A field's bytes
/// are its type's [`Put`] and [`Get`]; a variant added here needs nothing else to travel.
macro_rules! messages {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident $(<$lt:lifetime>)? {
            $(
                $(#[$vmeta:meta])*
                $code:literal => $variant:ident { $($field:ident : $ty:ty),* $(,)? }
            ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name $(<$lt>)? {
            $( $(#[$vmeta])* $variant { $($field: $ty),* }, )*
        }

        impl $(<$lt>)? $name $(<$lt>)? {
            /// The declaration's codes, variants and fields, for the protocol's fingerprint.
            pub const SHAPE: &'static str =
                stringify!($( $code $variant { $($field: $ty),* } )*);

            /// Appends the code and the fields.
            pub fn encode(&self, out: &mut $crate::store::request::codec::Out) {
                match self {
                    $( Self::$variant { $($field),* } => {
                        out.u8($code);
                        $( out.put($field); )*
                    } )*
                }
            }

            /// Reads a whole body: the code, each field, and nothing after.
            pub fn decode<'r>(body: &'r [u8]) -> $crate::error::Result<Self>
            where $('r: $lt)?
            {
                let mut r = $crate::store::request::codec::In::new(body);
                let code: u8 = r.get(concat!(stringify!($name), " code"))?;
                let message = match code {
                    $( $code => Self::$variant {
                        $( $field: r.get(stringify!($field))?, )*
                    }, )*
                    other => {
                        return Err($crate::store::request::codec::malformed(format!(
                            "unknown {} {other}",
                            stringify!($name)
                        )))
                    }
                };
                r.end()?;
                Ok(message)
            }

            /// The variant's name (for errors).
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$variant { .. } => stringify!($variant), )*
                }
            }
        }
    };
}
pub(crate) use messages;

/// Declares the reply type: an enum whose variants each carry one value of a type no other
/// variant carries, with its encoder and decoder (as `messages!`) and a `TryFrom<Reply>` for
/// each value type, so a caller asks for the type it expects (`let n: u64 = reply.try_into()?`)
/// and a reply of another variant is a clear error.
macro_rules! replies {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $code:literal => $variant:ident($ty:ty) ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis enum $name {
            $( $(#[$vmeta])* $variant($ty), )*
        }

        impl $name {
            /// The declaration's codes, variants and values, for the protocol's fingerprint.
            pub const SHAPE: &'static str = stringify!($( $code $variant($ty) )*);

            /// Appends the code and the value.
            pub fn encode(&self, out: &mut $crate::store::request::codec::Out) {
                match self {
                    $( Self::$variant(v) => {
                        out.u8($code).put(v);
                    } )*
                }
            }

            /// Reads a reply from `r` (the rest of the body is the caller's to check).
            pub fn decode(r: &mut $crate::store::request::codec::In<'_>) -> $crate::error::Result<Self> {
                let code: u8 = r.get(concat!(stringify!($name), " code"))?;
                Ok(match code {
                    $( $code => Self::$variant(r.get(stringify!($variant))?), )*
                    other => {
                        return Err($crate::store::request::codec::malformed(format!(
                            "unknown {} {other}",
                            stringify!($name)
                        )))
                    }
                })
            }

            /// The variant's name (for errors).
            pub fn name(&self) -> &'static str {
                match self {
                    $( Self::$variant(_) => stringify!($variant), )*
                }
            }
        }

        $(
            impl TryFrom<$name> for $ty {
                type Error = $crate::error::Error;
                fn try_from(reply: $name) -> $crate::error::Result<$ty> {
                    match reply {
                        $name::$variant(v) => Ok(v),
                        #[allow(unreachable_patterns)]
                        other => Err($crate::store::request::codec::malformed(format!(
                            "a reply {} where {} was expected",
                            other.name(),
                            stringify!($variant)
                        ))),
                    }
                }
            }
        )*
    };
}
pub(crate) use replies;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_every_short_body_is_an_error() {
        let items: Vec<(i64, &[u8])> = vec![(-5, b"payload"), (7, b"")];
        let mut out = Out::new();
        out.put(&b"jobs"[..])
            .put(&items)
            .put(&Some(Duration::from_millis(1500)))
            .put(&true);
        let body = &out.0[4..];
        let mut r = In::new(body);
        assert_eq!(r.get::<&[u8]>("q").unwrap(), b"jobs");
        assert_eq!(r.get::<Vec<(i64, &[u8])>>("items").unwrap(), items);
        assert_eq!(
            r.get::<Option<Duration>>("t").unwrap(),
            Some(Duration::from_millis(1500))
        );
        assert!(r.get::<bool>("f").unwrap());
        r.end().unwrap();
        for cut in 0..body.len() {
            let mut r = In::new(&body[..cut]);
            let all = (|| -> Result<()> {
                r.get::<&[u8]>("q")?;
                r.get::<Vec<(i64, &[u8])>>("items")?;
                r.get::<Option<Duration>>("t")?;
                r.get::<bool>("f")?;
                Ok(())
            })();
            assert!(all.is_err(), "a body cut at {cut} was read");
        }
    }

    #[test]
    fn a_count_larger_than_the_body_could_hold_is_refused_before_any_allocation() {
        let body = [0xff, 0xff, 0xff, 0x0f];
        let err = In::new(&body).get::<Vec<u64>>("ids").unwrap_err();
        assert!(err.to_string().contains("cannot fit"), "{err}");
        // An ack item without a receipt on a one-byte queue name: 4 + 1 + 8 + 1 bytes.
        type Ack<'a> = (&'a [u8], u64, Option<u64>);
        let mut out = Out::new();
        out.put(&vec![(&b"q"[..], 3u64, None::<u64>)]);
        let got: Vec<Ack> = In::new(&out.0[4..]).get("acks").unwrap();
        assert_eq!(got, vec![(&b"q"[..], 3, None)]);
    }

    #[test]
    fn the_fingerprint_sees_every_byte_and_where_the_parts_end() {
        let base = fingerprint(&["1 Count { queue: &'a [u8] }", "0 Done(())"]);
        assert_ne!(
            base,
            fingerprint(&["1 Count { queue: &'a [u8] }", "0 Done(( ))"])
        );
        assert_ne!(
            base,
            fingerprint(&["1 Count { queue: &'a [u8] }0 Done(())"])
        );
        assert_eq!(
            base,
            fingerprint(&["1 Count { queue: &'a [u8] }", "0 Done(())"])
        );
    }

    #[test]
    fn a_flag_byte_other_than_0_or_1_and_text_that_is_not_utf8_are_refused() {
        assert!(In::new(&[2]).get::<bool>("f").is_err());
        assert!(In::new(&[1, 0, 0, 0, 0xff]).get::<&str>("s").is_err());
    }
}
