//! The bytes of one segment, whichever file holds them: the read-only map of a `NNN.log`, or
//! the decompressed (and checked) contents of a `NNN.log.z` (spec section 9). Every reader of
//! sealed segments (the recovery scanner, the log's reads, the Spark reader) gets a
//! [`SegmentBytes`] from here and never needs to know which kind of file it came from.
//!
//! Decompressed segments go through one process-wide cache bounded in bytes (least recently
//! used out first), keyed by the `.z` file's identity: concurrent readers of the same segment
//! (several logs of one process, Spark tasks in one worker) decompress it once and share the
//! buffer; a reader keeps its buffer alive after the cache lets go of it.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use crate::error::{Error, IoContext, Result};
use crate::format::compressed::{self, BadCompressed, Header};

pub use crate::io::bytes::SegmentBytes;

pub use crate::format::compressed::is_compressed_path as is_compressed;

/// The error for a `.z` file that fails its checks: corruption naming the file and the field.
pub fn bad_compressed(path: &Path, why: &BadCompressed) -> Error {
    Error::corruption(
        path,
        Some(why.offset()),
        format!("compressed segment: {why}"),
    )
}

/// Default bound of the decompressed-segment cache (bytes).
pub const DEFAULT_CACHE_BYTES: u64 = 256 << 20;

/// Identity of a `.z` file: a rewritten file (new inode, size or mtime) is another entry.
type Key = (u64, u64, u64, i64, i64);

struct Cached {
    bytes: SegmentBytes,
    header: Header,
    used: u64,
}

struct Cache {
    entries: HashMap<Key, Cached>,
    total: u64,
    limit: u64,
    clock: u64,
    /// Decompressions done (for tests: "once, not per read").
    misses: u64,
}

fn cache() -> &'static Mutex<Cache> {
    static CACHE: std::sync::OnceLock<Mutex<Cache>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| {
        Mutex::new(Cache {
            entries: HashMap::new(),
            total: 0,
            limit: DEFAULT_CACHE_BYTES,
            clock: 0,
            misses: 0,
        })
    })
}

fn lock() -> std::sync::MutexGuard<'static, Cache> {
    cache().lock().unwrap_or_else(|p| p.into_inner())
}

impl Cache {
    fn evict_to(&mut self, limit: u64) {
        while self.total > limit {
            let Some((&key, _)) = self.entries.iter().min_by_key(|(_, c)| c.used) else {
                break;
            };
            if let Some(c) = self.entries.remove(&key) {
                self.total -= c.bytes.len() as u64;
            }
        }
    }
}

/// Sets the cache bound (0 disables caching); returns the previous one.
pub fn set_cache_limit(bytes: u64) -> u64 {
    let mut c = lock();
    let old = std::mem::replace(&mut c.limit, bytes);
    c.evict_to(bytes);
    old
}

/// How many segments were decompressed since the process started.
pub fn decompressions() -> u64 {
    lock().misses
}

fn key_of(file: &File, path: &Path) -> Result<Key> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().ctx("stat compressed segment", path)?;
    Ok((m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec()))
}

/// The original bytes of the compressed segment `file` (at `path`), decompressed and checked
/// (length and CRC from its header, first LSN against the name), from the cache when another
/// reader already decompressed it. The outer error is an I/O error, the inner one says why the
/// file is not a valid `.z` (see [`bad_compressed`]).
pub fn decompressed(
    path: &Path,
    file: &File,
) -> Result<std::result::Result<(SegmentBytes, Header), BadCompressed>> {
    let key = key_of(file, path)?;
    {
        let mut c = lock();
        c.clock += 1;
        let now = c.clock;
        if let Some(hit) = c.entries.get_mut(&key) {
            hit.used = now;
            return Ok(Ok((hit.bytes.clone(), hit.header)));
        }
    }
    // Decompressed outside the lock: other segments stay readable meanwhile. The header is
    // checked first, and the file's length against what its declared original allows; then
    // the file is mapped, not copied (a sparse file's length must never size an allocation).
    let len = key.2;
    let mut head = [0u8; compressed::HEADER_LEN];
    let got = usize::try_from(len).map_or(head.len(), |l| l.min(head.len()));
    file.read_exact_at(&mut head[..got], 0)
        .ctx("read compressed segment", path)?;
    let declared = match compressed::decode_header(&head[..got]) {
        Ok(h) => h,
        Err(why) => return Ok(Err(why)),
    };
    let max = compressed::max_file_len(declared.original_len);
    if len > max {
        return Ok(Err(BadCompressed::FileLen {
            len,
            original: declared.original_len,
            max,
        }));
    }
    let raw = crate::io::mmap::map_readonly(file, len)
        .ctx("map compressed segment", path)?
        .ok_or_else(|| too_big(path))?;
    let (header, original) = match compressed::decode(&raw) {
        Ok(decoded) => decoded,
        Err(why) => return Ok(Err(why)),
    };
    drop(raw);
    let named = path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(compressed::parse_file_name);
    if let Some(named) = named.filter(|&n| n != header.first_lsn) {
        let why = BadCompressed::FirstLsnName {
            found: header.first_lsn,
            named,
        };
        return Ok(Err(why));
    }
    let bytes = SegmentBytes::owned(original);
    let mut c = lock();
    c.misses += 1;
    let size = bytes.len() as u64;
    if size <= c.limit {
        c.clock += 1;
        let used = c.clock;
        let limit = c.limit;
        c.evict_to(limit.saturating_sub(size));
        let cached = Cached {
            bytes: bytes.clone(),
            header,
            used,
        };
        if let Some(old) = c.entries.insert(key, cached) {
            c.total -= old.bytes.len() as u64;
        }
        c.total += size;
    }
    Ok(Ok((bytes, header)))
}

/// [`decompressed`] with a bad file as [`Error::Corruption`] naming it.
pub fn decompressed_or_corrupt(path: &Path, file: &File) -> Result<(SegmentBytes, Header)> {
    decompressed(path, file)?.map_err(|why| bad_compressed(path, &why))
}

fn too_big(path: &Path) -> Error {
    Error::corruption(
        path,
        None,
        "compressed segment larger than the address space",
    )
}

#[cfg(test)]
mod tests {
    use super::SegmentBytes;
    use std::io::Write;

    fn mapped(bytes: &[u8]) -> (tempfile::NamedTempFile, SegmentBytes) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        let map = crate::io::mmap::map_readonly(f.as_file(), bytes.len() as u64).unwrap();
        (f, SegmentBytes::mapped(map))
    }

    #[test]
    fn a_map_prefix_is_exactly_the_first_bytes_of_an_unshared_map() {
        let (_f, map) = mapped(b"0123456789");
        let prefix = map.map_prefix(4).expect("an unshared map");
        assert_eq!(&prefix[..], b"0123");
        assert_eq!(&prefix.map_prefix(4).unwrap()[..], b"0123");
        let (_f, map) = mapped(b"0123456789");
        assert!(map.clone().map_prefix(4).is_none(), "shared");
        assert!(map.map_prefix(11).is_none(), "longer than the map");
        assert!(SegmentBytes::owned(b"0123".to_vec())
            .map_prefix(2)
            .is_none());
        assert!(SegmentBytes::empty().map_prefix(0).is_none());
    }
}
