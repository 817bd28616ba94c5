//! When written bytes become durable, and when writing must stop: the sync policies and their
//! one parser ([`policy`]), group commit ([`group_commit`]), the one background fsync thread
//! of the "interval" policy ([`interval`]) and the disk watermarks ([`watermarks`]) that
//! refuse writes before the file system is full. Shared by the store, the channel and `Log`.

pub mod group_commit;
pub mod interval;
pub mod policy;
pub mod watermarks;

pub use group_commit::{GroupCommit, Logged};
pub use interval::{spawn_interval, Stopper};
pub use policy::{StoreSync, SyncPolicy};
pub use watermarks::is_ratio;
