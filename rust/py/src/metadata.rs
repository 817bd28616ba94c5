//! `tflux.Metadata`, `tflux.read_metadata`, `tflux.write_metadata`: the node's Raft term and vote.

use std::path::PathBuf;

use pyo3::prelude::*;
use tflux_core::base::files;
use tflux_core::format::metadata::{Metadata, NO_VOTE};

use crate::delta::{int_arg, INT32};
use crate::errors::{py_result, Fail};

fn metadata(term: &Bound<'_, PyAny>, voted_for: Option<&Bound<'_, PyAny>>) -> PyResult<Metadata> {
    let py = term.py();
    let term: i32 = int_arg(term, "term", "0..=2147483647")?;
    let vote: Option<i32> = match voted_for {
        Some(v) if !v.is_none() => Some(int_arg(v, "voted_for", INT32)?),
        _ => None,
    };
    let m = Metadata {
        term,
        voted_for: vote.filter(|v| *v != NO_VOTE),
    };
    py_result(py, m.validate().map_err(Fail::Core))?;
    Ok(m)
}

/// Raft term and vote of this node (`voted_for` None = no vote).
#[pyclass(module = "tflux", name = "Metadata", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyMetadata {
    inner: Metadata,
}

impl From<Metadata> for PyMetadata {
    fn from(inner: Metadata) -> Self {
        PyMetadata { inner }
    }
}

#[pymethods]
impl PyMetadata {
    #[new]
    #[pyo3(signature = (term, voted_for=None))]
    fn new(term: &Bound<'_, PyAny>, voted_for: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyMetadata {
            inner: metadata(term, voted_for)?,
        })
    }

    #[getter]
    fn term(&self) -> i32 {
        self.inner.term
    }

    #[getter]
    fn voted_for(&self) -> Option<i32> {
        self.inner.voted_for
    }

    fn __repr__(&self) -> String {
        format!(
            "Metadata(term={}, voted_for={})",
            self.inner.term,
            self.inner
                .voted_for
                .map_or_else(|| "None".into(), |v| v.to_string())
        )
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let m = slf.get().inner;
        (slf.get_type(), (m.term, m.voted_for))
            .into_pyobject(slf.py())
            .map(Bound::into_any)
    }
}

/// Read `tflux.metadata`; an absent or empty file is term 1, no vote. `dialect=None` reads the
/// dialect the file's length and checksum say (24 bytes: taskflux), else `spec`.
#[pyfunction]
#[pyo3(signature = (path, *, dialect=None))]
fn read_metadata(py: Python<'_>, path: PathBuf, dialect: Option<&str>) -> PyResult<PyMetadata> {
    let chosen = crate::tools::dialect_arg(dialect)?;
    let r = py.detach(|| {
        let found = tflux_core::log::dialect::metadata_file_says(&path)?;
        let dialect = tflux_core::log::dialect::file_dialect(found, chosen)?;
        files::read_metadata_in(&path, dialect)
    });
    let r = r.map_err(Fail::Core);
    py_result(py, r).map(|inner| PyMetadata { inner })
}

/// Replace `tflux.metadata` atomically (temp file, fsync, rename, directory fsync), in
/// `dialect` (`"spec"`, 20 bytes, or `"taskflux"`, 24 bytes through `temporary/`).
#[pyfunction]
#[pyo3(signature = (path, term, voted_for=None, *, dialect="spec"))]
fn write_metadata(
    py: Python<'_>,
    path: PathBuf,
    term: &Bound<'_, PyAny>,
    voted_for: Option<&Bound<'_, PyAny>>,
    dialect: &str,
) -> PyResult<()> {
    let m = metadata(term, voted_for)?;
    let dialect = crate::tools::dialect_arg(Some(dialect))?.unwrap_or_default();
    let r = py.detach(|| {
        let fs = tflux_core::io::storage::RealStorage;
        files::write_metadata_in(&fs, &path, &m, dialect).map_err(Fail::Core)
    });
    py_result(py, r)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyMetadata>()?;
    m.add_function(wrap_pyfunction!(read_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(write_metadata, m)?)?;
    Ok(())
}
