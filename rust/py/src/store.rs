//! `tflux.Store` (opened by `tflux.open`), `tflux.Record`, `tflux.QueueInfo`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use tflux_core::format::queue::{implementation_code, implementation_name, IMPLEMENTATIONS};
use tflux_core::format::rules::{QueueRules, RulesChange, BACKOFF_ONE};
use tflux_core::io::fsutil;
use tflux_core::share::wire::malformed;
use tflux_core::share::{ShareOptions, SharedStore};
use tflux_core::state::{QueueConfig, QueueInfo};
use tflux_core::store::{Listed, Reply, Request, StoreInfo, StoreOptions};

use crate::delta::{bytes_repr, int_arg, key_range_arg, str_repr, INT64};
use crate::errors::{argument_error, py_result, Fail};
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
    /// The receipt of the delivery that handed the record out (None: built by hand or listed):
    /// ack and nack settle that delivery only (`Store::ack`). Named `incarnation` for the
    /// pickle format of earlier builds.
    incarnation: Option<u64>,
    /// Deliveries of the record so far, this one included (0: not handed out by a dequeue).
    #[pyo3(get)]
    attempts: u32,
    /// When the record was enqueued (unix ms), if the owner that handed it out saw it.
    enqueued_at_ms: Option<i64>,
}

/// Records are equal by content; the receipt only guards ack/nack.
impl PartialEq for PyRecord {
    fn eq(&self, other: &Self) -> bool {
        (self.id, self.key, &self.payload, &self.queue)
            == (other.id, other.key, &other.payload, &other.queue)
    }
}

impl PyRecord {
    /// A listed record (`peek`, `records`): no receipt, its attempts and enqueue time.
    fn listed(l: &Listed, queue: &str) -> PyRecord {
        let r = &l.record;
        let mut record = PyRecord::new(r.id, r.key, &r.data, queue);
        record.attempts = l.attempts;
        record.enqueued_at_ms = l.enqueued_at;
        record
    }

    pub fn new(id: u64, key: i64, payload: &[u8], queue: &str) -> PyRecord {
        PyRecord {
            id,
            key,
            payload: payload.to_vec(),
            queue: queue.to_string(),
            incarnation: None,
            attempts: 0,
            enqueued_at_ms: None,
        }
    }
}

#[pymethods]
impl PyRecord {
    /// `_attempts` and `_enqueued_at_ms` are for pickling (`__reduce__`); a pickle of an
    /// earlier build has five arguments and loads with neither.
    #[new]
    #[pyo3(signature = (id, key, payload, queue, _incarnation=None, _attempts=0, _enqueued_at_ms=None))]
    fn py_new(
        id: u64,
        key: i64,
        payload: Vec<u8>,
        queue: String,
        _incarnation: Option<u64>,
        _attempts: u32,
        _enqueued_at_ms: Option<i64>,
    ) -> Self {
        PyRecord {
            id,
            key,
            payload,
            queue,
            incarnation: _incarnation,
            attempts: _attempts,
            enqueued_at_ms: _enqueued_at_ms,
        }
    }

    /// Unix seconds; `None` when the record was enqueued before its owner started.
    #[getter]
    fn enqueued_at(&self) -> Option<f64> {
        self.enqueued_at_ms.map(|ms| ms as f64 / 1000.0)
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
        // The receipt travels too: a copy (pickle, deepcopy, multiprocessing) settles the same
        // delivery as its original, and is as stale once that delivery ended. So do its
        // attempts and enqueue time (in ms, exactly as the owner gave them).
        let args = (
            me.id,
            me.key,
            PyBytes::new(py, &me.payload),
            me.queue.clone(),
            me.incarnation,
            me.attempts,
            me.enqueued_at_ms,
        );
        (slf.get_type(), args)
            .into_pyobject(py)
            .map(Bound::into_any)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Record(id={}, key={}, payload={}, queue={})",
            self.id,
            self.key,
            bytes_repr(py, &self.payload)?,
            str_repr(py, &self.queue)?
        ))
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
    /// Mostly for pickling: `Store.queues()` builds these.
    #[new]
    #[pyo3(signature = (name, implementation="heap", count=0, in_flight=0, last_id=0, max_size=None, max_message_size=None, key_range=None))]
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        name: String,
        implementation: &str,
        count: u64,
        in_flight: u64,
        last_id: u64,
        max_size: Option<&Bound<'_, PyAny>>,
        max_message_size: Option<&Bound<'_, PyAny>>,
        key_range: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let config = queue_config(implementation, max_size, max_message_size, key_range)?;
        Ok(PyQueueInfo {
            inner: QueueInfo {
                name,
                config,
                last_id,
                count,
                in_flight,
            },
        })
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        let i = &me.inner;
        let args = (
            i.name.clone(),
            me.implementation(),
            i.count,
            i.in_flight,
            i.last_id,
            i.config.max_queue_size,
            i.config.max_message_size,
            i.config.key_range,
        );
        (slf.get_type(), args)
            .into_pyobject(slf.py())
            .map(Bound::into_any)
    }

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
    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "QueueInfo(name={}, implementation={}, count={}, in_flight={}, last_id={})",
            str_repr(py, &self.inner.name)?,
            str_repr(py, self.implementation())?,
            self.inner.count,
            self.inner.in_flight,
            self.inner.last_id
        ))
    }
}

