//! `tflux.Channel`, `tflux.Sender`, `tflux.Receiver`, `tflux.Message`, `tflux.MessageBatch`:
//! the file-channel face of the log. All logic is in `tflux_core::channel`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyIndexError, PyTypeError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};
use tflux_core::base::settings::StoreSync;
use tflux_core::channel::{ChannelOptions, Messages, Receiver, Retention, Start, Watermarks};
use tflux_core::io::fsutil;
use tflux_core::share::channel::SharedChannel;

use crate::errors::{argument_error, py_result, Fail};
use crate::tools::deadline;

fn run<T: Send>(py: Python<'_>, f: impl FnOnce() -> tflux_core::Result<T> + Send) -> PyResult<T> {
    py_result(py, py.detach(|| f().map_err(Fail::Core)))
}

/// Longest a blocked call waits before it looks at Python's signals (Ctrl-C).
const SIGNAL_SLICE: Duration = Duration::from_millis(50);

/// What `Message.__reduce__` returns: the class and its arguments.
type Reduced<'py> = (Bound<'py, PyAny>, (i64, Bound<'py, PyBytes>));

/// One message: its LSN and its bytes.
#[pyclass(module = "tflux", name = "Message", frozen, eq)]
#[derive(PartialEq)]
pub struct PyMessage {
    #[pyo3(get)]
    lsn: i64,
    data: Vec<u8>,
}

#[pymethods]
impl PyMessage {
    #[new]
    fn new(lsn: i64, data: Vec<u8>) -> Self {
        PyMessage { lsn, data }
    }

    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.data)
    }

    fn __repr__(&self) -> String {
        let shown: Vec<u8> = self.data.iter().copied().take(32).collect();
        let more = if self.data.len() > 32 { "..." } else { "" };
        format!(
            "Message(lsn={}, data=b{:?}{more})",
            self.lsn,
            String::from_utf8_lossy(&shown)
        )
    }

    fn __hash__(&self) -> u64 {
        self.lsn as u64
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Reduced<'py>> {
        let cls = py.get_type::<PyMessage>().into_any();
        Ok((cls, (self.lsn, PyBytes::new(py, &self.data))))
    }
}

/// Messages received together, in columnar form (no Python object per message until asked):
/// message `i` has LSN `first_lsn + i`.
#[pyclass(module = "tflux", name = "MessageBatch", frozen, sequence)]
pub struct PyMessageBatch {
    inner: Messages,
}

#[pymethods]
impl PyMessageBatch {
    #[getter]
    fn first_lsn(&self) -> i64 {
        self.inner.first_lsn
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    fn __getitem__(&self, i: isize) -> PyResult<PyMessage> {
        let n = self.inner.len() as isize;
        let k = if i < 0 { i + n } else { i };
        if k < 0 || k >= n {
            return Err(PyIndexError::new_err("message index out of range"));
        }
        let k = k as usize;
        Ok(PyMessage {
            lsn: self.inner.first_lsn + k as i64,
            data: self.inner.get(k).to_vec(),
        })
    }

    /// The payloads as a list of bytes.
    fn payloads<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(
            py,
            (0..self.inner.len()).map(|i| PyBytes::new(py, self.inner.get(i))),
        )
    }

    /// Every payload back to back (Arrow's binary values buffer).
    #[getter]
    fn data<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.data)
    }

    /// `len + 1` int32 positions into `data`, native byte order (Arrow's offsets buffer).
    #[getter]
    fn offsets<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        crate::tools::native_bytes(py, &self.inner.offsets, i32::to_ne_bytes)
    }

    fn __repr__(&self) -> String {
        format!(
            "MessageBatch(first_lsn={}, len={})",
            self.inner.first_lsn,
            self.inner.len()
        )
    }
}

/// A channel directory opened with `tflux.Channel.open(dir, ...)`.
#[pyclass(module = "tflux", name = "Channel", frozen)]
pub struct PyChannel {
    inner: std::mem::ManuallyDrop<Arc<SharedChannel>>,
    path: String,
}

