//! A fault-injecting [`Storage`] for tests (redb's `crash_consistency.rs` habit, inside `cargo
//! test`): it works on a real directory tree and
//! - fails the Nth changing operation (of one kind, or of any) with an errno, a failed write
//!   leaving its first half behind (a short write before `ENOSPC`);
//! - models power loss: it remembers what each file held at its last fsync and which directory
//!   entries were in place at each directory's last fsync; [`FaultStorage::crash`] rewrites the
//!   tree to exactly that (every unsynced byte and every unsynced name change is dropped).
//!
//! - fails the Nth read of one kind ([`ReadKind`]: opening a file to read it, listing a
//!   directory, mapping a file) with an errno ([`FaultStorage::fail_read`]). Reads are counted
//!   apart: arming one never moves the changing operations' numbers.
//!
//! After [`FaultStorage::crash_at`]'s operation, every changing operation fails with `EIO` (the
//! machine is down), so nothing after the crash point can become durable.
//!
//! Nothing in production uses this module: it is compiled for the crate's own tests and, behind
//! the `testing` feature, for the integration tests (`rust/core/tests`); the product never ships it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::storage::{Open, RealStorage, Rename, Storage, StorageFile};

/// `EIO`, the errno of a failing device.
pub const EIO: i32 = 5;
/// `ENOSPC`, the errno of a full disk.
pub const ENOSPC: i32 = 28;

/// The operations a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Create,
    Write,
    Sync,
    Rename,
    Remove,
    CreateDir,
    SyncDir,
    Lock,
}

/// The reads a fault can target (counted apart from the changing operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReadKind {
    /// [`Storage::open_file`].
    Open,
    /// [`Storage::list_dir`].
    List,
    /// [`Storage::map`].
    Map,
}

/// One injected failure: the `nth` (0-based) operation of `kind` (`None`: of any kind) fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    pub kind: Option<OpKind>,
    pub nth: u64,
    pub errno: i32,
}

#[derive(Debug, Clone, Copy)]
enum Node {
    File(usize),
    Dir,
}

type Entries = BTreeMap<OsString, Node>;

#[derive(Debug, Default)]
struct Inode {
    /// Content as of the last fsync.
    durable: Vec<u8>,
    /// Writes since then, in order.
    pending: Vec<(u64, Vec<u8>)>,
}

