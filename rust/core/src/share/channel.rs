//! A channel shared by several processes: the owner (the first writable open) appends every
//! process's messages; the others send through it. Receivers need no owner: each process
//! reads the files itself (a client keeps a read-only view of the channel for them).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::channel_request::ChannelRequest;
use super::owner::{find_owner, Found};
use super::role::{Handle, Role, Roles};
use super::server::{Served, Server};
use crate::channel::{Channel, ChannelLayout, ChannelOptions, Receiver, Start};
use crate::error::{Error, Result};
use crate::store::Reply;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A channel directory open in this process, as its owner, a client of the owner, or alone.
pub struct SharedChannel {
    base: PathBuf,
    opts: ChannelOptions,
    share: bool,
    roles: Roles<Channel>,
    /// A client's read-only view, for receivers, bounds and the receivers' list.
    reader: Mutex<Option<Channel>>,
}

impl SharedChannel {
    pub fn open(base: &Path, opts: ChannelOptions, share: bool) -> Result<SharedChannel> {
        let shared = SharedChannel {
            base: base.to_path_buf(),
            opts,
            share,
            roles: Roles::new("channel"),
            reader: Mutex::new(None),
        };
        shared.roles.handle(|| shared.resolve())?;
        Ok(shared)
    }

    fn resolve(&self) -> Result<Role<Channel>> {
        if self.opts.readonly || !self.share {
            return Ok(Role::Local(Channel::open(&self.base, self.opts.clone())?));
        }
        crate::base::require_kind(&self.base, crate::base::Kind::Channel)?;
        let found = find_owner(&self.base, &*self.opts.storage, None, |socket| {
            let channel = Channel::open(&self.base, self.opts.clone())?;
            let server = Server::start(Served::Channel(channel.clone()), socket)?;
            Ok((channel, server))
        })?;
        Ok(match found {
            Found::Owner((channel, server), lock) => Role::Owner {
                held: channel,
                server,
                _lock: lock,
            },
            Found::Client(client) => {
                let mut reader = lock(&self.reader);
                if reader.as_ref().is_none_or(|r| !r.is_here()) {
                    let opts = ChannelOptions {
                        readonly: true,
                        ..self.opts.clone()
                    };
                    if let Some(old) = reader.replace(Channel::open(&self.base, opts)?) {
                        std::mem::forget(old); // a forked parent's: not this process's
                    }
                }
                Role::Client(Arc::new(client))
            }
        })
    }

    /// The channel that serves reads in this process: the owner's own or a client's view.
    fn view(&self) -> Result<Channel> {
        match self.roles.handle(|| self.resolve())? {
            Handle::Here(c) => Ok(c),
            Handle::Client(_) => lock(&self.reader).clone().ok_or(Error::Closed("channel")),
        }
    }

    /// Carries out `request` here or by the owner (`Roles::run`), its reply as the type the
    /// caller expects.
    fn call<T: TryFrom<Reply, Error = Error>>(&self, request: &ChannelRequest<'_>) -> Result<T> {
        self.roles
            .run(
                request.resend(),
                || self.resolve(),
                |c| request.execute(c),
                |c| c.execute_channel(request),
            )?
            .try_into()
    }

    pub fn layout(&self) -> ChannelLayout {
        ChannelLayout::new(&self.base)
    }

    pub fn readonly(&self) -> bool {
        self.opts.readonly
    }

    /// Whether this process owns the channel (appends to its log itself).
    pub fn is_owner(&self) -> bool {
        self.roles.is_owner(self.opts.readonly)
    }

    pub fn closed(&self) -> bool {
        self.roles.closed()
            || self.roles.with(|role| match role {
                Role::Local(c) | Role::Owner { held: c, .. } => c.closed(),
                _ => false,
            })
    }

    pub fn bounds(&self) -> Result<(i64, i64)> {
        self.view()?.bounds()
    }

    pub fn disk_full(&self) -> bool {
        match self.roles.handle(|| self.resolve()) {
            Ok(Handle::Here(c)) => c.disk_full(),
            Ok(Handle::Client(c)) => c
                .execute_channel(&ChannelRequest::DiskFull {})
                .and_then(bool::try_from)
                .unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Appends `items` (all or nothing) through the owner; the first one's LSN. A send whose
    /// owner was lost after it may have reached it is `OwnerLost` (it may have been appended).
    pub fn send_many<D: AsRef<[u8]>>(&self, items: &[D]) -> Result<i64> {
        if self.opts.readonly {
            return Err(Error::ReadOnly {
                path: self.base.clone(),
            });
        }
        let messages = items.iter().map(AsRef::as_ref).collect();
        self.call(&ChannelRequest::SendMany { messages })
    }

    pub fn sync(&self) -> Result<()> {
        self.call(&ChannelRequest::Fsync {})
    }

    pub fn receiver(&self, name: &str, start: Start) -> Result<Receiver> {
        self.view()?.receiver(name, start)
    }

    pub fn receivers(&self) -> Result<Vec<(String, i64)>> {
        self.view()?.receivers()
    }

    pub fn drop_receiver(&self, name: &str) -> Result<bool> {
        if self.opts.readonly {
            return self.view()?.drop_receiver(name);
        }
        self.call(&ChannelRequest::DropReceiver { name })
    }

    pub fn collect(&self) -> Result<usize> {
        if self.opts.readonly {
            return self.view()?.collect();
        }
        self.call(&ChannelRequest::Collect {})
            .map(|n: u64| n as usize)
    }

    /// An owner stops serving (its clients take over) and closes the channel; a client closes
    /// its connections and its view.
    pub fn close(&self) -> Result<()> {
        let closed = self.roles.close();
        if let Some(reader) = lock(&self.reader).take() {
            if reader.is_here() {
                let _ = reader.close();
            } else {
                std::mem::forget(reader);
            }
        }
        closed
    }
}
