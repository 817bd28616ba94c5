//! `tflux.QueueState`: the queue state machine, for replaying logs outside a store.

use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use tflux_core::state::QueueState;

use crate::errors::{py_result, Fail};
use crate::log::PyLog;
use crate::store::{PyQueueInfo, PyRecord};

#[pyclass(module = "tflux", name = "QueueState", frozen)]
pub struct PyQueueState {
    inner: Mutex<QueueState>,
}

impl PyQueueState {
    fn with<T>(&self, f: impl FnOnce(&mut QueueState) -> T) -> T {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

#[pymethods]
impl PyQueueState {
    /// A fresh state: just the default queue.
    #[new]
    fn new() -> Self {
        PyQueueState {
            inner: Mutex::new(QueueState::new()),
        }
    }

    /// Applies one delta (the data of a log record). Raises `ReplayError`.
    #[pyo3(signature = (data, lsn=None))]
    fn apply(&self, py: Python<'_>, data: PyBackedBytes, lsn: Option<i64>) -> PyResult<()> {
        let r = self.with(|s| s.apply(lsn, &data).map(|_| ()).map_err(Fail::Core));
        py_result(py, r)
    }

    /// Applies the log's entries from `start` (default: its first entry) to its end, in Rust
    /// with the GIL released. Returns the number of deltas applied.
    #[pyo3(signature = (log, start=None))]
    fn replay(&self, py: Python<'_>, log: PyRef<'_, PyLog>, start: Option<i64>) -> PyResult<u64> {
        let shared = log.shared();
        drop(log);
        let r = py.detach(|| {
            let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
            let log = crate::log::usable(&mut guard)?;
            let mut state = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            tflux_core::replay::replay(&mut state, log, start).map_err(Fail::Core)
        });
        py_result(py, r)
    }

    fn queues(&self) -> Vec<PyQueueInfo> {
        self.with(|s| s.infos().into_iter().map(PyQueueInfo::from).collect())
    }

    /// Ready records of `queue` in dequeue order.
    fn records(&self, py: Python<'_>, queue: &str) -> PyResult<Vec<PyRecord>> {
        let r = self.with(|s| {
            s.queue(queue.as_bytes()).map(|q| {
                q.ready_in_order()
                    .into_iter()
                    .map(|r| PyRecord::new(r.id, r.key, &r.data, queue))
                    .collect()
            })
        });
        py_result(py, r.map_err(Fail::Core))
    }

    fn __len__(&self) -> usize {
        self.with(|s| s.len())
    }

    fn __repr__(&self) -> String {
        self.with(|s| {
            format!(
                "QueueState(queues={}, records={})",
                s.len(),
                s.total_records()
            )
        })
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyQueueState>()
}