impl Inode {
    fn settle(&mut self) {
        for (at, bytes) in self.pending.drain(..) {
            let end = at as usize + bytes.len();
            if self.durable.len() < end {
                self.durable.resize(end, 0);
            }
            self.durable[at as usize..end].copy_from_slice(&bytes);
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// Changing operations so far: all of them, and per kind.
    ops: u64,
    per_kind: BTreeMap<OpKind, u64>,
    fault: Option<Fault>,
    /// Reads so far, per kind, and the read that fails: `(kind, nth, errno)`.
    reads: BTreeMap<ReadKind, u64>,
    read_fault: Option<(ReadKind, u64, i32)>,
    crash_at: Option<u64>,
    crashed: bool,
    /// Each file fsync sleeps this long first (widens race windows in tests).
    sync_delay: std::time::Duration,
    /// Every operation in order, for messages: `(kind, path)`.
    history: Vec<(OpKind, PathBuf)>,
    inodes: Vec<Inode>,
    current: BTreeMap<PathBuf, Entries>,
    durable: BTreeMap<PathBuf, Entries>,
}

impl State {
    /// Counts an operation and decides whether it fails (and with what).
    fn begin(&mut self, kind: OpKind, path: &Path) -> io::Result<()> {
        if self.crashed {
            return Err(io::Error::from_raw_os_error(EIO));
        }
        let index = self.ops;
        let nth = *self.per_kind.get(&kind).unwrap_or(&0);
        self.ops += 1;
        *self.per_kind.entry(kind).or_default() += 1;
        self.history.push((kind, path.to_path_buf()));
        if self.crash_at == Some(index) {
            self.crashed = true;
            return Err(io::Error::from_raw_os_error(EIO));
        }
        match self.fault {
            Some(f) if f.kind.is_none() && f.nth == index => {}
            Some(f) if f.kind == Some(kind) && f.nth == nth => {}
            _ => return Ok(()),
        }
        Err(io::Error::from_raw_os_error(
            self.fault.map_or(EIO, |f| f.errno),
        ))
    }

    /// Counts a read and decides whether it fails (a crash does not fail reads: tests read the
    /// tree a crash left through the same storage).
    fn begin_read(&mut self, kind: ReadKind) -> io::Result<()> {
        let count = self.reads.entry(kind).or_default();
        let nth = *count;
        *count += 1;
        match self.read_fault {
            Some((k, n, errno)) if k == kind && n == nth => {
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => Ok(()),
        }
    }

    fn entries(&mut self, dir: &Path) -> &mut Entries {
        self.current.entry(dir.to_path_buf()).or_default()
    }

    fn lookup(&self, path: &Path) -> Option<Node> {
        let (dir, name) = split(path);
        self.current.get(dir)?.get(&name).copied()
    }
}

fn split(path: &Path) -> (&Path, OsString) {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(OsString::from).unwrap_or_default();
    (dir, name)
}

/// See the module documentation.
#[derive(Debug)]
pub struct FaultStorage {
    root: PathBuf,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl FaultStorage {
    /// Takes over the tree under `root` (which must exist): everything in it now counts as
    /// durable. Paths given to the storage must be `root` joined with relative names.
    pub fn new(root: &Path) -> io::Result<Arc<FaultStorage>> {
        let mut state = State::default();
        import(&mut state, root)?;
        state.durable = state.current.clone();
        Ok(Arc::new(FaultStorage {
            root: root.to_path_buf(),
            state: Arc::new(Mutex::new(state)),
        }))
    }

    /// Arms one injected failure (replacing any earlier one).
    pub fn fail(&self, fault: Fault) {
        lock(&self.state).fault = Some(fault);
    }

    /// Arms one injected read failure: the `nth` (0-based, counted from now) read of `kind`
    /// fails with `errno` (replacing any earlier read fault).
    pub fn fail_read(&self, kind: ReadKind, nth: u64, errno: i32) {
        let mut st = lock(&self.state);
        let base = *st.reads.get(&kind).unwrap_or(&0);
        st.read_fault = Some((kind, base + nth, errno));
    }

    /// Reads of one kind seen so far.
    pub fn reads_of(&self, kind: ReadKind) -> u64 {
        *lock(&self.state).reads.get(&kind).unwrap_or(&0)
    }

    /// Power goes off during operation number `index` (0-based, all kinds): it and every later
    /// operation fail with `EIO`.
    pub fn crash_at(&self, index: u64) {
        lock(&self.state).crash_at = Some(index);
    }

    /// Makes every file fsync take at least `delay` (outside the storage's lock).
    pub fn slow_syncs(&self, delay: std::time::Duration) {
        lock(&self.state).sync_delay = delay;
    }

    /// Changing operations seen so far.
    pub fn ops(&self) -> u64 {
        lock(&self.state).ops
    }

    /// Operations of one kind seen so far.
    pub fn ops_of(&self, kind: OpKind) -> u64 {
        *lock(&self.state).per_kind.get(&kind).unwrap_or(&0)
    }

    /// `(kind, path)` of operation `index`.
    pub fn op(&self, index: u64) -> Option<(OpKind, PathBuf)> {
        lock(&self.state).history.get(index as usize).cloned()
    }

    /// Power loss: the tree becomes what the fsyncs made durable; then the storage is dead
    /// (every later operation fails). Close or drop every handle on the tree first.
    pub fn crash(&self) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.crashed = true;
        for entry in fs::read_dir(&self.root)? {
            let path = entry?.path();
            if path.is_dir() && !path.is_symlink() {
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
        }
        rebuild(&st, &self.root)
    }
}

fn import(state: &mut State, dir: &Path) -> io::Result<()> {
    let mut entries = Entries::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            entries.insert(entry.file_name(), Node::Dir);
            import(state, &path)?;
        } else {
            let durable = fs::read(&path)?;
            state.inodes.push(Inode {
                durable,
                pending: Vec::new(),
            });
            entries.insert(entry.file_name(), Node::File(state.inodes.len() - 1));
        }
    }
    state.current.insert(dir.to_path_buf(), entries);
    Ok(())
}

fn rebuild(st: &State, dir: &Path) -> io::Result<()> {
    let Some(entries) = st.durable.get(dir) else {
        return Ok(());
    };
    for (name, node) in entries {
        let path = dir.join(name);
        match node {
            Node::Dir => {
                fs::create_dir(&path)?;
                rebuild(st, &path)?;
            }
            Node::File(ino) => fs::write(&path, &st.inodes[*ino].durable)?,
        }
    }
    Ok(())
}

#[derive(Debug)]
struct FaultFile {
    file: File,
    ino: usize,
    path: PathBuf,
    state: Arc<Mutex<State>>,
}

impl StorageFile for FaultFile {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = lock(&self.state);
        if let Err(e) = st.begin(OpKind::Write, &self.path) {
            if !st.crashed {
                // A short write before the error, as a filling disk does.
                let half = &buf[..buf.len() / 2];
                self.file.write_all_at(half, offset)?;
                st.inodes[self.ino].pending.push((offset, half.to_vec()));
            }
            return Err(e);
        }
        self.file.write_all_at(buf, offset)?;
        st.inodes[self.ino].pending.push((offset, buf.to_vec()));
        Ok(())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        let delay = lock(&self.state).sync_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        let mut st = lock(&self.state);
        st.begin(OpKind::Sync, &self.path)?;
        st.inodes[self.ino].settle();
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        self.sync_data()
    }

    fn file_len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn file(&self) -> &File {
        &self.file
    }
}

impl FaultStorage {
    fn handle(&self, file: File, ino: usize, path: &Path) -> Arc<dyn StorageFile> {
        Arc::new(FaultFile {
            file,
            ino,
            path: path.to_path_buf(),
            state: Arc::clone(&self.state),
        })
    }

