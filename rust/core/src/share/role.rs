//! What a shared store or channel is in this process right now (its own, the owner's, a
//! client's, or lost), and the rules for switching: the one place they live, for both.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{Client, Server};
use crate::channel::Channel;
use crate::error::{Error, Result};
use crate::fork::ParentOnly;
use crate::store::request::Resend;
use crate::store::Store;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The most owners one call goes on to after the one it was sent to went: each was found
/// anew (a handover, so progress), and the bound only stops a call chasing owners that keep
/// dying at once.
pub(crate) const HANDOVERS: usize = 16;

/// What an owner holds open.
pub(crate) trait Opened: Clone {
    /// Whether this is the process that opened it (not a forked child's copy).
    fn is_here(&self) -> bool;
    fn close(&self) -> Result<()>;
}

impl Opened for Arc<Store> {
    fn is_here(&self) -> bool {
        Store::is_here(self)
    }
    fn close(&self) -> Result<()> {
        Store::close(self)
    }
}

impl Opened for Channel {
    fn is_here(&self) -> bool {
        Channel::is_here(self)
    }
    fn close(&self) -> Result<()> {
        Channel::close(self)
    }
}

pub(crate) enum Role<T> {
    /// Read-only, or not shared: this process's own, as before sharing existed.
    Local(T),
    Owner {
        held: T,
        server: Server,
        _lock: ParentOnly<File>,
    },
    Client(Arc<Client>),
    /// No owner known: the next call finds or becomes one.
    Lost,
}

impl<T: Opened> Role<T> {
    /// Whether this is a forked parent's: its threads, sockets and locks are not this
    /// process's (the fork handler closed its descriptors).
    fn forked(&self) -> bool {
        match self {
            Role::Local(held) | Role::Owner { held, .. } => !held.is_here(),
            Role::Client(c) => !c.is_here(),
            Role::Lost => false,
        }
    }
}

/// What a call is carried out by.
pub(crate) enum Handle<T> {
    Here(T),
    Client(Arc<Client>),
}

/// The role of one open store or channel.
pub(crate) struct Roles<T: Opened> {
    role: Mutex<Role<T>>,
    closed: AtomicBool,
    what: &'static str,
}

impl<T: Opened> Roles<T> {
    pub fn new(what: &'static str) -> Roles<T> {
        Roles {
            role: Mutex::new(Role::Lost),
            closed: AtomicBool::new(false),
            what,
        }
    }

    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Looks at the current role.
    pub fn with<R>(&self, f: impl FnOnce(&Role<T>) -> R) -> R {
        f(&lock(&self.role))
    }

    /// The role to carry out a call with: a forked parent's objects are let go of (never
    /// freed: their pages are the parent's, shared copy-on-write), a lost client is dropped,
    /// and then `resolve` finds (or becomes) the owner.
    pub fn handle(&self, resolve: impl FnOnce() -> Result<Role<T>>) -> Result<Handle<T>> {
        let mut role = lock(&self.role);
        // Under the lock: a close that ran meanwhile is never followed by this call taking
        // over as the owner of something closed.
        if self.closed() {
            return Err(Error::Closed(self.what));
        }
        // A forked parent's owner or client is replaced (the child becomes a client); its
        // own store or channel (read-only, unshared) stays, and refuses the child (`Forked`).
        if role.forked() && !matches!(&*role, Role::Local(_)) {
            std::mem::forget(std::mem::replace(&mut *role, Role::Lost));
        } else if matches!(&*role, Role::Client(c) if c.is_lost()) {
            *role = Role::Lost;
        }
        if matches!(*role, Role::Lost) {
            *role = resolve()?;
        }
        Ok(match &*role {
            Role::Local(held) | Role::Owner { held, .. } => Handle::Here(held.clone()),
            Role::Client(c) => Handle::Client(c.clone()),
            Role::Lost => unreachable!("resolved above"),
        })
    }

    /// Carries out a call. When the owner is lost, what becomes of the call is its
    /// `resend` ([`Resend`]): one that surely never reached the owner, or one harmless to
    /// repeat, goes to the next owner; otherwise the caller is told (`OwnerLost`: it may have
    /// happened). Owners may go one after another (each closes when its own work is done), so
    /// the next owner may be gone too: a call follows up to [`HANDOVERS`] of them before it
    /// gives up.
    pub fn run<R>(
        &self,
        resend: Resend,
        resolve: impl Fn() -> Result<Role<T>>,
        here: impl Fn(&T) -> Result<R>,
        remote: impl Fn(&Client) -> Result<R>,
    ) -> Result<R> {
        let mut tries = 0;
        loop {
            tries += 1;
            let result = match self.handle(&resolve)? {
                Handle::Here(held) => here(&held),
                Handle::Client(c) => remote(&c),
            };
            let again = match resend {
                Resend::Never => false,
                Resend::IfUnsent => matches!(result, Err(Error::OwnerLost { sent: false, .. })),
                Resend::Again => matches!(result, Err(Error::OwnerLost { .. })),
            };
            if !again || tries > HANDOVERS {
                return result;
            }
        }
    }

    /// Whether this process owns the directory: the owner, or its own writable open.
    pub fn is_owner(&self, readonly: bool) -> bool {
        match &*lock(&self.role) {
            Role::Owner { held, .. } => held.is_here(),
            Role::Local(held) => !readonly && held.is_here(),
            _ => false,
        }
    }

    /// Closes this process's part: an owner stops serving (its clients take over) and closes
    /// what it holds; a client closes its connections. Later calls are `Closed`.
    pub fn close(&self) -> Result<()> {
        let role = {
            let mut role = lock(&self.role);
            self.closed.store(true, Ordering::SeqCst);
            std::mem::replace(&mut *role, Role::Lost)
        };
        if role.forked() {
            std::mem::forget(role);
            return Ok(());
        }
        match role {
            Role::Owner {
                held,
                mut server,
                _lock,
            } => {
                server.stop();
                let closed = held.close();
                drop(server);
                drop(_lock);
                closed
            }
            Role::Local(held) => held.close(),
            Role::Client(c) => {
                c.close();
                Ok(())
            }
            Role::Lost => Ok(()),
        }
    }
}

impl<T: Opened> Drop for Roles<T> {
    fn drop(&mut self) {
        let role = std::mem::replace(&mut *lock(&self.role), Role::Lost);
        if role.forked() {
            std::mem::forget(role);
        } else if let Role::Owner { mut server, .. } = role {
            // The server's threads hold what it serves: stop them so that it closes now.
            server.stop();
        }
    }
}
