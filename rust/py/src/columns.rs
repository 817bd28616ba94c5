//! `Log.read_deltas` -> `tflux.DeltaBatch`: decoded entries as Arrow-layout buffers.

use pyo3::prelude::*;
use pyo3::types::PyList;
use tflux_core::log::columns::{Binary, Bitmap, DeltaColumns, Nullable, SnapshotColumns};

use crate::buffer::{Column, PyColumnBuffer};

/// `(type, validity | None, values, offsets | None)` for pyarrow.Array.from_buffers, each a
/// `tflux.ColumnBuffer` that owns the column built by the core (moved in, not copied).
type Spec = (
    &'static str,
    Option<Py<PyColumnBuffer>>,
    Py<PyColumnBuffer>,
    Option<Py<PyColumnBuffer>>,
);

fn buf(py: Python<'_>, column: Column) -> PyResult<Py<PyColumnBuffer>> {
    PyColumnBuffer::py(py, column)
}

/// A buffer of zeros for a batch's columns that every entry leaves null (their values and
/// their validity): at least `len` int64 values long.
struct Zeros {
    len: usize,
    buffer: Option<Py<PyColumnBuffer>>,
}

/// Buffers kept for the next batches (nothing ever writes a `ColumnBuffer`), so that a loop
/// of reads hands Arrow the same buffers instead of writing fresh ones for each batch. The
/// newest last; at most [`KEPT_BYTES`] in all, the oldest dropped first, so a process holds
/// no more than that once its reads are done.
struct Kept<T> {
    items: Vec<(T, usize)>,
}

/// Bytes kept at most per [`Kept`] (a bigger buffer is made for its batch and not kept).
const KEPT_BYTES: usize = 16 << 20;

impl<T> Kept<T> {
    const fn new() -> Kept<T> {
        Kept { items: Vec::new() }
    }

    /// The newest kept item that `fits`.
    fn find(&self, fits: impl Fn(&T) -> bool) -> Option<&T> {
        self.items.iter().rev().map(|(t, _)| t).find(|t| fits(t))
    }

    /// Keeps `item` (`bytes` long) in place of any item it `replaces`, dropping the oldest
    /// beyond [`KEPT_BYTES`] or `max_items`; returns what it let go, to be dropped outside
    /// the lock (dropping a `Py` may run Python code).
    fn keep(
        &mut self,
        item: T,
        bytes: usize,
        max_items: usize,
        replaces: impl Fn(&T) -> bool,
    ) -> Vec<T> {
        if bytes > KEPT_BYTES {
            return vec![item];
        }
        let (mut gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.items)
            .into_iter()
            .partition(|(t, _)| replaces(t));
        self.items = kept;
        self.items.push((item, bytes));
        while self.items.len() > max_items
            || self.items.iter().map(|(_, b)| b).sum::<usize>() > KEPT_BYTES
        {
            gone.push(self.items.remove(0));
        }
        gone.into_iter().map(|(t, _)| t).collect()
    }
}

