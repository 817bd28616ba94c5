//! When appended entries are fsynced: the store's `LogSyncPolicy` words and the log's
//! policies they map to, parsed in one place for the settings file, `Log.open` and
//! `Channel.open`.

use crate::error::{Error, Result};

/// When appended records are fsynced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPolicy {
    /// Before every append call returns (durable acknowledgement).
    Always,
    /// Only on `sync()`, at roll-over and at close.
    Batch,
    /// Only on an explicit `sync()`; the operating system decides otherwise.
    Never,
}

impl std::str::FromStr for SyncPolicy {
    type Err = Error;
    /// A policy word ([`StoreSync::parse`]) as the log's policy.
    fn from_str(s: &str) -> Result<Self> {
        StoreSync::parse(s).map(StoreSync::log_policy)
    }
}

/// When the store fsyncs the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreSync {
    /// Before each write call returns; concurrent writers share one fsync (group commit).
    Always,
    /// A background fsync every `LogSyncIntervalMs`: survives a process crash, may lose the
    /// last interval on power loss.
    Interval,
    /// Left to the operating system.
    Never,
}

impl StoreSync {
    /// What a policy word may be, for error messages.
    pub const WORDS: &'static str =
        "\"always\", \"interval\" or \"never\" (\"batch\" is another name for \"interval\")";

    /// The policy a word names: "always", "interval" (or its older name "batch"), "never".
    pub fn from_word(word: &str) -> Option<StoreSync> {
        match word {
            "always" => Some(StoreSync::Always),
            "interval" | "batch" => Some(StoreSync::Interval),
            "never" => Some(StoreSync::Never),
            _ => None,
        }
    }

    /// [`StoreSync::from_word`], or the error that names the word and the accepted ones.
    pub fn parse(word: &str) -> Result<StoreSync> {
        StoreSync::from_word(word).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unknown sync policy {word:?} (expected {})",
                StoreSync::WORDS
            ))
        })
    }

    /// The word settings and reprs spell the policy with.
    pub fn word(self) -> &'static str {
        match self {
            StoreSync::Always => "always",
            StoreSync::Interval => "interval",
            StoreSync::Never => "never",
        }
    }

    /// What the log itself does: "interval" is the log's batch policy (fsync at roll-over,
    /// close and `sync()`) plus the background fsync of [`super::spawn_interval`].
    pub fn log_policy(self) -> SyncPolicy {
        match self {
            StoreSync::Always => SyncPolicy::Always,
            StoreSync::Interval => SyncPolicy::Batch,
            StoreSync::Never => SyncPolicy::Never,
        }
    }
}
