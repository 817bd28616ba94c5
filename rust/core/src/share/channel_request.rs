//! What a sender in another process asks of a channel's owner: one enum, declared once with its
//! codes and fields as the store's [`Request`](crate::store::Request) is, so the client, the
//! owner's server and the wire's fingerprint read the same declaration (apart from
//! `share::channel`, which stands above the client: no import circle).

use crate::channel::Channel;
use crate::durability::Logged;
use crate::error::Result;
use crate::store::request::codec::messages;
use crate::store::request::{Pace, Resend};
use crate::store::Reply;

messages! {
    /// What a sender in another process asks of a channel's owner (codes after the store's:
    /// wire format, as [`Request`](crate::store::Request)'s).
    #[derive(Debug, Clone, PartialEq)]
    pub enum ChannelRequest<'a> {
        /// All or nothing. Reply: `Lsn` (the first message's).
        32 => SendMany { messages: Vec<&'a [u8]> },
        33 => Fsync {},
        /// Reply: `Flag` (false: no such receiver).
        34 => DropReceiver { name: &'a str },
        /// Reply: `Count` (segments deleted).
        35 => Collect {},
        /// Reply: `Flag`.
        36 => DiskFull {},
    }
}

impl ChannelRequest<'_> {
    pub fn resend(&self) -> Resend {
        use ChannelRequest::*;
        match self {
            SendMany { .. } | DropReceiver { .. } | Collect {} => Resend::IfUnsent,
            Fsync {} | DiskFull {} => Resend::Again,
        }
    }

    pub fn pace(&self) -> Pace {
        use ChannelRequest::*;
        match self {
            SendMany { .. } | DiskFull {} => Pace::Quick,
            Fsync {} | DropReceiver { .. } | Collect {} => Pace::Long,
        }
    }

    /// Carries out the request on `channel`, without the wait for durability of what it
    /// appended ([`Channel::make_durable`]).
    pub fn execute_logged(&self, channel: &Channel) -> Result<(Reply, Logged)> {
        use ChannelRequest::*;
        let reply = match self {
            SendMany { messages } => {
                let (first, logged) = channel.send_many_logged(messages)?;
                return Ok((Reply::Lsn(first), logged));
            }
            Fsync {} => Reply::Done(channel.sync()?),
            DropReceiver { name } => Reply::Flag(channel.drop_receiver(name)?),
            Collect {} => Reply::Count(channel.collect()? as u64),
            DiskFull {} => Reply::Flag(channel.disk_full()),
        };
        Ok((reply, Logged::NOTHING))
    }

    /// Carries out the request on `channel` and waits until it is durable.
    pub fn execute(&self, channel: &Channel) -> Result<Reply> {
        let (reply, logged) = self.execute_logged(channel)?;
        channel.make_durable(logged)?;
        Ok(reply)
    }
}
