//! `tflux.Store` (opened by `tflux.open`), `tflux.Record`, `tflux.QueueInfo`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use tflux_core::format::queue::{implementation_code, implementation_name, IMPLEMENTATIONS};
use tflux_core::state::{QueueConfig, QueueInfo};
use tflux_core::store::Store;

use crate::errors::{py_result, Fail};
use crate::tools::deadline;

/// One record handed out by `dequeue` (or listed by inspection).
#[pyclass(module = "tflux", name = "Record", frozen, eq)]
pub struct PyRecord {
    #[pyo3(get)]
    id: u64,
    #[pyo3(get)]
    key: i64,
    payload: Vec<u8>,
    #[pyo3(get)]
    queue: String,
    /// The life of the queue that handed the record out (None: built by hand or listed).
    incarnation: Option<u64>,
}

/// Records are equal by content; the incarnation only guards ack/nack.
impl PartialEq for PyRecord {
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.key, &self.payload, &self.queue)
            == (other.id, other.key, &other.payload, &other.queue)
    }
}

impl PyRecord {
    pub fn new(id: u64, key: i64, payload: &[u8], queue: &str) -> PyRecord {
        PyRecord {
            id,
            key,
            payload: payload.to_vec(),
            queue: queue.to_string(),
            incarnation: None,
        }
    }
}

#[pymethods]
impl PyRecord {
    #[new]
    #[pyo3(signature = (id, key, payload, queue, _incarnation=None))]
    fn py_new(
        id: u64,
        key: i64,
        payload: Vec<u8>,
        queue: String,
        _incarnation: Option<u64>,
    ) -> Self {
        PyRecord {
            id,
            key,
            payload,
            queue,
            incarnation: _incarnation,
        }
    }

    #[getter]
    fn payload<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.payload)
    }

    fn __hash__(&self) -> u64 {
        // Records are identified by queue and id.
        self.id ^ (self.queue.len() as u64).rotate_left(48)
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        let py = slf.py();
        // The incarnation travels too: a copy (pickle, deepcopy, multiprocessing) is as stale as
        // its original after a reopen or a re-creation of the queue.
        let args = (
            me.id,
            me.key,
            PyBytes::new(py, &me.payload),
            me.queue.clone(),
            me.incarnation,
        );
        (slf.get_type(), args)
            .into_pyobject(py)
            .map(Bound::into_any)
    }

    fn __repr__(&self) -> String {
        let payload = if self.payload.len() > 32 {
            format!("<{} bytes>", self.payload.len())
        } else {
            format!("{:?}", String::from_utf8_lossy(&self.payload))
        };
        format!(
            "Record(id={}, key={}, payload={payload}, queue={:?})",
            self.id, self.key, self.queue
        )
    }
}

/// A summary of one queue.
#[pyclass(module = "tflux", name = "QueueInfo", frozen, eq)]
#[derive(PartialEq)]
pub struct PyQueueInfo {
    inner: QueueInfo,
}

impl From<QueueInfo> for PyQueueInfo {
    fn from(inner: QueueInfo) -> Self {
        PyQueueInfo { inner }
    }
}

#[pymethods]
impl PyQueueInfo {
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
    /// "heap" or "array".
    #[getter]
    fn implementation(&self) -> &'static str {
        // A queue's config was validated when it was made: its code is in the table.
        implementation_name(self.inner.config.implementation).unwrap_or("unknown")
    }
    /// Ready records (in-flight ones are counted in `in_flight`).
    #[getter]
    fn count(&self) -> u64 {
        self.inner.count
    }
    #[getter]
    fn in_flight(&self) -> u64 {
        self.inner.in_flight
    }
    #[getter]
    fn last_id(&self) -> u64 {
        self.inner.last_id
    }
    #[getter]
    fn max_size(&self) -> Option<u32> {
        self.inner.config.max_queue_size
    }
    #[getter]
    fn max_message_size(&self) -> Option<u32> {
        self.inner.config.max_message_size
    }
    #[getter]
    fn key_range(&self) -> Option<(i64, i64)> {
        self.inner.config.key_range
    }
    fn __repr__(&self) -> String {
        format!(
            "QueueInfo(name={:?}, implementation={:?}, count={}, in_flight={}, last_id={})",
            self.inner.name,
            self.implementation(),
            self.inner.count,
            self.inner.in_flight,
            self.inner.last_id
        )
    }
}

