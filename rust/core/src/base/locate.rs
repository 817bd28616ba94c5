//! What a path handed to a reader is (a base directory, its `data/log`, a bare log directory,
//! one segment file, a snapshot file), once, for the CLI and the Spark reader; and a read-only
//! log over a chosen set of a log directory's segments (what one Spark partition, or `tflux
//! dump` of one segment, reads), without a directory of links that would change the paths the
//! core reports.
//!
//! Paths are made absolute first (lexically, so a symlinked base keeps the name it was given):
//! a relative segment path, `.` inside `data/log` and the path from the directory above all
//! name the same files.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::{fmt, io};

use crate::error::{Error, Result};
use crate::format::compressed::parse_any_file_name;
use crate::format::dialect::Dialect;
use crate::io::storage::{Open, Rename, Storage, StorageFile};
use crate::log::{Log, LogOptions};

use super::layout::Layout;

/// What kind of path [`locate`] was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathKind {
    /// A base directory (it holds `data/`).
    Base,
    /// The `data/log` directory of a base directory.
    LogDir,
    /// A directory of segments outside any base directory.
    BareLogDir,
    /// One segment file (`NNN.log` or `NNN.log.z`): that segment alone.
    Segment,
    /// Any other file: read as a snapshot file.
    Snapshot,
}

impl PathKind {
    pub fn name(self) -> &'static str {
        match self {
            PathKind::Base => "base",
            PathKind::LogDir => "log",
            PathKind::BareLogDir => "bare_log",
            PathKind::Segment => "segment",
            PathKind::Snapshot => "snapshot",
        }
    }
}

/// What a path is, and the files a reader of it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The path as given, made absolute.
    pub path: PathBuf,
    pub kind: PathKind,
    /// The base directory it is or belongs to (`None`: a log or a file outside one).
    pub base: Option<PathBuf>,
    /// The log directory to read (`None`: there is none, e.g. a base without `data/log`).
    pub log: Option<PathBuf>,
    /// The snapshot file to read, when it exists.
    pub snapshot: Option<PathBuf>,
    /// The first LSNs of the segments chosen (`None`: every segment of `log`).
    pub segments: Option<Vec<i64>>,
    /// The dialect the files say, agreeing with the one asked for ([`super::dialect_of`] of
    /// the base when there is one, else of the log directory or the file).
    pub dialect: Dialect,
}

impl Located {
    /// A read-only log over the chosen segments of [`Located::log`] (every segment when none
    /// were chosen), in [`Located::dialect`].
    pub fn open_log(&self) -> Result<Log> {
        let Some(log) = &self.log else {
            return Err(Error::InvalidArgument(format!(
                "{} has no log directory",
                self.path.display()
            )));
        };
        match &self.segments {
            Some(chosen) => open_segments(log, chosen, Some(self.dialect)),
            None => Log::open(
                log,
                LogOptions {
                    readonly: true,
                    dialect: Some(self.dialect),
                    ..LogOptions::default()
                },
            ),
        }
    }
}

/// `path` made absolute without resolving symlinks, `.` components dropped; a path with `..`
/// is resolved by the system (a lexical `..` after a symlink would name another directory).
fn absolute(path: &Path) -> Result<PathBuf> {
    let has_parent = path
        .components()
        .any(|c| c == std::path::Component::ParentDir);
    let made = if has_parent {
        std::fs::canonicalize(path)
    } else {
        std::path::absolute(path)
    };
    let made = made.map_err(|e| Error::io("locate", path, e))?;
    Ok(made
        .components()
        .filter(|c| *c != std::path::Component::CurDir)
        .collect())
}

/// What `path` is (see [`PathKind`]), its base and log directories, its snapshot file and the
/// dialect its files say, agreeing with `chosen` (files that disagree: `Error::Dialect`).
/// A path that does not exist is an I/O error naming it.
pub fn locate(path: &Path, chosen: Option<Dialect>) -> Result<Located> {
    let path = absolute(path)?;
    let meta = std::fs::metadata(&path).map_err(|e| Error::io("locate", &path, e))?;
    let of_log = |log: &Path| -> Option<PathBuf> {
        let base = log.parent()?.parent()?;
        (Layout::new(base).log == log).then(|| base.to_path_buf())
    };
    let existing = |p: PathBuf, dir: bool| {
        let found = if dir { p.is_dir() } else { p.is_file() };
        found.then_some(p)
    };
    let (kind, base, log, snapshot, segments) = if meta.is_dir() {
        let layout = Layout::new(&path);
        if layout.data.is_dir() {
            let log = existing(layout.log, true);
            let snapshot = existing(layout.snapshot, false);
            (PathKind::Base, Some(path.clone()), log, snapshot, None)
        } else if let Some(base) = of_log(&path) {
            let snapshot = existing(Layout::new(&base).snapshot, false);
            (
                PathKind::LogDir,
                Some(base),
                Some(path.clone()),
                snapshot,
                None,
            )
        } else {
            (PathKind::BareLogDir, None, Some(path.clone()), None, None)
        }
    } else {
        let parent = path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if let Some(first) = parse_any_file_name(name) {
            let base = of_log(&parent);
            let snapshot = base
                .as_ref()
                .and_then(|b| existing(Layout::new(b).snapshot, false));
            (
                PathKind::Segment,
                base,
                Some(parent),
                snapshot,
                Some(vec![first]),
            )
        } else {
            // A snapshot file: `<base>/data/tflux.snapshot` reads `<base>`'s log too.
            let base = parent
                .parent()
                .filter(|b| Layout::new(b).data == parent)
                .map(Path::to_path_buf);
            let log = base
                .as_ref()
                .and_then(|b| existing(Layout::new(b).log, true));
            (PathKind::Snapshot, base, log, Some(path.clone()), None)
        }
    };
    let says = match (&base, &log) {
        (Some(b), _) => b.clone(),
        (None, Some(l)) if kind != PathKind::Snapshot => l.clone(),
        _ => path.clone(),
    };
    let dialect = super::dialect_of(&says, chosen)?;
    Ok(Located {
        path,
        kind,
        base,
        log,
        snapshot,
        segments,
        dialect,
    })
}

