//! `tflux.Log`, `tflux.Entry`, `tflux.EntryBatch` and the log's small report types.

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList};
use tflux_core::durability::{spawn_interval, Stopper, StoreSync};
use tflux_core::io::fsutil;
use tflux_core::log as core;

use crate::buffer::{Column, PyColumnBuffer};
use crate::errors::{py_result, Fail};
use crate::tools::{py_bool, py_opt};

pub type Shared = Arc<Mutex<Option<core::Log>>>;

fn lock(shared: &Shared) -> MutexGuard<'_, Option<core::Log>> {
    // A panic never leaves the log half-updated in a way a later call could not detect, so a
    // poisoned mutex is still usable.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The log of `guard` if it is open and was opened in this process (a forked child's copy is
/// `Forked`: `core::Log::check_process`).
pub fn usable(guard: &mut Option<core::Log>) -> Result<&mut core::Log, Fail> {
    let log = guard.as_mut().ok_or(Fail::Closed)?;
    log.check_process()?;
    Ok(log)
}

/// The log's lock if nobody holds it now (poisoned is usable, as in [`lock`]).
fn try_lock(shared: &Shared) -> Option<MutexGuard<'_, Option<core::Log>>> {
    match shared.try_lock() {
        Ok(g) => Some(g),
        Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(std::sync::TryLockError::WouldBlock) => None,
    }
}

/// Reads of at most this many bytes of data keep the GIL ([`PyLog::read`]).
const SMALL_READ: u64 = 64 << 10;

/// Runs `f` on the open log with the GIL released.
fn with_log<T: Send>(
    py: Python<'_>,
    shared: &Shared,
    f: impl FnOnce(&mut core::Log) -> tflux_core::Result<T> + Send,
) -> PyResult<T> {
    let result = py.detach(|| f(usable(&mut lock(shared))?).map_err(Fail::Core));
    py_result(py, result)
}

fn to_term(term: i64) -> PyResult<i32> {
    i32::try_from(term).ok().filter(|t| *t >= 0).ok_or_else(|| {
        crate::errors::argument_error(format!("term must be in 0..=2147483647 (got {term})"))
    })
}

#[pyclass(module = "tflux", name = "Entry", frozen)]
pub struct PyEntry {
    #[pyo3(get)]
    lsn: i64,
    #[pyo3(get)]
    term: i32,
    #[pyo3(get)]
    data: Py<PyBytes>,
}

impl PyEntry {
    fn new(py: Python<'_>, lsn: i64, term: i32, data: &[u8]) -> PyEntry {
        PyEntry {
            lsn,
            term,
            data: PyBytes::new(py, data).unbind(),
        }
    }
}

#[pymethods]
impl PyEntry {
    #[new]
    fn py_new(lsn: i64, term: i32, data: Py<PyBytes>) -> Self {
        PyEntry { lsn, term, data }
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> bool {
        match other.cast::<PyEntry>() {
            Ok(o) => {
                let o = o.get();
                self.lsn == o.lsn
                    && self.term == o.term
                    && self.data.as_bytes(py) == o.data.as_bytes(py)
            }
            Err(_) => false,
        }
    }

    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        (self.lsn, self.term, self.data.clone_ref(py))
            .into_pyobject(py)?
            .hash()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let data = self.data.bind(py);
        let shown = if data.as_bytes().len() > 32 {
            format!("<{} bytes>", data.as_bytes().len())
        } else {
            data.repr()?.to_string()
        };
        Ok(format!(
            "Entry(lsn={}, term={}, data={shown})",
            self.lsn, self.term
        ))
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        let args = (me.lsn, me.term, me.data.clone_ref(slf.py()));
        (slf.get_type(), args)
            .into_pyobject(slf.py())
            .map(Bound::into_any)
    }
}

#[pyclass(module = "tflux", name = "SegmentInfo", frozen)]
pub struct PySegmentInfo {
    inner: core::SegmentInfo,
}

impl From<core::SegmentInfo> for PySegmentInfo {
    fn from(inner: core::SegmentInfo) -> Self {
        PySegmentInfo { inner }
    }
}