/// Ready records handed out one at a time (`Store.iter_records`).
#[pyclass(module = "tflux", name = "RecordIter", frozen)]
pub struct PyRecordIter {
    records: std::sync::Mutex<std::vec::IntoIter<Listed>>,
    queue: String,
}

#[pymethods]
impl PyRecordIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self) -> Option<PyRecord> {
        let next = self
            .records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .next();
        next.map(|l| PyRecord::listed(&l, &self.queue))
    }

    fn __length_hint__(&self) -> usize {
        self.records.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// Parses the Python face of a queue configuration; every bad value is an `ArgumentError`
/// that names the argument (and never an internal implementation code).
pub fn queue_config(
    implementation: &str,
    max_size: Option<&Bound<'_, PyAny>>,
    max_message_size: Option<&Bound<'_, PyAny>>,
    key_range: Option<&Bound<'_, PyAny>>,
) -> PyResult<QueueConfig> {
    let names = || {
        IMPLEMENTATIONS
            .iter()
            .map(|(_, n)| format!("{n:?}"))
            .collect::<Vec<String>>()
            .join(" or ")
    };
    let code = implementation_code(implementation).ok_or_else(|| {
        argument_error(format!(
            "implementation must be {} (got {implementation:?})",
            names()
        ))
    })?;
    let size = |v: Option<&Bound<'_, PyAny>>, what: &str| -> PyResult<Option<u32>> {
        let range = crate::delta::SIZE;
        match v {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(v) => {
                let n: i64 = int_arg(v, what, range)?;
                u32::try_from(n)
                    .ok()
                    .filter(|n| *n <= i32::MAX as u32)
                    .map(Some)
                    .ok_or_else(|| argument_error(format!("{what} must be in {range} (got {n})")))
            }
        }
    };
    let config = QueueConfig {
        implementation: code,
        max_queue_size: size(max_size, "max_size")?,
        max_message_size: size(max_message_size, "max_message_size")?,
        key_range: key_range_arg(key_range)?,
    };
    // The rules of a configuration (an array needs a key range, ...) are the core's
    // (`QueueConfig::validate`, which every create runs).
    Ok(config)
}

/// `deadline` for an argument other than `timeout` (its name in the error).
fn deadline_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Instant>> {
    deadline(Some(obj)).map_err(|e| {
        if e.is_instance_of::<pyo3::exceptions::PyValueError>(obj.py()) {
            // The message alone: `PyErr`'s own text starts with the type's name.
            let message = e
                .value(obj.py())
                .str()
                .map_or_else(|_| e.to_string(), |s| s.to_string());
            argument_error(message.replacen("timeout", what, 1))
        } else {
            e
        }
    })
}

/// A record key: an int that fits 64 bits signed (else an `ArgumentError` naming `what`).
fn key_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<i64> {
    int_arg(obj, what, INT64)
}

/// A payload: bytes (zero-copy) or any other bytes-like object (bytearray, memoryview, array,
/// numpy...), copied once.
enum Payload {
    Shared(PyBackedBytes),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Shared(b) => b,
            Payload::Owned(v) => v,
        }
    }
}

