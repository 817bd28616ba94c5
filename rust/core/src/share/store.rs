//! A store shared by several processes: the owner's own [`Store`], or a client of it,
//! switching between the two as owners come and go (`super::role`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use super::role::{Handle, Role, Roles, HANDOVERS};
use super::{find_owner, Client, Found, Served, Server};
use crate::base::settings::Settings;
use crate::base::{self, Layout};
use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::state::{QueueConfig, QueueInfo, Record};
use crate::store::{OpenReport, Store, StoreOptions};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
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
    roles: Roles<Arc<Store>>,
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
            roles: Roles::new("store"),
            known: Mutex::new(Known {
                layout: Layout::new(base),
                settings: Settings::default(),
                report: OpenReport::default(),
            }),
        };
        shared.roles.handle(|| shared.resolve())?;
        Ok(shared)
    }

    /// Finds the owner, or becomes it, and notes what it found. An owner that goes between
    /// its welcome and the question for its settings (it was closing) is one more handover:
    /// the next owner is looked for, as if this one had never answered.
    fn resolve(&self) -> Result<Role<Arc<Store>>> {
        let mut handovers = 0;
        loop {
            let role = self.find_role()?;
            let known = match &role {
                Role::Local(s) | Role::Owner { held: s, .. } => Known {
                    layout: s.layout().clone(),
                    settings: s.settings().clone(),
                    report: s.open_report().clone(),
                },
                Role::Client(c) => match c.info() {
                    Ok(info) => Known {
                        layout: Layout::in_dialect(
                            &self.base,
                            Dialect::parse(c.dialect()).unwrap_or_default(),
                        ),
                        settings: info.settings,
                        report: OpenReport::default(),
                    },
                    Err(Error::OwnerLost { .. }) if handovers < HANDOVERS => {
                        handovers += 1;
                        continue;
                    }
                    Err(e) => return Err(e),
                },
                Role::Lost => return Ok(role),
            };
            *lock(&self.known) = known;
            return Ok(role);
        }
    }

    fn find_role(&self) -> Result<Role<Arc<Store>>> {
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
                held: store,
                server,
                _lock: lock,
            },
            Found::Client(client) => Role::Client(Arc::new(client)),
        })
    }

    /// A call that changes something (`Roles::run`: never repeated once it may have
    /// reached an owner).
    fn run<T>(
        &self,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        self.roles
            .run(false, || self.resolve(), |s| local(s), remote)
    }

    /// A call that may be repeated without harm (a read, a dequeue: deliveries of a lost owner
    /// are void), sent again to the next owner whatever became of it.
    fn run_again<T>(
        &self,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        self.roles
            .run(true, || self.resolve(), |s| local(s), remote)
    }

    /// A call tied to the owner that made a delivery (an ack, a nack): never sent again.
    fn run_once<T>(
        &self,
        local: impl Fn(&Store) -> Result<T>,
        remote: impl Fn(&Client) -> Result<T>,
    ) -> Result<T> {
        match self.roles.handle(|| self.resolve())? {
            Handle::Here(s) => local(&s),
            Handle::Client(c) => remote(&c),
        }
    }

    /// Whether this process owns the directory (holds its writer lock): the owner of a shared
    /// store, or a store that is not shared. False for clients and read-only stores.
    pub fn is_owner(&self) -> bool {
        self.roles.is_owner(self.opts.store.readonly)
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

    /// Acks and nacks settle a delivery of one owner and are never sent on to the next: losing
    /// the owner mid-call is [`Error::OwnerLost`]. Receipts are unique
    /// to the process that made the delivery (`state::next_incarnation`, with a random key per process),
    /// so a next owner refuses a gone owner's receipt with `NotInFlight`: that delivery was void,
    /// the record is delivered again.
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
        self.roles.close()
    }
}