#[pymethods]
impl PySegmentInfo {
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
    #[getter]
    fn path(&self) -> String {
        self.inner.path.display().to_string()
    }
    #[getter]
    fn start_lsn(&self) -> i64 {
        self.inner.start_lsn
    }
    #[getter]
    fn count(&self) -> u64 {
        self.inner.count
    }
    #[getter]
    fn last_lsn(&self) -> i64 {
        self.inner.start_lsn + self.inner.count as i64 - 1
    }
    #[getter]
    fn size(&self) -> u64 {
        self.inner.size
    }
    #[getter]
    fn file_size(&self) -> u64 {
        self.inner.file_size
    }
    #[getter]
    fn sealed(&self) -> bool {
        self.inner.sealed
    }
    /// `"zstd"` or `"lz4"` for a `.log.z` file, else None.
    #[getter]
    fn compression(&self) -> Option<&'static str> {
        self.inner.compression.map(|m| m.as_str())
    }
    fn __repr__(&self) -> String {
        format!(
            "SegmentInfo(name={:?}, start_lsn={}, count={}, size={}, sealed={})",
            self.inner.name,
            self.inner.start_lsn,
            self.inner.count,
            self.inner.size,
            py_bool(self.inner.sealed)
        )
    }
}

#[pyclass(module = "tflux", name = "RecoveryReport", frozen)]
pub struct PyRecoveryReport {
    inner: core::RecoveryReport,
}

#[pymethods]
impl PyRecoveryReport {
    #[getter]
    fn truncated(&self) -> bool {
        self.inner.truncated()
    }
    #[getter]
    fn cut_path(&self) -> Option<String> {
        self.inner
            .cut_path
            .as_ref()
            .map(|p| p.display().to_string())
    }
    #[getter]
    fn cut_offset(&self) -> Option<u64> {
        self.inner.cut_offset
    }
    #[getter]
    fn bytes_cut(&self) -> u64 {
        self.inner.bytes_cut
    }
    #[getter]
    fn records_kept(&self) -> u64 {
        self.inner.records_kept
    }
    #[getter]
    fn reason(&self) -> Option<String> {
        self.inner.reason.clone()
    }
    #[getter]
    fn moved(&self) -> Vec<String> {
        self.inner
            .moved
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }
    fn __repr__(&self) -> String {
        format!(
            "RecoveryReport(truncated={}, cut_path={}, cut_offset={}, bytes_cut={}, records_kept={}, moved={})",
            py_bool(self.inner.truncated()),
            py_opt(self.cut_path().map(|p| format!("{p:?}"))),
            py_opt(self.inner.cut_offset),
            self.inner.bytes_cut,
            self.inner.records_kept,
            self.inner.moved.len()
        )
    }
}

/// Entries in columnar buffers: the bulk path hands Python a few buffers, not one object per
/// record. Each column is built once in Rust and moved (not copied) into a `tflux.ColumnBuffer`
/// when a caller first asks for a buffer (`lsn`, `term`, `offsets`, `data_view`, `to_arrow()`):
/// a random read of one entry that only takes `batch[0]`, `data` or `nbytes` makes none.
#[pyclass(module = "tflux", name = "EntryBatch", frozen)]
pub struct PyEntryBatch {
    len: usize,
    first_lsn: i64,
    /// The columns until they move into `buffers` (under this lock, so a reader finds them in
    /// one place or the other).
    columns: Mutex<Option<core::EntryBatch>>,
    /// lsn, term, offsets, data.
    buffers: PyOnceLock<[Py<PyColumnBuffer>; 4]>,
    /// `data` as `bytes`, made on first use (the one copy a `bytes` caller asks for).
    data_bytes: PyOnceLock<Py<PyBytes>>,
}

impl PyEntryBatch {
    fn new(_py: Python<'_>, batch: core::EntryBatch) -> PyResult<PyEntryBatch> {
        Ok(PyEntryBatch {
            len: batch.len(),
            first_lsn: batch.first_lsn,
            columns: Mutex::new(Some(batch)),
            buffers: PyOnceLock::new(),
            data_bytes: PyOnceLock::new(),
        })
    }

