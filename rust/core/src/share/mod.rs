//! Several processes, one base directory (issue 29; docs/format.md, "Several processes").
//!
//! The first process to open a base directory for writing becomes its **owner**: it takes an
//! owner lock (an `flock` on the base directory), opens the [`Store`] (which takes the log's writer lock) and
//! serves it to the other processes of the same user over a Unix socket beside the data
//! (`data/tflux.sock`). Every later writable open of that directory, in any process, becomes
//! a **client** of the owner with the same calls; durability and delivery stay the owner's.
//!
//! When the owner goes (it closed the store, or its process died), a client's call in flight
//! fails with [`Error::OwnerLost`], and the client's next call finds the new owner, or takes
//! the owner lock itself and restores the store from disk: the user never reopens. A forked
//! child's copy of an owner's store becomes a client of the parent the same way.

pub mod channel;
pub mod client;
pub mod server;
pub mod wire;

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use client::{Client, ConnectError, OwnerInfo};
pub use server::{Served, Server};

use crate::base::{self, Layout};
use crate::error::{Error, IoContext, Result};
use crate::fork::ParentOnly;
use crate::format::dialect::Dialect;
use crate::settings::Settings;
use crate::state::{QueueConfig, QueueInfo, Record};
use crate::store::{OpenReport, Store, StoreOptions};

/// The owner's socket, in the base directory's `data/`.
pub const SOCKET: &str = "tflux.sock";
/// How long a client waits for an owner that holds the owner lock but does not answer yet
/// (it is restoring the store) before giving up, unless `lock_timeout` is longer.
pub const OWNER_WAIT: Duration = Duration::from_secs(60);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Socket paths longer than `sun_path` holds are reached through the directory's descriptor.
const SUN_PATH: usize = 107;

