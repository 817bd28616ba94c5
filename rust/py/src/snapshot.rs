//! `tflux.Snapshot`, `tflux.SnapshotQueue`, `tflux.read_snapshot`, `tflux.write_snapshot`.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList};
use tflux_core::base::files;
use tflux_core::format::snapshot::{QueueData, Snapshot};

use crate::delta::{
    bytes_repr, int_arg, items, key_range_arg, key_range_repr, limit_arg, limit_py, name_arg,
    name_py, str_repr, INT32, INT64, UINT64,
};
use crate::errors::{py_result, Fail};

fn invalid(py: Python<'_>, e: tflux_core::Error) -> PyErr {
    crate::errors::to_pyerr(py, Fail::Core(e))
}

/// One queue of a snapshot; records are kept in ascending id order.
#[pyclass(module = "tflux", name = "SnapshotQueue", frozen, eq)]
#[derive(PartialEq, Eq, Clone)]
pub struct PySnapshotQueue {
    inner: QueueData,
}

#[pymethods]
impl PySnapshotQueue {
    #[new]
    #[allow(clippy::too_many_arguments)] // mirrors the Python signature
    #[pyo3(
        signature = (name, implementation=None, last_id=None, max_queue_size=None,
                     max_message_size=None, key_range=None, records=None),
        text_signature = "(name, implementation=1, last_id=0, max_queue_size=None, \
                          max_message_size=None, key_range=None, records=None)"
    )]
    fn new(
        py: Python<'_>,
        name: &str,
        implementation: Option<&Bound<'_, PyAny>>,
        last_id: Option<&Bound<'_, PyAny>>,
        max_queue_size: Option<&Bound<'_, PyAny>>,
        max_message_size: Option<&Bound<'_, PyAny>>,
        key_range: Option<&Bound<'_, PyAny>>,
        records: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let mut inner = QueueData {
            name: name_arg(name)?,
            implementation: implementation
                .map_or(Ok(1), |o| int_arg(o, "implementation", INT32))?,
            last_id: last_id.map_or(Ok(0), |o| int_arg(o, "last_id", UINT64))?,
            max_queue_size: limit_arg(max_queue_size, "max_queue_size")?,
            max_message_size: limit_arg(max_message_size, "max_message_size")?,
            key_range: key_range_arg(key_range)?,
            records: match records {
                Some(r) if !r.is_none() => records_arg(r)?,
                _ => Vec::new(),
            },
        };
        inner.validate().map_err(|e| invalid(py, e))?;
        inner.sort_records();
        Ok(PySnapshotQueue { inner })
    }

    #[getter]
    fn name(&self) -> String {
        name_py(&self.inner.name)
    }
    #[getter]
    fn implementation(&self) -> i32 {
        self.inner.implementation
    }
    #[getter]
    fn last_id(&self) -> u64 {
        self.inner.last_id
    }
    #[getter]
    fn max_queue_size(&self) -> Option<i32> {
        limit_py(self.inner.max_queue_size)
    }
    #[getter]
    fn max_message_size(&self) -> Option<i32> {
        limit_py(self.inner.max_message_size)
    }
    #[getter]
    fn key_range(&self) -> Option<(i64, i64)> {
        self.inner.key_range
    }
    /// `(id, key, data)` tuples in ascending id order.
    #[getter]
    fn records<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        records_py(py, &self.inner.records)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let q = &self.inner;
        let records = q
            .records
            .iter()
            .take(8)
            .map(|(id, key, data)| Ok(format!("({id}, {key}, {})", bytes_repr(py, data)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let more = if q.records.len() > 8 {
            format!(", ... {} more", q.records.len() - 8)
        } else {
            String::new()
        };
        Ok(format!(
            "SnapshotQueue({}, implementation={}, last_id={}, max_queue_size={}, \
             max_message_size={}, key_range={}, records=[{}{more}])",
            str_repr(py, &self.name())?,
            q.implementation,
            q.last_id,
            opt(limit_py(q.max_queue_size)),
            opt(limit_py(q.max_message_size)),
            key_range_repr(q.key_range),
            records.join(", ")
        ))
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let q = &slf.get().inner;
        let args = (
            name_py(&q.name),
            q.implementation,
            q.last_id,
            limit_py(q.max_queue_size),
            limit_py(q.max_message_size),
            q.key_range,
            records_py(py, &q.records)?,
        );
        (slf.get_type(), args)
            .into_pyobject(py)
            .map(Bound::into_any)
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "None".into(), |v| v.to_string())
}

fn records_arg(obj: &Bound<'_, PyAny>) -> PyResult<Vec<(u64, i64, Vec<u8>)>> {
    let mut out = Vec::new();
    for item in obj.try_iter()? {
        let item = item?;
        let [id, key, data] = items(&item).ok_or_else(|| {
            crate::errors::argument_error(format!(
                "a record must be an (id, key, data) tuple (got {item})"
            ))
        })?;
        let id = int_arg(&id, "record id", UINT64)?;
        let key = int_arg(&key, "record key", INT64)?;
        let data: PyBackedBytes = data.extract()?;
        out.push((id, key, data.to_vec()));
    }
    Ok(out)
}

fn records_py<'py>(
    py: Python<'py>,
    records: &[(u64, i64, Vec<u8>)],
) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        records
            .iter()
            .map(|(id, key, data)| (*id, *key, PyBytes::new(py, data))),
    )
}

