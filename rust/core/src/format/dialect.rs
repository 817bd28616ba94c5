//! The two dialects a base directory can be written in (spec section 11): their names and the
//! few facts that are not a layout (the metadata file's length, the temp directory's name).
//! Each file's layout lives with its codec (`record::Framing`, `snapshot::Layout`,
//! `metadata::encode_in`); what one file's bytes say about the dialect is `format::detect`.
//!
//! ```text
//!                 spec (sections 1-10)                     taskflux (TaskFlux's own code)
//! log record      marker | Int32 term | CRC | Int32 len    marker | Int64 term (>= 1) | CRC
//!                 | data | zero padding to 4 bytes         | Int32 len | data (no padding)
//! checksum        CRC-32 ISO-HDLC (zlib's)                 CRC-32/MPEG-2
//! snapshot        B6 38 0F C9 | Int32 index | Int32 term   B6 38 0F C9 | Int64 index | Int64 term
//!                 | Int32 len | state | CRC                | Int32 len | state | CRC
//!                 (B6 38 0F CA: the wide layout, 4.1)
//! metadata        20 bytes                                 24 bytes (Int64 term)
//! temp directory  data/temp                                data/temporary
//! ```

use std::fmt;

use crate::error::{Error, Result};

/// How a directory's files are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dialect {
    /// The format document's layout (sections 1-10): tflux's own, the default.
    #[default]
    Spec,
    /// What TaskFlux's C# storage code writes (section 11).
    Taskflux,
}

impl Dialect {
    pub const ALL: [Dialect; 2] = [Dialect::Spec, Dialect::Taskflux];

    /// The name users write (`"spec"`, `"taskflux"`).
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Spec => "spec",
            Dialect::Taskflux => "taskflux",
        }
    }

    /// The dialect called `name`; anything else is an invalid argument that lists the names.
    pub fn parse(name: &str) -> Result<Dialect> {
        Dialect::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown dialect {name:?} (expected \"spec\" or \"taskflux\")"
                ))
            })
    }

    /// The name of the temp directory in `data/` (spec section 11).
    pub fn temp_dir(self) -> &'static str {
        match self {
            Dialect::Spec => "temp",
            Dialect::Taskflux => "temporary",
        }
    }

    /// Length of the metadata file.
    pub fn metadata_len(self) -> u64 {
        match self {
            Dialect::Spec => 20,
            Dialect::Taskflux => 24,
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