/// A read-only log over the segments of `log_dir` whose first LSNs are `first_lsns` (a
/// segment compressed since it was chosen is read from its `.log.z`): the others are not
/// listed, so not scanned. Its last segment is read as the last of a log (a torn tail is
/// reported in `Log::recovery`, not refused): a caller that knows it is sealed checks that.
/// Paths in errors and reports are the real files'.
pub fn open_segments(log_dir: &Path, first_lsns: &[i64], dialect: Option<Dialect>) -> Result<Log> {
    let storage = Arc::new(Chosen {
        inner: crate::io::storage::real(),
        dir: log_dir.to_path_buf(),
        first_lsns: first_lsns.iter().copied().collect(),
    });
    let log = Log::open(
        log_dir,
        LogOptions {
            readonly: true,
            dialect,
            storage,
            ..LogOptions::default()
        },
    )?;
    let held: HashSet<i64> = log.segments().iter().map(|s| s.start_lsn).collect();
    if let Some(missing) = first_lsns.iter().find(|l| !held.contains(l)) {
        return Err(Error::io(
            "open segment",
            &log_dir.join(crate::format::segment::file_name(*missing)),
            io::Error::from(io::ErrorKind::NotFound),
        ));
    }
    Ok(log)
}

/// The real file system, listing only the chosen segments of one log directory.
struct Chosen {
    inner: Arc<dyn Storage>,
    dir: PathBuf,
    first_lsns: HashSet<i64>,
}

impl fmt::Debug for Chosen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chosen")
            .field("dir", &self.dir)
            .field("segments", &self.first_lsns.len())
            .finish()
    }
}

impl Storage for Chosen {
    fn open(&self, path: &Path, mode: Open) -> io::Result<Arc<dyn StorageFile>> {
        self.inner.open(path, mode)
    }
    fn adopt(&self, file: File, path: &Path) -> Arc<dyn StorageFile> {
        self.inner.adopt(file, path)
    }
    fn rename(&self, from: &Path, to: &Path, mode: Rename) -> io::Result<()> {
        self.inner.rename(from, to, mode)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn lock_dir(&self, path: &Path) -> io::Result<Option<File>> {
        self.inner.lock_dir(path)
    }
    fn open_file(&self, path: &Path, writable: bool) -> io::Result<File> {
        self.inner.open_file(path, writable)
    }
    fn list_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let listed = self.inner.list_dir(path)?;
        if path != self.dir {
            return Ok(listed);
        }
        Ok(listed
            .into_iter()
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .and_then(parse_any_file_name)
                    .is_some_and(|first| self.first_lsns.contains(&first))
            })
            .collect())
    }
    fn map(&self, file: &File, len: u64) -> io::Result<Option<memmap2::Mmap>> {
        self.inner.map(file, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn demo_log(dir: &Path) -> Vec<i64> {
        let log_dir = Layout::new(dir).log;
        std::fs::create_dir_all(&log_dir).unwrap();
        let mut log = Log::open(
            &log_dir,
            LogOptions {
                soft_limit: 4096,
                hard_limit: 8192,
                preallocate: false,
                sync: crate::durability::SyncPolicy::Never,
                ..LogOptions::default()
            },
        )
        .unwrap();
        for _ in 0..300 {
            let lsn = log.append(1, &[7u8; 40]).unwrap();
            log.commit(lsn).unwrap(); // segments roll at a commit
        }
        let firsts = log.segments().iter().map(|s| s.start_lsn).collect();
        drop(log);
        firsts
    }

    #[test]
    fn every_form_of_a_path_names_the_same_files() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("b");
        let firsts = demo_log(&base);
        assert!(firsts.len() > 2);
        let log = Layout::new(&base).log;
        let seg = log.join(crate::format::segment::file_name(firsts[1]));

        let b = locate(&base, None).unwrap();
        assert_eq!(b.kind, PathKind::Base);
        assert_eq!(b.log.as_deref(), Some(log.as_path()));
        let l = locate(&log.join("."), None).unwrap();
        assert_eq!(l.kind, PathKind::LogDir);
        assert_eq!(l.base.as_deref(), Some(base.as_path()));
        let s = locate(&log.join("../log/.").join(seg.file_name().unwrap()), None).unwrap();
        assert_eq!(s.kind, PathKind::Segment);
        assert_eq!(s.segments, Some(vec![firsts[1]]));
        assert_eq!(
            s.base
                .as_deref()
                .map(std::fs::canonicalize)
                .unwrap()
                .unwrap(),
            std::fs::canonicalize(&base).unwrap()
        );
        let opened = s.open_log().unwrap();
        assert_eq!(opened.segments().len(), 1);
        assert_eq!(
            opened.segments()[0].path,
            s.log.unwrap().join(seg.file_name().unwrap())
        );

        std::os::unix::fs::symlink(&base, dir.path().join("link")).unwrap();
        let linked = locate(&dir.path().join("link"), None).unwrap();
        assert_eq!(linked.kind, PathKind::Base);
        assert_eq!(linked.base, Some(dir.path().join("link")));

        let bare = dir.path().join("bare");
        std::fs::rename(&log, &bare).unwrap();
        let lone = locate(&bare, None).unwrap();
        assert_eq!((lone.kind, lone.base), (PathKind::BareLogDir, None));
        assert!(locate(&dir.path().join("nosuch"), None).is_err());
    }
}
