//! Which dialect a directory is in (spec section 11), found from its files before anything
//! reads them as data: the metadata file's length, the snapshot's header and the first record
//! of every log segment, each checked by `format::detect`. Files that disagree are an error that names
//! them; a directory whose files say nothing (new, empty) is `spec` unless the caller chose.
//!
//! Detection comes before recovery: a log of the other dialect must never be read as one
//! damaged record followed by garbage and "repaired" into an empty log.

use std::fs::File;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::format::compressed::is_compressed_path as is_compressed;
use crate::format::detect::{
    first_record_reach, first_record_says, has_record_marker_after_first, metadata_says,
    second_record_at, second_record_says, snapshot_says, Says, RECORD_PROBE_HEADER, SNAPSHOT_PROBE,
};
use crate::format::record::END_MARKER;
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

/// What the first record of a segment holds, for detection: what it says, and whether it holds
/// bytes that may be a record (not the end marker, not a header alone) that say nothing.
struct Probe {
    found: Option<Found>,
    /// A first record neither framing reads (damaged) and more records after it, where no
    /// file may say the dialect: an open in either dialect would cut them all.
    undecided: bool,
}

fn probe_segment(segment: &SegmentFile) -> Result<Probe> {
    let path = match (&segment.twin, is_compressed(&segment.path)) {
        (_, false) => &segment.path,
        (Some(plain), true) => plain,
        (None, true) => {
            return Ok(Probe {
                found: None,
                undecided: false,
            })
        }
    };
    if segment.kind != EntryKind::Regular {
        return Ok(Probe {
            found: None,
            undecided: false,
        });
    }
    probe_plain_segment(path)
}

/// What the first record of the plain (`.log`) segment file at `path` says: [`segment_says`]
/// of one file (`None` for a `.log.z`, which exists only in the spec dialect).
pub fn plain_segment_says(path: &Path) -> Result<Option<Found>> {
    if is_compressed(path) {
        return Ok(None);
    }
    Ok(probe_plain_segment(path)?.found)
}

fn probe_plain_segment(path: &Path) -> Result<Probe> {
    let nothing = Probe {
        found: None,
        undecided: false,
    };
    let file = File::open(path).ctx("open segment", path)?;
    let len = file.metadata().ctx("stat segment", path)?.len();
    let Some(available) = len.checked_sub(HEADER_LEN as u64) else {
        return Ok(nothing);
    };
    let mut header = [0u8; RECORD_PROBE_HEADER];
    let got = read_full_at(&file, path, "read segment", &mut header, HEADER_LEN as u64)?;
    let header = &header[..got];
    // The end marker (or a preallocated tail of zeros), or no record at all: nothing written.
    let written = header[..got.min(END_MARKER.len())].iter().any(|&b| b != 0);
    let reach = first_record_reach(header, available);
    if reach > MAX_RECORD_PROBE {
        return Ok(nothing); // the metadata file and the snapshot still speak
    }
    // Bounded by the file's own length and by MAX_RECORD_PROBE, whatever its length fields say.
    let mut record = vec![0u8; reach as usize];
    let got = read_full_at(&file, path, "read segment", &mut record, HEADER_LEN as u64)?;
    let mut found = first_record_says(&record[..got]).map(|says| Found {
        says,
        path: path.to_path_buf(),
    });
    if found.is_none() && written {
        // A damaged first record: the record after it may still say, where one framing's
        // length of the first leads to a record of that framing (and the other's does not).
        let mut seconds = Vec::new();
        for dialect in Dialect::ALL {
            if let Some(says) = second_record(&file, path, header, available, dialect)? {
                seconds.push(says);
            }
        }
        if let [says] = seconds[..] {
            found = Some(Found {
                says,
                path: path.to_path_buf(),
            });
        }
    }
    let undecided = found.is_none() && written && later_record_marker(&file, path, available)?;
    Ok(Probe { undecided, found })
}

/// How far past a damaged first record [`later_record_marker`] looks for another record.
const MARKER_WINDOW: u64 = 1 << 20;

/// Whether a record marker follows the first record's own (within [`MARKER_WINDOW`]): then
/// the damaged first record is followed by more records, which a cut would discard. A write
/// torn by a power loss leaves a prefix of what it wrote followed by zeros (or the end of the
/// file), so a torn first record is never followed by a record (what a cut of it removes was
/// never acknowledged): such a segment is not undecided, and opens as before.
fn later_record_marker(file: &File, path: &Path, available: u64) -> Result<bool> {
    let len = available.min(MARKER_WINDOW) as usize;
    let mut bytes = vec![0u8; len];
    let got = read_full_at(file, path, "read segment", &mut bytes, HEADER_LEN as u64)?;
    Ok(has_record_marker_after_first(&bytes[..got]))
}

