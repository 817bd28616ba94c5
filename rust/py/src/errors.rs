//! Maps core errors onto the Python exception tree defined in `tflux/errors.py`.

use pyo3::prelude::*;
use tflux_core::error::{ErrorKind, ErrorReport};
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

/// What a Python class of `tflux/errors.py` takes after the message.
enum Args {
    Message,
    PathOffset,
    PathErrno,
    Lsn,
    Queue,
    QueuePolicy,
}

/// The one table from a kind of core error to its Python class: every error goes through it,
/// this process's own and those an owner sent its client ([`ErrorReport`] carries both).
fn class(kind: ErrorKind) -> (&'static str, Args) {
    use Args::*;
    use ErrorKind as K;
    match kind {
        K::Corruption => ("CorruptionError", PathOffset),
        K::Dialect => ("DialectError", PathOffset),
        K::StaleRead => ("StaleReadError", PathOffset),
        K::Io => ("TfluxIOError", PathErrno),
        K::DiskFull => ("DiskFullError", PathErrno),
        K::Locked => ("LockedError", PathErrno),
        K::OwnerLost => ("OwnerLostError", PathErrno),
        K::OwnerBusy => ("TfluxIOError", PathErrno),
        K::ReadOnly => ("ReadOnlyError", Message),
        K::Forked => ("ForkedError", Message),
        K::Replay => ("ReplayError", Lsn),
        K::NoSuchQueue => ("QueueNotFoundError", Queue),
        K::QueueExists => ("QueueExistsError", Message),
        K::Policy => ("PolicyViolation", QueuePolicy),
        K::Settings => ("SettingsError", Message),
        K::Closed => ("ClosedError", Message),
        K::NotInFlight => ("NotInFlightError", Message),
        K::InvalidArgument => ("ArgumentError", Message),
        K::OutOfRange => ("OutOfRangeError", Message),
    }
}

/// The Python exception of an error report.
fn raise(py: Python<'_>, r: ErrorReport) -> PyErr {
    let (name, args) = class(r.kind);
    let m = r.message;
    let args = match args {
        Args::Message => (m,).into_pyobject(py),
        Args::PathOffset => (m, r.path, r.offset).into_pyobject(py),
        Args::PathErrno => (m, r.path, r.errno).into_pyobject(py),
        Args::Lsn => (m, r.lsn).into_pyobject(py),
        Args::Queue => (m, r.queue).into_pyobject(py),
        Args::QueuePolicy => (m, r.queue, r.policy).into_pyobject(py),
    };
    match args {
        Ok(args) => tflux_error(py, name, args),
        Err(e) => e,
    }
}

pub fn to_pyerr(py: Python<'_>, fail: Fail) -> PyErr {
    let err = match fail {
        Fail::Closed => return tflux_error(py, "ClosedError", ("I/O operation on a closed log",)),
        Fail::Core(err) => err,
    };
    let exc = raise(py, err.report());
    // A replay that failed on undecodable bytes says why as its cause.
    if let Error::Replay {
        source: Some(cause),
        ..
    } = err
    {
        exc.set_cause(py, Some(to_pyerr(py, Fail::Core(*cause))));
    }
    exc
}

/// `tflux.ArgumentError` (a `TfluxError` and a `ValueError`): an argument outside its domain.
pub fn argument_error(message: impl Into<String>) -> PyErr {
    let message = message.into();
    Python::attach(|py| tflux_error(py, "ArgumentError", (message,)))
}

/// Converts a core result for Python, after handing the events waiting for `logging` over
/// (`crate::logging`): that runs Python code (handlers), so never call it holding a lock that
/// a thread with the GIL may take.
pub fn py_result<T>(py: Python<'_>, r: Result<T, Fail>) -> PyResult<T> {
    // The events the call reported reach `logging` before it returns (`crate::logging`).
    crate::logging::deliver(py);
    r.map_err(|e| to_pyerr(py, e))
}

/// `tflux.CorruptionError` for bytes that did not come from a file (no path).
pub fn corruption_error(py: Python<'_>, message: String, offset: Option<usize>) -> PyErr {
    tflux_error(py, "CorruptionError", (message, None::<String>, offset))
}
