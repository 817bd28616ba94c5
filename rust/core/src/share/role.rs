//! What a shared store or channel is in this process right now (its own, the owner's, a
//! client's, or lost), and the rules for switching: the one place they live, for both.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use super::client::Client;
use super::server::Server;
use crate::channel::Channel;
use crate::error::{Error, Result};
use crate::fork::{Birth, ParentOnly};
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

/// The role and who is finding the next one.
struct State<T> {
    role: Role<T>,
    /// The process whose thread is finding the owner (the role is `Lost` meanwhile). The lock
    /// is not held while it looks (up to a minute): a fork in that time copies a free lock and
    /// a finder the child does not have, so the child looks for itself (issue 43: its first
    /// call waited forever on the lock its parent's thread held).
    finding: Option<Birth>,
}

/// The role of one open store or channel.
pub(crate) struct Roles<T: Opened> {
    state: Mutex<State<T>>,
    /// Signalled when a finder is done (found, failed or closed).
    found: Condvar,
    closed: AtomicBool,
    what: &'static str,
}

/// Ends a find however it ends (an error or a panic included): the next call looks anew and
/// the callers waiting for this find wake up.
struct FindGuard<'a, T: Opened>(&'a Roles<T>);

impl<T: Opened> Drop for FindGuard<'_, T> {
    fn drop(&mut self) {
        lock(&self.0.state).finding = None;
        self.0.found.notify_all();
    }
}

impl<T: Opened> Roles<T> {
    pub fn new(what: &'static str) -> Roles<T> {
        Roles {
            state: Mutex::new(State {
                role: Role::Lost,
                finding: None,
            }),
            found: Condvar::new(),
            closed: AtomicBool::new(false),
            what,
        }
    }

    pub fn closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Looks at the current role.
    pub fn with<R>(&self, f: impl FnOnce(&Role<T>) -> R) -> R {
        f(&lock(&self.state).role)
    }

    /// The role to carry out a call with: a forked parent's objects are let go of (never
    /// freed: their pages are the parent's, shared copy-on-write), a lost client is dropped,
    /// and then `resolve` finds (or becomes) the owner, without the lock held; other callers
    /// meanwhile wait for its outcome.
    pub fn handle(&self, resolve: impl Fn() -> Result<Role<T>>) -> Result<Handle<T>> {
        let mut state = lock(&self.state);
        loop {
            // Under the lock: a close that ran meanwhile is never followed by this call taking
            // over as the owner of something closed.
            if self.closed() {
                return Err(Error::Closed(self.what));
            }
            let role = &mut state.role;
            // A forked parent's owner or client is replaced (the child becomes a client); its
            // own store or channel (read-only, unshared) stays, and refuses the child (`Forked`).
            if role.forked() && !matches!(role, Role::Local(_)) {
                std::mem::forget(std::mem::replace(role, Role::Lost));
            } else if matches!(role, Role::Client(c) if c.is_lost()) {
                if let Role::Client(c) = std::mem::replace(role, Role::Lost) {
                    ::log::info!(
                        target: crate::events::SHARE,
                        "the owner of {} (process {}) is gone; process {} finds the next one \
                         or takes over",
                        c.base().display(),
                        c.owner_pid(),
                        std::process::id()
                    );
                }
            }
            match (&state.role, state.finding) {
                (Role::Local(held) | Role::Owner { held, .. }, _) => {
                    return Ok(Handle::Here(held.clone()))
                }
                (Role::Client(c), _) => return Ok(Handle::Client(c.clone())),
                (Role::Lost, Some(finder)) if finder.is_here() => {
                    state = self.found.wait(state).unwrap_or_else(|e| e.into_inner());
                }
                // Nobody finds it, or a forked parent's thread did (not in this process).
                (Role::Lost, _) => {
                    state.finding = Some(Birth::now());
                    drop(state);
                    let guard = FindGuard(self);
                    let found = resolve();
                    state = lock(&self.state);
                    match found {
                        // Closed while this looked: what it found is let go of at once.
                        Ok(found) if self.closed() => {
                            drop(state);
                            drop(guard);
                            let _ = shut(found);
                            return Err(Error::Closed(self.what));
                        }
                        Ok(found) => state.role = found,
                        Err(e) => {
                            drop(state);
                            return Err(e);
                        }
                    }
                    drop(state);
                    drop(guard);
                    state = lock(&self.state);
                }
            }
        }
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
        match &lock(&self.state).role {
            Role::Owner { held, .. } => held.is_here(),
            Role::Local(held) => !readonly && held.is_here(),
            _ => false,
        }
    }

    /// Closes this process's part: an owner stops serving (its clients take over) and closes
    /// what it holds; a client closes its connections. Later calls are `Closed`.
    pub fn close(&self) -> Result<()> {
        let role = {
            let mut state = lock(&self.state);
            self.closed.store(true, Ordering::SeqCst);
            std::mem::replace(&mut state.role, Role::Lost)
        };
        // Callers waiting for a finder see the close; the finder lets go of what it finds.
        self.found.notify_all();
        shut(role)
    }
}

/// Lets go of a role: an owner stops serving (its clients take over) and closes what it
/// holds; a client closes its connections; a forked parent's is only forgotten.
fn shut<T: Opened>(role: Role<T>) -> Result<()> {
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

impl<T: Opened> Drop for Roles<T> {
    fn drop(&mut self) {
        let role = std::mem::replace(&mut lock(&self.state).role, Role::Lost);
        if role.forked() {
            std::mem::forget(role);
        } else if let Role::Owner { mut server, .. } = role {
            // The server's threads hold what it serves: stop them so that it closes now.
            server.stop();
        }
    }
}
