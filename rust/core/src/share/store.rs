//! A store shared by several processes: the owner's own [`Store`], or a client of it,
//! switching between the two as owners come and go (`super::role`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::role::{Handle, Role, Roles, HANDOVERS};
use super::{find_owner, Found, Served, Server};
use crate::base::settings::Settings;
use crate::base::{self, Layout};
use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::store::{OpenReport, Reply, Request, Store, StoreInfo, StoreOptions};

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
                Role::Client(c) => match c.call::<StoreInfo>(&Request::Info {}) {
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

    /// Carries out `request` here (the owner, or a store that is not shared) or by the owner;
    /// when the owner goes meanwhile, what becomes of it is the request's
    /// [`resend`](Request::resend) (`Roles::run`).
    pub fn execute(&self, request: &Request<'_>) -> Result<Reply> {
        self.roles.run(
            request.resend(),
            || self.resolve(),
            |s| s.execute(request),
            |c| c.execute(request),
        )
    }

    /// [`SharedStore::execute`], its reply as the type the caller expects.
    pub fn call<T: TryFrom<Reply, Error = Error>>(&self, request: &Request<'_>) -> Result<T> {
        self.execute(request)?.try_into()
    }

    /// Whether this process owns the directory (holds its writer lock): the owner of a shared
    /// store, or a store that is not shared. False for clients and read-only stores.
    pub fn is_owner(&self) -> bool {
        self.roles.is_owner(self.opts.store.readonly)
    }

    /// The owner's process id (this process's when it is the owner).
    pub fn owner_pid(&self) -> Result<u32> {
        Ok(match self.roles.handle(|| self.resolve())? {
            Handle::Here(_) => std::process::id(),
            Handle::Client(c) => c.owner_pid(),
        })
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

    /// Read-only stores catch up with the writer; the owner's store is always current.
    pub fn refresh(&self) -> Result<u64> {
        match self.roles.handle(|| self.resolve())? {
            Handle::Here(s) => s.refresh(),
            Handle::Client(_) => Ok(0),
        }
    }

    /// Closes this process's part: an owner stops serving (its clients fail over) and closes
    /// the store; a client closes its connections (its records in flight go back).
    pub fn close(&self) -> Result<()> {
        self.roles.close()
    }
}
