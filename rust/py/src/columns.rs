//! `Log.read_deltas` -> `tflux.DeltaBatch`: decoded entries as Arrow-layout buffers.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use tflux_core::columns::{Binary, Bitmap, DeltaColumns, Nullable, SnapshotColumns};

/// Decoded log entries in columns; `to_arrow()` wraps the buffers without copying them again.
#[pyclass(module = "tflux", name = "DeltaBatch", frozen)]
pub struct PyDeltaBatch {
    inner: DeltaColumns,
}

impl PyDeltaBatch {
    pub fn new(inner: DeltaColumns) -> Self {
        PyDeltaBatch { inner }
    }
}

use crate::tools::native_bytes as ne_bytes;

fn validity<'py>(py: Python<'py>, bits: &Bitmap) -> Option<Bound<'py, PyBytes>> {
    (bits.nulls > 0).then(|| PyBytes::new(py, &bits.bytes))
}

/// `(type, validity | None, values, offsets | None)` for pyarrow.Array.from_buffers.
type Spec<'py> = (
    &'static str,
    Option<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
    Option<Bound<'py, PyBytes>>,
);

fn int64<'py>(py: Python<'py>, c: &Nullable<i64>) -> Spec<'py> {
    (
        "int64",
        validity(py, &c.validity),
        ne_bytes(py, &c.values, i64::to_ne_bytes),
        None,
    )
}

fn int32<'py>(py: Python<'py>, c: &Nullable<i32>) -> Spec<'py> {
    (
        "int32",
        validity(py, &c.validity),
        ne_bytes(py, &c.values, i32::to_ne_bytes),
        None,
    )
}

fn var<'py>(py: Python<'py>, kind: &'static str, c: &Binary) -> Spec<'py> {
    (
        kind,
        validity(py, &c.validity),
        PyBytes::new(py, &c.data),
        Some(ne_bytes(py, &c.offsets, i32::to_ne_bytes)),
    )
}

#[pymethods]
impl PyDeltaBatch {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// Column name -> `(arrow type, validity, values, offsets)`, in schema order.
    fn _buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let c = &self.inner;
        let mut cols: Vec<(&str, Spec<'py>)> = vec![
            (
                "lsn",
                ("int64", None, ne_bytes(py, &c.lsn, i64::to_ne_bytes), None),
            ),
            (
                "term",
                ("int32", None, ne_bytes(py, &c.term, i32::to_ne_bytes), None),
            ),
            ("kind", var(py, "string", &c.kind)),
            ("queue", var(py, "string", &c.queue)),
            ("key", int64(py, &c.key)),
            ("record_id", int64(py, &c.record_id)),
            ("message", var(py, "binary", &c.message)),
            ("implementation", int32(py, &c.implementation)),
            ("max_queue_size", int32(py, &c.max_queue_size)),
            ("max_message_size", int32(py, &c.max_message_size)),
            ("key_min", int64(py, &c.key_min)),
            ("key_max", int64(py, &c.key_max)),
        ];
        if let Some(raw) = &c.raw {
            cols.push(("data", var(py, "binary", raw)));
        }
        let out = PyList::empty(py);
        for (name, spec) in cols {
            out.append((name, spec))?;
        }
        Ok(out)
    }

    /// A `pyarrow.RecordBatch` with the log source's columns.
    fn to_arrow<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("tflux._arrow")?
            .call_method1("delta_batch_to_arrow", (slf,))
    }

    fn __repr__(&self) -> String {
        let first = self.inner.lsn.first().copied();
        format!(
            "DeltaBatch(first_lsn={}, len={})",
            crate::tools::py_opt(first),
            self.inner.len()
        )
    }
}

/// A snapshot's records in columns (the Spark snapshot source and Parquet export).
#[pyclass(module = "tflux", name = "SnapshotBatch", frozen)]
pub struct PySnapshotBatch {
    inner: SnapshotColumns,
}

#[pymethods]
impl PySnapshotBatch {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    #[getter]
    fn last_index(&self) -> i64 {
        self.inner.last_index
    }