fn via_short_path<T>(path: &Path, f: impl FnOnce(&Path) -> io::Result<T>) -> io::Result<T> {
    use std::os::unix::ffi::OsStrExt;
    if path.as_os_str().as_bytes().len() <= SUN_PATH {
        return f(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return f(path);
    };
    let dir = File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    f(&short)
}

pub(crate) fn bind(path: &Path) -> Result<UnixListener> {
    via_short_path(path, |p| UnixListener::bind(p)).ctx("listen on", path)
}

pub(crate) fn connect(path: &Path) -> io::Result<UnixStream> {
    via_short_path(path, |p| UnixStream::connect(p))
}

/// The owner lock (an `flock` on the base directory itself: nothing is created for it, so an
/// open that fails changes nothing), or `None` while another process holds it.
fn try_owner_lock(base: &Path) -> Result<Option<ParentOnly<File>>> {
    let dir = File::open(base).ctx("open base directory", base)?;
    match dir.try_lock() {
        Ok(()) => Ok(Some(ParentOnly::new(dir))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", base, e)),
    }
}

/// What [`find_owner`] found.
pub(crate) enum Found<T> {
    /// This process is the owner now: what `become_owner` made, and the owner lock.
    Owner(T, ParentOnly<File>),
    Client(Client),
}

/// Finds the owner of the directory `base` and connects to it, or becomes the owner: with the
/// owner lock held, `become_owner` opens the data (taking its writer lock) and starts serving
/// on the socket it is given. The one place the rules of ownership live, for stores and
/// channels: a live owner that does not answer yet is waited for (up to [`OWNER_WAIT`], or
/// `lock_wait` when longer), never taken over; a writer lock held by something that is not an
/// owner (a `Log`, `tflux repair`, an unshared open) is `Locked` at once or after `lock_wait`.
pub(crate) fn find_owner<T>(
    base: &Path,
    storage: &dyn crate::storage::Storage,
    lock_wait: Option<Duration>,
    mut become_owner: impl FnMut(&Path) -> Result<T>,
) -> Result<Found<T>> {
    if !base.is_dir() {
        // A new directory: made first, as the store or channel would make it.
        crate::fsutil::create_dir_durable(storage, base)?;
    }
    let socket = base.join("data").join(SOCKET);
    let started = Instant::now();
    let owner_wait = lock_wait.map_or(OWNER_WAIT, |t| t.max(OWNER_WAIT));
    let mut pause = Duration::from_millis(2);
    loop {
        if let Some(owner_lock) = try_owner_lock(base)? {
            match become_owner(&socket) {
                Ok(made) => return Ok(Found::Owner(made, owner_lock)),
                Err(Error::Locked { path }) => {
                    drop(owner_lock);
                    if lock_wait.is_none_or(|t| started.elapsed() >= t) {
                        return Err(Error::Locked { path });
                    }
                }
                Err(e) => return Err(e),
            }
        } else {
            match Client::connect(base, &socket) {
                Ok(client) => return Ok(Found::Client(client)),
                Err(ConnectError::Gone(_)) if started.elapsed() < owner_wait => {}
                Err(ConnectError::Gone(e)) => {
                    return Err(Error::OwnerLost {
                        sent: false,
                        path: base.to_path_buf(),
                        reason: format!(
                            "another process holds the owner lock of {} but did not answer \
                             on {} within {:.0} s ({e})",
                            base.display(),
                            socket.display(),
                            owner_wait.as_secs_f64()
                        ),
                    })
                }
                Err(ConnectError::Refused(e)) => return Err(e),
                Err(ConnectError::Other(e)) => {
                    return Err(Error::io("connect to the owner", &socket, e))
                }
            }
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Errors of a connection attempt that mean "no owner answers yet".
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

enum Role {
    /// Read-only, or not shared: this process's own store, as before sharing existed.
    Local(Arc<Store>),
    Owner {
        store: Arc<Store>,
        server: Server,
        _lock: ParentOnly<File>,
    },
    Client(Arc<Client>),
    /// No owner known: the next call finds or becomes one.
    Lost,
}

/// What a call is carried out by.
#[derive(Clone)]
enum Handle {
    Store(Arc<Store>),
    Client(Arc<Client>),
}

/// How [`SharedStore::open`] opens a base directory.
#[derive(Debug, Clone)]
pub struct ShareOptions {
    pub store: StoreOptions,
    /// Serve other processes (owner) or use the owner's store (client); false keeps the
    /// single-process behaviour (a second writer gets `Locked`).
    pub share: bool,
}

/// A store of a base directory shared by several processes: the owner's own [`Store`], or a
/// client of it, switching between the two as owners come and go.
pub struct SharedStore {
    base: PathBuf,
    overrides: Option<String>,
    opts: ShareOptions,
    role: Mutex<Role>,
    closed: AtomicBool,
    /// What the last owner found (kept after close, as a store's own fields are).
    known: Mutex<Known>,
}

/// The layout, settings and open report of the store as last resolved.
#[derive(Clone)]
struct Known {
    layout: Layout,
    settings: Settings,
    report: OpenReport,
}

impl SharedStore {
    pub fn open(base: &Path, overrides: Option<&str>, opts: ShareOptions) -> Result<SharedStore> {
        let shared = SharedStore {
            base: base.to_path_buf(),
            overrides: overrides.map(str::to_string),
            opts,
            role: Mutex::new(Role::Lost),
            closed: AtomicBool::new(false),
            known: Mutex::new(Known {
                layout: Layout::new(base),
                settings: Settings::default(),
                report: OpenReport::default(),
            }),
        };
        let role = shared.resolve()?;
        *lock(&shared.role) = role;
        Ok(shared)
    }

    /// Finds the owner, or becomes it, and notes what it found.
    fn resolve(&self) -> Result<Role> {
        let role = self.find_role()?;
        let known = match &role {
            Role::Local(s) | Role::Owner { store: s, .. } => Known {
                layout: s.layout().clone(),
                settings: s.settings().clone(),
                report: s.open_report().clone(),
            },
            Role::Client(c) => Known {
                layout: Layout::in_dialect(
                    &self.base,
                    Dialect::parse(c.dialect()).unwrap_or_default(),
                ),
                settings: c.info()?.settings,
                report: OpenReport::default(),
            },
            Role::Lost => return Ok(role),
        };
        *lock(&self.known) = known;
        Ok(role)
    }

    fn find_role(&self) -> Result<Role> {
        let store_opts = &self.opts.store;
        if store_opts.readonly || !self.opts.share {
            let store = Arc::new(Store::open_with(
                &self.base,
                self.overrides.as_deref(),
                store_opts.clone(),
            )?);
            store.start_background_sync();
            return Ok(Role::Local(store));
        }
        base::require_kind(&self.base, base::Kind::Store)?;
        let found = find_owner(
            &self.base,
            &*store_opts.storage,
            store_opts.lock_timeout,
            |socket| {
                let opts = StoreOptions {
                    lock_timeout: None,
                    ..store_opts.clone()
                };
                let store = Arc::new(Store::open_with(
                    &self.base,
                    self.overrides.as_deref(),
                    opts,
                )?);
                store.start_background_sync();
                let server = Server::start(Served::Store(store.clone()), socket)?;
                Ok((store, server))
            },
        )?;
        Ok(match found {
            Found::Owner((store, server), lock) => Role::Owner {
                store,
                server,
                _lock: lock,
            },
            Found::Client(client) => Role::Client(Arc::new(client)),
        })
    }

    /// The store or client to carry out a call, finding (or becoming) the owner first when
    /// the last one was lost, and letting go of a forked parent's objects.
    fn handle(&self) -> Result<Handle> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed("store"));
        }
        let mut role = lock(&self.role);
        // Checked again under the lock: a close that ran meanwhile must not be followed by
        // this call taking over as the owner of a closed store.
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Closed("store"));
        }
        let forked = match &*role {
            Role::Owner { store, .. } => !store.is_here(),
            Role::Client(c) => !c.is_here(),
            _ => false,
        };
        if forked {
            // The parent's threads, sockets and locks are not this process's: its copy is
            // left alone (the fork handler closed its descriptors; freeing its memory would
            // only copy pages the parent still shares).
            std::mem::forget(std::mem::replace(&mut *role, Role::Lost));
        } else if matches!(&*role, Role::Client(c) if c.is_lost()) {
            *role = Role::Lost;
        }
        if matches!(*role, Role::Lost) {
            *role = self.resolve()?;
        }
        Ok(match &*role {
            Role::Local(s) | Role::Owner { store: s, .. } => Handle::Store(s.clone()),
            Role::Client(c) => Handle::Client(c.clone()),
            Role::Lost => unreachable!("resolved above"),
        })
    }

    /// Carries out a call that changes something: when the owner is lost after the request
    /// may have reached it, the caller is told ([`Error::OwnerLost`]); only a request that
    /// surely never reached it is sent again, to the next owner.
    fn run<T>(
        &self,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        self.run_retrying(false, local, remote)
    }

    /// A call that may be repeated without harm (a read, a dequeue: deliveries of a lost owner
    /// are void), sent again once to the next owner whatever became of it.
    fn run_again<T>(
        &self,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        self.run_retrying(true, local, remote)
    }

    /// A call tied to the owner that made a delivery: never sent to another owner.
    fn run_once<T>(
        &self,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        match self.handle()? {
            Handle::Store(s) => local(&s),
            Handle::Client(c) => remote(&c),
        }
    }

    fn run_retrying<T>(
        &self,
        repeatable: bool,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        let mut tries = 0;
        loop {
            tries += 1;
            let result = match self.handle()? {
                Handle::Store(s) => local(&s),
                Handle::Client(c) => remote(&c),
            };
            match result {
                Err(Error::OwnerLost { sent, .. }) if tries < 2 && (repeatable || !sent) => {}
                other => return other,
            }
        }
    }

    /// Whether this process owns the directory (holds its writer lock): the owner of a shared
    /// store, or a store that is not shared. False for clients and read-only stores.
    pub fn is_owner(&self) -> bool {
        match &*lock(&self.role) {
            Role::Owner { store, .. } => store.is_here(),
            Role::Local(s) => !self.opts.store.readonly && s.is_here(),
            _ => false,
        }
    }

    /// The owner's process id (this process's when it is the owner).
    pub fn owner_pid(&self) -> Result<u32> {
        self.run_again(|_| Ok(std::process::id()), |c| Ok(c.owner_pid()))
    }

    /// The base directory's layout (as of the last owner found).
    pub fn layout(&self) -> Layout {
        lock(&self.known).layout.clone()
    }

    /// The settings in force: the owner's.
    pub fn settings(&self) -> Settings {
        lock(&self.known).settings.clone()
    }

    /// What this process's open of the store found and did (a client replayed nothing).
    pub fn open_report(&self) -> OpenReport {
        lock(&self.known).report.clone()
    }

    pub fn log_bounds(&self) -> Result<(i64, i64, i64)> {
        self.run_again(|s| s.log_bounds(), |c| Ok(c.info()?.log_bounds))
    }

    pub fn term(&self) -> Result<i32> {
        self.run_again(|s| Ok(s.metadata()?.term), |c| Ok(c.info()?.term))
    }

    pub fn create_queue_as(
        &self,
        name: &[u8],
        config: QueueConfig,
        exist_ok: bool,
    ) -> Result<bool> {
        self.run(
            |s| s.create_queue_as(name, config, exist_ok),
            |c| c.create_queue_as(name, config, exist_ok),
        )
    }

    pub fn delete_queue(&self, name: &[u8]) -> Result<()> {
        self.run(|s| s.delete_queue(name), |c| c.delete_queue(name))
    }

    pub fn enqueue(&self, name: &[u8], key: i64, message: &[u8]) -> Result<u64> {
        self.run(
            |s| s.enqueue(name, key, message),
            |c| c.enqueue(name, key, message),
        )
    }

    pub fn enqueue_many(&self, name: &[u8], items: &[(i64, &[u8])]) -> Result<Vec<u64>> {
        self.run(
            |s| s.enqueue_many(name, items),
            |c| c.enqueue_many(name, items),
        )
    }

    pub fn dequeue_leased(
        &self,
        name: &[u8],
        timeout: Option<Duration>,
        lease: Option<Duration>,
    ) -> Result<Option<(Record, u64)>> {
        self.run_again(
            |s| s.dequeue_leased(name, timeout, lease),
            |c| c.dequeue_leased(name, timeout, lease),
        )
    }

    pub fn wait_ready(&self, name: &[u8], timeout: Option<Duration>) -> Result<bool> {
        self.run_again(
            |s| s.wait_ready(name, timeout),
            |c| c.wait_ready(name, timeout),
        )
    }

    /// Acks and nacks settle a delivery of one owner: never sent on to the next one (its
    /// receipts are another owner's), so losing the owner is [`Error::OwnerLost`] (the
    /// delivery is void; the record is delivered again).
    /// Receipts are unique to the process that made the delivery (`state::next_incarnation`,
    /// seeded from the clock), so the next owner refuses a gone owner's receipt with
    /// `NotInFlight`: that delivery was void, the record is delivered again.
    pub fn ack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        self.run_once(|s| s.ack(name, id, receipt), |c| c.ack(name, id, receipt))
    }

    pub fn ack_many(&self, items: &[(&[u8], u64, Option<u64>)]) -> Result<()> {
        self.run_once(|s| s.ack_many(items), |c| c.ack_many(items))
    }

    pub fn nack(&self, name: &[u8], id: u64, receipt: Option<u64>) -> Result<()> {
        self.run_once(|s| s.nack(name, id, receipt), |c| c.nack(name, id, receipt))
    }

    pub fn count(&self, name: &[u8]) -> Result<u64> {
        self.run_again(|s| s.count(name), |c| c.count(name))
    }

    pub fn peek(&self, name: &[u8]) -> Result<Option<Record>> {
        self.run_again(|s| s.peek(name), |c| c.peek(name))
    }

    pub fn peek_all(&self, name: &[u8]) -> Result<Vec<Record>> {
        self.run_again(|s| s.peek_all(name), |c| c.peek_all(name))
    }

    pub fn queues(&self) -> Result<Vec<QueueInfo>> {
        self.run_again(|s| s.queues(), |c| c.queues())
    }

    pub fn snapshot(&self) -> Result<bool> {
        self.run(|s| s.snapshot(), |c| c.snapshot())
    }

    /// Read-only stores catch up with the writer; the owner's store is always current.
    pub fn refresh(&self) -> Result<u64> {
        self.run(|s| s.refresh(), |_| Ok(0))
    }

    /// Closes this process's part: an owner stops serving (its clients fail over) and closes
    /// the store; a client closes its connections (its records in flight go back).
    pub fn close(&self) -> Result<()> {
        let role = {
            let mut role = lock(&self.role);
            self.closed.store(true, Ordering::SeqCst);
            std::mem::replace(&mut *role, Role::Lost)
        };
        match role {
            Role::Owner { ref store, .. } | Role::Local(ref store) if !store.is_here() => {
                std::mem::forget(role);
                Ok(())
            }
            Role::Client(ref c) if !c.is_here() => {
                std::mem::forget(role);
                Ok(())
            }
            Role::Owner {
                store,
                mut server,
                _lock,
            } => {
                server.stop();
                let closed = store.close();
                drop(server);
                drop(store);
                drop(_lock);
                closed
            }
            Role::Local(store) => store.close(),
            Role::Client(c) => {
                c.close();
                Ok(())
            }
            Role::Lost => Ok(()),
        }
    }
}

impl Drop for SharedStore {
    fn drop(&mut self) {
        let role = std::mem::replace(&mut *lock(&self.role), Role::Lost);
        match role {
            Role::Owner { ref store, .. } if !store.is_here() => std::mem::forget(role),
            Role::Client(ref c) if !c.is_here() => std::mem::forget(role),
            // The server's threads hold the store: stop them so that it closes now.
            Role::Owner { mut server, .. } => server.stop(),
            _ => {}
        }
    }
}