    fn columns(&self) -> MutexGuard<'_, Option<core::EntryBatch>> {
        self.columns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `f(terms, offsets, data)` over the columns wherever they are now.
    fn with_columns<R>(&self, py: Python<'_>, f: impl FnOnce(&[i32], &[i32], &[u8]) -> R) -> R {
        let columns = self.columns();
        if let Some(c) = columns.as_ref() {
            return f(&c.terms, &c.offsets, &c.data);
        }
        let [_, term, offsets, data] = self.buffers.get(py).expect("moved columns have buffers");
        fn ints(b: &Py<PyColumnBuffer>) -> &[i32] {
            match b.get().column() {
                Column::I32(v) => v,
                _ => &[],
            }
        }
        f(ints(term), ints(offsets), data.get().bytes())
    }

    /// The four buffers, the columns moved into them on first use.
    fn buffers(&self, py: Python<'_>) -> PyResult<&[Py<PyColumnBuffer>; 4]> {
        let mut columns = self.columns();
        if let Some(b) = self.buffers.get(py) {
            return Ok(b);
        }
        let Some(c) = columns.take() else {
            unreachable!("columns move only into buffers");
        };
        let first = c.first_lsn;
        let lsns: Vec<i64> = (0..c.len() as i64).map(|i| first + i).collect();
        let made = [
            PyColumnBuffer::py(py, Column::I64(lsns))?,
            PyColumnBuffer::py(py, Column::I32(c.terms))?,
            PyColumnBuffer::py(py, Column::I32(c.offsets))?,
            PyColumnBuffer::py(py, Column::U8(c.data))?,
        ];
        let _ = self.buffers.set(py, made);
        drop(columns);
        Ok(self.buffers.get(py).expect("just set"))
    }

    fn view<'py>(&self, py: Python<'py>, k: usize) -> PyResult<Bound<'py, PyAny>> {
        PyColumnBuffer::view(&self.buffers(py)?[k], py)
    }

    fn entry(&self, py: Python<'_>, i: usize) -> PyEntry {
        self.with_columns(py, |terms, offsets, data| {
            let data = &data[offsets[i] as usize..offsets[i + 1] as usize];
            PyEntry::new(py, self.first_lsn + i as i64, terms[i], data)
        })
    }
}

impl Drop for PyEntryBatch {
    /// Columns never handed over go to the pool of the next bulk read, as a dropped
    /// `ColumnBuffer`'s do.
    fn drop(&mut self) {
        use tflux_core::log::columns::pool;
        let columns = self.columns.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = columns.take() {
            pool::give(c.terms);
            pool::give(c.offsets);
            pool::give(c.data);
        }
    }
}

#[pymethods]
impl PyEntryBatch {
    fn __len__(&self) -> usize {
        self.len
    }

    fn __getitem__(&self, py: Python<'_>, index: isize) -> PyResult<PyEntry> {
        let i = if index < 0 {
            index + self.len as isize
        } else {
            index
        };
        if i < 0 || i as usize >= self.len {
            return Err(PyIndexError::new_err("EntryBatch index out of range"));
        }
        Ok(self.entry(py, i as usize))
    }

    fn __iter__(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let entries: Vec<PyEntry> = (0..self.len).map(|i| self.entry(py, i)).collect();
        Ok(entries.into_pyobject(py)?.try_iter()?.into_any().unbind())
    }

    /// Native-endian int64 LSNs (a view of tflux's buffer, no copy).
    #[getter]
    fn lsn<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.view(py, 0)
    }

    /// Native-endian int32 terms.
    #[getter]
    fn term<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.view(py, 1)
    }

    /// `len + 1` native-endian int32 positions into `data`.
    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.view(py, 2)
    }

    /// Every entry's data back to back, as `bytes` (a copy, made once per batch; `data_view`
    /// and `to_arrow()` need none).
    #[getter]
    fn data(&self, py: Python<'_>) -> Py<PyBytes> {
        self.data_bytes
            .get_or_init(py, || {
                self.with_columns(py, |_, _, data| PyBytes::new(py, data).unbind())
            })
            .clone_ref(py)
    }

    /// `data` as a read-only memoryview of tflux's buffer (no copy).
    #[getter]
    fn data_view<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.view(py, 3)
    }

    #[getter]
    fn nbytes(&self, py: Python<'_>) -> usize {
        self.with_columns(py, |_, _, data| data.len())
    }

    /// The columns' `tflux.ColumnBuffer`s: lsn, term, offsets, data (for Arrow, without copying).
    fn _buffers(&self, py: Python<'_>) -> PyResult<[Py<PyColumnBuffer>; 4]> {
        Ok(self.buffers(py)?.each_ref().map(|b| b.clone_ref(py)))
    }

    /// A `pyarrow.RecordBatch` (lsn int64, term int32, data binary) over these buffers.
    fn to_arrow<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        slf.py()
            .import("tflux._arrow")?
            .call_method1("entry_batch_to_arrow", (slf,))
    }

    fn __repr__(&self) -> String {
        format!("EntryBatch(first_lsn={}, len={})", self.first_lsn, self.len)
    }
}

