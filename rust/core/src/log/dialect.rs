//! Which dialect a directory is in (spec section 11), found from its files before anything
//! reads them as data: the metadata file's length, the snapshot's header and the first record
//! of the log, each checked by `format::detect`. Files that disagree are an error that names
//! them; a directory whose files say nothing (new, empty) is `spec` unless the caller chose.
//!
//! Detection comes before recovery: a log of the other dialect must never be read as one
//! damaged record followed by garbage and "repaired" into an empty log.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::compressed::is_compressed_path as is_compressed;
use crate::format::detect::{
    first_record_reach, first_record_says, metadata_says, snapshot_says, Says, RECORD_PROBE_HEADER,
    SNAPSHOT_PROBE,
};
use crate::format::segment::HEADER_LEN;
use crate::io::fsutil::{read_full_at, EntryKind, SegmentFile};

pub use crate::format::dialect::Dialect;

/// The longest first record read to tell the log's dialect (a sparse file's length field must
/// not size an allocation): a longer one says nothing, and the other files decide.
const MAX_RECORD_PROBE: u64 = 64 << 20;

/// Snapshots up to this long are read whole to tell their dialect (checksum included).
const WHOLE_SNAPSHOT: u64 = 1 << 20;

/// What one file of a directory says about its dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub says: Says,
    pub path: PathBuf,
}

/// What the first record of `segment` says (`None` for a compressed segment, which exists
/// only in the spec dialect and is checked by its own header, and for anything but a regular
/// file, which the scan reports). Reads the segment header and one record, never more than the
/// file holds.
pub fn segment_says(segment: &SegmentFile) -> Result<Option<Found>> {
    let path = match (&segment.twin, is_compressed(&segment.path)) {
        (_, false) => &segment.path,
        (Some(plain), true) => plain,
        (None, true) => return Ok(None),
    };
    if segment.kind != EntryKind::Regular {
        return Ok(None);
    }
    plain_segment_says(path)
}

/// What the first record of the plain (`.log`) segment file at `path` says: [`segment_says`]
/// of one file (`None` for a `.log.z`, which exists only in the spec dialect).
pub fn plain_segment_says(path: &Path) -> Result<Option<Found>> {
    if is_compressed(path) {
        return Ok(None);
    }
    let file = File::open(path).ctx("open segment", path)?;
    let len = file.metadata().ctx("stat segment", path)?.len();
    let Some(available) = len.checked_sub(HEADER_LEN as u64) else {
        return Ok(None);
    };
    let mut header = [0u8; RECORD_PROBE_HEADER];
    let got = read_full_at(&file, path, "read segment", &mut header, HEADER_LEN as u64)?;
    let reach = first_record_reach(&header[..got], available);
    if reach > MAX_RECORD_PROBE {
        return Ok(None); // the metadata file and the snapshot still speak
    }
    // Bounded by the file's own length and by MAX_RECORD_PROBE, whatever its length fields say.
    let mut record = vec![0u8; reach as usize];
    let got = read_full_at(&file, path, "read segment", &mut record, HEADER_LEN as u64)?;
    Ok(first_record_says(&record[..got]).map(|says| Found {
        says,
        path: path.to_path_buf(),
    }))
}

/// The files of a base directory detection reads (`base::Layout` has them; taken one by one so
/// that this module stays below `base`, which calls it).
pub struct BaseFiles<'a> {
    pub metadata: &'a Path,
    pub snapshot: &'a Path,
    pub log: &'a Path,
}

/// What a metadata file says (`None`: absent, not a regular file, or saying nothing).
pub fn metadata_file_says(path: &Path) -> Result<Option<Found>> {
    let Some(len) = regular_len(path)?.filter(|&l| l <= 24) else {
        return Ok(None);
    };
    let file = File::open(path).ctx("open metadata", path)?;
    let mut bytes = [0u8; 24];
    let got = read_full_at(&file, path, "read metadata", &mut bytes[..len as usize], 0)?;
    Ok(metadata_says(&bytes[..got]).map(|says| Found {
        says,
        path: path.to_path_buf(),
    }))
}

/// What a snapshot file says (`None`: absent, not a regular file, or saying nothing).
pub fn snapshot_file_says(path: &Path) -> Result<Option<Found>> {
    let Some(len) = regular_len(path)? else {
        return Ok(None);
    };
    // A small snapshot is read whole, so that its checksum is checked too; a large one by its
    // header's lengths alone (it is read again, whole, by its own reader).
    let file = File::open(path).ctx("open snapshot", path)?;
    let mut head = vec![
        0u8;
        if len <= WHOLE_SNAPSHOT {
            len as usize
        } else {
            SNAPSHOT_PROBE
        }
    ];
    let got = read_full_at(&file, path, "read snapshot", &mut head, 0)?;
    Ok(snapshot_says(&head[..got], len).map(|says| Found {
        says,
        path: path.to_path_buf(),
    }))
}

