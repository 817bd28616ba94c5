//! Paths of a base directory (spec section 1), the names of its files, and what kind of
//! directory a path is (a store's base, a channel, a bare log): the one place that knows them.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::dialect::Dialect;
use crate::log::recovery::{Keep, RecoveryMode, ScanOptions};
use crate::log::verify::VerifyReport;

use super::settings::SETTINGS_FILE;

/// Paths of a base directory (spec section 1). The one place that knows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The dialect its files are written in (spec section 11): says the temp directory's
    /// name and how the snapshot and metadata are read and written.
    pub dialect: Dialect,
    pub base: PathBuf,
    pub data: PathBuf,
    pub log: PathBuf,
    pub temp: PathBuf,
    pub snapshot: PathBuf,
    pub metadata: PathBuf,
    pub settings: PathBuf,
}

impl Layout {
    /// The layout of a spec-dialect base directory.
    pub fn new(base: &Path) -> Layout {
        Layout::in_dialect(base, Dialect::Spec)
    }

    /// The layout of a base directory in `dialect`.
    pub fn in_dialect(base: &Path, dialect: Dialect) -> Layout {
        let data = base.join("data");
        Layout {
            dialect,
            base: base.to_path_buf(),
            log: data.join("log"),
            temp: data.join(dialect.temp_dir()),
            snapshot: data.join("tflux.snapshot"),
            metadata: data.join("tflux.metadata"),
            settings: base.join(SETTINGS_FILE),
            data,
        }
    }

    /// The layout of `base` in the dialect its files say (agreeing with `chosen`; a directory
    /// whose files say nothing is in `chosen`, else `spec`): [`crate::log::dialect::decide`].
    pub fn detect(base: &Path, chosen: Option<Dialect>) -> Result<Layout> {
        let probe = Layout::new(base);
        let dialect = crate::log::dialect::base_dialect(probe.dialect_files(), chosen)?;
        Ok(Layout::in_dialect(base, dialect))
    }

    /// The files whose bytes say the directory's dialect (`crate::log::dialect::base_says`).
    pub fn dialect_files(&self) -> crate::log::dialect::BaseFiles<'_> {
        crate::log::dialect::BaseFiles {
            metadata: &self.metadata,
            snapshot: &self.snapshot,
            log: &self.log,
        }
    }
}

/// The dialect of whatever `path` is, agreeing with `chosen` (spec section 11): a base
/// directory (what its metadata, snapshot and first segment say), a log directory (its first
/// segment), or one file (a segment's first record, a metadata file's length, a snapshot's
/// header). What says nothing is `chosen`, else `spec`. For readers handed a path (Spark,
/// export) that must read it in the dialect its owner would.
pub fn dialect_of(path: &Path, chosen: Option<Dialect>) -> Result<Dialect> {
    let layout = Layout::new(path);
    if layout.data.is_dir() {
        return Ok(Layout::detect(path, chosen)?.dialect);
    }
    if path.is_dir() {
        let (segments, _) =
            crate::io::fsutil::list_segments(&crate::io::storage::RealStorage, path)?;
        return crate::log::dialect::log_dialect(&segments, chosen);
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let found = if crate::format::segment::parse_file_name(name).is_some() {
        crate::log::dialect::plain_segment_says(path)?
    } else if Some(name) == layout_name(|l| &l.metadata) {
        crate::log::dialect::metadata_file_says(path)?
    } else {
        crate::log::dialect::snapshot_file_says(path)?
    };
    crate::log::dialect::file_dialect(found, chosen)
}

/// The file name of one of [`Layout`]'s files (the one place that names them).
fn layout_name(file: impl Fn(&Layout) -> &PathBuf) -> Option<&'static str> {
    static LAYOUT: std::sync::OnceLock<Layout> = std::sync::OnceLock::new();
    let layout = LAYOUT.get_or_init(|| Layout::new(Path::new("")));
    file(layout).file_name().and_then(|n| n.to_str())
}

/// What a base directory holds: a store's (its metadata file or snapshot), a channel's (its
/// `data/cursors`, spec section 10), or neither yet (a new directory, or a log alone). The one
/// place this is decided: each open refuses the other's directory, and verify never lowers its
/// checks because a folder appeared (issue 30 item 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Store,
    Channel,
    Unknown,
}

impl Kind {
    pub fn name(self) -> Option<&'static str> {
        match self {
            Kind::Store => Some("store"),
            Kind::Channel => Some("channel"),
            Kind::Unknown => None,
        }
    }
}

