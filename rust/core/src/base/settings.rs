//! `taskflux.settings.json` (spec section 8): PascalCase keys as TaskFlux spells them; unknown
//! keys and wrong types are errors that name them; absent keys take defaults.

use std::path::Path;

use serde_json::{Map, Value};

use crate::base::files::{read_regular, ReadError};
use crate::error::{Error, Result};

pub const SETTINGS_FILE: &str = "taskflux.settings.json";
/// The longest settings file read (1 MiB): a few hundred bytes is typical, and a cap keeps a
/// hostile file from costing memory or producing huge error messages.
pub const SETTINGS_MAX_LEN: u64 = 1 << 20;
/// At most this many characters of a bad key or value are quoted in an error.
const QUOTE_CHARS: usize = 64;

/// `text` for an error message: at most [`QUOTE_CHARS`] characters, then how much was left out.
fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        None => text.to_string(),
        Some((cut, _)) => format!(
            "{}... ({} more characters)",
            &text[..cut],
            text[cut..].chars().count()
        ),
    }
}

pub use crate::durability::StoreSync;

/// Where records of a queue go after too many failed deliveries (`DeadLetter` setting).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// The dead-letter queue (it must exist when a record is moved).
    pub queue: String,
    /// Failed deliveries (nacks and expired leases) after which a record is moved.
    pub max_nacks: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub log_file_soft_limit: u64,
    pub log_file_hard_limit: u64,
    pub log_preallocate_segments: bool,
    /// Sealed segments after the snapshot before a new snapshot is taken; 0 disables.
    pub snapshot_creation_segments_threshold: u64,
    pub log_sync_policy: StoreSync,
    pub log_sync_interval_ms: u64,
    /// Used-space ratio of the file system at or above which writes are refused with
    /// `DiskFull` before the disk is full (1.0: only a full disk).
    pub disk_full_ratio: f64,
    /// `LogCompressSealedSegments`: how the store compresses sealed segments in the
    /// background after a roll-over (`"none"`, the default: never; `"zstd"`; `"lz4"`).
    pub log_compress_sealed_segments: Option<crate::format::compressed::Method>,
    /// Dead-letter rules by source queue name.
    pub dead_letter: std::collections::BTreeMap<String, DeadLetter>,
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
            disk_full_ratio: 0.95,
            log_compress_sealed_segments: None,
            dead_letter: std::collections::BTreeMap::new(),
        }
    }
}

/// Every key the settings file accepts.
pub const KEYS: [&str; 9] = [
    "LogFileSoftLimit",
    "LogFileHardLimit",
    "LogPreallocateSegments",
    "SnapshotCreationSegmentsThreshold",
    "LogSyncPolicy",
    "LogSyncIntervalMs",
    "DiskFullRatio",
    "LogCompressSealedSegments",
    "DeadLetter",
];

/// The keyword argument that stands for settings key `key` (`tflux.open(base,
/// log_file_soft_limit=...)`): its snake_case form (`LogFileSoftLimit` -> `log_file_soft_limit`).
pub fn keyword(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for (i, c) in key.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A JSON value for an error message, never longer than a short prefix.
fn quote_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{}\"", quote(s)),
        Value::Array(a) => format!("an array of {} items", a.len()),
        Value::Object(o) => format!("an object of {} keys", o.len()),
        other => quote(&other.to_string()),
    }
}

impl Settings {
    /// Defaults, then `base/taskflux.settings.json` if present, then `overrides` (a JSON object
    /// with the same keys, e.g. from keyword arguments).
    pub fn load(base: &Path, overrides: Option<&str>) -> Result<Settings> {
        Settings::load_from(Some(base), overrides)
    }

    /// What a read-only look (a read-only `Store::open`, `verify_base`, the CLI's read-only
    /// verbs) does with the settings file: a typo in it must not block reading the data, so a
    /// bad file (`Error::Settings`) gives the defaults plus `overrides` and its message back as
    /// a warning. I/O errors and bad `overrides` still fail; writers use [`Settings::load`],
    /// which refuses the file.
    pub fn load_for_reading(
        base: &Path,
        overrides: Option<&str>,
    ) -> Result<(Settings, Option<String>)> {
        match Settings::load(base, overrides) {
            Err(Error::Settings(message)) => {
                let settings = Settings::load_from(None, overrides)?;
                Ok((settings, Some(message)))
            }
            other => other.map(|s| (s, None)),
        }
    }

