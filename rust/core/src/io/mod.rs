//! The ground floor every file operation stands on: shared immutable bytes of a map or a
//! buffer ([`bytes`]), the storage seam ([`storage`]: every call
//! that changes a file goes through it), read-only memory maps (`mmap`), the small
//! file-system helpers built on both ([`fsutil`]: atomic writes, listings, temp and backup
//! files), and the fault-injecting storage the tests use (`testing`, not in the product).

pub mod bytes;
pub mod fsutil;
pub(crate) mod mmap;
pub mod storage;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