fn payload_arg(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Payload> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Payload::Shared(b.clone().into()));
    }
    match pyo3::buffer::PyBuffer::<u8>::get(obj) {
        Ok(buf) => Ok(Payload::Owned(buf.to_vec(obj.py())?)),
        Err(_) => {
            // Buffers of other item types (array("i"), numpy ints): their raw bytes.
            let as_bytes = obj
                .py()
                .import("builtins")?
                .getattr("memoryview")?
                .call1((obj,))
                .and_then(|m| m.call_method1("cast", ("B",)));
            match as_bytes.and_then(|m| pyo3::buffer::PyBuffer::<u8>::get(&m)?.to_vec(obj.py())) {
                Ok(v) => Ok(Payload::Owned(v)),
                Err(_) => Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "{what} must be bytes or another bytes-like object (got {})",
                    obj.get_type().name()?
                ))),
            }
        }
    }
}

/// The embedded durable queue of one base directory. Open it with `tflux.open`.
#[pyclass(module = "tflux", name = "Store", frozen)]
pub struct PyStore {
    /// Dropped first by `Drop`, so that the allocator can then hand back what it freed.
    inner: std::mem::ManuallyDrop<Arc<SharedStore>>,
    path: String,
}

impl Drop for PyStore {
    /// Drops the store (without the GIL), (its queues, when no other handle holds it), then returns the freed
    /// pages to the system: mimalloc keeps freed pages for reuse and purges them only on later
    /// allocator activity, so a process that restored a 10M-delta store, closed it and let it
    /// go kept 131 MiB resident for good.
    fn drop(&mut self) {
        // SAFETY: `inner` is taken once, here, and not used after.
        let inner = unsafe { std::mem::ManuallyDrop::take(&mut self.inner) };
        // Without the GIL: an owner's last handle stops its server, which waits for clients
        // to settle what they hold (the drain), and other Python threads must run meanwhile.
        crate::tools::drop_detached(inner);
        crate::tools::release_freed_memory();
    }
}

/// Seconds from Python as milliseconds, by the core's rule (`store::tasks::delay_ms`).
fn seconds_ms(py: Python<'_>, seconds: f64, what: &str) -> PyResult<i64> {
    py_result(
        py,
        tflux_core::store::tasks::delay_ms(seconds, what).map_err(Fail::Core),
    )
}

/// An enqueue of `items`, delayed by `delay` seconds from now or until `at` (unix seconds):
/// `EnqueueAt` with either, `Enqueue` with neither, refused with both.
fn enqueue_request<'a>(
    py: Python<'_>,
    queue: &'a [u8],
    items: Vec<(i64, &'a [u8])>,
    delay: Option<f64>,
    at: Option<f64>,
) -> PyResult<Request<'a>> {
    let not_before = match (delay, at) {
        (Some(_), Some(_)) => {
            return Err(argument_error("give delay= or at=, not both".to_string()))
        }
        (Some(d), None) => {
            Some(tflux_core::store::now_ms().saturating_add(seconds_ms(py, d, "delay")?))
        }
        (None, Some(t)) => Some(seconds_ms(py, t, "at")?),
        (None, None) => None,
    };
    Ok(match not_before {
        Some(not_before) => Request::EnqueueAt {
            queue,
            items,
            not_before,
        },
        None => Request::Enqueue { queue, items },
    })
}

/// The rules named in `kwargs` (dead_letter=(queue, n), retry_delay=, retry_backoff=,
/// retry_max_delay=, lease= in seconds; None clears one) as a change.
fn rules_change(
    py: Python<'_>,
    kwargs: Option<&Bound<'_, pyo3::types::PyDict>>,
) -> PyResult<RulesChange<Vec<u8>>> {
    let mut change = RulesChange::<Vec<u8>>::default();
    let Some(kwargs) = kwargs else {
        return Ok(change);
    };
    for (k, v) in kwargs.iter() {
        let name: String = k.extract()?;
        let secs = |v: &Bound<'_, PyAny>| -> PyResult<Option<i64>> {
            if v.is_none() {
                return Ok(None);
            }
            seconds_ms(py, v.extract::<f64>()?, &name).map(Some)
        };
        match name.as_str() {
            "dead_letter" => {
                change.dead_letter = Some(if v.is_none() {
                    None
                } else {
                    let (q, n): (String, i64) = v.extract()?;
                    let n = i32::try_from(n).map_err(|_| {
                        argument_error(format!("dead_letter deliveries {n} is out of range"))
                    })?;
                    Some((q.into_bytes(), n))
                })
            }
            "retry_delay" => change.retry_delay_ms = Some(secs(&v)?),
            "retry_max_delay" => change.retry_max_delay_ms = Some(secs(&v)?),
            "lease" => change.lease_ms = Some(secs(&v)?),
            "retry_backoff" => {
                change.retry_backoff = Some(if v.is_none() {
                    None
                } else {
                    let b: f64 = v.extract()?;
                    if b.is_nan() || b < 1.0 {
                        return Err(argument_error(format!(
                            "retry_backoff must be >= 1, not {b}"
                        )));
                    }
                    Some((b * BACKOFF_ONE as f64).round() as i64)
                })
            }
            other => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "unexpected keyword argument {other:?} (queue rules: dead_letter, retry_delay, \
                     retry_backoff, retry_max_delay, lease)"
                )))
            }
        }
    }
    Ok(change)
}