impl Drop for PyChannel {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and not used after.
        crate::tools::drop_detached(unsafe { std::mem::ManuallyDrop::take(&mut self.inner) });
    }
}

fn parse_sync(sync: &str) -> PyResult<StoreSync> {
    StoreSync::from_word(sync)
        .ok_or_else(|| argument_error(format!("sync must be {} (got {sync:?})", StoreSync::WORDS)))
}

fn parse_start(start: &Bound<'_, PyAny>) -> PyResult<Start> {
    if let Ok(s) = start.extract::<String>() {
        return match s.as_str() {
            "earliest" => Ok(Start::Earliest),
            "latest" => Ok(Start::Latest),
            other => Err(argument_error(format!(
                "start must be \"earliest\", \"latest\" or an LSN (got {other:?})"
            ))),
        };
    }
    if start.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(
            "start must be \"earliest\", \"latest\" or an LSN",
        ));
    }
    match start.extract::<i64>() {
        Ok(lsn) if lsn >= 0 => Ok(Start::Lsn(lsn)),
        Ok(lsn) => Err(argument_error(format!(
            "start LSN must be >= 0 (got {lsn})"
        ))),
        Err(_) => Err(PyTypeError::new_err(
            "start must be \"earliest\", \"latest\" or an LSN (int)",
        )),
    }
}

fn ratio(name: &str, v: Option<f64>) -> PyResult<Option<f64>> {
    match v {
        Some(r) if !tflux_core::durability::is_ratio(r) => Err(argument_error(format!(
            "{name} must be None or a ratio in (0, 1] (got {r})"
        ))),
        other => Ok(other),
    }
}

