//! Read-only memory maps of sealed segments, one of the core's few `unsafe` blocks.
//!
//! A map is only sound while the mapped bytes do not change and the file does not shrink under
//! it (a shrink turns reads past the new end into SIGBUS). Since issue 11 a map can outlive its
//! `Segment`: a restored record borrows its message from the map of the sealed segment it was
//! read from ([`crate::state::payload::Payload`]) and keeps the map alive until the record is gone,
//! possibly for the life of the process. The argument therefore covers every way tflux writes
//! into, shrinks, replaces or removes a segment file, in this process or in another tflux
//! process writing the same directory:
//!
//! - **Only bytes a scan accepted are borrowed, and only from sealed plain segments**: the
//!   active segment (read with positioned reads) and a decompressed `.log.z` (private memory)
//!   are copied (`Segment::replay_records`). The bytes a segment (and a record borrowing
//!   from it) reads are `[0, size)`, the header and the records up to the last good one, never
//!   the end marker or the reserved tail. The mapping under them may reach further: the replay
//!   right after open reads the scan's own map of the whole file (`Segment::from_file_scan`,
//!   `SegmentBytes::map_prefix`), so that the log is not mapped and faulted in twice; nothing
//!   reads past `size` through it, and what follows `size` is not read while it changes.
//! - **Appends** write at or after `size`, outside the bytes every map of the file lends. A
//!   sealed segment is written again only after `Segment::unseal` (a cut reaches into it, or
//!   it becomes the last segment at open), which drops the segment's own map first; maps held
//!   by records still lend only the records below `size`, which appends never touch.
//! - **Cuts** (`Log::truncate_after`, `insert_range`, repair of a sealed segment) never write
//!   into the cut file: `segment::rewrite_prefix` copies the kept prefix into a new file and
//!   renames it over the old name (copy-on-truncate). A map of the old inode keeps the old
//!   bytes.
//! - **The torn-tail cut and repair at open** zero `[first bad record, reach)` in place
//!   (`recovery::cut_segment`): bytes no scan accepted, after every record a map can lend.
//! - **Compaction, compression, restart, a `.log` whose `.z` twin decodes** unlink or rename
//!   the file. The mapped pages of an unlinked file stay valid (the inode lives until the last
//!   map goes); the cost is disk space: a deleted segment's blocks are freed only when the last
//!   record borrowing from it is dequeued and acked (or the store is dropped).
//! - **`decompress_in_place`** writes a new `.log` (a new inode), never a mapped one.
//! - **Nothing in tflux shrinks a segment file** (no `set_len`; cuts make new files).
//!
//! Consistency with the scan at open: a segment keeps the file handle its scan at open read
//! (`Segment::from_file_scan`), so its maps are of the inode whose records that scan checked
//! (framing and CRC), and by the points above no tflux writer changes those bytes afterwards.
//! That is why the replay right after open, read-only or not, does not check their CRCs a
//! second time (`Log::replay_rechecks_crc`, the one place that decides it). Another program
//! writing into or truncating segment files is outside what any mmap reader can guard against.

use std::fs::File;

use memmap2::{Mmap, MmapOptions};

/// Maps the first `len` bytes of `file` read-only; `None` for an empty range (mmap refuses 0).
pub fn map_readonly(file: &File, len: u64) -> std::io::Result<Option<Mmap>> {
    if len == 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    // SAFETY: the mapping is read-only, covers records a scan accepted, and tflux never writes
    // into those bytes nor shrinks the file, in any process (the module doc has the argument
    // for every writer). Another program shrinking the file is outside what any mmap reader can
    // guard against; writers of tflux directories never do it.
    let map = unsafe { MmapOptions::new().len(len).map(file)? };
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Some(map))
}
