//! Small helpers shared by the binding modules: Python spellings in reprs, Arrow buffers, and
//! numbers from Python that must not panic or wrap on their way into Rust.

use std::time::{Duration, Instant};

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// Python's spelling of an optional value in reprs.
pub fn py_opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "None".to_string(), |v| v.to_string())
}

/// Python's spelling of a bool in reprs.
pub fn py_bool(v: bool) -> &'static str {
    if v {
        "True"
    } else {
        "False"
    }
}

/// A bytes object holding `values` in native byte order (an Arrow values buffer).
pub fn native_bytes<'py, T: Copy, const N: usize>(
    py: Python<'py>,
    values: &[T],
    to_bytes: impl Fn(T) -> [u8; N],
) -> Bound<'py, PyBytes> {
    PyBytes::new_with(py, values.len() * N, |buf| {
        for (chunk, v) in buf.chunks_exact_mut(N).zip(values) {
            chunk.copy_from_slice(&to_bytes(*v));
        }
        Ok(())
    })
    .expect("filling a fresh bytes object cannot fail")
}

/// The instant a wait of `timeout` seconds ends; `None` means wait forever: no timeout, an
/// infinite one, or one too long for the clock to hold (1e19, 2**64, 10**400) — nobody waits
/// that long, and neither `Duration` nor `Instant` may panic on it. NaN or a negative number is
/// a `ValueError`.
pub fn deadline(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Instant>> {
    let Some(timeout) = timeout else {
        return Ok(None);
    };
    let seconds = match timeout.extract::<f64>() {
        Ok(seconds) => seconds,
        // An int beyond the float range: huge, one way or the other.
        Err(e) if e.is_instance_of::<PyOverflowError>(timeout.py()) => {
            if timeout.gt(0)? {
                f64::INFINITY
            } else {
                f64::NEG_INFINITY
            }
        }
        Err(e) => return Err(e),
    };
    if seconds.is_nan() || seconds < 0.0 {
        return Err(crate::errors::argument_error(format!(
            "timeout must be None or a number of seconds >= 0 (got {})",
            timeout.repr()?
        )));
    }
    Ok(Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|wait| Instant::now().checked_add(wait)))
}