    #[getter]
    fn last_term(&self) -> i64 {
        self.inner.last_term
    }

    /// Every queue (also those without records): dicts with name, implementation, last_id,
    /// max_queue_size, max_message_size (None = no limit) and key_range.
    #[getter]
    fn queues<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for q in &self.inner.queues {
            let d = pyo3::types::PyDict::new(py);
            d.set_item("name", String::from_utf8_lossy(&q.name))?;
            d.set_item("implementation", q.implementation)?;
            d.set_item("last_id", q.last_id)?;
            d.set_item(
                "max_queue_size",
                (q.max_queue_size >= 0).then_some(q.max_queue_size),
            )?;
            d.set_item(
                "max_message_size",
                (q.max_message_size >= 0).then_some(q.max_message_size),
            )?;
            d.set_item("key_range", q.key_range)?;
            out.append(d)?;
        }
        Ok(out)
    }

    fn _buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let c = &self.inner;
        let cols: Vec<(&str, Spec<'py>)> = vec![
            ("queue", var(py, "string", &c.queue)),
            (
                "implementation",
                (
                    "int32",
                    None,
                    ne_bytes(py, &c.implementation, i32::to_ne_bytes),
                    None,
                ),
            ),
            (
                "record_id",
                (
                    "int64",
                    None,
                    ne_bytes(py, &c.record_id, i64::to_ne_bytes),
                    None,
                ),
            ),
            (
                "key",
                ("int64", None, ne_bytes(py, &c.key, i64::to_ne_bytes), None),
            ),
            ("message", var(py, "binary", &c.message)),
        ];
        let out = PyList::empty(py);
        for (name, spec) in cols {
            out.append((name, spec))?;
        }
        Ok(out)
    }

    /// A `pyarrow.RecordBatch`: queue, implementation, record_id, key, message.
    fn to_arrow<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("tflux._arrow")?
            .call_method1("snapshot_batch_to_arrow", (slf,))
    }

    fn __repr__(&self) -> String {
        format!(
            "SnapshotBatch(last_index={}, last_term={}, records={})",
            self.inner.last_index,
            self.inner.last_term,
            self.inner.len()
        )
    }
}

/// Reads a snapshot file into columns; None when absent or empty. Corruption raises
/// `CorruptionError` as `read_snapshot` does.
#[pyfunction]
fn read_snapshot_batch(
    py: Python<'_>,
    path: std::path::PathBuf,
) -> PyResult<Option<PySnapshotBatch>> {
    let r = py.detach(|| {
        let snap = tflux_core::files::read_snapshot(&path)?;
        snap.map(|s| SnapshotColumns::from_snapshot(&s)).transpose()
    });
    let cols = crate::errors::py_result(py, r.map_err(crate::errors::Fail::Core))?;
    Ok(cols.map(|inner| PySnapshotBatch { inner }))
}

/// Decodes one segment file on its own (no log is opened): the Spark source reads one segment
/// per task this way. `last=True` treats a torn tail as the end (the active segment); in a
/// sealed segment it is `CorruptionError`.
#[pyfunction]
#[pyo3(signature = (path, *, last=false, from_lsn=None, to_lsn=None, raw=false))]
fn read_segment_deltas(
    py: Python<'_>,
    path: std::path::PathBuf,
    last: bool,
    from_lsn: Option<i64>,
    to_lsn: Option<i64>,
    raw: bool,
) -> PyResult<PyDeltaBatch> {
    use tflux_core::recovery::Position;
    let position = if last {
        Position::Last
    } else {
        Position::Sealed
    };
    let r = py.detach(|| {
        tflux_core::columns::read_segment_deltas(&path, position, from_lsn, to_lsn, raw)
    });
    let cols = crate::errors::py_result(py, r.map_err(crate::errors::Fail::Core))?;
    Ok(PyDeltaBatch::new(cols))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_segment_deltas, m)?)?;
    m.add_class::<PyDeltaBatch>()?;
    m.add_class::<PySnapshotBatch>()?;
    m.add_function(wrap_pyfunction!(read_snapshot_batch, m)?)
}
