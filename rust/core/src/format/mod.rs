//! Byte layouts, one module per file kind. Each module opens with the table it implements.

pub mod compressed;
pub mod cursor;
pub mod delta;
pub mod detect;
pub mod dialect;
pub mod framed;
pub mod metadata;
pub mod queue;
pub mod receiver;
pub mod record;
pub mod rules;
pub mod segment;
pub mod snapshot;
pub mod steps;
pub mod tasks;
