//! One segment file: scanning its records, appending to it, cutting it.
//!
//! The segment keeps an in-memory index (the start offset of each record and the runs of equal
//! terms) built by the scan at open, so reads go straight to a record. Sealed segments are read
//! through a read-only memory map; the active (last) segment is read and written with positioned
//! reads and writes.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use crate::format::compressed;
use crate::format::dialect::Dialect;
use crate::io::storage::{Storage, StorageFile};

use crate::format::steps::Steps;
pub use bytes::SegmentBytes;

pub mod bytes;
pub mod compress;
mod file;
mod index;
mod read;
mod rewrite;
mod scan;
mod walk;
pub use file::initialise;
use file::reserve;
pub use index::{reads_before_full_offsets, RecordIndex};
pub use rewrite::{
    cut_temp_path, remove_cut_leftovers, rewrite_prefix, zero_range, RewriteOptions, RewriteStep,
    CUT_SUFFIX,
};

pub use scan::{
    scan_file, scan_file_keeping, scan_file_stepping, ActiveBytes, FileBytes, FileScan,
};
pub use walk::{
    end_of_records, is_ambiguous_empty_record, is_torn_header, next_record, record_offset_in_file,
    scan_records, scan_records_from, scan_records_in, walk_frames, walk_framing, EndOfRecords,
    RecordSink, ScanStop,
};

pub use crate::format::segment::MAX_ENTRY_LSN;

/// An open segment file.
#[derive(Debug)]
pub struct Segment {
    path: PathBuf,
    /// How its records are framed (the log's dialect).
    dialect: Dialect,
    first_lsn: i64,
    index: RecordIndex,
    /// Offset just past the last record (header included, end marker excluded).
    size: u64,
    /// Its file: open (shared so that a group-commit fsync can run on it outside the log's
    /// lock), or closed while the segment is sealed ([`Handle`]).
    file: Handle,
    /// Whether its open file counts against [`sealed_budget`] (a sealed segment's).
    budgeted: bool,
    /// Where a read-only segment reopens itself for writing (`unseal`).
    storage: Arc<dyn Storage>,
    writable: bool,
    sealed: bool,
    /// The bytes of a sealed segment (map of a `.log`, decompressed `.log.z`), made on first
    /// read.
    map: Option<SegmentBytes>,
    /// The header of the `.log.z` this segment is read from (always sealed).
    compressed: Option<compressed::Header>,
    /// Offset of every record of a sealed segment, built once random reads of it have paid
    /// for the walk ([`Segment::note_random_read`]): a lookup is then one load instead of the
    /// sparse anchor plus a walk of up to `SEALED_STRIDE - 1` headers (two cache misses). 4 B
    /// per record, paid only by segments something reads at random.
    every_offset: Option<Box<[u32]>>,
    /// Small reads of this sealed segment so far (saturating), for [`Segment::note_random_read`].
    random_reads: u32,
    /// The buffer a read-only read checks each record in, kept between reads (a random read
    /// would otherwise allocate one per call) while at most `SCRATCH_KEPT` bytes.
    scratch: Vec<u8>,
    /// Records (from the first) whose framing and CRC the scan at open checked in the file this
    /// segment still reads: 0 once the segment reads another file (a cut's copy, a
    /// decompressed or compressed twin), or for a segment created after the open. Appends
    /// never raise it. [`crate::log::Log::read_rechecks_crc`] decides with it.
    checked_at_open: usize,
    /// The replay steps its scan at open made (a sealed plain segment fed to a restore while
    /// the next ones are scanned, [`crate::format::steps`]); taken back once it is applied.
    steps: Option<Steps>,
}

/// The largest scratch buffer a segment keeps between reads.
const SCRATCH_KEPT: usize = 64 << 10;

/// A segment's file, held open or closed. Sealed segments hold a descriptor only within a
/// process-wide budget ([`sealed_budget`]; issue 30 item 9: one per segment made a log of
/// 1,500 segments unopenable under the usual limit of 1,024 open files). Past it a sealed
/// segment's file is closed: its bytes are read through a map, which outlives the descriptor it
/// was made from, and a read that needs the file opens it again by name, for that read only,
/// refused unless the name still names the inode the scan at open checked
/// ([`Segment::with_file`]): the consistency argument of `crate::io::mmap` (a segment reads the
/// inode its scan checked) holds for a closed file too. What a closed file cannot do is keep a
/// reader's view of a segment a writer has replaced since (copy-on-truncate) once its map is
/// dropped: that read is a `StaleRead` (reopen the log), where a held descriptor still reads
/// the old inode. The budget keeps that to logs of hundreds of segments.
#[derive(Debug)]
enum Handle {
    Open(Arc<dyn StorageFile>),
    Closed(Identity),
}

/// Which file a closed segment is, and how long it was when it was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    len: u64,
}

/// Descriptors of sealed segments this process may hold open at once: a quarter of its soft
/// limit of open files (256 of the usual 1,024), or `TFLUX_OPEN_SEALED_SEGMENTS`.
fn sealed_budget() -> &'static std::sync::atomic::AtomicI64 {
    static LEFT: std::sync::OnceLock<std::sync::atomic::AtomicI64> = std::sync::OnceLock::new();
    LEFT.get_or_init(|| {
        let chosen = std::env::var("TFLUX_OPEN_SEALED_SEGMENTS")
            .ok()
            .and_then(|v| v.trim().parse::<i64>().ok());
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given, nothing else.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
            i64::try_from(limit.rlim_cur).unwrap_or(i64::MAX)
        } else {
            1024
        };
        std::sync::atomic::AtomicI64::new(chosen.unwrap_or(soft / 4).max(0))
    })
}

impl Identity {
    fn of(file: &File) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata().ok()?;
        Some(Identity {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
        })
    }
}

/// Bytes of the active segment the replay after open reads at a time (whole records; a record
/// longer than this is read alone): the scan's window size, so that what one read copies is
/// still in cache when the replay walks it (2 MiB before).
const REPLAY_WINDOW: u64 = 256 << 10;

impl Drop for Segment {
    fn drop(&mut self) {
        self.release_budget();
    }
}

#[cfg(test)]
mod tests;
