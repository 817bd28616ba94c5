//! A channel shared by several processes: the owner (the first writable open) appends every
//! process's messages; the others send through it. Receivers need no owner: each process
//! reads the files itself (a client keeps a read-only view of the channel for them).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{find_owner, Client, Found, Served, Server};
use crate::channel::{Channel, ChannelLayout, ChannelOptions, Receiver, Start};
use crate::error::{Error, Result};
use crate::fork::ParentOnly;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

enum Role {
    /// Read-only or not shared: this process's own channel.
    Local(Channel),
    Owner {
        channel: Channel,
        server: Server,
        _lock: ParentOnly<std::fs::File>,
    },
    Client(Arc<Client>),
    Lost,
}

enum Handle {
    Channel(Channel),
    Client(Arc<Client>),
}

/// A channel directory open in this process, as its owner, a client of the owner, or alone.
pub struct SharedChannel {
    base: PathBuf,
    opts: ChannelOptions,
    share: bool,
    role: Mutex<Role>,
    /// A client's read-only view, for receivers, bounds and the receivers' list.
    reader: Mutex<Option<Channel>>,
    closed: AtomicBool,
}

impl SharedChannel {
    pub fn open(base: &Path, opts: ChannelOptions, share: bool) -> Result<SharedChannel> {
        let shared = SharedChannel {
            base: base.to_path_buf(),
            opts,
            share,
            role: Mutex::new(Role::Lost),
            reader: Mutex::new(None),
            closed: AtomicBool::new(false),
        };
        let role = shared.resolve()?;
        *lock(&shared.role) = role;
        Ok(shared)
    }

    fn resolve(&self) -> Result<Role> {
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
                channel,
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

    fn handle(&self) -> Result<Handle> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed("channel"));
        }
        let mut role = lock(&self.role);
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed("channel"));
        }
        let forked = match &*role {
            Role::Owner { channel, .. } => !channel.is_here(),
            Role::Client(c) => !c.is_here(),
            _ => false,
        };
        if forked {
            std::mem::forget(std::mem::replace(&mut *role, Role::Lost));
        } else if matches!(&*role, Role::Client(c) if c.is_lost()) {
            *role = Role::Lost;
        }
        if matches!(*role, Role::Lost) {
            *role = self.resolve()?;
        }
        Ok(match &*role {
            Role::Local(c) | Role::Owner { channel: c, .. } => Handle::Channel(c.clone()),
            Role::Client(c) => Handle::Client(c.clone()),
            Role::Lost => unreachable!("resolved above"),
        })
    }

    /// The channel that serves reads in this process: the owner's own or a client's view.
    fn view(&self) -> Result<Channel> {
        match self.handle()? {
            Handle::Channel(c) => Ok(c),
            Handle::Client(_) => lock(&self.reader).clone().ok_or(Error::Closed("channel")),
        }
    }

    /// Runs a call; a request that surely never reached a lost owner goes to the next one
    /// (`repeatable`: whatever became of it).
    fn run<T>(
        &self,
        repeatable: bool,
        local: impl Fn(&Channel) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            tries += 1;
            let result = match self.handle()? {
                Handle::Channel(c) => local(&c),
                Handle::Client(c) => remote(&c),
            };
            match result {
                Err(Error::OwnerLost { sent, .. }) if tries < 2 && (repeatable || !sent) => {}
                other => return other,
            }
        }
    }

    pub fn layout(&self) -> ChannelLayout {
        ChannelLayout::new(&self.base)
    }

    pub fn readonly(&self) -> bool {
        self.opts.readonly
    }

    /// Whether this process owns the channel (appends to its log itself).
    pub fn is_owner(&self) -> bool {
        match &*lock(&self.role) {
            Role::Owner { channel, .. } => channel.is_here(),
            Role::Local(c) => !self.opts.readonly && c.is_here(),
            _ => false,
        }
    }

    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
            || match &*lock(&self.role) {
                Role::Local(c) | Role::Owner { channel: c, .. } => c.closed(),
                _ => false,
            }
    }

    pub fn bounds(&self) -> Result<(i64, i64)> {
        self.view()?.bounds()
    }

    pub fn disk_full(&self) -> bool {
        match self.handle() {
            Ok(Handle::Channel(c)) => c.disk_full(),
            Ok(Handle::Client(c)) => c.disk_full().unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Appends `items` (all or nothing) through the owner; the first one's LSN. A send whose
    /// owner was lost after it may have reached it is `OwnerLost` (it may have been appended).
    pub fn send_many<D: AsRef<[u8]> + Sync>(&self, items: &[D]) -> Result<i64> {
        if self.opts.readonly {
            return Err(Error::ReadOnly {
                path: self.base.clone(),
            });
        }
        self.run(false, |c| c.send_many(items), |c| c.send_many(items))
    }

    pub fn sync(&self) -> Result<()> {
        self.run(true, |c| c.sync(), |c| c.channel_sync())
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
        self.run(false, |c| c.drop_receiver(name), |c| c.drop_receiver(name))
    }

    pub fn collect(&self) -> Result<usize> {
        if self.opts.readonly {
            return self.view()?.collect();
        }
        self.run(false, |c| c.collect(), |c| c.collect())
    }

    /// An owner stops serving (its clients take over) and closes the channel; a client closes
    /// its connections and its view.
    pub fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(reader) = lock(&self.reader).take() {
            if reader.is_here() {
                let _ = reader.close();
            } else {
                std::mem::forget(reader);
            }
        }
        let role = {
            let mut role = lock(&self.role);
            self.closed.store(true, Ordering::SeqCst);
            std::mem::replace(&mut *role, Role::Lost)
        };
        match role {
            Role::Owner { ref channel, .. } | Role::Local(ref channel) if !channel.is_here() => {
                std::mem::forget(role);
                Ok(())
            }
            Role::Client(ref c) if !c.is_here() => {
                std::mem::forget(role);
                Ok(())
            }
            Role::Owner {
                channel,
                mut server,
                _lock,
            } => {
                server.stop();
                let closed = channel.close();
                drop(server);
                drop(_lock);
                closed
            }
            Role::Local(channel) => channel.close(),
            Role::Client(c) => {
                c.close();
                Ok(())
            }
            Role::Lost => Ok(()),
        }
    }
}

impl Drop for SharedChannel {
    fn drop(&mut self) {
        let role = std::mem::replace(&mut *lock(&self.role), Role::Lost);
        match role {
            Role::Owner { ref channel, .. } if !channel.is_here() => std::mem::forget(role),
            Role::Client(ref c) if !c.is_here() => std::mem::forget(role),
            // The server's threads hold the channel: stop them so that it closes now.
            Role::Owner { mut server, .. } => server.stop(),
            _ => {}
        }
    }
}
