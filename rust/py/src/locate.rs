//! `tflux.locate` and `tflux.Located`: what a path handed to a reader is (the core's
//! `base::locate`), and a read-only log over a chosen set of segments (`base::open_segments`).

use std::path::PathBuf;

use pyo3::prelude::*;
use tflux_core::base as core;

use crate::errors::{py_result, Fail};
use crate::log::PyLog;

fn path_str(p: &std::path::Path) -> String {
    p.display().to_string()
}

/// What a path is: `kind` ("base", "log" for a base's data/log, "bare_log" for a log directory
/// outside a base, "segment", "snapshot"), the base and log directories and snapshot file a
/// reader of it reads (None: there is none), the segments chosen (their first LSNs; None:
/// every segment of `log`) and the dialect its files say.
#[pyclass(module = "tflux", name = "Located", frozen)]
pub struct PyLocated {
    inner: core::Located,
}

#[pymethods]
impl PyLocated {
    /// The path as given, made absolute (a symlink keeps its name).
    #[getter]
    fn path(&self) -> String {
        path_str(&self.inner.path)
    }
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind.name()
    }
    #[getter]
    fn base(&self) -> Option<String> {
        self.inner.base.as_deref().map(path_str)
    }
    #[getter]
    fn log(&self) -> Option<String> {
        self.inner.log.as_deref().map(path_str)
    }
    #[getter]
    fn snapshot(&self) -> Option<String> {
        self.inner.snapshot.as_deref().map(path_str)
    }
    #[getter]
    fn segments(&self) -> Option<Vec<i64>> {
        self.inner.segments.clone()
    }
    #[getter]
    fn dialect(&self) -> &'static str {
        self.inner.dialect.name()
    }
    /// A read-only `Log` over the chosen segments (every segment when none were chosen).
    fn open_log(&self, py: Python<'_>) -> PyResult<PyLog> {
        let log = py.detach(|| self.inner.open_log().map_err(Fail::from));
        let path = self.log().unwrap_or_default();
        py_result(py, log).map(|log| PyLog::from_readonly(log, path))
    }
    fn __repr__(&self) -> String {
        format!(
            "Located(kind={:?}, path={:?}, dialect={:?})",
            self.kind(),
            self.path(),
            self.dialect()
        )
    }
}

/// What `path` is (see `Located`), in the dialect its files say, agreeing with `dialect`
/// (files that disagree raise `DialectError`; a missing path `TfluxIOError`).
#[pyfunction]
#[pyo3(signature = (path, *, dialect=None))]
fn locate(py: Python<'_>, path: PathBuf, dialect: Option<&str>) -> PyResult<PyLocated> {
    let chosen = crate::tools::dialect_arg(dialect)?;
    let found = py.detach(|| core::locate(&path, chosen).map_err(Fail::from));
    py_result(py, found).map(|inner| PyLocated { inner })
}

/// A read-only `Log` over the segments of `log_dir` that start at `first_lsns` only (a segment
/// compressed since is read from its `.log.z`); its last segment is read as a log's last (a
/// torn tail is in `Log.recovery`, not refused). Errors name the real files.
#[pyfunction]
#[pyo3(signature = (log_dir, first_lsns, *, dialect=None))]
fn open_segments(
    py: Python<'_>,
    log_dir: PathBuf,
    first_lsns: Vec<i64>,
    dialect: Option<&str>,
) -> PyResult<PyLog> {
    let chosen = crate::tools::dialect_arg(dialect)?;
    let log = py.detach(|| core::open_segments(&log_dir, &first_lsns, chosen).map_err(Fail::from));
    py_result(py, log).map(|log| PyLog::from_readonly(log, path_str(&log_dir)))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLocated>()?;
    m.add_function(wrap_pyfunction!(locate, m)?)?;
    m.add_function(wrap_pyfunction!(open_segments, m)?)?;
    Ok(())
}