/// A `lease=` argument: None or a lease too long for the clock is no lease.
fn lease_arg(lease: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    Ok(match lease {
        None => None,
        Some(l) => deadline_arg(l, "lease")?.map(|d| d.saturating_duration_since(Instant::now())),
    })
}

/// The record of a delivery, holding its receipt, attempts and enqueue time.
fn delivered(d: tflux_core::store::Delivery, queue: &str) -> PyRecord {
    let r = d.record;
    let mut record = PyRecord::new(r.id, r.key, &r.data, queue);
    record.incarnation = Some(d.receipt);
    record.attempts = d.attempts;
    record.enqueued_at_ms = d.enqueued_at;
    record
}

fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> tflux_core::Result<T> + Send) -> PyResult<T> {
    py_result(py, py.detach(|| f().map_err(Fail::Core)))
}

impl PyStore {
    /// Carries out `request` without the GIL; its reply as the type the method returns.
    fn call<T: Send + TryFrom<Reply, Error = tflux_core::Error>>(
        &self,
        py: Python<'_>,
        request: &Request<'_>,
    ) -> PyResult<T> {
        run(py, || self.inner.call(request))
    }

    /// Carries out a waiting request (a dequeue, a wait) in slices of at most 100 ms, so that
    /// Ctrl-C (and other signals) are handled while it waits, until one gives something or
    /// `deadline` (None: never) passes; the last reply.
    fn wait_in_slices<T: Send + TryFrom<Reply, Error = tflux_core::Error>>(
        &self,
        py: Python<'_>,
        request: &Request<'_>,
        deadline: Option<Instant>,
    ) -> PyResult<T> {
        const SLICE: Duration = Duration::from_millis(100);
        loop {
            let slice = deadline.map_or(SLICE, |d| {
                d.saturating_duration_since(Instant::now()).min(SLICE)
            });
            let reply = run(py, || self.inner.execute(&request.waiting(slice)))?;
            if !reply.is_nothing() || deadline.is_some_and(|d| Instant::now() >= d) {
                return py_result(py, reply.try_into().map_err(Fail::Core));
            }
            py.check_signals()?;
        }
    }
}

#[pymethods]
impl PyStore {
    /// Use `tflux.open(base_dir, **settings)`; `settings_json` holds the PascalCase overrides.
    #[staticmethod]
    #[pyo3(signature = (base_dir, settings_json=None, readonly=false, lock_timeout=None, dialect=None, share=true, create=false))]
    #[allow(clippy::too_many_arguments)]
    fn _open(
        py: Python<'_>,
        base_dir: std::path::PathBuf,
        settings_json: Option<String>,
        readonly: bool,
        lock_timeout: Option<&Bound<'_, PyAny>>,
        dialect: Option<&str>,
        share: bool,
        create: bool,
    ) -> PyResult<PyStore> {
        let dialect = crate::tools::dialect_arg(dialect)?;
        let path = base_dir.display().to_string();
        let lock_timeout = match lock_timeout {
            None => None,
            // A wait too long for the clock is "forever" (MAX: retried until the lock is free).
            Some(t) => Some(deadline_arg(t, "lock_timeout")?.map_or(Duration::MAX, |d| {
                d.saturating_duration_since(Instant::now())
            })),
        };
        let opts = StoreOptions {
            readonly,
            lock_timeout,
            dialect,
            ..StoreOptions::default()
        };
        let opts = ShareOptions { store: opts, share };
        let store = run(py, || {
            if !readonly {
                fsutil::create_named_dir(&*opts.store.storage, &base_dir, create)?;
            }
            let store = SharedStore::open(&base_dir, settings_json.as_deref(), opts);
            crate::tools::release_freed_memory();
            store
        })?;
        let store = Arc::new(store);
        Ok(PyStore {
            inner: std::mem::ManuallyDrop::new(store),
            path,
        })
    }

