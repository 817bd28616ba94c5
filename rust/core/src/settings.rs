//! `taskflux.settings.json` (spec section 8): PascalCase keys as TaskFlux spells them; unknown
//! keys and wrong types are errors that name them; absent keys take defaults.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, IoContext, Result};

pub const SETTINGS_FILE: &str = "taskflux.settings.json";

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub log_file_soft_limit: u64,
    pub log_file_hard_limit: u64,
    pub log_preallocate_segments: bool,
    /// Sealed segments after the snapshot before a new snapshot is taken; 0 disables.
    pub snapshot_creation_segments_threshold: u64,
    pub log_sync_policy: StoreSync,
    pub log_sync_interval_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            log_file_soft_limit: 16 << 20,
            log_file_hard_limit: 32 << 20,
            log_preallocate_segments: true,
            snapshot_creation_segments_threshold: 5,
            log_sync_policy: StoreSync::Always,
            log_sync_interval_ms: 100,
        }
    }
}

/// Every key the settings file accepts.
pub const KEYS: [&str; 6] = [
    "LogFileSoftLimit",
    "LogFileHardLimit",
    "LogPreallocateSegments",
    "SnapshotCreationSegmentsThreshold",
    "LogSyncPolicy",
    "LogSyncIntervalMs",
];

impl Settings {
    /// Defaults, then `base/taskflux.settings.json` if present, then `overrides` (a JSON object
    /// with the same keys, e.g. from keyword arguments).
    pub fn load(base: &Path, overrides: Option<&str>) -> Result<Settings> {
        let mut settings = Settings::default();
        let path = base.join(SETTINGS_FILE);
        if path.is_file() {
            let text = std::fs::read_to_string(&path).ctx("read settings", &path)?;
            // An empty file means "nothing written yet": all defaults (spec section 1).
            if !text.trim().is_empty() {
                settings.merge_json(&text, &path.display().to_string())?;
            }
        }
        if let Some(json) = overrides {
            settings.merge_json(json, "settings arguments")?;
        }
        settings.validate()?;
        Ok(settings)
    }

    fn merge_json(&mut self, text: &str, source: &str) -> Result<()> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| Error::Settings(format!("{source}: invalid JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(Error::Settings(format!("{source}: expected a JSON object")));
        };
        self.merge(&map, source)
    }

    fn merge(&mut self, map: &Map<String, Value>, source: &str) -> Result<()> {
        let unknown: Vec<&str> = map
            .keys()
            .map(String::as_str)
            .filter(|k| !KEYS.contains(k))
            .collect();
        if !unknown.is_empty() {
            return Err(Error::Settings(format!(
                "{source}: unknown setting(s) {} (known: {})",
                unknown.join(", "),
                KEYS.join(", ")
            )));
        }
        let bad = |key: &str, want: &str| {
            Error::Settings(format!("{source}: {key} must be {want}, got {}", map[key]))
        };
        let uint = |key: &str| {
            map[key]
                .as_u64()
                .ok_or_else(|| bad(key, "a non-negative integer"))
        };
        for key in map.keys() {
            match key.as_str() {
                "LogFileSoftLimit" => self.log_file_soft_limit = uint(key)?,
                "LogFileHardLimit" => self.log_file_hard_limit = uint(key)?,
                "LogPreallocateSegments" => {
                    self.log_preallocate_segments = map[key]
                        .as_bool()
                        .ok_or_else(|| bad(key, "true or false"))?
                }
                "SnapshotCreationSegmentsThreshold" => {
                    self.snapshot_creation_segments_threshold = uint(key)?
                }
                "LogSyncIntervalMs" => self.log_sync_interval_ms = uint(key)?,
                "LogSyncPolicy" => {
                    self.log_sync_policy = match map[key].as_str() {
                        Some("always") => StoreSync::Always,
                        Some("interval") => StoreSync::Interval,
                        Some("never") => StoreSync::Never,
                        _ => return Err(bad(key, "\"always\", \"interval\" or \"never\"")),
                    }
                }
                _ => unreachable!("unknown keys were rejected above"),
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        if self.log_file_soft_limit == 0 || self.log_file_soft_limit > self.log_file_hard_limit {
            return Err(Error::Settings(format!(
                "settings: need 0 < LogFileSoftLimit <= LogFileHardLimit (got {} and {})",
                self.log_file_soft_limit, self.log_file_hard_limit
            )));
        }
        if self.log_sync_policy == StoreSync::Interval && self.log_sync_interval_ms == 0 {
            return Err(Error::Settings(
                "settings: LogSyncIntervalMs must be > 0 with LogSyncPolicy \"interval\"".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_wrong_types_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = Settings::load(dir.path(), Some(r#"{"LogFileSoftLimitt": 1}"#)).unwrap_err();
        assert!(e.to_string().contains("LogFileSoftLimitt"), "{e}");
        let e = Settings::load(dir.path(), Some(r#"{"LogPreallocateSegments": 1}"#)).unwrap_err();
        assert!(e.to_string().contains("LogPreallocateSegments"), "{e}");
    }

    #[test]
    fn file_then_overrides() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(SETTINGS_FILE),
            r#"{"LogFileSoftLimit": 1000, "LogFileHardLimit": 5000, "LogSyncPolicy": "never"}"#,
        )
        .unwrap();
        let s = Settings::load(dir.path(), Some(r#"{"LogFileSoftLimit": 2000}"#)).unwrap();
        assert_eq!(s.log_file_soft_limit, 2000);
        assert_eq!(s.log_file_hard_limit, 5000);
        assert_eq!(s.log_sync_policy, StoreSync::Never);
        assert_eq!(s.snapshot_creation_segments_threshold, 5);
    }
}
