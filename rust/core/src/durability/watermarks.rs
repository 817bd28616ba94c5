//! Disk watermarks (DLedger's disk-full flag and clean-space service): above the high
//! used-space ratio sends are refused with [`Error::DiskFull`] before the file system is full;
//! they resume by themselves below the low ratio; above the cleaning ratio collection runs by
//! itself (ignoring retention, never deleting what a receiver has not acknowledged).

use std::fmt::Debug;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// Measures how full the file system holding a path is (tests inject their own).
pub trait SpaceProbe: Send + Sync + Debug {
    /// Used space as a ratio in `0.0..=1.0`.
    fn used_ratio(&self, path: &Path) -> io::Result<f64>;
}

/// `statvfs`, measured as `df` shows it (see [`used_ratio_of`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct Statvfs;

impl SpaceProbe for Statvfs {
    fn used_ratio(&self, path: &Path) -> io::Result<f64> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs.
        if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(used_ratio_of(
            st.f_blocks as u64,
            st.f_bfree as u64,
            st.f_bavail as u64,
        ))
    }
}

/// The used ratio `df` prints as `Use%`: used / (used + available to unprivileged users), with
/// used = total - free. 1.0 is the moment a process that is not root can write nothing more.
/// Not `1 - available / total`: blocks the file system holds back from unprivileged users (the
/// root reserve, or far more on some virtual disks: 65% of one test machine's disk) would count as
/// used, so the default watermarks would refuse writes on a disk `df` shows half empty.
pub fn used_ratio_of(blocks: u64, free: u64, available: u64) -> f64 {
    let used = blocks.saturating_sub(free) as f64;
    let usable = used + available as f64;
    if usable <= 0.0 {
        return 0.0;
    }
    (used / usable).clamp(0.0, 1.0)
}

/// Whether `v` is a used-space ratio a setting may name: in (0, 1] (1.0: only a full disk).
pub fn is_ratio(v: f64) -> bool {
    v > 0.0 && v <= 1.0
}

/// Used-space ratios; `None` switches a mark off.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Watermarks {
    /// At or above: sends are refused.
    pub high: Option<f64>,
    /// Below: refused sends resume (defaults to `high` when unset).
    pub low: Option<f64>,
    /// At or above: collection runs by itself on send.
    pub clean: Option<f64>,
}

impl Default for Watermarks {
    fn default() -> Self {
        Watermarks {
            high: Some(0.95),
            low: Some(0.90),
            clean: Some(0.85),
        }
    }
}

impl Watermarks {
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("high", self.high),
            ("low", self.low),
            ("clean", self.clean),
        ] {
            if let Some(v) = v {
                if !is_ratio(v) {
                    return Err(Error::InvalidArgument(format!(
                        "disk watermark {name} must be a ratio in (0, 1] (got {v})"
                    )));
                }
            }
        }
        if let (Some(low), Some(high)) = (self.low, self.high) {
            if low > high {
                return Err(Error::InvalidArgument(format!(
                    "disk watermarks need low <= high (got low={low}, high={high})"
                )));
            }
        }
        Ok(())
    }
}

/// The disk-full flag with hysteresis.
#[derive(Debug, Default)]
pub struct Gate {
    full: AtomicBool,
}

/// What a check found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Checked {
    /// At or above the cleaning ratio.
    pub clean: bool,
}

impl Gate {
    /// Refuses (`DiskFull`) while the file system of `path` is above the marks.
    pub fn check(
        &self,
        probe: &dyn SpaceProbe,
        path: &Path,
        marks: &Watermarks,
    ) -> Result<Checked> {
        if marks.high.is_none() && marks.clean.is_none() {
            return Ok(Checked { clean: false });
        }
        let used = probe
            .used_ratio(path)
            .map_err(|e| Error::io("measure free space", path, e))?;
        if let Some(high) = marks.high {
            let low = marks.low.unwrap_or(high);
            let full = self.full.load(Ordering::Relaxed);
            let now_full = if full { used >= low } else { used >= high };
            if now_full != full {
                self.full.store(now_full, Ordering::Relaxed);
            }
            if now_full {
                return Err(Error::DiskFull {
                    path: path.to_path_buf(),
                    used,
                    limit: if full { low } else { high },
                });
            }
        }
        Ok(Checked {
            clean: marks.clean.is_some_and(|c| used >= c),
        })
    }

    pub fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_used_ratio_is_what_df_shows_not_counting_held_back_blocks_as_used() {
        // statvfs of a test machine's disk (4 KiB blocks): df said 56% used while
        // 1 - available / total said 84%, a hair below the default cleaning ratio (0.85).
        let r = used_ratio_of(66_053_021, 52_891_612, 10_660_063);
        assert!((r - 0.5525).abs() < 1e-3, "{r}");
        // A classic 5% root reserve: full for unprivileged users when nothing is available.
        assert_eq!(used_ratio_of(1000, 50, 0), 1.0);
        assert!((used_ratio_of(1000, 550, 500) - 0.45 / 0.95).abs() < 1e-9);
        // An empty or unreadable file system is not full.
        assert_eq!(used_ratio_of(0, 0, 0), 0.0);
        assert_eq!(used_ratio_of(1000, 1000, 1000), 0.0);
    }

    #[test]
    fn statvfs_of_this_directory_is_a_ratio() {
        let r = Statvfs.used_ratio(Path::new(".")).unwrap();
        assert!((0.0..=1.0).contains(&r), "{r}");
    }
}