    #[pyo3(signature = (name, implementation="heap", max_size=None, max_message_size=None, key_range=None, *, exist_ok=false, **rules))]
    #[allow(clippy::too_many_arguments)]
    fn create_queue(
        &self,
        py: Python<'_>,
        name: &str,
        implementation: &str,
        max_size: Option<&Bound<'_, PyAny>>,
        max_message_size: Option<&Bound<'_, PyAny>>,
        key_range: Option<&Bound<'_, PyAny>>,
        exist_ok: bool,
        rules: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<()> {
        let config = queue_config(implementation, max_size, max_message_size, key_range)?;
        let queue = name.as_bytes();
        let rules = QueueRules::default().changed(&rules_change(py, rules)?);
        if !rules.is_empty() {
            let _created: bool = self.call(
                py,
                &Request::CreateQueueRules {
                    queue,
                    config,
                    rules,
                    exist_ok,
                },
            )?;
            return Ok(());
        }
        let _created: bool = self.call(
            py,
            &Request::CreateQueue {
                queue,
                config,
                exist_ok,
            },
        )?;
        Ok(())
    }

    fn delete_queue(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        self.call(
            py,
            &Request::DeleteQueue {
                queue: name.as_bytes(),
            },
        )
    }

    /// `delay` (seconds from now) or `at` (unix seconds): not delivered before then.
    #[pyo3(signature = (queue, key, payload, *, delay=None, at=None))]
    fn enqueue(
        &self,
        py: Python<'_>,
        queue: &str,
        key: &Bound<'_, PyAny>,
        payload: &Bound<'_, PyAny>,
        delay: Option<f64>,
        at: Option<f64>,
    ) -> PyResult<u64> {
        let key = key_arg(key, "key")?;
        let payload = payload_arg(payload, "payload")?;
        let items = vec![(key, &payload[..])];
        let request = enqueue_request(py, queue.as_bytes(), items, delay, at)?;
        let ids: Vec<u64> = self.call(py, &request)?;
        let first = ids.first().copied();
        py_result(
            py,
            first.ok_or_else(|| malformed("no id in the reply").into()),
        )
    }

    /// `delay` (seconds from now) or `at` (unix seconds): not delivered before then.
    #[pyo3(signature = (queue, items, *, delay=None, at=None))]
    fn enqueue_many(
        &self,
        py: Python<'_>,
        queue: &str,
        items: &Bound<'_, PyAny>,
        delay: Option<f64>,
        at: Option<f64>,
    ) -> PyResult<Vec<u64>> {
        let mut owned: Vec<(i64, Payload)> = Vec::new();
        for (i, item) in items.try_iter()?.enumerate() {
            let item = item?;
            let Some([key, payload]) = crate::delta::items::<2>(&item) else {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "items[{i}] must be a (key, payload) tuple (got {})",
                    item.get_type().name()?
                )));
            };
            owned.push((
                key_arg(&key, &format!("items[{i}] key"))?,
                payload_arg(&payload, &format!("items[{i}] payload"))?,
            ));
        }
        let items: Vec<(i64, &[u8])> = owned.iter().map(|(k, p)| (*k, &p[..])).collect();
        let request = enqueue_request(py, queue.as_bytes(), items, delay, at)?;
        self.call(py, &request)
    }

    /// Waits up to `timeout` seconds (None or inf = forever, 0 = never) for a record.
    #[pyo3(signature = (queue, timeout=None, lease=None))]
    fn dequeue(
        &self,
        py: Python<'_>,
        queue: &str,
        timeout: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyRecord>> {
        let deadline = deadline(timeout)?;
        let lease = lease_arg(lease)?;
        let request = Request::Deliver {
            queue: queue.as_bytes(),
            timeout: None,
            lease,
        };
        let got: Option<tflux_core::store::Delivery> =
            self.wait_in_slices(py, &request, deadline)?;
        Ok(got.map(|d| delivered(d, queue)))
    }

    /// Waits like `dequeue` for the first record, then takes up to `n - 1` more ready ones
    /// without waiting (one round trip, one logged write); `[]` when nothing came in time.
    #[pyo3(signature = (queue, n, timeout=None, lease=None))]
    fn dequeue_many(
        &self,
        py: Python<'_>,
        queue: &str,
        n: &Bound<'_, PyAny>,
        timeout: Option<&Bound<'_, PyAny>>,
        lease: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyRecord>> {
        // The store refuses n < 1 and caps a large n: a count past u64 is as large as any.
        if !n.is_instance_of::<pyo3::types::PyInt>() {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "n must be an int, not {}",
                n.get_type().name()?
            )));
        }
        let n: u64 = match n.extract::<i128>() {
            Ok(n) => u64::try_from(n.max(0)).unwrap_or(u64::MAX),
            Err(_) if n.gt(0)? => u64::MAX,
            Err(_) => 0,
        };
        let deadline = deadline(timeout)?;
        let lease = lease_arg(lease)?;
        let request = Request::DequeueMany {
            queue: queue.as_bytes(),
            n,
            timeout: None,
            lease,
        };
        let got: Vec<tflux_core::store::Delivery> = self.wait_in_slices(py, &request, deadline)?;
        Ok(got.into_iter().map(|d| delivered(d, queue)).collect())
    }

    /// Waits up to `timeout` seconds (None = forever) until `queue` has a ready record, without
    /// taking it; True when one is ready (another consumer may still take it first).
    #[pyo3(signature = (queue, timeout=None))]
    fn wait(
        &self,
        py: Python<'_>,
        queue: &str,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let deadline = deadline(timeout)?;
        let request = Request::WaitReady {
            queue: queue.as_bytes(),
            timeout: None,
        };
        self.wait_in_slices(py, &request, deadline)
    }

    fn ack(&self, py: Python<'_>, record: PyRef<'_, PyRecord>) -> PyResult<()> {
        let (queue, id, inc) = (record.queue.clone(), record.id, record.incarnation);
        drop(record);
        let items = vec![(queue.as_bytes(), id, inc)];
        self.call(py, &Request::Ack { items })
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
        self.call(py, &Request::Ack { items })
    }

    /// `delay`: None follows the queue's retry rule (ready at once without one), else
    /// seconds before the record is ready again.
    #[pyo3(signature = (record, delay=None))]
    fn nack(
        &self,
        py: Python<'_>,
        record: PyRef<'_, PyRecord>,
        delay: Option<f64>,
    ) -> PyResult<()> {
        let (queue, id, inc) = (record.queue.clone(), record.id, record.incarnation);
        drop(record);
        let delay_ms = delay.map(|d| seconds_ms(py, d, "delay")).transpose()?;
        let request = Request::NackDelayed {
            queue: queue.as_bytes(),
            id,
            receipt: inc,
            delay_ms,
        };
        self.call(py, &request)
    }

    /// The lease of `record`'s delivery now ends `seconds` from now.
    fn extend(&self, py: Python<'_>, record: PyRef<'_, PyRecord>, seconds: f64) -> PyResult<()> {
        let (queue, id, inc) = (record.queue.clone(), record.id, record.incarnation);
        drop(record);
        let ms = seconds_ms(py, seconds, "seconds")?;
        let request = Request::Extend {
            queue: queue.as_bytes(),
            id,
            receipt: inc,
            lease: Duration::from_millis(ms as u64),
        };
        self.call(py, &request)
    }

    /// Removes every ready and delayed record of `queue` (one logged write); how many went.
    fn purge(&self, py: Python<'_>, queue: &str) -> PyResult<u64> {
        self.call(
            py,
            &Request::Purge {
                queue: queue.as_bytes(),
            },
        )
    }

    /// The owner's live figures of `queue` (a `tflux.QueueStats`).
    fn stats<'py>(&self, py: Python<'py>, queue: &str) -> PyResult<Bound<'py, PyAny>> {
        let s: tflux_core::store::QueueStats = self.call(
            py,
            &Request::Stats {
                queue: queue.as_bytes(),
            },
        )?;
        py.import("tflux._tasks")?.getattr("QueueStats")?.call1((
            s.ready,
            s.delayed,
            s.in_flight,
            s.dead_lettered,
            s.oldest_ready_age_ms.map(|ms| ms as f64 / 1000.0),
            s.enqueued,
            s.acked,
            s.nacked,
            s.expired,
        ))
    }

    /// The rules of `queue` (a `tflux.QueueRules`).
    fn queue_rules<'py>(&self, py: Python<'py>, queue: &str) -> PyResult<Bound<'py, PyAny>> {
        let r: QueueRules = self.call(
            py,
            &Request::QueueRulesOf {
                queue: queue.as_bytes(),
            },
        )?;
        let secs = |ms: Option<i64>| ms.map(|ms| ms as f64 / 1000.0);
        let dead = r
            .dead_letter
            .map(|(q, n)| (String::from_utf8_lossy(&q).into_owned(), n));
        py.import("tflux._tasks")?.getattr("QueueRules")?.call1((
            dead,
            secs(r.retry_delay_ms),
            r.retry_backoff.map(|b| b as f64 / BACKOFF_ONE as f64),
            secs(r.retry_max_delay_ms),
            secs(r.lease_ms),
        ))
    }

    /// Changes the rules named (None clears one); the others stay.
    #[pyo3(signature = (queue, **rules))]
    fn set_queue_rules(
        &self,
        py: Python<'_>,
        queue: &str,
        rules: Option<&Bound<'_, pyo3::types::PyDict>>,
    ) -> PyResult<()> {
        let change = rules_change(py, rules)?;
        let change = change.as_borrowed();
        self.call(
            py,
            &Request::SetQueueRules {
                queue: queue.as_bytes(),
                change,
            },
        )
    }

    /// Ready records of `queue` (in-flight records are not counted).
    fn count(&self, py: Python<'_>, queue: &str) -> PyResult<u64> {
        self.call(
            py,
            &Request::Count {
                queue: queue.as_bytes(),
            },
        )
    }

    /// The record `dequeue` would return next, without taking it (None: nothing ready).
    fn peek(&self, py: Python<'_>, queue: &str) -> PyResult<Option<PyRecord>> {
        let r: Option<Listed> = self.call(
            py,
            &Request::Peek {
                queue: queue.as_bytes(),
            },
        )?;
        Ok(r.map(|l| PyRecord::listed(&l, queue)))
    }

    /// Read-only stores: apply what the writer logged since the open or the last refresh.
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        run(py, || self.inner.refresh())
    }

    /// An iterator over the ready records of `queue` in dequeue order (a copy taken now;
    /// nothing is dequeued). Records are made one at a time as the iterator advances.
    fn iter_records(&self, py: Python<'_>, queue: &str) -> PyResult<PyRecordIter> {
        let recs: Vec<Listed> = self.call(
            py,
            &Request::PeekAll {
                queue: queue.as_bytes(),
            },
        )?;
        Ok(PyRecordIter {
            records: std::sync::Mutex::new(recs.into_iter()),
            queue: queue.to_string(),
        })
    }

    fn queues(&self, py: Python<'_>) -> PyResult<Vec<PyQueueInfo>> {
        let queues: Vec<QueueInfo> = self.call(py, &Request::Queues {})?;
        Ok(queues.into_iter().map(PyQueueInfo::from).collect())
    }

    /// Ready records of `queue` in dequeue order (a copy; nothing is dequeued).
    fn records(&self, py: Python<'_>, queue: &str) -> PyResult<Vec<PyRecord>> {
        let recs: Vec<Listed> = self.call(
            py,
            &Request::PeekAll {
                queue: queue.as_bytes(),
            },
        )?;
        Ok(recs.iter().map(|l| PyRecord::listed(l, queue)).collect())
    }

    /// Writes a snapshot and compacts the log; False when nothing changed since the last one.
    fn snapshot(&self, py: Python<'_>) -> PyResult<bool> {
        self.call(py, &Request::Snapshot {})
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || self.inner.close())
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The dialect of the base directory (`"spec"` or `"taskflux"`, spec section 11).
    #[getter]
    fn dialect(&self) -> &'static str {
        self.inner.layout().dialect.name()
    }

    /// True in the process that owns the base directory (holds its writer lock and serves
    /// the other processes); False in a client of the owner and in a read-only store. A
    /// client becomes the owner by itself when the owner goes.
    #[getter]
    fn is_owner(&self) -> bool {
        self.inner.is_owner()
    }

    /// The process id of the directory's owner (this process's own when `is_owner`).
    #[getter]
    fn owner_pid(&self, py: Python<'_>) -> PyResult<u32> {
        run(py, || self.inner.owner_pid())
    }

    /// Deltas replayed from the log when the store was opened.
    #[getter]
    fn replayed(&self) -> u64 {
        self.inner.open_report().replayed
    }

    /// Files put into data/temp at open: a copy of the bytes a torn-tail cut removed, and the
    /// segment files moved because the snapshot was ahead of the whole log (the log restarted
    /// after it); empty normally.
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
        let info: StoreInfo = self.call(py, &Request::Info {})?;
        Ok(info.log_bounds)
    }

    /// Current Raft term (from the metadata file) and vote.
    #[getter]
    fn term(&self, py: Python<'_>) -> PyResult<i32> {
        let info: StoreInfo = self.call(py, &Request::Info {})?;
        Ok(info.term)
    }

    /// The settings in force, with the JSON file's PascalCase keys and typed values (ints,
    /// bools, the sync policy as a string).
    #[getter]
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        settings_dict(py, &self.inner.settings())
    }

    /// Why a read-only open ignored the settings file (it is bad; the defaults are in force),
    /// or None.
    #[getter]
    fn settings_warning(&self) -> Option<String> {
        self.inner.open_report().settings_warning
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

/// Whether a process (this one included) owns `base_dir` now: the core's rule
/// (`share::owner_holds`), a probe of the owner lock released at once.
#[pyfunction]
fn owner_holds(py: Python<'_>, base_dir: std::path::PathBuf) -> PyResult<bool> {
    run(py, || tflux_core::share::owner_holds(&base_dir))
}

/// The settings in force for `base_dir` (defaults, then `taskflux.settings.json`, then the
/// JSON overrides), with PascalCase keys and typed values, and the warning of a read-only look
/// (`readonly=True`: a bad file gives the defaults and its problem instead of an error, as a
/// read-only open does); nothing is opened or replayed.
#[pyfunction]
#[pyo3(signature = (base_dir, settings_json=None, readonly=false))]
fn load_settings<'py>(
    py: Python<'py>,
    base_dir: std::path::PathBuf,
    settings_json: Option<String>,
    readonly: bool,
) -> PyResult<(Bound<'py, pyo3::types::PyDict>, Option<String>)> {
    use tflux_core::base::settings::Settings;
    let (s, warning) = run(py, || {
        if readonly {
            Settings::load_for_reading(&base_dir, settings_json.as_deref())
        } else {
            Settings::load(&base_dir, settings_json.as_deref()).map(|s| (s, None))
        }
    })?;
    Ok((settings_dict(py, &s)?, warning))
}