/// A whole snapshot: the state after applying the log up to `last_index`.
#[pyclass(module = "tflux", name = "Snapshot", frozen, eq)]
#[derive(PartialEq, Eq)]
pub struct PySnapshot {
    inner: Snapshot,
}

fn snapshot_arg(
    py: Python<'_>,
    last_index: &Bound<'_, PyAny>,
    last_term: &Bound<'_, PyAny>,
    queues: &Bound<'_, PyAny>,
) -> PyResult<Snapshot> {
    let mut qs = Vec::new();
    for q in queues.try_iter()? {
        let q = q?;
        let q = q.cast::<PySnapshotQueue>().map_err(|_| {
            crate::errors::argument_error(format!(
                "queues must hold SnapshotQueue objects (got {q})"
            ))
        })?;
        qs.push(q.get().inner.clone());
    }
    let s = Snapshot {
        last_index: int_arg(last_index, "last_index", "0..=9223372036854775807")?,
        last_term: int_arg(last_term, "last_term", "0..=9223372036854775807")?,
        queues: qs,
    };
    s.validate().map_err(|e| invalid(py, e))?;
    Ok(s)
}

#[pymethods]
impl PySnapshot {
    #[new]
    fn new(
        py: Python<'_>,
        last_index: &Bound<'_, PyAny>,
        last_term: &Bound<'_, PyAny>,
        queues: &Bound<'_, PyAny>,
    ) -> PyResult<Self> {
        Ok(PySnapshot {
            inner: snapshot_arg(py, last_index, last_term, queues)?,
        })
    }

    #[getter]
    fn last_index(&self) -> i64 {
        self.inner.last_index
    }
    #[getter]
    fn last_term(&self) -> i64 {
        self.inner.last_term
    }
    /// The queues in file order.
    #[getter]
    fn queues(&self) -> Vec<PySnapshotQueue> {
        self.inner
            .queues
            .iter()
            .map(|q| PySnapshotQueue { inner: q.clone() })
            .collect()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let names = self
            .inner
            .queues
            .iter()
            .map(|q| str_repr(py, &name_py(&q.name)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!(
            "Snapshot(last_index={}, last_term={}, queues=[{}])",
            self.inner.last_index,
            self.inner.last_term,
            names.join(", ")
        ))
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let s = &slf.get().inner;
        let args = (s.last_index, s.last_term, slf.get().queues());
        (slf.get_type(), args)
            .into_pyobject(slf.py())
            .map(Bound::into_any)
    }
}

/// Read `tflux.snapshot`; `None` when the file is absent or empty (nothing written yet).
/// `dialect=None` reads the dialect its header says, else `spec`.
#[pyfunction]
#[pyo3(signature = (path, *, dialect=None))]
fn read_snapshot(
    py: Python<'_>,
    path: PathBuf,
    dialect: Option<&str>,
) -> PyResult<Option<PySnapshot>> {
    let chosen = crate::tools::dialect_arg(dialect)?;
    let r = py.detach(|| {
        let found = tflux_core::log::dialect::snapshot_file_says(&path)?;
        let dialect = tflux_core::log::dialect::file_dialect(found, chosen)?;
        files::read_snapshot_in(&path, dialect)
    });
    let r = r.map_err(Fail::Core);
    Ok(py_result(py, r)?.map(|inner| PySnapshot { inner }))
}

/// Replace `tflux.snapshot` atomically (temp file under `temp/`, or `temporary/` in the
/// taskflux dialect; fsync, rename, directory fsync).
#[pyfunction]
#[pyo3(signature = (path, last_index, last_term, queues, *, dialect="spec"))]
fn write_snapshot(
    py: Python<'_>,
    path: PathBuf,
    last_index: &Bound<'_, PyAny>,
    last_term: &Bound<'_, PyAny>,
    queues: &Bound<'_, PyAny>,
    dialect: &str,
) -> PyResult<()> {
    let s = snapshot_arg(py, last_index, last_term, queues)?;
    let dialect = crate::tools::dialect_arg(Some(dialect))?.unwrap_or_default();
    let r = py.detach(|| {
        let fs = tflux_core::io::storage::RealStorage;
        files::write_snapshot_in(&fs, &path, &s, dialect).map_err(Fail::Core)
    });
    py_result(py, r)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySnapshotQueue>()?;
    m.add_class::<PySnapshot>()?;
    m.add_function(wrap_pyfunction!(read_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(write_snapshot, m)?)?;
    Ok(())
}