fn locked<T>(kept: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    kept.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kept buffer of zeros (one: a bigger one replaces it).
static ZEROS: std::sync::Mutex<Kept<Py<PyColumnBuffer>>> = std::sync::Mutex::new(Kept::new());

impl Zeros {
    fn get(&mut self, py: Python<'_>) -> PyResult<Py<PyColumnBuffer>> {
        if self.buffer.is_none() {
            self.buffer = Some(shared_zeros(py, self.len * 8)?);
        }
        Ok(self.buffer.as_ref().expect("set above").clone_ref(py))
    }
}

/// A buffer of at least `bytes` zeros: the kept one when it is big enough.
fn shared_zeros(py: Python<'_>, bytes: usize) -> PyResult<Py<PyColumnBuffer>> {
    if let Some(b) = locked(&ZEROS).find(|b| b.get().bytes().len() >= bytes) {
        return Ok(b.clone_ref(py));
    }
    // Fresh memory from the allocator is zero already (no pass over it).
    let made = buf(py, Column::U8(vec![0u8; bytes]))?;
    let gone = locked(&ZEROS).keep(made.clone_ref(py), bytes, 1, |_| true);
    drop(gone);
    Ok(made)
}

/// Buffers of one name repeated (`offsets`, `data`) for at least `entries` entries: most
/// batches have one kind and one queue, so a loop of reads hands Arrow the same two buffers
/// for each instead of writing them again (`Repeats`).
struct Repeated {
    value: Vec<u8>,
    entries: usize,
    offsets: Py<PyColumnBuffer>,
    data: Py<PyColumnBuffer>,
}

/// The kept [`Repeated`] buffers.
static REPEATED: std::sync::Mutex<Kept<Repeated>> = std::sync::Mutex::new(Kept::new());

/// Names kept at most in [`REPEATED`] (the four kinds and a few queues).
const REPEATED_KEPT: usize = 8;

/// A utf8 column whose `n` entries are all `value` (none null): the kept buffers when they
/// are long enough, else new ones (kept in turn, with room for slightly longer batches, when
/// they are small enough). Arrow reads the first `n + 1` offsets and the data they reach.
fn repeated(py: Python<'_>, value: &[u8], n: usize) -> PyResult<Spec> {
    let spec = |r: &Repeated| {
        (
            "string",
            None,
            r.data.clone_ref(py),
            Some(r.offsets.clone_ref(py)),
        )
    };
    if let Some(r) = locked(&REPEATED).find(|r| r.value == value && r.entries >= n) {
        return Ok(spec(r));
    }
    let room = n.saturating_add(n / 8);
    let entries = if Binary::repeated_len(value, room).is_ok() {
        room
    } else {
        n
    };
    let made = Binary::repeated(value, entries).map_err(crate::errors::Fail::Core);
    let column = crate::errors::py_result(py, made)?;
    let bytes = column.data.len() + column.offsets.len() * 4;
    let made = Repeated {
        value: value.to_vec(),
        entries,
        offsets: buf(py, Column::I32(column.offsets))?,
        data: buf(py, Column::U8(column.data))?,
    };
    let out = spec(&made);
    let gone = locked(&REPEATED).keep(made, bytes, REPEATED_KEPT, |r| r.value == value);
    drop(gone);
    Ok(out)
}

fn validity(
    py: Python<'_>,
    bits: Bitmap,
    zeros: &mut Zeros,
) -> PyResult<Option<Py<PyColumnBuffer>>> {
    if bits.nulls == 0 {
        Ok(None)
    } else if bits.bytes.is_empty() {
        zeros.get(py).map(Some)
    } else {
        buf(py, Column::U8(bits.bytes)).map(Some)
    }
}

fn fixed<T>(
    py: Python<'_>,
    kind: &'static str,
    c: Nullable<T>,
    zeros: &mut Zeros,
    column: fn(Vec<T>) -> Column,
) -> PyResult<Spec> {
    let values = if c.values.is_empty() && c.validity.len > 0 {
        zeros.get(py)?
    } else {
        buf(py, column(c.values))?
    };
    Ok((kind, validity(py, c.validity, zeros)?, values, None))
}

fn var(py: Python<'_>, kind: &'static str, c: Binary, zeros: &mut Zeros) -> PyResult<Spec> {
    Ok((
        kind,
        validity(py, c.validity, zeros)?,
        buf(py, Column::U8(c.data))?,
        Some(buf(py, Column::I32(c.offsets))?),
    ))
}

fn plain(py: Python<'_>, kind: &'static str, column: Column) -> PyResult<Spec> {
    Ok((kind, None, buf(py, column)?, None))
}

fn spec_list<'py>(py: Python<'py>, cols: &[(&'static str, Spec)]) -> PyResult<Bound<'py, PyList>> {
    let out = PyList::empty(py);
    for (name, (kind, validity, values, offsets)) in cols {
        let spec = (
            *kind,
            validity.as_ref().map(|b| b.clone_ref(py)),
            values.clone_ref(py),
            offsets.as_ref().map(|b| b.clone_ref(py)),
        );
        out.append((*name, spec))?;
    }
    Ok(out)
}

/// Decoded log entries in columns; `to_arrow()` wraps the buffers without copying them.
#[pyclass(module = "tflux", name = "DeltaBatch", frozen)]
pub struct PyDeltaBatch {
    len: usize,
    first_lsn: Option<i64>,
    columns: Vec<(&'static str, Spec)>,
}

impl PyDeltaBatch {
    /// Moves every column of `c` into a `tflux.ColumnBuffer` (no copy).
    pub fn new(py: Python<'_>, c: DeltaColumns) -> PyResult<Self> {
        let (len, first_lsn) = (c.len(), c.lsn.first().copied());
        let z = &mut Zeros { len, buffer: None };
        let kind = match c.repeats.kind {
            Some(name) => repeated(py, name.as_bytes(), len)?,
            None => var(py, "string", c.kind, z)?,
        };
        let queue = match &c.repeats.queue {
            Some(name) => repeated(py, name, len)?,
            None => var(py, "string", c.queue, z)?,
        };
        let mut columns = vec![
            ("lsn", plain(py, "int64", Column::I64(c.lsn))?),
            ("term", plain(py, "int32", Column::I32(c.term))?),
            ("kind", kind),
            ("queue", queue),
            ("key", fixed(py, "int64", c.key, z, Column::I64)?),
            (
                "record_id",
                fixed(py, "int64", c.record_id, z, Column::I64)?,
            ),
            ("message", var(py, "binary", c.message, z)?),
            (
                "implementation",
                fixed(py, "int32", c.implementation, z, Column::I32)?,
            ),
            (
                "max_queue_size",
                fixed(py, "int32", c.max_queue_size, z, Column::I32)?,
            ),
            (
                "max_message_size",
                fixed(py, "int32", c.max_message_size, z, Column::I32)?,
            ),
            ("key_min", fixed(py, "int64", c.key_min, z, Column::I64)?),
            ("key_max", fixed(py, "int64", c.key_max, z, Column::I64)?),
            ("due", fixed(py, "int64", c.due, z, Column::I64)?),
            (
                "kept_ids",
                (
                    "list<int64>",
                    validity(py, c.kept_ids.validity, z)?,
                    buf(py, Column::I64(c.kept_ids.values))?,
                    Some(buf(py, Column::I32(c.kept_ids.offsets))?),
                ),
            ),
            ("rules", var(py, "string", c.rules, z)?),
        ];
        if let Some(raw) = c.raw {
            columns.push(("data", var(py, "binary", raw, z)?));
        }
        Ok(PyDeltaBatch {
            len,
            first_lsn,
            columns,
        })
    }
}

#[pymethods]
impl PyDeltaBatch {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Column name -> `(arrow type, validity, values, offsets)`, in schema order.
    fn _buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        spec_list(py, &self.columns)
    }

    /// A `pyarrow.RecordBatch` with the log source's columns.
    fn to_arrow<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("tflux._arrow")?
            .call_method1("delta_batch_to_arrow", (slf,))
    }

    fn __repr__(&self) -> String {
        format!(
            "DeltaBatch(first_lsn={}, len={})",
            crate::tools::py_opt(self.first_lsn),
            self.len
        )
    }
}

/// A snapshot's records in columns (the Spark snapshot source and Parquet export).
#[pyclass(module = "tflux", name = "SnapshotBatch", frozen)]
pub struct PySnapshotBatch {
    len: usize,
    last_index: i64,
    last_term: i64,
    queues: Vec<tflux_core::format::snapshot::QueueData>,
    tasks: Vec<(Vec<u8>, tflux_core::format::rules::QueueRules)>,
    columns: Vec<(&'static str, Spec)>,
    /// `due` and `attempts`, made into buffers the first time they are asked for (a read
    /// that never asks, as every plain reader, makes none).
    task_columns: std::sync::Mutex<TaskColumns>,
}

enum TaskColumns {
    Core(Nullable<i64>, Vec<i32>),
    Made(Vec<(&'static str, Spec)>),
}

impl PySnapshotBatch {
    fn new(py: Python<'_>, c: SnapshotColumns) -> PyResult<Self> {
        let len = c.len();
        let z = &mut Zeros { len, buffer: None };
        let columns = vec![
            ("queue", var(py, "string", c.queue, z)?),
            (
                "implementation",
                plain(py, "int32", Column::I32(c.implementation))?,
            ),
            ("record_id", plain(py, "int64", Column::I64(c.record_id))?),
            ("key", plain(py, "int64", Column::I64(c.key))?),
            ("message", var(py, "binary", c.message, z)?),
        ];
        Ok(PySnapshotBatch {
            len,
            last_index: c.last_index,
            last_term: c.last_term,
            queues: c.queues,
            tasks: c.tasks,
            columns,
            task_columns: std::sync::Mutex::new(TaskColumns::Core(c.due, c.attempts)),
        })
    }

    /// The `due` and `attempts` columns (every record ready and 0 when the snapshot holds
    /// no delays or counts: one shared buffer of zeros).
    fn task_columns(&self, py: Python<'_>) -> PyResult<Vec<(&'static str, Spec)>> {
        let mut made = locked(&self.task_columns);
        if let TaskColumns::Core(due, attempts) = &mut *made {
            let z = &mut Zeros {
                len: self.len,
                buffer: None,
            };
            let due = fixed(py, "int64", std::mem::take(due), z, Column::I64)?;
            let attempts = if attempts.is_empty() && self.len > 0 {
                ("int32", None, z.get(py)?, None)
            } else {
                plain(py, "int32", Column::I32(std::mem::take(attempts)))?
            };
            *made = TaskColumns::Made(vec![("due", due), ("attempts", attempts)]);
        }
        let TaskColumns::Made(columns) = &*made else {
            unreachable!("made above")
        };
        Ok(columns
            .iter()
            .map(|(name, (kind, validity, values, offsets))| {
                let spec = (
                    *kind,
                    validity.as_ref().map(|b| b.clone_ref(py)),
                    values.clone_ref(py),
                    offsets.as_ref().map(|b| b.clone_ref(py)),
                );
                (*name, spec)
            })
            .collect())
    }
}

#[pymethods]
impl PySnapshotBatch {
    fn __len__(&self) -> usize {
        self.len
    }

    #[getter]
    fn last_index(&self) -> i64 {
        self.last_index
    }

    #[getter]
    fn last_term(&self) -> i64 {
        self.last_term
    }

    /// Every queue (also those without records): dicts with name, implementation, last_id,
    /// max_queue_size, max_message_size (None = no limit) and key_range.
    #[getter]
    fn queues<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for q in &self.queues {
            out.append(queue_dict(
                py,
                &q.name,
                q.implementation,
                q.last_id,
                (q.max_queue_size, q.max_message_size),
                q.key_range,
            )?)?;
        }
        Ok(out)
    }

    /// The queues a task-layout snapshot holds task-queue state for (spec section 12: rules,
    /// delayed records, delivery counts), by name.
    #[getter]
    fn task_queues(&self) -> Vec<String> {
        self.tasks
            .iter()
            .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
            .collect()
    }

    /// Each of those queues' rules as JSON text, every rule named (null: none), as the log
    /// columns' `rules` spell a change (`rules_json`).
    #[getter]
    fn rules<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let out = pyo3::types::PyDict::new(py);
        for (name, rules) in &self.tasks {
            let json = tflux_core::log::columns::rules_json(&rules.as_change());
            out.set_item(String::from_utf8_lossy(name), json)?;
        }
        Ok(out)
    }

    #[pyo3(signature = (tasks=false))]
    fn _buffers<'py>(&self, py: Python<'py>, tasks: bool) -> PyResult<Bound<'py, PyList>> {
        let out = spec_list(py, &self.columns)?;
        if tasks {
            for item in spec_list(py, &self.task_columns(py)?)?.iter() {
                out.append(item)?;
            }
        }
        Ok(out)
    }

    /// A `pyarrow.RecordBatch`: queue, implementation, record_id, key, message; with
    /// `tasks=True` also due and attempts.
    #[pyo3(signature = (tasks=false))]
    fn to_arrow<'py>(slf: &Bound<'py, Self>, tasks: bool) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("tflux._arrow")?
            .call_method1("snapshot_batch_to_arrow", (slf, tasks))
    }

    fn __repr__(&self) -> String {
        format!(
            "SnapshotBatch(last_index={}, last_term={}, records={})",
            self.last_index, self.last_term, self.len
        )
    }
}