/// The settings as the JSON file spells them: PascalCase keys, JSON-typed values.
fn settings_dict<'py>(
    py: Python<'py>,
    s: &tflux_core::base::settings::Settings,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    let policy = s.log_sync_policy.word();
    let d = pyo3::types::PyDict::new(py);
    d.set_item("DiskFullRatio", s.disk_full_ratio)?;
    let compress = s
        .log_compress_sealed_segments
        .map_or("none", |m| m.as_str());
    d.set_item("LogCompressSealedSegments", compress)?;
    d.set_item("LogFileHardLimit", s.log_file_hard_limit)?;
    d.set_item("LogFileSoftLimit", s.log_file_soft_limit)?;
    d.set_item("LogPreallocateSegments", s.log_preallocate_segments)?;
    d.set_item("LogSyncIntervalMs", s.log_sync_interval_ms)?;
    d.set_item("LogSyncPolicy", policy)?;
    d.set_item(
        "SnapshotCreationSegmentsThreshold",
        s.snapshot_creation_segments_threshold,
    )?;
    let rules = pyo3::types::PyDict::new(py);
    for (from, rule) in &s.dead_letter {
        let r = pyo3::types::PyDict::new(py);
        r.set_item("Queue", &rule.queue)?;
        r.set_item("MaxNacks", rule.max_nacks)?;
        rules.set_item(from, r)?;
    }
    d.set_item("DeadLetter", rules)?;
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(load_settings, m)?)?;
    m.add_function(wrap_pyfunction!(owner_holds, m)?)?;
    m.add_class::<PyStore>()?;
    m.add_class::<PyRecord>()?;
    m.add_class::<PyQueueInfo>()?;
    m.add_class::<PyRecordIter>()?;
    // The core's code -> name table, read-only: {1: "heap", 2: "array"}.
    let table = pyo3::types::PyDict::new(m.py());
    for (code, name) in IMPLEMENTATIONS {
        table.set_item(code, name)?;
    }
    let proxy = m.py().import("types")?.getattr("MappingProxyType")?;
    m.add("IMPLEMENTATIONS", proxy.call1((table,))?)?;
    // The settings keys by keyword argument, in the core's order: {"log_file_soft_limit":
    // "LogFileSoftLimit", ...}, read-only.
    let keywords = pyo3::types::PyDict::new(m.py());
    for key in tflux_core::base::settings::KEYS {
        keywords.set_item(tflux_core::base::settings::keyword(key), key)?;
    }
    m.add("SETTINGS_KEYWORDS", proxy.call1((keywords,))?)?;
    Ok(())
}