#[pymethods]
impl PyChannel {
    /// Opens (creating it unless read-only) the channel directory `dir`.
    #[staticmethod]
    #[pyo3(signature = (dir, sync="always", retention_bytes=None, retention_ms=None,
        compress_sealed=None, readonly=false, *, sync_interval_ms=100, soft_limit=16 << 20,
        hard_limit=32 << 20, preallocate=true, disk_high_ratio=Some(0.95),
        disk_low_ratio=Some(0.90), disk_clean_ratio=Some(0.85), share=true, create=false))]
    #[allow(clippy::too_many_arguments)]
    fn open(
        py: Python<'_>,
        dir: PathBuf,
        sync: &str,
        retention_bytes: Option<u64>,
        retention_ms: Option<u64>,
        compress_sealed: Option<String>,
        readonly: bool,
        sync_interval_ms: u64,
        soft_limit: u64,
        hard_limit: u64,
        preallocate: bool,
        disk_high_ratio: Option<f64>,
        disk_low_ratio: Option<f64>,
        disk_clean_ratio: Option<f64>,
        share: bool,
        create: bool,
    ) -> PyResult<PyChannel> {
        let opts = ChannelOptions {
            sync: parse_sync(sync)?,
            sync_interval_ms,
            retention: Retention {
                bytes: retention_bytes,
                ms: retention_ms,
            },
            compress_sealed,
            readonly,
            soft_limit,
            hard_limit,
            preallocate,
            watermarks: Watermarks {
                high: ratio("disk_high_ratio", disk_high_ratio)?,
                low: ratio("disk_low_ratio", disk_low_ratio)?,
                clean: ratio("disk_clean_ratio", disk_clean_ratio)?,
            },
            ..ChannelOptions::default()
        };
        let path = dir.display().to_string();
        let inner = Arc::new(run(py, || {
            if !readonly {
                fsutil::create_named_dir(&*opts.storage, &dir, create)?;
            }
            SharedChannel::open(&dir, opts, share)
        })?);
        Ok(PyChannel {
            inner: std::mem::ManuallyDrop::new(inner),
            path,
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    #[getter]
    fn readonly(&self) -> bool {
        self.inner.readonly()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.closed()
    }

    /// LSN of the first message the channel still holds.
    #[getter]
    fn start_lsn(&self, py: Python<'_>) -> PyResult<i64> {
        run(py, || self.inner.bounds()).map(|b| b.0)
    }

    /// LSN the next message sent gets.
    #[getter]
    fn next_lsn(&self, py: Python<'_>) -> PyResult<i64> {
        run(py, || self.inner.bounds()).map(|b| b.1)
    }

    /// True in the process that appends to the channel's log (the owner, or an unshared
    /// channel); a client's senders send through the owner. False when read-only.
    #[getter]
    fn is_owner(&self) -> bool {
        self.inner.is_owner()
    }

    /// Whether sends are refused for lack of disk space (until below the low ratio).
    #[getter]
    fn disk_full(&self) -> bool {
        self.inner.disk_full()
    }

    /// A sender (refused on a read-only channel).
    fn sender(&self, py: Python<'_>) -> PyResult<PySender> {
        if self.inner.readonly() {
            return Err(crate::errors::to_pyerr(
                py,
                Fail::Core(tflux_core::Error::ReadOnly {
                    path: self.inner.layout().base,
                }),
            ));
        }
        if self.inner.closed() {
            return Err(crate::errors::to_pyerr(
                py,
                Fail::Core(tflux_core::Error::Closed("channel")),
            ));
        }
        Ok(PySender {
            inner: std::mem::ManuallyDrop::new(Arc::clone(&self.inner)),
        })
    }

    /// Receiver `name`: resumes at its first unacknowledged message; `start` ("earliest",
    /// "latest" or an LSN) applies only when it has no cursor yet.
    #[pyo3(signature = (name, start=None))]
    fn receiver(
        &self,
        py: Python<'_>,
        name: &str,
        start: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyReceiver> {
        let start = match start {
            None => Start::Earliest,
            Some(s) => parse_start(s)?,
        };
        let rx = run(py, || self.inner.receiver(name, start))?;
        Ok(PyReceiver {
            inner: Arc::new(rx),
        })
    }

    /// `{name: first unacknowledged LSN}` of every receiver of the directory.
    fn receivers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let list = run(py, || self.inner.receivers())?;
        let d = PyDict::new(py);
        for (name, next) in list {
            d.set_item(name, next)?;
        }
        Ok(d)
    }

    /// Deletes receiver `name`'s cursor; False when it had none.
    fn drop_receiver(&self, py: Python<'_>, name: &str) -> PyResult<bool> {
        run(py, || self.inner.drop_receiver(name))
    }

    /// Deletes the oldest sealed segments every receiver has acknowledged and retention lets
    /// go; returns how many.
    fn collect(&self, py: Python<'_>) -> PyResult<usize> {
        run(py, || self.inner.collect())
    }

    /// Makes every sent message durable now.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || self.inner.sync())
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        run(py, || self.inner.close())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "Channel(path={:?}, readonly={})",
            self.path,
            crate::tools::py_bool(self.inner.readonly())
        )
    }
}

/// Appends messages to a channel.
#[pyclass(module = "tflux", name = "Sender", frozen)]
pub struct PySender {
    inner: std::mem::ManuallyDrop<Arc<SharedChannel>>,
}

impl Drop for PySender {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and not used after.
        crate::tools::drop_detached(unsafe { std::mem::ManuallyDrop::take(&mut self.inner) });
    }
}

#[pymethods]
impl PySender {
    /// Appends one message; returns its LSN (durable per the channel's sync policy).
    fn send(&self, py: Python<'_>, data: PyBackedBytes) -> PyResult<i64> {
        run(py, || self.inner.send_many(&[&data[..]]))
    }

    /// Appends messages, all or nothing, with one write and one fsync; returns the first LSN.
    fn send_many(&self, py: Python<'_>, items: Vec<PyBackedBytes>) -> PyResult<i64> {
        let borrowed: Vec<&[u8]> = items.iter().map(|d| &d[..]).collect();
        run(py, || self.inner.send_many(&borrowed))
    }

