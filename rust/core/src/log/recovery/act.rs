//! Acting on a scan: cutting a torn tail, initialising a half-created segment, resolving
//! compressed twins and executing a repair plan (every byte removed is copied aside first).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::format::dialect::Dialect;
use crate::format::record;
use crate::io::fsutil;
use crate::io::storage::Storage;
use crate::segment::{self, Segment};

use super::finding::{FindingKind, RecoveryReport};
use super::plan::RepairPlan;
use super::scan::{LogScan, RecoveryMode, TwinAction};

/// Acts on a scan whose mode accepted it (the caller checked [`LogScan::ok`], or the mode is
/// Repair): cuts a torn tail, initialises a half-created last segment, or executes the repair
/// plan. `writable` false changes nothing and only reports.
pub(crate) fn recover(
    mut scan: LogScan,
    writable: bool,
    storage: &Arc<dyn Storage>,
) -> Result<Recovered> {
    let fs = &**storage;
    let mut report = RecoveryReport::default();
    let repair = scan.options.mode == RecoveryMode::Repair;
    let plan = if repair {
        RepairPlan::from_scan(&scan)
    } else {
        None
    };
    let torn = scan
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::TornTail)
        .cloned();
    let uninitialised = scan
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::UninitialisedHeader)
        .map(|f| f.path.clone());
    let dir = scan.dir.clone();
    let dialect = scan.dialect;
    let twins = std::mem::take(&mut scan.twins);
    let kept = plan.as_ref().map_or(scan.files.len(), |p| p.kept_files);
    let mut segments: Vec<Segment> = scan
        .files
        .into_iter()
        .take(kept)
        .filter_map(|f| f.segment)
        .collect();
    if let Some(plan) = plan {
        let temp = fsutil::temp_dir_beside(fs, &dir, dialect)?;
        if let Some(cut) = &plan.cut {
            let backup = fsutil::backup_copy(fs, &cut.path, &temp, "repair")?;
            report.moved.push(backup);
        }
        for path in &plan.moved {
            report
                .moved
                .push(fsutil::move_aside(fs, path, &temp, "repair")?);
        }
        fsutil::sync_dir(fs, &temp)?;
        fsutil::sync_dir(fs, &dir)?;
        if let Some(cut) = &plan.cut {
            let seg = segments.last_mut().expect("the cut segment is kept");
            cut_segment(seg, cut.offset, cut.reach)?;
            report.cut_path = Some(cut.path.clone());
            report.cut_offset = Some(cut.offset);
            report.bytes_cut = cut.reach.saturating_sub(cut.offset);
            report.records_kept = cut.records_kept;
        }
        report.reason = Some(plan.reason.to_error().to_string());
    } else if let Some(t) = torn {
        let offset = t.offset.unwrap_or_default();
        let reach = t.reach.unwrap_or(offset);
        let seg = segments
            .last_mut()
            .expect("a torn tail is in the last segment");
        if writable {
            if let Some(copy) = keep_cut_bytes(fs, dialect, &dir, seg.path(), offset, reach)? {
                report.moved.push(copy);
            }
            cut_segment(seg, offset, reach)?;
        }
        report.cut_path = Some(t.path.clone());
        report.cut_offset = Some(offset);
        report.bytes_cut = reach.saturating_sub(offset);
        report.records_kept = seg.len() as u64;
        report.reason = Some(t.message.clone());
    }
    if writable {
        tell(&dir, &report, repair);
        let twins_moved = resolve_twins(fs, &dir, &twins)?;
        if !twins_moved.is_empty() {
            ::log::warn!(
                target: crate::events::LOG,
                "moved {} compressed segment(s) of {} that do not match their .log aside: {}",
                twins_moved.len(),
                dir.display(),
                paths_text(&twins_moved)
            );
        }
        report.moved.extend(twins_moved);
        if let Some(last) = segments.last_mut() {
            // The active segment is written from here on: dense index, no map, writable file.
            last.unseal()?;
            if uninitialised.as_deref() == Some(last.path()) {
                segment::initialise(&*last.shared_file()?, last.path())?;
            }
        }
    }
    Ok(Recovered { segments, report })
}

/// Reports what a writable open or a repair did to the files of `dir` (a WARNING each: a cut
/// or a move loses nothing, but a crash or damage came before it).
fn tell(dir: &Path, report: &RecoveryReport, repair: bool) {
    let reason = report.reason.as_deref().unwrap_or("");
    let cut = match (&report.cut_path, report.cut_offset) {
        (Some(path), Some(offset)) => Some(format!(
            "cut {} at offset {offset} ({} bytes; {} records kept before it)",
            path.display(),
            report.bytes_cut,
            report.records_kept
        )),
        _ => None,
    };
    if repair {
        if cut.is_none() && report.moved.is_empty() {
            return;
        }
        ::log::warn!(
            target: crate::events::LOG,
            "repair of {}: {reason}; {}; copies of what it removed: {}",
            dir.display(),
            cut.as_deref().unwrap_or("nothing cut"),
            paths_text(&report.moved)
        );
    } else if let Some(cut) = cut {
        let kept = if report.moved.is_empty() {
            "only zeros were cut".to_string()
        } else {
            format!("the cut bytes are kept in {}", paths_text(&report.moved))
        };
        ::log::warn!(
            target: crate::events::LOG,
            "torn tail at open of {}: {cut}; {kept} ({reason})",
            dir.display()
        );
    }
}