/// The [`Kind`] of `base`; a directory holding both a store's files and a channel's cursors is
/// corruption naming both (no reader can tell which it is).
pub fn kind(base: &Path) -> Result<Kind> {
    let layout = Layout::new(base);
    let cursors = layout.data.join("cursors");
    let present = |p: &Path| std::fs::symlink_metadata(p).is_ok();
    let store_file = [&layout.metadata, &layout.snapshot]
        .into_iter()
        .find(|p| present(p));
    match (store_file, present(&cursors)) {
        (Some(file), true) => Err(Error::corruption(
            &cursors,
            None,
            format!(
                "a channel's cursors beside a store's {}: a directory is a store or a channel, \
                 never both (move data/cursors aside if a channel was opened on a store by mistake)",
                file.display()
            ),
        )),
        (Some(_), false) => Ok(Kind::Store),
        (None, true) => Ok(Kind::Channel),
        (None, false) => Ok(Kind::Unknown),
    }
}

/// Refuses to open `base` as `want` when it is the other kind: a clear error naming what it is
/// and which open to use.
pub fn require_kind(base: &Path, want: Kind) -> Result<()> {
    match kind(base)? {
        Kind::Unknown => Ok(()),
        found if found == want => Ok(()),
        Kind::Store => Err(Error::InvalidArgument(format!(
            "{} is a store's base directory (it holds data/tflux.snapshot or data/tflux.metadata): \
             open it with tflux.open, not as a channel",
            base.display()
        ))),
        Kind::Channel => Err(Error::InvalidArgument(format!(
            "{} is a channel directory (it holds data/cursors): open it with tflux.Channel.open, \
             not as a store",
            base.display()
        ))),
    }
}

/// The directory a user names when they open the log directory `log`: the base directory of
/// a base's log (`<base>/data/log`: made as `tflux.open` makes a base, `data/log` below it as
/// needed), else `log` itself. What [`crate::io::fsutil::create_named_dir`] makes of a
/// `Log.open` (issue 43: `Log.open("base/data/log")` is how a base's log is written).
pub fn named_dir_of_log(log: &Path) -> &Path {
    let mut up = log.components().rev();
    let is_base_log = matches!(
        (up.next(), up.next()),
        (Some(Component::Normal(l)), Some(Component::Normal(d))) if l == "log" && d == "data"
    );
    match log.parent().and_then(Path::parent) {
        // `data/log` given from inside the base: the base is the current directory.
        Some(base) if is_base_log && base.as_os_str().is_empty() => Path::new("."),
        Some(base) if is_base_log => base,
        _ => log,
    }
}

/// The log directory of `path`: `path/data/log` when it is a base directory, else `path`.
pub fn resolve_log_dir(path: &Path) -> PathBuf {
    let nested = Layout::new(path).log;
    if nested.is_dir() {
        nested
    } else {
        path.to_path_buf()
    }
}

/// Checks every byte of the log at `path` (a base directory or a log directory) as a raw Raft
/// log (empty entries allowed), in the dialect its first segment says.
pub fn verify(path: impl AsRef<Path>) -> Result<VerifyReport> {
    verify_in(path, None)
}

/// [`verify`] in the dialect `chosen` (`None`: the one its first segment says).
pub fn verify_in(path: impl AsRef<Path>, chosen: Option<Dialect>) -> Result<VerifyReport> {
    let dir = resolve_log_dir(path.as_ref());
    crate::log::verify::verify_log_dir(
        &dir,
        ScanOptions {
            mode: RecoveryMode::ReportOnly,
            empty_entries: true,
            keep: Keep::Report,
            dialect: chosen,
            ..ScanOptions::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_log_is_named_by_its_base_and_a_bare_log_by_itself() {
        assert_eq!(
            named_dir_of_log(Path::new("/a/b/data/log")),
            Path::new("/a/b")
        );
        assert_eq!(named_dir_of_log(Path::new("b/data/log")), Path::new("b"));
        assert_eq!(named_dir_of_log(Path::new("data/log")), Path::new("."));
        assert_eq!(named_dir_of_log(Path::new("/a/log")), Path::new("/a/log"));
        assert_eq!(
            named_dir_of_log(Path::new("/a/data/logs")),
            Path::new("/a/data/logs")
        );
        assert_eq!(named_dir_of_log(Path::new("log")), Path::new("log"));
    }
}