/// Reads a snapshot file into columns; None when absent or empty. Corruption raises
/// `CorruptionError` as `read_snapshot` does (`dialect=None`: the one its header says).
#[pyfunction]
#[pyo3(signature = (path, *, dialect=None))]
fn read_snapshot_batch(
    py: Python<'_>,
    path: std::path::PathBuf,
    dialect: Option<&str>,
) -> PyResult<Option<PySnapshotBatch>> {
    let chosen = crate::tools::dialect_arg(dialect)?;
    let r = py.detach(|| {
        let found = tflux_core::log::dialect::snapshot_file_says(&path)?;
        let dialect = tflux_core::log::dialect::file_dialect(found, chosen)?;
        let snap = tflux_core::base::files::read_snapshot_full(&path, dialect)?;
        snap.map(|(s, tasks)| SnapshotColumns::from_snapshot_with_tasks(&s, tasks))
            .transpose()
    });
    let cols = crate::errors::py_result(py, r.map_err(crate::errors::Fail::Core))?;
    cols.map(|c| PySnapshotBatch::new(py, c)).transpose()
}

/// Decodes one segment file on its own (no log is opened): the Spark source reads one segment
/// per task this way. `last=True` treats a torn tail as the end (the active segment); in a
/// sealed segment it is `CorruptionError`. `dialect=None` reads the dialect its first record
/// says (else `spec`); the Spark sources pass the log's.
#[pyfunction]
#[pyo3(signature = (path, *, last=false, from_lsn=None, to_lsn=None, raw=false, dialect=None))]
#[allow(clippy::too_many_arguments)]
fn read_segment_deltas(
    py: Python<'_>,
    path: std::path::PathBuf,
    last: bool,
    from_lsn: Option<i64>,
    to_lsn: Option<i64>,
    raw: bool,
    dialect: Option<&str>,
) -> PyResult<PyDeltaBatch> {
    let dialect = crate::tools::dialect_arg(dialect)?;
    use tflux_core::log::recovery::Position;
    let position = if last {
        Position::Last
    } else {
        Position::Sealed
    };
    let r = py.detach(|| {
        tflux_core::log::columns::read_segment_deltas(
            &path, position, from_lsn, to_lsn, raw, dialect,
        )
    });
    let cols = crate::errors::py_result(py, r.map_err(crate::errors::Fail::Core))?;
    PyDeltaBatch::new(py, cols)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(read_segment_deltas, m)?)?;
    m.add_class::<PyDeltaBatch>()?;
    m.add_class::<PySnapshotBatch>()?;
    m.add_function(wrap_pyfunction!(read_snapshot_batch, m)?)
}

/// A snapshot queue's settings as the dict `SnapshotBatch.queues` and
/// `BaseReport.snapshot_queues` give: name, implementation, last_id, max_queue_size and
/// max_message_size (None: no limit, -1 on disk), key_range.
pub fn queue_dict<'py>(
    py: Python<'py>,
    name: &[u8],
    implementation: i32,
    last_id: u64,
    (max_queue_size, max_message_size): (i32, i32),
    key_range: Option<(i64, i64)>,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let d = pyo3::types::PyDict::new(py);
    d.set_item("name", String::from_utf8_lossy(name))?;
    d.set_item("implementation", implementation)?;
    d.set_item("last_id", last_id)?;
    d.set_item(
        "max_queue_size",
        (max_queue_size >= 0).then_some(max_queue_size),
    )?;
    d.set_item(
        "max_message_size",
        (max_message_size >= 0).then_some(max_message_size),
    )?;
    d.set_item("key_range", key_range)?;
    Ok(d)
}
