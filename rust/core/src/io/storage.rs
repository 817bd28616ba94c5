//! The storage seam: every call that changes files on disk (create, positioned write, fsync,
//! rename, remove, directory creation and fsync, the writer lock) goes through [`Storage`], and
//! so do the reads a log's open and reads make of its segments (the opening of a segment for
//! its scan, the listing of the log directory, the memory map of a sealed segment). Tests
//! inject I/O errors and power loss there (`io::testing::FaultStorage`, behind the `testing`
//! feature) where production uses [`RealStorage`] (modelled on raft-engine's `FileSystem` and
//! redb's `StorageBackend`).
//!
//! A map needs the real descriptor: [`Storage::open_file`] hands out a plain [`File`], and
//! [`StorageFile::file`] exposes one. Readers outside a log (the CLI's and Spark's one-off
//! reads of a file, the channel's tail) use `std::fs` or [`RealStorage`] directly.
//!
//! The file handle is a trait object: one indirect call per write or fsync costs nanoseconds next
//! to the system call it wraps; nothing here allocates per append.

use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use memmap2::Mmap;

/// How [`Storage::open`] opens a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// An existing file, read-only.
    Read,
    /// An existing file, for reading and writing.
    ReadWrite,
    /// A new file for reading and writing; fails with `EEXIST` when the name exists, also as a
    /// symlink (`O_CREAT|O_EXCL` never follows one), so nothing is written through a planted link.
    CreateNew,
}

/// Whether [`Storage::rename`] may replace an existing target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rename {
    /// Atomically replace the target (the `atomic_write` pattern).
    Replace,
    /// Fail with `EEXIST` when the target exists (moving files aside must never destroy one).
    NoReplace,
}

/// The operations that change a directory tree.
pub trait Storage: Send + Sync + Debug {
    fn open(&self, path: &Path, mode: Open) -> io::Result<Arc<dyn StorageFile>>;
    /// Wraps a file that was opened directly (by a scan at open) so that later writes and
    /// syncs go through this storage.
    fn adopt(&self, file: File, path: &Path) -> Arc<dyn StorageFile>;
    fn rename(&self, from: &Path, to: &Path, mode: Rename) -> io::Result<()>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Creates one directory (its parent must exist); `AlreadyExists` when it does.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// Makes a directory's entries (created, renamed, removed names) durable.
    fn sync_dir(&self, path: &Path) -> io::Result<()>;
    /// Takes the exclusive writer lock on a directory; `Ok(None)` when another holder has it.
    /// The returned handle holds the lock until dropped.
    fn lock_dir(&self, path: &Path) -> io::Result<Option<File>>;

    // ----- reads: they change nothing, but a failing device fails them too -----

    /// Opens an existing file for reading (and writing when `writable`) as a plain descriptor:
    /// what a segment's scan opens, and later maps or [`Storage::adopt`]s.
    fn open_file(&self, path: &Path, writable: bool) -> io::Result<File>;
    /// The paths of the entries of a directory, in the order the system lists them.
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>>;
    /// Maps the first `len` bytes of `file` read-only (`None` when `len` is 0).
    fn map(&self, file: &File, len: u64) -> io::Result<Option<Mmap>>;
}

/// An open file of a [`Storage`].
pub trait StorageFile: Send + Sync + Debug {
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// fdatasync: the data written so far survives a power cut.
    fn sync_data(&self) -> io::Result<()>;
    /// fsync: data and metadata.
    fn sync_all(&self) -> io::Result<()>;
    /// The file's size in bytes.
    fn file_len(&self) -> io::Result<u64>;
    /// The real descriptor, for memory maps and reads.
    fn file(&self) -> &File;
}

/// Who may read what tflux creates (docs/format.md, "Who may read a base directory"; issue 43:
/// bases were `0755` and files `0644`, so every user read every payload, and another user's
/// `flock` on the base directory or `data/log` locked the owner out). A new directory or file is
/// its user's only (`0700`/`0600`), unless the directory it is made in is shared with its group
/// alone (the group may read and search it, others nothing): then the group may read it too
/// (`0750`/`0640`), never write. The umask can only take bits away.
pub fn new_dir_mode(parent: &Path) -> u32 {
    if shared_with_group(parent) {
        0o750
    } else {
        0o700
    }
}

/// The mode of a new file in `parent` ([`new_dir_mode`]'s rule).
pub fn new_file_mode(parent: &Path) -> u32 {
    if shared_with_group(parent) {
        0o640
    } else {
        0o600
    }
}