/// Paths in a message: the first few, and how many more.
fn paths_text(paths: &[PathBuf]) -> String {
    const SHOWN: usize = 3;
    if paths.is_empty() {
        return "none".to_string();
    }
    let listed: Vec<String> = paths
        .iter()
        .take(SHOWN)
        .map(|p| p.display().to_string())
        .collect();
    match paths.len().saturating_sub(SHOWN) {
        0 => listed.join(", "),
        more => format!("{} and {more} more", listed.join(", ")),
    }
}

/// Whether the `.log` beside a `.log.z` that decodes holds the bytes the `.z` was made from:
/// at least the original length, whose first `original_len` bytes have the original CRC (what
/// follows the end marker is never read). Reads the `.log` once, in bounded chunks: this only
/// happens after a compression stopped between its rename and its delete.
pub(crate) fn twin_matches(
    plain: &Path,
    header: &crate::format::compressed::Header,
) -> Result<bool> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(plain).ctx("open segment", plain)?;
    let len = file.metadata().ctx("stat segment", plain)?.len();
    if len < header.original_len {
        return Ok(false);
    }
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; (1 << 20).min(header.original_len as usize)];
    let mut at = 0u64;
    while at < header.original_len {
        let want = ((header.original_len - at) as usize).min(buf.len());
        let n = file
            .read_at(&mut buf[..want], at)
            .ctx("read segment", plain)?;
        if n == 0 {
            return Ok(false);
        }
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hasher.finalize() == header.original_crc)
}

/// Acts on the segments found twice (spec section 9): deletes the `.log` of a `.z` that
/// decodes, moves a `.z` that does not (or that a repair found to differ) into `../temp`, and
/// returns where those went. A file already moved by repair is gone.
pub(crate) fn resolve_twins(
    fs: &dyn Storage,
    dir: &Path,
    twins: &[TwinAction],
) -> Result<Vec<PathBuf>> {
    if twins.is_empty() {
        return Ok(Vec::new());
    }
    let mut temp = None;
    let mut moved = Vec::new();
    for twin in twins {
        match twin {
            TwinAction::DeletePlain(path) => match fs.remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io("delete segment replaced by its .z", path, e))
                }
                _ => {}
            },
            TwinAction::MoveCompressedAside(path) if path.exists() => {
                let t = match &temp {
                    Some(t) => t,
                    None => temp.insert(fsutil::temp_dir_beside(fs, dir, Dialect::Spec)?),
                };
                moved.push(fsutil::move_aside(fs, path, t, "compress")?);
            }
            TwinAction::MoveCompressedAside(_) => {}
        }
    }
    if let Some(t) = &temp {
        fsutil::sync_dir(fs, t)?;
    }
    fsutil::sync_dir(fs, dir)?;
    Ok(moved)
}

/// Copies what a torn-tail cut removes, `[offset, reach)` of `path`, into the temp directory
/// before the cut (spec section 3: a cut never destroys bytes silently): a fresh exclusive
/// `cut-...-<segment>.at-<offset>` file, fsynced with its directory. A cut of nothing but
/// zeros (`reach <= offset`) needs no copy: `None`.
pub(crate) fn keep_cut_bytes(
    fs: &dyn Storage,
    dialect: Dialect,
    dir: &Path,
    path: &Path,
    offset: u64,
    reach: u64,
) -> Result<Option<PathBuf>> {
    if reach <= offset {
        return Ok(None);
    }
    let temp = fsutil::temp_dir_beside(fs, dir, dialect)?;
    let suffix = format!(".at-{offset}");
    let copy = fsutil::backup_range(fs, path, offset..reach, &temp, "cut", &suffix)?;
    fsutil::sync_dir(fs, &temp)?;
    Ok(Some(copy))
}

/// Zeroes `[offset, max(reach, offset + end marker))` of the (kept) segment and syncs it: the
/// first zero word is the new end marker, and no discarded record can be read back.
pub(crate) fn cut_segment(seg: &mut Segment, offset: u64, reach: u64) -> Result<()> {
    seg.unseal()?;
    let file = seg.shared_file()?;
    let marker_end = offset + record::END_MARKER.len() as u64;
    segment::zero_range(&*file, seg.path(), offset, reach.max(marker_end))?;
    file.sync_data().ctx("fsync segment", seg.path())
}

/// What acting on a scan produced: the segments of the opened log and the report of what was
/// cut or moved.
pub(crate) struct Recovered {
    pub segments: Vec<Segment>,
    pub report: RecoveryReport,
}
