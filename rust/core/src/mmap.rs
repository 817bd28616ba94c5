//! The only `unsafe` in the core: read-only memory maps of sealed segments.
//!
//! A mapping turns into SIGBUS if the file shrinks under it. tflux never shrinks a segment file
//! (cuts overwrite with zeros, deletes unlink, which keeps mapped pages alive), and only sealed
//! segments are mapped; a segment that becomes writable again drops its map first.

use std::fs::File;

use memmap2::{Mmap, MmapOptions};

/// Maps the first `len` bytes of `file` read-only; `None` for an empty range (mmap refuses 0).
pub fn map_readonly(file: &File, len: u64) -> std::io::Result<Option<Mmap>> {
    if len == 0 {
        return Ok(None);
    }
    let len = usize::try_from(len).map_err(std::io::Error::other)?;
    // SAFETY: the mapping is read-only and never outlives the `Segment` that owns it. tflux does
    // not shrink or write into a segment while it is mapped (`Segment::unseal` drops the map
    // before any write). Another process shrinking the file is outside what any mmap reader can
    // guard against; writers of tflux directories never do it.
    let map = unsafe { MmapOptions::new().len(len).map(file)? };
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(Some(map))
}