/// What a writable open by its owner does to the modes of an existing base (issue 43
/// leftover): a base made by an earlier version, or by `mkdir` under the common umask, is
/// `0755` and every user reads every payload and can lock the owner out. `dirs` are the base
/// directory first, then the directories of its layout that exist. Each one that others may
/// read or search (any of the `0o007` bits), and that the opening user owns, loses what
/// [`new_dir_mode`] would not give it: everything for group and others (`0700`), or only
/// group write and others (`0750`) when the base is shared with its group alone, which is how
/// a user grants a group read access (docs/format.md, "Who may read a base directory"). A
/// directory others cannot reach is as its user configured it and is left alone; so is one
/// owned by another user (never touched), a symlink below the base (what it leads to is
/// outside the base) and one whose mode cannot be changed (a read-only file system: the open
/// goes on). Files are left as they are: the directories guard them.
/// Each directory tightened is named in one WARNING line of `target`.
pub fn make_private(dirs: &[&Path], target: &str) {
    use std::os::unix::fs::MetadataExt;
    let Some(base) = dirs.first() else {
        return;
    };
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut changed = Vec::new();
    let mut group = None;
    for (i, dir) in dirs.iter().enumerate() {
        // Checked and changed through one descriptor (no swap between the two). The base is
        // the path its user named, followed; a symlink below it leads out of the base (a
        // directory shared on purpose, or one planted by whoever may write there) and is left
        // alone: chmod would follow it.
        let nofollow = if i == 0 { 0 } else { libc::O_NOFOLLOW };
        let Ok(file) = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | nofollow)
            .open(dir)
        else {
            continue;
        };
        let Ok(meta) = file.metadata() else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o7777;
        if !meta.is_dir() || meta.uid() != me || mode & 0o007 == 0 {
            continue;
        }
        // The base decides, after its own change: a base shared with its group alone keeps
        // its group's read access below it.
        let keep_group = *group.get_or_insert_with(|| shared_with_group(base));
        let private = if keep_group {
            mode & !0o027
        } else {
            mode & !0o077
        };
        if file
            .set_permissions(fs::Permissions::from_mode(private))
            .is_ok()
        {
            changed.push(format!("{} {mode:04o} -> {private:04o}", dir.display()));
        }
    }
    if !changed.is_empty() {
        ::log::warn!(
            target: target,
            "made {} private to its owner: {} (other users could read every payload and lock \
             the owner out; a base shared with its group alone, mode 0750, keeps its group's \
             read access)",
            base.display(),
            changed.join(", ")
        );
    }
}

fn shared_with_group(dir: &Path) -> bool {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    fs::metadata(dir).is_ok_and(|m| {
        let mode = m.permissions().mode();
        mode & 0o050 == 0o050 && mode & 0o007 == 0
    })
}

fn parent_dir(path: &Path) -> &Path {
    path.parent().unwrap_or(Path::new("."))
}

/// Creates the new file `path` with [`new_file_mode`] (`O_CREAT|O_EXCL`: never through a
/// planted link), for reading and writing: the one way tflux makes a file.
pub fn create_new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(new_file_mode(parent_dir(path)))
        .open(path)
}

/// Creates the directory `path` (its parent must exist) with [`new_dir_mode`].
pub fn create_one_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .mode(new_dir_mode(parent_dir(path)))
        .create(path)
}

/// The operating system's file system.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealStorage;

/// The shared [`RealStorage`] handle (the default of every option struct).
pub fn real() -> Arc<dyn Storage> {
    static REAL: OnceLock<Arc<dyn Storage>> = OnceLock::new();
    Arc::clone(REAL.get_or_init(|| Arc::new(RealStorage)))
}

#[derive(Debug)]
struct RealFile(File);

impl StorageFile for RealFile {
    #[inline]
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_all_at(buf, offset)
    }
    #[inline]
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_exact_at(buf, offset)
    }
    #[inline]
    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn sync_all(&self) -> io::Result<()> {
        self.0.sync_all()
    }
    fn file_len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
    fn file(&self) -> &File {
        &self.0
    }
}

impl Storage for RealStorage {
    fn open(&self, path: &Path, mode: Open) -> io::Result<Arc<dyn StorageFile>> {
        let file = match mode {
            Open::Read => File::open(path)?,
            Open::ReadWrite => OpenOptions::new().read(true).write(true).open(path)?,
            Open::CreateNew => create_new_file(path)?,
        };
        Ok(Arc::new(RealFile(file)))
    }

    fn adopt(&self, file: File, _path: &Path) -> Arc<dyn StorageFile> {
        Arc::new(RealFile(file))
    }

    fn rename(&self, from: &Path, to: &Path, mode: Rename) -> io::Result<()> {
        match mode {
            Rename::Replace => fs::rename(from, to),
            Rename::NoReplace => rename_noreplace(from, to),
        }
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        create_one_dir(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn lock_dir(&self, path: &Path) -> io::Result<Option<File>> {
        let handle = File::open(path)?;
        match handle.try_lock() {
            Ok(()) => Ok(Some(handle)),
            Err(fs::TryLockError::WouldBlock) => Ok(None),
            Err(fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn open_file(&self, path: &Path, writable: bool) -> io::Result<File> {
        OpenOptions::new().read(true).write(writable).open(path)
    }

    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect()
    }

    fn map(&self, file: &File, len: u64) -> io::Result<Option<Mmap>> {
        super::mmap::map_readonly(file, len)
    }
}

/// `rename(from, to)` that fails with `EEXIST` instead of replacing `to`: `renameat2` with
/// `RENAME_NOREPLACE` (atomic, and it moves directories too, which repair moves aside when one
/// has a segment's name).
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let cstr = |p: &Path| {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
    };
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: both are valid NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // A file system without RENAME_NOREPLACE: a hard link fails with EEXIST when the
        // target exists (atomically, unlike a check before the rename); a crash between link
        // and unlink leaves both names, never none.
        Some(libc::EINVAL) | Some(libc::ENOSYS) => {
            fs::hard_link(from, to)?;
            fs::remove_file(from)
        }
        _ => Err(err),
    }
}