/// Iterator over a range of entries, fetched from the core in chunks.
#[pyclass(module = "tflux", name = "EntryIterator")]
pub struct PyEntryIterator {
    log: Shared,
    next: i64,
    end: i64,
    chunk: core::EntryBatch,
    pos: usize,
}

const ITER_CHUNK_BYTES: u64 = 4 << 20;

#[pymethods]
impl PyEntryIterator {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<PyEntry>> {
        if self.pos >= self.chunk.len() {
            if self.next >= self.end {
                return Ok(None);
            }
            let (next, end) = (self.next, self.end);
            self.chunk = with_log(py, &self.log, |log| {
                log.read_batch(next, end, ITER_CHUNK_BYTES)
            })?;
            self.pos = 0;
            if self.chunk.is_empty() {
                self.end = self.next;
                return Ok(None);
            }
            self.next += self.chunk.len() as i64;
        }
        let i = self.pos;
        self.pos += 1;
        let c = &self.chunk;
        let data = &c.data[c.offsets[i] as usize..c.offsets[i + 1] as usize];
        Ok(Some(PyEntry::new(
            py,
            c.first_lsn + i as i64,
            c.terms[i],
            data,
        )))
    }
}

/// The segmented Raft log of one directory. One writer per directory.
#[pyclass(module = "tflux", name = "Log", frozen)]
pub struct PyLog {
    inner: Shared,
    path: String,
    readonly: bool,
    /// The background fsync of `sync="interval"`, stopped at close.
    interval: Option<Arc<Stopper>>,
}

impl PyLog {
    /// The shared handle, for bulk work in other bindings (replay).
    pub fn shared(&self) -> Shared {
        self.inner.clone()
    }

    /// A read-only log opened by another binding (`tflux.locate(...).open_log()`).
    pub fn from_readonly(log: core::Log, path: String) -> PyLog {
        PyLog {
            inner: Arc::new(Mutex::new(Some(log))),
            path,
            readonly: true,
            interval: None,
        }
    }

    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut core::Log) -> tflux_core::Result<T> + Send,
    ) -> PyResult<T> {
        with_log(py, &self.inner, f)
    }

    /// Quick state reads: no GIL release (a mutex holder never waits for the GIL).
    fn peek<T>(&self, py: Python<'_>, f: impl FnOnce(&core::Log) -> T) -> PyResult<T> {
        let read = {
            let mut guard = lock(&self.inner);
            usable(&mut guard).map(|log| f(log))
        };
        // Not under the lock: `py_result` may run Python (logging handlers).
        py_result(py, read)
    }

    fn bounds(&self, py: Python<'_>, start: Option<i64>, end: Option<i64>) -> PyResult<(i64, i64)> {
        self.peek(py, |log| {
            (
                start.unwrap_or(log.start_index()),
                end.unwrap_or(log.last_index().saturating_add(1)),
            )
        })
    }
}

/// `sync=` of `Log.open` in the store's words (`LogSyncPolicy`, parsed by the core's
/// [`StoreSync::parse`]): the log's policy, and the interval of the background fsync that
/// "interval" adds to the log's batch policy.
fn sync_policy(
    word: &str,
    interval_ms: u64,
) -> Result<(core::SyncPolicy, Option<std::time::Duration>), Fail> {
    let policy = StoreSync::parse(word).map_err(Fail::Core)?;
    if policy != StoreSync::Interval {
        return Ok((policy.log_policy(), None));
    }
    if interval_ms == 0 {
        return Err(Fail::Core(tflux_core::Error::InvalidArgument(format!(
            "sync_interval_ms must be > 0 with sync={word:?}"
        ))));
    }
    let every = std::time::Duration::from_millis(interval_ms);
    Ok((policy.log_policy(), Some(every)))
}

