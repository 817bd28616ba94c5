//! Maps core errors onto the Python exception tree defined in `tflux/errors.py`.

use pyo3::prelude::*;
use tflux_core::Error;

/// A failure of a binding call: a core error, or use of a closed object.
pub enum Fail {
    Core(Error),
    Closed,
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Core(e)
    }
}

fn tflux_error<'py>(py: Python<'py>, class: &str, args: impl pyo3::call::PyCallArgs<'py>) -> PyErr {
    let made = py
        .import("tflux.errors")
        .and_then(|m| m.getattr(class))
        .and_then(|cls| cls.call1(args));
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

pub fn to_pyerr(py: Python<'_>, fail: Fail) -> PyErr {
    let err = match fail {
        Fail::Closed => return tflux_error(py, "ClosedError", ("I/O operation on a closed log",)),
        Fail::Core(err) => err,
    };
    let message = err.to_string();
    match err {
        Error::Corruption { path, offset, .. } => tflux_error(
            py,
            "CorruptionError",
            (message, path.display().to_string(), offset),
        ),
        Error::Dialect { path, .. } => tflux_error(
            py,
            "DialectError",
            (message, path.display().to_string(), None::<u64>),
        ),
        Error::StaleRead { path, offset, .. } => tflux_error(
            py,
            "StaleReadError",
            (message, path.display().to_string(), offset),
        ),
        Error::Io { path, source, .. } => tflux_error(
            py,
            io_class(source.raw_os_error()),
            (message, path.display().to_string(), source.raw_os_error()),
        ),
        Error::DiskFull { path, .. } => tflux_error(
            py,
            "DiskFullError",
            (message, path.display().to_string(), ENOSPC),
        ),
        Error::Locked { path } => tflux_error(
            py,
            "LockedError",
            (message, path.display().to_string(), None::<i32>),
        ),
        Error::ReceiverLocked { path, .. } => tflux_error(
            py,
            "LockedError",
            (message, path.display().to_string(), None::<i32>),
        ),
        Error::ReadOnly { .. } => tflux_error(py, "ReadOnlyError", (message,)),
        Error::Forked { .. } => tflux_error(py, "ForkedError", (message,)),
        Error::Poisoned { cause } | Error::NotDurable { cause } => tflux_error(
            py,
            io_class(cause.errno),
            (
                message,
                cause.path.map(|p| p.display().to_string()),
                cause.errno,
            ),
        ),
        Error::Replay { lsn, source, .. } => {
            let err = tflux_error(py, "ReplayError", (message, lsn));
            if let Some(cause) = source {
                err.set_cause(py, Some(to_pyerr(py, Fail::Core(*cause))));
            }
            err
        }
        Error::NoSuchQueue { name } => tflux_error(py, "QueueNotFoundError", (message, name)),
        Error::QueueExists { .. } => tflux_error(py, "QueueExistsError", (message,)),
        Error::Policy { queue, policy, .. } => {
            tflux_error(py, "PolicyViolation", (message, queue, policy))
        }
        Error::Settings(_) => tflux_error(py, "SettingsError", (message,)),
        Error::Closed(_) => tflux_error(py, "ClosedError", (message,)),
        Error::NotInFlight { .. } => tflux_error(py, "NotInFlightError", (message,)),
        Error::InvalidArgument(_) => tflux_error(py, "ArgumentError", (message,)),
        Error::OutOfRange(_) => tflux_error(py, "OutOfRangeError", (message,)),
        Error::OwnerLost { path, .. } => tflux_error(
            py,
            "OwnerLostError",
            (message, path.display().to_string(), None::<i32>),
        ),
        Error::Remote(remote) => remote_error(py, *remote),
    }
}

/// The exception the owner's own call would have raised, for a client of it.
fn remote_error(py: Python<'_>, r: tflux_core::error::RemoteError) -> PyErr {
    use tflux_core::error::RemoteKind as K;
    let m = r.message;
    match r.kind {
        K::Corruption => tflux_error(py, "CorruptionError", (m, r.path, r.offset)),
        K::Dialect => tflux_error(py, "DialectError", (m, r.path, None::<u64>)),
        K::StaleRead => tflux_error(py, "StaleReadError", (m, r.path, r.offset)),
        K::Io => tflux_error(py, io_class(r.errno), (m, r.path, r.errno)),
        K::DiskFull => tflux_error(py, "DiskFullError", (m, r.path, ENOSPC)),
        K::Locked => tflux_error(py, "LockedError", (m, r.path, None::<i32>)),
        K::OwnerLost => tflux_error(py, "OwnerLostError", (m, r.path, None::<i32>)),
        K::ReadOnly => tflux_error(py, "ReadOnlyError", (m,)),
        K::Forked => tflux_error(py, "ForkedError", (m,)),
        K::Replay => tflux_error(py, "ReplayError", (m, r.lsn)),
        K::NoSuchQueue => tflux_error(py, "QueueNotFoundError", (m, r.queue)),
        K::QueueExists => tflux_error(py, "QueueExistsError", (m,)),
        K::Policy => tflux_error(py, "PolicyViolation", (m, r.queue, r.policy)),
        K::Settings => tflux_error(py, "SettingsError", (m,)),
        K::Closed => tflux_error(py, "ClosedError", (m,)),
        K::NotInFlight => tflux_error(py, "NotInFlightError", (m,)),
        K::InvalidArgument => tflux_error(py, "ArgumentError", (m,)),
        K::OutOfRange => tflux_error(py, "OutOfRangeError", (m,)),
    }
}

/// `tflux.ArgumentError` (a `TfluxError` and a `ValueError`): an argument outside its domain.
pub fn argument_error(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| tflux_error(py, "ArgumentError", (message,)))
}

const ENOSPC: i32 = 28;

/// A full file system is `DiskFullError` (a `TfluxIOError` with errno ENOSPC), whether a
/// watermark refused the write or the write itself failed.
fn io_class(errno: Option<i32>) -> &'static str {
    if errno == Some(ENOSPC) {
        "DiskFullError"
    } else {
        "TfluxIOError"
    }
}

/// Converts a core result for Python.
pub fn py_result<T>(py: Python<'_>, r: Result<T, Fail>) -> PyResult<T> {
    r.map_err(|e| to_pyerr(py, e))
}

/// `tflux.CorruptionError` for bytes that did not come from a file (no path).
pub fn corruption_error(py: Python<'_>, message: String, offset: Option<usize>) -> PyErr {
    tflux_error(py, "CorruptionError", (message, None::<String>, offset))
}