/// The dialect a lone file is read in: `chosen`, else what it says, else `spec` (whose reader
/// then reports what is wrong with it). For `tflux.read_metadata` and `tflux.read_snapshot`.
pub fn file_dialect(found: Option<Found>, chosen: Option<Dialect>) -> Result<Dialect> {
    decide(&Vec::from_iter(found), chosen)
}

/// What the metadata file, the snapshot and the first log segment of a base directory say.
pub fn base_says(layout: BaseFiles<'_>) -> Result<Vec<Found>> {
    let mut found = Vec::new();
    found.extend(metadata_file_says(layout.metadata)?);
    found.extend(snapshot_file_says(layout.snapshot)?);
    if layout.log.is_dir() {
        let (segments, _) =
            crate::io::fsutil::list_segments(&crate::io::storage::RealStorage, layout.log)?;
        if let Some(first) = segments.first() {
            found.extend(segment_says(first)?);
        }
    }
    Ok(found)
}

/// The dialect the files agree on, or `chosen` where they say nothing (`spec` when neither).
/// Files that disagree with each other, or with `chosen`, are [`Error::Dialect`] naming them.
pub fn decide(found: &[Found], chosen: Option<Dialect>) -> Result<Dialect> {
    let Some(first) = found.first() else {
        return Ok(chosen.unwrap_or(Dialect::Spec));
    };
    if let Some(other) = found.iter().find(|f| f.says.dialect != first.says.dialect) {
        return Err(Error::Dialect {
            path: other.path.clone(),
            reason: format!(
                "files of two dialects in one directory: this file is in the {} dialect ({}), \
                 but {} is in the {} dialect ({})",
                other.says.dialect,
                other.says.why,
                first.path.display(),
                first.says.dialect,
                first.says.why
            ),
        });
    }
    match chosen {
        Some(c) if c != first.says.dialect => Err(Error::Dialect {
            path: first.path.clone(),
            reason: format!(
                "the {c} dialect was asked for, but this file is in the {} dialect ({})",
                first.says.dialect, first.says.why
            ),
        }),
        _ => Ok(first.says.dialect),
    }
}

/// The dialect of a base directory: what its files say, agreeing with `chosen` (see [`decide`]).
pub fn base_dialect(layout: BaseFiles<'_>, chosen: Option<Dialect>) -> Result<Dialect> {
    decide(&base_says(layout)?, chosen)
}

/// The dialect of a log directory listed as `entries` (LSN order): what its first segment
/// says, agreeing with `chosen`. Compressed segments (spec section 9) exist only in the spec
/// dialect: a taskflux log holding one is refused, naming it.
pub fn log_dialect(entries: &[SegmentFile], chosen: Option<Dialect>) -> Result<Dialect> {
    let found = match entries.first() {
        Some(first) => Vec::from_iter(segment_says(first)?),
        None => Vec::new(),
    };
    let dialect = decide(&found, chosen)?;
    if dialect == Dialect::Taskflux {
        if let Some(z) = entries.iter().find(|e| is_compressed(&e.path)) {
            return Err(Error::Dialect {
                path: z.path.clone(),
                reason: "a compressed segment (spec section 9) in a taskflux-dialect log: \
                         compressed segments exist only in the spec dialect"
                    .into(),
            });
        }
    }
    Ok(dialect)
}

/// Refuses a taskflux directory where only the spec dialect is supported (channels, spec
/// section 11): never read as damage, so nothing in it is cut or rewritten.
pub fn require_spec(found: &[Found], what: &str) -> Result<()> {
    match decide(found, None)? {
        Dialect::Spec => Ok(()),
        Dialect::Taskflux => {
            let first = &found[0];
            Err(Error::Dialect {
                path: first.path.clone(),
                reason: format!(
                    "this directory is in the taskflux dialect ({}); {what} exists only in \
                     the spec dialect, so it is refused (nothing was changed)",
                    first.says.why
                ),
            })
        }
    }
}

/// The length of `path` when it is a regular file (a symlink to one included); `None` when
/// absent or something else (which the reader of that file reports).
fn regular_len(path: &Path) -> Result<Option<u64>> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(Some(m.len())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("stat", path, e)),
    }
}