/// The background fsync of `sync="interval"`: the core's interval thread, holding only a weak
/// handle so that it never keeps a dropped log open; it stops at close (or at the first tick
/// after the log is gone).
fn start_interval_sync(shared: &Shared, every: std::time::Duration) -> Arc<Stopper> {
    let weak = Arc::downgrade(shared);
    let stopper = Arc::new(Stopper::default());
    spawn_interval(Arc::clone(&stopper), every, move || {
        let Some(shared) = weak.upgrade() else {
            return false;
        };
        let mut guard = lock(&shared);
        match guard.as_mut() {
            // A failed sync poisons the log: the next write reports it.
            Some(log) => {
                drop(log.sync());
                true
            }
            None => false,
        }
    });
    stopper
}

#[pymethods]
impl PyLog {
    #[staticmethod]
    #[pyo3(signature = (path, *, soft_limit=16 << 20, hard_limit=32 << 20, preallocate=true,
                        sync="always", repair=false, readonly=false, commit_index=None,
                        empty_entries=true, sync_interval_ms=100, dialect=None, create=false))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        path: std::path::PathBuf,
        soft_limit: u64,
        hard_limit: u64,
        preallocate: bool,
        sync: &str,
        repair: bool,
        readonly: bool,
        commit_index: Option<i64>,
        empty_entries: bool,
        sync_interval_ms: u64,
        dialect: Option<&str>,
        create: bool,
    ) -> PyResult<PyLog> {
        let dialect = crate::tools::dialect_arg(dialect)?;
        let (sync, interval) = py_result(py, sync_policy(sync, sync_interval_ms))?;
        let opts = core::LogOptions {
            soft_limit,
            hard_limit,
            preallocate,
            sync,
            recovery: if repair {
                tflux_core::RecoveryMode::Repair
            } else {
                tflux_core::RecoveryMode::TolerateTornTail
            },
            readonly,
            commit_index,
            empty_entries,
            dialect,
            ..core::LogOptions::default()
        };
        let display = path.display().to_string();
        let log = py.detach(|| {
            if !readonly {
                let named = tflux_core::base::named_dir_of_log(&path);
                fsutil::create_named_dir(&*opts.storage, named, create)?;
            }
            core::Log::open(&path, opts)
        });
        let log = log.map_err(Fail::Core);
        let inner = Arc::new(Mutex::new(Some(py_result(py, log)?)));
        let interval = match (interval, readonly) {
            (Some(every), false) => Some(start_interval_sync(&inner, every)),
            _ => None,
        };
        Ok(PyLog {
            inner,
            path: display,
            readonly,
            interval,
        })
    }

    fn append(&self, py: Python<'_>, term: i64, data: PyBackedBytes) -> PyResult<i64> {
        let term = to_term(term)?;
        self.run(py, |log| log.append(term, &data))
    }

    fn append_many(&self, py: Python<'_>, term: i64, items: Vec<PyBackedBytes>) -> PyResult<i64> {
        let term = to_term(term)?;
        self.run(py, |log| log.append_many(term, &items))
    }

    fn insert_range(
        &self,
        py: Python<'_>,
        start: i64,
        entries: Vec<(i64, PyBackedBytes)>,
    ) -> PyResult<()> {
        let entries = entries
            .into_iter()
            .map(|(t, d)| Ok((to_term(t)?, d)))
            .collect::<PyResult<Vec<_>>>()?;
        self.run(py, |log| log.insert_range(start, &entries))
    }

    fn commit(&self, py: Python<'_>, lsn: i64) -> PyResult<()> {
        self.run(py, |log| log.commit(lsn))
    }

    fn truncate_after(&self, py: Python<'_>, lsn: i64) -> PyResult<()> {
        self.run(py, |log| log.truncate_after(lsn))
    }

    #[pyo3(signature = (start, max_bytes=None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        start: i64,
        max_bytes: Option<u64>,
    ) -> PyResult<Bound<'py, PyList>> {
        if let Some(budget) = max_bytes.filter(|m| *m <= SMALL_READ) {
            // A small read (a random single-record read) costs less than releasing and
            // retaking the GIL: keep it when the log is free right now (a holder of the log's
            // lock never waits for the GIL). The first entry's data is copied straight from
            // the segment into its `bytes` and checked there (`Log::read_one`); the rest, if
            // the budget takes more, as `Log::read` would. Entries and the list are made after
            // the lock is released (they are Python objects a collection could reach).
            if let Some(mut guard) = try_lock(&self.inner) {
                let log = match usable(&mut guard) {
                    Ok(log) => log,
                    Err(fail) => {
                        drop(guard);
                        return py_result(py, Err(fail));
                    }
                };
                let first = match log.read_one(start, |d| PyBytes::new(py, d), |b| b.as_bytes()) {
                    Ok(Some((term, data))) => PyEntry {
                        lsn: start,
                        term,
                        data: data.unbind(),
                    },
                    Ok(None) => return Ok(PyList::empty(py)),
                    Err(e) => {
                        drop(guard);
                        return py_result(py, Err(Fail::Core(e)));
                    }
                };
                let taken = first.data.as_bytes(py).len() as u64;
                if taken > budget || start >= log.last_index() {
                    drop(guard);
                    return PyList::new(py, [first]);
                }
                let mut entries = vec![first];
                let r = log.read_after(start + 1, Some(taken), Some(budget), |lsn, term, d| {
                    entries.push(PyEntry::new(py, lsn, term, d))
                });
                drop(guard);
                py_result(py, r.map_err(Fail::Core))?;
                return PyList::new(py, entries);
            }
        }
        let entries = self.run(py, |log| log.read(start, max_bytes))?;
        PyList::new(
            py,
            entries
                .iter()
                .map(|e| PyEntry::new(py, e.lsn, e.term, &e.data)),
        )
    }

    #[pyo3(signature = (start=None, end=None, max_bytes=4 << 20))]
    fn read_batch(
        &self,
        py: Python<'_>,
        start: Option<i64>,
        end: Option<i64>,
        max_bytes: u64,
    ) -> PyResult<PyEntryBatch> {
        // A small batch (a random read of a few records) costs less than releasing and
        // retaking the GIL: as in `read`, keep it when the log is free right now, bounds and
        // read under one lock.
        if let Some(mut guard) = try_lock(&self.inner) {
            let log = match usable(&mut guard) {
                Ok(log) => log,
                Err(fail) => {
                    drop(guard);
                    return py_result(py, Err(fail));
                }
            };
            let start = start.unwrap_or(log.start_index());
            let end = end.unwrap_or(log.last_index().saturating_add(1));
            let (_, bytes) = log.estimate(start, end, max_bytes);
            if bytes as u64 <= SMALL_READ {
                let r = log.read_batch(start, end, max_bytes).map_err(Fail::Core);
                drop(guard);
                return PyEntryBatch::new(py, py_result(py, r)?);
            }
        }
        let (start, end) = self.bounds(py, start, end)?;
        let batch = self.run(py, |log| log.read_batch(start, end, max_bytes))?;
        PyEntryBatch::new(py, batch)
    }

    /// Entries `start..end` decoded as deltas into columns (the Spark and Parquet path), at
    /// most `max_bytes` of record data (at least one entry). `raw=True` adds the undecoded
    /// bytes. Undecodable data raises `CorruptionError` naming the LSN.
    #[pyo3(signature = (start=None, end=None, max_bytes=4 << 20, raw=false))]
    fn read_deltas(
        &self,
        py: Python<'_>,
        start: Option<i64>,
        end: Option<i64>,
        max_bytes: u64,
        raw: bool,
    ) -> PyResult<crate::columns::PyDeltaBatch> {
        let (start, end) = self.bounds(py, start, end)?;
        let cols = self.run(py, |log| {
            tflux_core::log::columns::read_deltas(log, start, end, max_bytes, raw)
        })?;
        crate::columns::PyDeltaBatch::new(py, cols)
    }

    #[pyo3(signature = (start=None, end=None))]
    fn entries(
        &self,
        py: Python<'_>,
        start: Option<i64>,
        end: Option<i64>,
    ) -> PyResult<PyEntryIterator> {
        let (start, end) = self.bounds(py, start, end)?;
        // Validate the start now, so a bad start fails at the call and not at the first next().
        self.run(py, |log| log.read_batch(start, start, 0))?;
        Ok(PyEntryIterator {
            log: self.inner.clone(),
            next: start,
            end,
            chunk: core::EntryBatch::default(),
            pos: 0,
        })
    }

    fn term_at(&self, py: Python<'_>, lsn: i64) -> PyResult<i32> {
        let r = self.peek(py, |log| log.term_at(lsn).map_err(Fail::Core))?;
        py_result(py, r)
    }

    /// Replaces every sealed segment not yet compressed by a `.log.z`; returns their paths.
    #[pyo3(signature = (method = "zstd"))]
    fn compress(&self, py: Python<'_>, method: &str) -> PyResult<Vec<String>> {
        let method = method.to_owned();
        self.run(py, move |log| {
            let method = tflux_core::segment::compress::parse_method(&method)?;
            let made = log.compress(method)?;
            Ok(made.iter().map(|p| p.display().to_string()).collect())
        })
    }

    /// First LSNs of the sealed segments not yet compressed.
    fn compressible(&self, py: Python<'_>) -> PyResult<Vec<i64>> {
        self.peek(py, |log| log.compressible())
    }

    /// Compresses the one sealed segment starting at `first_lsn`; None when there is none to
    /// compress (compacted, compressed already, or the active one).
    #[pyo3(signature = (first_lsn, method = "zstd"))]
    fn compress_one(
        &self,
        py: Python<'_>,
        first_lsn: i64,
        method: &str,
    ) -> PyResult<Option<String>> {
        let method = method.to_owned();
        self.run(py, move |log| {
            let method = tflux_core::segment::compress::parse_method(&method)?;
            let made = log.compress_one(first_lsn, method)?;
            Ok(made.map(|p| p.display().to_string()))
        })
    }

    fn compact(&self, py: Python<'_>, snapshot_index: i64) -> PyResult<usize> {
        self.run(py, |log| log.compact(snapshot_index))
    }

    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.run(py, |log| log.sync())
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if let Some(stopper) = &self.interval {
            stopper.stop();
        }
        let taken = lock(&self.inner).take();
        match taken {
            Some(log) => py_result(py, py.detach(|| log.close().map_err(Fail::Core))),
            None => Ok(()),
        }
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    #[getter]
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }

    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    /// The dialect its records are framed in (`"spec"` or `"taskflux"`, spec section 11).
    #[getter]
    fn dialect(&self, py: Python<'_>) -> PyResult<&'static str> {
        self.peek(py, |log| log.dialect().name())
    }

    #[getter]
    fn start_index(&self, py: Python<'_>) -> PyResult<i64> {
        self.peek(py, |log| log.start_index())
    }

    #[getter]
    fn last_index(&self, py: Python<'_>) -> PyResult<i64> {
        self.peek(py, |log| log.last_index())
    }

    #[getter]
    fn commit_index(&self, py: Python<'_>) -> PyResult<i64> {
        self.peek(py, |log| log.commit_index())
    }

    #[getter]
    fn last_entry(&self, py: Python<'_>) -> PyResult<Option<(i64, i32)>> {
        self.peek(py, |log| log.last_entry())
    }

    #[getter]
    fn segments(&self, py: Python<'_>) -> PyResult<Vec<PySegmentInfo>> {
        self.peek(py, |log| {
            log.segments()
                .into_iter()
                .map(PySegmentInfo::from)
                .collect()
        })
    }

    #[getter]
    fn recovery(&self, py: Python<'_>) -> PyResult<PyRecoveryReport> {
        self.peek(py, |log| PyRecoveryReport {
            inner: log.recovery().clone(),
        })
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        self.peek(py, |log| log.len() as usize)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self) -> String {
        match lock(&self.inner).as_ref() {
            Some(log) => format!(
                "Log(path={:?}, start_index={}, last_index={}, commit_index={})",
                self.path,
                log.start_index(),
                log.last_index(),
                log.commit_index()
            ),
            None => format!("Log(path={:?}, closed)", self.path),
        }
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyLog>()?;
    m.add_class::<PyEntry>()?;
    m.add_class::<PyEntryBatch>()?;
    m.add_class::<PyEntryIterator>()?;
    m.add_class::<PySegmentInfo>()?;
    m.add_class::<PyRecoveryReport>()?;
    Ok(())
}