    /// What a settings error of `base`'s file says without naming the file (its messages
    /// start `FILE: `, as [`Settings::load`] writes them): a finding's reason.
    pub fn reason_of<'m>(message: &'m str, base: &Path) -> &'m str {
        let prefix = format!("{}: ", base.join(SETTINGS_FILE).display());
        message.strip_prefix(&prefix).unwrap_or(message)
    }

    /// Every setting as the file spells it (PascalCase keys): what an owner tells its clients
    /// (`crate::share`), read back with [`Settings::from_json`].
    pub fn to_json(&self) -> String {
        let policy = self.log_sync_policy.word();
        let rules: serde_json::Map<String, Value> = self
            .dead_letter
            .iter()
            .map(|(from, r)| {
                (
                    from.clone(),
                    serde_json::json!({"Queue": r.queue, "MaxNacks": r.max_nacks}),
                )
            })
            .collect();
        serde_json::json!({
            "LogFileSoftLimit": self.log_file_soft_limit,
            "LogFileHardLimit": self.log_file_hard_limit,
            "LogPreallocateSegments": self.log_preallocate_segments,
            "SnapshotCreationSegmentsThreshold": self.snapshot_creation_segments_threshold,
            "LogSyncPolicy": policy,
            "LogSyncIntervalMs": self.log_sync_interval_ms,
            "DiskFullRatio": self.disk_full_ratio,
            "LogCompressSealedSegments":
                self.log_compress_sealed_segments.map_or("none", |m| m.as_str()),
            "DeadLetter": rules,
        })
        .to_string()
    }

    /// The settings [`Settings::to_json`] wrote (defaults for keys it lacks).
    pub fn from_json(json: &str) -> Result<Settings> {
        Settings::load_from(None, Some(json))
    }

    /// Defaults, then the settings file of `base` (none: skipped), then `overrides`.
    fn load_from(base: Option<&Path>, overrides: Option<&str>) -> Result<Settings> {
        let mut settings = Settings::default();
        // The file whose values are checked by `validate` (named in its error).
        let mut from_file = None;
        if let Some(base) = base {
            let path = base.join(SETTINGS_FILE);
            let source = path.display().to_string();
            let bytes = read_regular(&path, SETTINGS_MAX_LEN).map_err(|e| match e {
                ReadError::Io(e) => Error::io("read settings", &path, e),
                other => Error::Settings(format!("{source}: {other}")),
            })?;
            if let Some(bytes) = bytes {
                let text = String::from_utf8(bytes)
                    .map_err(|e| Error::Settings(format!("{source}: not UTF-8 text: {e}")))?;
                // An empty file means "nothing written yet": all defaults (spec section 1).
                if !text.trim().is_empty() {
                    settings.merge_json(&text, &source)?;
                    from_file = Some(source);
                }
            }
        }
        if let Some(json) = overrides {
            settings.merge_json(json, "settings arguments")?;
            from_file = None; // the arguments may be what broke the rule
        }
        settings.validate().map_err(|e| match (e, from_file) {
            (Error::Settings(m), Some(source)) => {
                let rule = m.strip_prefix("settings: ").unwrap_or(&m);
                Error::Settings(format!("{source}: {rule}"))
            }
            (e, _) => e,
        })?;
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
            const SHOWN: usize = 5;
            let mut names: Vec<String> = unknown.iter().take(SHOWN).map(|k| quote(k)).collect();
            if unknown.len() > SHOWN {
                names.push(format!("and {} more", unknown.len() - SHOWN));
            }
            return Err(Error::Settings(format!(
                "{source}: unknown setting(s) {} (known: {})",
                names.join(", "),
                KEYS.join(", ")
            )));
        }
        let bad = |key: &str, want: &str| {
            Error::Settings(format!(
                "{source}: {key} must be {want}, got {}",
                quote_value(&map[key])
            ))
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
                "DiskFullRatio" => {
                    self.disk_full_ratio = map[key]
                        .as_f64()
                        .filter(|r| crate::durability::is_ratio(*r))
                        .ok_or_else(|| bad(key, "a ratio in (0, 1]"))?
                }
                "LogCompressSealedSegments" => {
                    self.log_compress_sealed_segments = match map[key].as_str() {
                        Some("none") => None,
                        Some(m) if crate::format::compressed::Method::parse(m).is_some() => {
                            crate::format::compressed::Method::parse(m)
                        }
                        _ => return Err(bad(key, "\"none\", \"zstd\" or \"lz4\"")),
                    }
                }
                "LogSyncPolicy" => {
                    self.log_sync_policy = map[key]
                        .as_str()
                        .and_then(StoreSync::from_word)
                        .ok_or_else(|| bad(key, StoreSync::WORDS))?
                }
                "DeadLetter" => {
                    self.dead_letter =
                        parse_dead_letter(&map[key]).map_err(|want| bad(key, &want))?
                }
                _ => unreachable!("unknown keys were rejected above"),
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<()> {
        for (from, rule) in &self.dead_letter {
            if *from == rule.queue {
                return Err(Error::Settings(format!(
                    "settings: DeadLetter of queue \"{}\" names the queue itself",
                    quote(from)
                )));
            }
        }
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

/// `{"jobs": {"Queue": "jobs-dead", "MaxNacks": 3}, ...}`; the error says what was expected.
fn parse_dead_letter(
    v: &Value,
) -> std::result::Result<std::collections::BTreeMap<String, DeadLetter>, String> {
    const WANT: &str =
        "an object of queue names to {\"Queue\": name, \"MaxNacks\": 1..=4294967295}";
    let Value::Object(rules) = v else {
        return Err(WANT.into());
    };
    let mut out = std::collections::BTreeMap::new();
    for (from, rule) in rules {
        let Some(rule) = rule.as_object() else {
            return Err(format!("{WANT} (queue \"{}\")", quote(from)));
        };
        let queue = rule.get("Queue").and_then(Value::as_str);
        let max = rule
            .get("MaxNacks")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n >= 1);
        match (queue, max, rule.len()) {
            (Some(queue), Some(max_nacks), 2) => {
                out.insert(
                    from.clone(),
                    DeadLetter {
                        queue: queue.to_string(),
                        max_nacks,
                    },
                );
            }
            _ => return Err(format!("{WANT} (queue \"{}\")", quote(from))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_has_its_snake_case_keyword() {
        let words: Vec<String> = KEYS.iter().map(|k| keyword(k)).collect();
        assert_eq!(
            words,
            [
                "log_file_soft_limit",
                "log_file_hard_limit",
                "log_preallocate_segments",
                "snapshot_creation_segments_threshold",
                "log_sync_policy",
                "log_sync_interval_ms",
                "disk_full_ratio",
                "log_compress_sealed_segments",
                "dead_letter",
            ]
        );
    }

    #[test]
    fn a_read_only_look_takes_the_defaults_and_a_warning_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(SETTINGS_FILE);
        std::fs::write(&file, r#"{"LogFileSoftLimt": 1}"#).unwrap();
        assert!(matches!(
            Settings::load(dir.path(), None),
            Err(Error::Settings(_))
        ));
        let (s, warning) =
            Settings::load_for_reading(dir.path(), Some(r#"{"LogSyncPolicy": "never"}"#)).unwrap();
        let warning = warning.unwrap();
        assert!(warning.contains(&file.display().to_string()), "{warning}");
        assert!(warning.contains("LogFileSoftLimt"), "{warning}");
        assert_eq!(s.log_sync_policy, StoreSync::Never); // the arguments still apply
        assert_eq!(
            s.log_file_soft_limit,
            Settings::default().log_file_soft_limit
        );
        // Bad arguments are the caller's error, not the file's: they still fail.
        assert!(Settings::load_for_reading(dir.path(), Some(r#"{"LogSyncPolicy": 1}"#)).is_err());
        // A good file: no warning.
        std::fs::write(&file, r#"{"LogFileSoftLimit": 4096}"#).unwrap();
        let (s, warning) = Settings::load_for_reading(dir.path(), None).unwrap();
        assert_eq!((s.log_file_soft_limit, warning), (4096, None));
    }

    #[test]
    fn a_rule_broken_by_the_file_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(SETTINGS_FILE);
        std::fs::write(&file, r#"{"LogFileSoftLimit": 10, "LogFileHardLimit": 5}"#).unwrap();
        let Err(Error::Settings(m)) = Settings::load(dir.path(), None) else {
            panic!("accepted soft > hard")
        };
        assert!(m.starts_with(&file.display().to_string()), "{m}");
    }

    #[test]
    fn unknown_keys_and_wrong_types_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = Settings::load(dir.path(), Some(r#"{"LogFileSoftLimitt": 1}"#)).unwrap_err();
        assert!(e.to_string().contains("LogFileSoftLimitt"), "{e}");
        let e = Settings::load(dir.path(), Some(r#"{"LogPreallocateSegments": 1}"#)).unwrap_err();
        assert!(e.to_string().contains("LogPreallocateSegments"), "{e}");
    }

    #[test]
    fn dead_letter_rules_are_parsed_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let ok = r#"{"DeadLetter": {"jobs": {"Queue": "dlq", "MaxNacks": 3}}}"#;
        let s = Settings::load(dir.path(), Some(ok)).unwrap();
        assert_eq!(
            s.dead_letter["jobs"],
            DeadLetter {
                queue: "dlq".into(),
                max_nacks: 3
            }
        );
        for bad in [
            r#"{"DeadLetter": {"jobs": {"Queue": "dlq", "MaxNacks": 0}}}"#,
            r#"{"DeadLetter": {"jobs": {"Queue": "dlq"}}}"#,
            r#"{"DeadLetter": {"jobs": {"Queue": "dlq", "MaxNacks": 1, "X": 1}}}"#,
            r#"{"DeadLetter": {"jobs": {"Queue": "jobs", "MaxNacks": 1}}}"#,
            r#"{"DeadLetter": ["jobs"]}"#,
        ] {
            let e = Settings::load(dir.path(), Some(bad)).unwrap_err();
            assert!(e.to_string().contains("DeadLetter"), "{e}");
        }
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