    fn __repr__(&self) -> String {
        format!(
            "Sender(path={:?})",
            self.inner.layout().base.display().to_string()
        )
    }
}

/// A named receiver with a durable cursor.
#[pyclass(module = "tflux", name = "Receiver", frozen)]
pub struct PyReceiver {
    inner: Arc<Receiver>,
}

impl PyReceiver {
    /// Waits (GIL released, in slices so Ctrl-C is handled) until messages arrive or the
    /// deadline passes.
    fn wait_many(
        &self,
        py: Python<'_>,
        max_messages: usize,
        max_bytes: u64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Messages> {
        let deadline = deadline(timeout)?;
        let zero = deadline.is_some_and(|d| d <= Instant::now());
        loop {
            let slice = match deadline {
                None => SIGNAL_SLICE,
                Some(d) => d
                    .saturating_duration_since(Instant::now())
                    .min(SIGNAL_SLICE),
            };
            let rx = Arc::clone(&self.inner);
            let got = run(py, move || {
                rx.recv_many(max_messages, max_bytes, Some(slice))
            })?;
            if !got.is_empty() || zero || deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(got);
            }
            py.check_signals()?;
        }
    }
}

#[pymethods]
impl PyReceiver {
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// The next LSN to deliver.
    #[getter]
    fn position(&self) -> i64 {
        self.inner.position()
    }

    /// The first unacknowledged LSN (what the cursor file holds).
    #[getter]
    fn acked(&self) -> i64 {
        self.inner.acked()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.inner.closed()
    }

    /// The next message, waiting up to `timeout` seconds (None = forever); None on timeout.
    #[pyo3(signature = (timeout=None))]
    fn recv(
        &self,
        py: Python<'_>,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<PyMessage>> {
        let got = self.wait_many(py, 1, u64::MAX, timeout)?;
        Ok((!got.is_empty()).then(|| PyMessage {
            lsn: got.first_lsn,
            data: got.get(0).to_vec(),
        }))
    }

    /// Up to `max_messages` messages (and about `max_bytes` of data), waiting up to `timeout`
    /// for the first; an empty batch on timeout.
    #[pyo3(signature = (max_messages=1024, timeout=None, max_bytes=None))]
    fn recv_many(
        &self,
        py: Python<'_>,
        max_messages: usize,
        timeout: Option<&Bound<'_, PyAny>>,
        max_bytes: Option<u64>,
    ) -> PyResult<PyMessageBatch> {
        if max_messages == 0 {
            return Err(argument_error("max_messages must be >= 1"));
        }
        // Offsets are int32 (Arrow): a batch stays under 1 GiB of data.
        let max_bytes = max_bytes.unwrap_or(64 << 20).min(1 << 30);
        let inner = self.wait_many(py, max_messages, max_bytes, timeout)?;
        Ok(PyMessageBatch { inner })
    }

    /// Acknowledges the `n` oldest received messages (cursor replaced atomically).
    #[pyo3(signature = (n=1))]
    fn ack(&self, py: Python<'_>, n: u64) -> PyResult<()> {
        let rx = Arc::clone(&self.inner);
        run(py, move || rx.ack(n))
    }

    /// Releases the name (another process may open it).
    fn close(&self) {
        self.inner.close()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, _exc: &Bound<'_, pyo3::types::PyTuple>) {
        self.close()
    }

    fn __repr__(&self) -> String {
        format!(
            "Receiver(name={:?}, position={}, acked={})",
            self.inner.name(),
            self.inner.position(),
            self.inner.acked()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyChannel>()?;
    m.add_class::<PySender>()?;
    m.add_class::<PyReceiver>()?;
    m.add_class::<PyMessage>()?;
    m.add_class::<PyMessageBatch>()?;
    Ok(())
}