/// What the record after the first says when `dialect`'s framing of the first one puts it
/// there ([`second_record_says`]); reads at most one record header and one record, within
/// the file and [`MAX_RECORD_PROBE`].
fn second_record(
    file: &File,
    path: &Path,
    first_header: &[u8],
    available: u64,
    dialect: Dialect,
) -> Result<Option<Says>> {
    let Some(at) = second_record_at(first_header, dialect).filter(|&at| at < available) else {
        return Ok(None);
    };
    let left = available - at;
    let mut header = [0u8; RECORD_PROBE_HEADER];
    let want = (RECORD_PROBE_HEADER as u64).min(left) as usize;
    let offset = HEADER_LEN as u64 + at;
    let got = read_full_at(file, path, "read segment", &mut header[..want], offset)?;
    let reach = first_record_reach(&header[..got], left);
    if reach > MAX_RECORD_PROBE {
        return Ok(None);
    }
    let mut record = vec![0u8; reach as usize];
    let got = read_full_at(file, path, "read segment", &mut record, offset)?;
    Ok(second_record_says(&record[..got], dialect))
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

/// What the files of a directory say, and the first segment whose first record is written
/// but says nothing (see [`decide_or_refuse`]).
#[derive(Debug, Default)]
pub struct Said {
    pub found: Vec<Found>,
    pub undecided: Option<PathBuf>,
}

/// What the first record of every segment of a log listed as `entries` says (a segment of the
/// other dialect anywhere in the log is found, never read as damage: issue 43).
pub fn log_says(entries: &[SegmentFile]) -> Result<Said> {
    let mut said = Said::default();
    for entry in entries {
        let probe = probe_segment(entry)?;
        if probe.undecided && said.undecided.is_none() {
            said.undecided = Some(entry.path.clone());
        }
        said.found.extend(probe.found);
    }
    Ok(said)
}

/// What the metadata file, the snapshot and the first record of every log segment of a base
/// directory say.
pub fn base_says(layout: BaseFiles<'_>) -> Result<Vec<Found>> {
    Ok(base_said(&layout)?.found)
}

fn base_said(layout: &BaseFiles<'_>) -> Result<Said> {
    let mut found = Vec::new();
    found.extend(metadata_file_says(layout.metadata)?);
    found.extend(snapshot_file_says(layout.snapshot)?);
    let mut said = Said::default();
    if layout.log.is_dir() {
        let (segments, _) =
            crate::io::fsutil::list_segments(&crate::io::storage::RealStorage, layout.log)?;
        said = log_says(&segments)?;
    }
    found.append(&mut said.found);
    said.found = found;
    Ok(said)
}

/// [`decide`], except where no file says a dialect and none was chosen but a segment holds a
/// first record neither framing reads: then the files cannot decide, and reading the log in
/// either dialect would cut that record and every entry after it (a torn tail), so the
/// directory is refused with what each `--dialect` would do (nothing is changed).
pub fn decide_or_refuse(said: &Said, chosen: Option<Dialect>) -> Result<Dialect> {
    match (&said.undecided, said.found.is_empty(), chosen) {
        (Some(path), true, None) => Err(undecided(path)),
        _ => decide(&said.found, chosen),
    }
}

/// The refusal of a directory whose files cannot decide its dialect, saying what a read of the
/// log in each dialect would find (the scanner's own words).
fn undecided(segment: &Path) -> Error {
    use crate::log::recovery::{scan_dir, RecoveryMode, ScanOptions};
    let dir = segment.parent().unwrap_or(Path::new("."));
    let outcomes: Vec<String> = Dialect::ALL
        .into_iter()
        .map(|d| {
            let options = ScanOptions {
                mode: RecoveryMode::ReportOnly,
                dialect: Some(d),
                ..ScanOptions::default()
            };
            let what = match scan_dir(dir, options, &crate::io::storage::real()) {
                Ok(scan) => match scan.findings.iter().find(|f| f.file.is_some()) {
                    Some(f) => format!(
                        "reads {} entries, then {}: {} at offset {}",
                        scan.records(),
                        f.path.display(),
                        f.message,
                        f.offset.unwrap_or(0)
                    ),
                    None => format!("reads {} entries and cuts nothing", scan.records()),
                },
                Err(e) => format!("fails: {e}"),
            };
            format!("--dialect {d} (dialect=\"{d}\") {what}")
        })
        .collect();
    Error::Dialect {
        path: segment.to_path_buf(),
        reason: format!(
            "the files cannot decide this directory's dialect: the first record of this \
             segment reads in neither dialect's framing (damaged), and no metadata file, \
             snapshot or other segment says one. Nothing was changed. Choose the dialect: {}",
            outcomes.join("; ")
        ),
    }
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
/// A directory whose files cannot decide is refused ([`decide_or_refuse`]).
pub fn base_dialect(layout: BaseFiles<'_>, chosen: Option<Dialect>) -> Result<Dialect> {
    decide_or_refuse(&base_said(&layout)?, chosen)
}

/// The dialect of a log directory listed as `entries` (LSN order): what the first record of
/// each segment says, agreeing with `chosen` (segments of two dialects are refused, naming
/// them; a log whose files cannot decide is refused: [`decide_or_refuse`]). Compressed
/// segments (spec section 9) exist only in the spec dialect: a taskflux log holding one is
/// refused, naming it.
pub fn log_dialect(entries: &[SegmentFile], chosen: Option<Dialect>) -> Result<Dialect> {
    let dialect = decide_or_refuse(&log_says(entries)?, chosen)?;
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