/// Parses the Python face of a queue configuration.
pub fn queue_config(
    implementation: &str,
    max_size: Option<i64>,
    max_message_size: Option<i64>,
    key_range: Option<(i64, i64)>,
) -> PyResult<QueueConfig> {
    let implementation = implementation_code(implementation).ok_or_else(|| {
        let names: Vec<String> = IMPLEMENTATIONS
            .iter()
            .map(|(_, n)| format!("{n:?}"))
            .collect();
        PyValueError::new_err(format!(
            "implementation must be {} (got {implementation:?})",
            names.join(" or ")
        ))
    })?;
    let size = |v: Option<i64>, what: &str| -> PyResult<Option<u32>> {
        match v {
            None => Ok(None),
            Some(v) if (0..=i32::MAX as i64).contains(&v) => Ok(Some(v as u32)),
            Some(v) => Err(PyValueError::new_err(format!(
                "{what} must be None or 0..2147483647 (got {v})"
            ))),
        }
    };
    Ok(QueueConfig {
        implementation,
        max_queue_size: size(max_size, "max_size")?,
        max_message_size: size(max_message_size, "max_message_size")?,
        key_range,
    })
}

/// The embedded durable queue of one base directory. Open it with `tflux.open`.
#[pyclass(module = "tflux", name = "Store", frozen)]
pub struct PyStore {
    inner: Arc<Store>,
    path: String,
}

fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> tflux_core::Result<T> + Send) -> PyResult<T> {
    py_result(py, py.detach(|| f().map_err(Fail::Core)))
}

#[pymethods]
impl PyStore {
    /// Use `tflux.open(base_dir, **settings)`; `settings_json` holds the PascalCase overrides.
    #[staticmethod]
    #[pyo3(signature = (base_dir, settings_json=None, readonly=false))]
    fn _open(
        py: Python<'_>,
        base_dir: std::path::PathBuf,
        settings_json: Option<String>,
        readonly: bool,
    ) -> PyResult<PyStore> {
        let path = base_dir.display().to_string();
        let store = run(py, || {
            Store::open(&base_dir, settings_json.as_deref(), readonly)
        })?;
        let store = Arc::new(store);
        store.start_background_sync();
        Ok(PyStore { inner: store, path })
    }

    #[pyo3(signature = (name, implementation="heap", max_size=None, max_message_size=None, key_range=None))]
    fn create_queue(
        &self,
        py: Python<'_>,
        name: &str,
        implementation: &str,
        max_size: Option<i64>,
        max_message_size: Option<i64>,
        key_range: Option<(i64, i64)>,
    ) -> PyResult<()> {
        let config = queue_config(implementation, max_size, max_message_size, key_range)?;
        run(py, || self.inner.create_queue(name.as_bytes(), config))
    }

    fn delete_queue(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        run(py, || self.inner.delete_queue(name.as_bytes()))
    }

    fn enqueue(
        &self,
        py: Python<'_>,
        queue: &str,
        key: i64,
        payload: PyBackedBytes,
    ) -> PyResult<u64> {
        run(py, || self.inner.enqueue(queue.as_bytes(), key, &payload))
    }

    fn enqueue_many(
        &self,
        py: Python<'_>,
        queue: &str,
        items: Vec<(i64, PyBackedBytes)>,
    ) -> PyResult<Vec<u64>> {
        let borrowed: Vec<(i64, &[u8])> = items.iter().map(|(k, p)| (*k, &p[..])).collect();
        run(py, || self.inner.enqueue_many(queue.as_bytes(), &borrowed))
    }