    /// The inode behind `path`, adopting a file this storage has not seen (as durable).
    fn inode_of(&self, st: &mut State, path: &Path) -> io::Result<usize> {
        match st.lookup(path) {
            Some(Node::File(ino)) => Ok(ino),
            Some(Node::Dir) => Err(io::Error::from_raw_os_error(21)), // EISDIR
            None => {
                let durable = fs::read(path)?;
                st.inodes.push(Inode {
                    durable,
                    pending: Vec::new(),
                });
                let ino = st.inodes.len() - 1;
                let (dir, name) = split(path);
                st.entries(dir).insert(name.clone(), Node::File(ino));
                st.durable
                    .entry(dir.to_path_buf())
                    .or_default()
                    .insert(name, Node::File(ino));
                Ok(ino)
            }
        }
    }
}

impl Storage for FaultStorage {
    fn open(&self, path: &Path, mode: Open) -> io::Result<Arc<dyn StorageFile>> {
        let mut st = lock(&self.state);
        if mode == Open::CreateNew {
            st.begin(OpKind::Create, path)?;
        }
        let file = RealStorage.open(path, mode)?;
        let file = file.file().try_clone()?;
        let ino = if mode == Open::CreateNew {
            st.inodes.push(Inode::default());
            let ino = st.inodes.len() - 1;
            let (dir, name) = split(path);
            st.entries(dir).insert(name, Node::File(ino));
            ino
        } else {
            self.inode_of(&mut st, path)?
        };
        Ok(self.handle(file, ino, path))
    }

    fn adopt(&self, file: File, path: &Path) -> Arc<dyn StorageFile> {
        let mut st = lock(&self.state);
        // A file that cannot be read here is still written through this storage; it has no
        // durable content to fall back to.
        let ino = self.inode_of(&mut st, path).unwrap_or_else(|_| {
            st.inodes.push(Inode::default());
            st.inodes.len() - 1
        });
        self.handle(file, ino, path)
    }

    fn rename(&self, from: &Path, to: &Path, mode: Rename) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.begin(OpKind::Rename, from)?;
        RealStorage.rename(from, to, mode)?;
        let (from_dir, from_name) = split(from);
        let node = st.entries(from_dir).remove(&from_name);
        if let Some(node) = node {
            let (to_dir, to_name) = split(to);
            st.entries(to_dir).insert(to_name, node);
        }
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.begin(OpKind::Remove, path)?;
        RealStorage.remove_file(path)?;
        let (dir, name) = split(path);
        st.entries(dir).remove(&name);
        Ok(())
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.begin(OpKind::CreateDir, path)?;
        RealStorage.create_dir(path)?;
        let (dir, name) = split(path);
        st.entries(dir).insert(name, Node::Dir);
        st.current.entry(path.to_path_buf()).or_default();
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        let mut st = lock(&self.state);
        st.begin(OpKind::SyncDir, path)?;
        // No real fsync: durability is what this model says, and the tests stay fast.
        let entries = st.entries(path).clone();
        st.durable.insert(path.to_path_buf(), entries);
        Ok(())
    }

    fn lock_dir(&self, path: &Path) -> io::Result<Option<File>> {
        lock(&self.state).begin(OpKind::Lock, path)?;
        RealStorage.lock_dir(path)
    }

    fn open_file(&self, path: &Path, writable: bool) -> io::Result<File> {
        lock(&self.state).begin_read(ReadKind::Open)?;
        RealStorage.open_file(path, writable)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        lock(&self.state).begin_read(ReadKind::List)?;
        RealStorage.list_dir(path)
    }

    fn map(&self, file: &File, len: u64) -> io::Result<Option<memmap2::Mmap>> {
        lock(&self.state).begin_read(ReadKind::Map)?;
        RealStorage.map(file, len)
    }
}
