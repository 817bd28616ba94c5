//! Several processes, one base directory (issue 29; docs/format.md, "Several processes").
//!
//! The first process to open a base directory for writing becomes its **owner**: it takes an
//! owner lock (an `flock` on the base directory), opens the [`Store`](crate::store::Store)
//! (which takes the log's writer lock) and serves it to the other processes of the same user over a Unix socket beside the data
//! (`data/tflux.sock`). Every later writable open of that directory, in any process, becomes
//! a **client** of the owner with the same calls; durability and delivery stay the owner's.
//!
//! When the owner goes (it closed the store, or its process died), a client's call in flight
//! fails with [`Error::OwnerLost`](crate::error::Error::OwnerLost), and the client's next call finds the new owner, or takes
//! the owner lock itself and restores the store from disk: the user never reopens. A forked
//! child's copy of an owner's store becomes a client of the parent the same way.

pub mod channel;
mod channel_request;
pub mod client;
mod connection;
mod off_loop;
mod owner;
mod requests;
mod role;
pub mod server;
mod serving;
mod socket;
pub mod store;
pub mod wire;

pub use channel_request::ChannelRequest;
pub use client::{Client, ConnectError};
pub use owner::{owner_holds, OWNER_WAIT, SOCKET};
pub use server::{Served, Server};
pub use store::{ShareOptions, SharedStore};
