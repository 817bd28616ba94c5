//! Small helpers shared by the binding modules: Python spellings in reprs, Arrow buffers,
//! numbers from Python that must not panic or wrap on their way into Rust, the `dialect=`
//! argument, and letting go of a store or channel (without the GIL, then returning the freed
//! pages to the system).

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

/// Returns to the system the pages a restore's temporary buffers (scan chunks, the pending record
/// columns before the heaps are built) freed: mimalloc keeps freed pages for reuse, which a
/// long-lived store would otherwise hold as resident anonymous memory for good.
pub fn release_freed_memory() {
    // SAFETY: `mi_collect` takes no pointers; it only walks mimalloc's own free lists.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

/// The `dialect=` argument of every open and reader: `None` (detect), `"spec"` or `"taskflux"`.
pub fn dialect_arg(name: Option<&str>) -> PyResult<Option<tflux_core::format::dialect::Dialect>> {
    name.map(|n| {
        tflux_core::format::dialect::Dialect::parse(n).map_err(|e| match e {
            tflux_core::Error::InvalidArgument(m) => crate::errors::argument_error(m),
            other => crate::errors::argument_error(other.to_string()),
        })
    })
    .transpose()
}

/// Drops `value` with the GIL released (a shared store's or channel's owner stops serving when
/// its last handle goes, waiting for its clients: other Python threads must not wait with it).
pub fn drop_detached<T: Send>(value: T) {
    Python::attach(|py| py.detach(move || drop(value)));
}