    /// Waits up to `timeout` seconds (None or inf = forever, 0 = never) for a record.
    #[pyo3(signature = (queue, timeout=None))]
    fn dequeue(
        &self,
        py: Python<'_>,
        queue: &str,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyRecord>> {
        let deadline = deadline(timeout)?;
        // Wait in slices so Ctrl-C (and other signals) are handled while blocked.
        loop {
            let slice = match deadline {
                None => Duration::from_millis(100),
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100)),
            };
            let got = run(py, || self.inner.dequeue(queue.as_bytes(), Some(slice)))?;
            if let Some((r, incarnation)) = got {
                let mut record = PyRecord::new(r.id, r.key, &r.data, queue);
                record.incarnation = Some(incarnation);
                return Ok(Some(record));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    fn ack(&self, py: Python<'_>, record: PyRef<'_, PyRecord>) -> PyResult<()> {
        let (queue, id, inc) = (record.queue.clone(), record.id, record.incarnation);
        drop(record);
        run(py, || self.inner.ack(queue.as_bytes(), id, inc))
    }

    /// Acknowledges several records with one log write and one fsync (all or none).
    fn ack_many(&self, py: Python<'_>, records: Vec<PyRef<'_, PyRecord>>) -> PyResult<()> {
        let owned: Vec<(String, u64, Option<u64>)> = records
            .iter()
            .map(|r| (r.queue.clone(), r.id, r.incarnation))
            .collect();
        drop(records);
        let items: Vec<(&[u8], u64, Option<u64>)> = owned
            .iter()
            .map(|(q, id, inc)| (q.as_bytes(), *id, *inc))
            .collect();
        run(py, || self.inner.ack_many(&items))
    }

    fn nack(&self, py: Python<'_>, record: PyRef<'_, PyRecord>) -> PyResult<()> {
        let (queue, id, inc) = (record.queue.clone(), record.id, record.incarnation);
        drop(record);
        run(py, || self.inner.nack(queue.as_bytes(), id, inc))
    }

    fn queues(&self, py: Python<'_>) -> PyResult<Vec<PyQueueInfo>> {
        Ok(run(py, || self.inner.queues())?
            .into_iter()
            .map(PyQueueInfo::from)
            .collect())
    }

    /// Ready records of `queue` in dequeue order (a copy; nothing is dequeued).
    fn records(&self, py: Python<'_>, queue: &str) -> PyResult<Vec<PyRecord>> {
        let recs = run(py, || self.inner.peek_all(queue.as_bytes()))?;
        Ok(recs
            .iter()
            .map(|r| PyRecord::new(r.id, r.key, &r.data, queue))
            .collect())
    }

    /// Writes a snapshot and compacts the log; False when nothing changed since the last one.
    fn snapshot(&self, py: Python<'_>) -> PyResult<bool> {
        run(py, || self.inner.snapshot())
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || self.inner.close())
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// Deltas replayed from the log when the store was opened.
    #[getter]
    fn replayed(&self) -> u64 {
        self.inner.open_report().replayed
    }

    /// Segment files moved into data/temp at open because the snapshot was ahead of the whole
    /// log (the log restarted after it); empty normally.
    #[getter]
    fn moved_aside(&self) -> Vec<String> {
        self.inner
            .open_report()
            .moved_aside
            .iter()
            .map(|p| p.display().to_string())
            .collect()
    }

    /// Last index of the snapshot the store was restored from (None: no snapshot).
    #[getter]
    fn restored_snapshot_index(&self) -> Option<i64> {
        self.inner.open_report().snapshot_index
    }

    /// `(start_index, last_index, snapshot_index)` of the log right now.
    #[getter]
    fn log_bounds(&self, py: Python<'_>) -> PyResult<(i64, i64, i64)> {
        run(py, || self.inner.log_bounds())
    }

    /// Current Raft term (from the metadata file) and vote.
    #[getter]
    fn term(&self, py: Python<'_>) -> PyResult<i32> {
        Ok(run(py, || self.inner.metadata())?.term)
    }

    /// The settings in force, with the JSON file's PascalCase keys.
    #[getter]
    fn settings(&self) -> std::collections::BTreeMap<&'static str, String> {
        settings_map(self.inner.settings())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self) -> String {
        format!("Store(path={:?})", self.path)
    }
}

/// The settings in force for `base_dir` (defaults, then `taskflux.settings.json`, then the
/// JSON overrides), with PascalCase keys; nothing is opened or replayed.
#[pyfunction]
#[pyo3(signature = (base_dir, settings_json=None))]
fn load_settings(
    py: Python<'_>,
    base_dir: std::path::PathBuf,
    settings_json: Option<String>,
) -> PyResult<std::collections::BTreeMap<&'static str, String>> {
    let s = run(py, || {
        tflux_core::settings::Settings::load(&base_dir, settings_json.as_deref())
    })?;
    Ok(settings_map(&s))
}

fn settings_map(
    s: &tflux_core::settings::Settings,
) -> std::collections::BTreeMap<&'static str, String> {
    let policy = match s.log_sync_policy {
        tflux_core::settings::StoreSync::Always => "always",
        tflux_core::settings::StoreSync::Interval => "interval",
        tflux_core::settings::StoreSync::Never => "never",
    };
    [
        ("LogFileSoftLimit", s.log_file_soft_limit.to_string()),
        ("LogFileHardLimit", s.log_file_hard_limit.to_string()),
        (
            "LogPreallocateSegments",
            s.log_preallocate_segments.to_string(),
        ),
        (
            "SnapshotCreationSegmentsThreshold",
            s.snapshot_creation_segments_threshold.to_string(),
        ),
        ("LogSyncPolicy", policy.to_string()),
        ("LogSyncIntervalMs", s.log_sync_interval_ms.to_string()),
    ]
    .into_iter()
    .collect()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_settings, m)?)?;
    m.add_class::<PyStore>()?;
    m.add_class::<PyRecord>()?;
    m.add_class::<PyQueueInfo>()?;
    // The core's code -> name table, read-only: {1: "heap", 2: "array"}.
    let table = pyo3::types::PyDict::new(m.py());
    for (code, name) in IMPLEMENTATIONS {
        table.set_item(code, name)?;
    }
    let proxy = m.py().import("types")?.getattr("MappingProxyType")?;
    m.add("IMPLEMENTATIONS", proxy.call1((table,))?)?;
    Ok(())
}
