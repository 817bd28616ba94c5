//! `tflux.verify` and its report types.

use pyo3::prelude::*;
use tflux_core::verify as core;

use crate::errors::{py_result, Fail};
use crate::log::PySegmentInfo;

#[pyclass(module = "tflux", name = "Problem", frozen, get_all)]
pub struct PyProblem {
    path: String,
    offset: Option<u64>,
    kind: &'static str,
    message: String,
    fatal: bool,
}

#[pymethods]
impl PyProblem {
    fn __repr__(&self) -> String {
        format!(
            "Problem(kind={:?}, path={:?}, offset={}, fatal={})",
            self.kind,
            self.path,
            crate::tools::py_opt(self.offset),
            crate::tools::py_bool(self.fatal)
        )
    }
}

#[pyclass(module = "tflux", name = "VerifyReport", frozen)]
pub struct PyVerifyReport {
    inner: core::VerifyReport,
}

#[pymethods]
impl PyVerifyReport {
    #[getter]
    fn path(&self) -> String {
        self.inner.dir.display().to_string()
    }
    #[getter]
    fn segments(&self) -> Vec<PySegmentInfo> {
        self.inner
            .segments
            .iter()
            .cloned()
            .map(PySegmentInfo::from)
            .collect()
    }
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records
    }
    #[getter]
    fn bytes(&self) -> u64 {
        self.inner.bytes
    }
    #[getter]
    fn problems(&self) -> Vec<PyProblem> {
        self.inner
            .problems
            .iter()
            .map(|p| PyProblem {
                path: p.path.display().to_string(),
                offset: p.offset,
                kind: p.kind.as_str(),
                message: p.message.clone(),
                fatal: p.fatal,
            })
            .collect()
    }
    #[getter]
    fn ok(&self) -> bool {
        self.inner.ok()
    }
    fn __repr__(&self) -> String {
        format!(
            "VerifyReport(path={:?}, segments={}, records={}, problems={}, ok={})",
            self.inner.dir.display().to_string(),
            self.inner.segments.len(),
            self.inner.records,
            self.inner.problems.len(),
            crate::tools::py_bool(self.inner.ok())
        )
    }
}

/// Checks every record of every segment under `path` (base or log directory) without writing.
#[pyfunction]
fn verify(py: Python<'_>, path: std::path::PathBuf) -> PyResult<PyVerifyReport> {
    let report = py.detach(|| core::verify(&path).map_err(Fail::from));
    py_result(py, report).map(|inner| PyVerifyReport { inner })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProblem>()?;
    m.add_class::<PyVerifyReport>()?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    Ok(())
}
