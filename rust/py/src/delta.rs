//! `tflux.Delta`, `tflux.encode_delta` and `tflux.decode_delta`: the data of each log record.

use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyList, PyTuple};
use tflux_core::format::delta::{self as core, Delta};

use crate::errors::corruption_error;

/// Extracts an integer, turning "does not fit" into a `ValueError` that names the argument.
pub fn int_arg<'py, T>(obj: &Bound<'py, PyAny>, what: &str, range: &str) -> PyResult<T>
where
    T: for<'a> FromPyObject<'a, 'py>,
{
    obj.extract::<T>().map_err(|e| {
        let e: PyErr = e.into();
        if e.is_instance_of::<PyOverflowError>(obj.py()) {
            crate::errors::argument_error(format!("{what} must be in {range} (got {obj})"))
        } else {
            e
        }
    })
}

pub const INT32: &str = "-2147483648..=2147483647";
pub const INT64: &str = "-9223372036854775808..=9223372036854775807";
pub const UINT64: &str = "0..=18446744073709551615";
pub const SIZE: &str = "0..=2147483647 (None = no limit)";

/// A size limit: None is "no limit" (-1 on disk); otherwise 0..=2^31-1.
pub fn limit_arg(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<i32> {
    match obj {
        None => Ok(core::NO_LIMIT),
        Some(o) if o.is_none() => Ok(core::NO_LIMIT),
        Some(o) => {
            let v: i64 = int_arg(o, what, SIZE)?;
            i32::try_from(v).ok().filter(|v| *v >= 0).ok_or_else(|| {
                crate::errors::argument_error(format!("{what} must be in {SIZE} (got {v})"))
            })
        }
    }
}

/// A size limit as Python sees it: -1 on disk is None.
pub fn limit_py(v: i32) -> Option<i32> {
    (v != core::NO_LIMIT).then_some(v)
}

pub fn name_arg(queue: &str) -> PyResult<Vec<u8>> {
    core::validate_queue_name(queue.as_bytes()).map_err(crate::errors::argument_error)?;
    Ok(queue.as_bytes().to_vec())
}

/// Python's repr of a str (quotes chosen and escaped as Python does).
pub fn str_repr(py: Python<'_>, s: &str) -> PyResult<String> {
    Ok(pyo3::types::PyString::new(py, s).repr()?.to_string())
}

/// A name that passed validation (ASCII) as a Python str.
pub fn name_py(name: &[u8]) -> String {
    String::from_utf8_lossy(name).into_owned()
}

pub fn key_range_arg(obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(i64, i64)>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => {
            let [min, max] = items(o).ok_or_else(|| {
                crate::errors::argument_error(format!(
                    "key_range must be None or a (min, max) tuple (got {o})"
                ))
            })?;
            let min = int_arg(&min, "key_range min", INT64)?;
            let max = int_arg(&max, "key_range max", INT64)?;
            Ok(Some((min, max)))
        }
    }
}

/// The items of a tuple or list of exactly `N` items.
pub fn items<'py, const N: usize>(obj: &Bound<'py, PyAny>) -> Option<[Bound<'py, PyAny>; N]> {
    let seq: Vec<Bound<'py, PyAny>> = if let Ok(t) = obj.cast::<PyTuple>() {
        t.iter().collect()
    } else if let Ok(l) = obj.cast::<PyList>() {
        l.iter().collect()
    } else {
        return None;
    };
    seq.try_into().ok()
}

pub fn key_range_repr(r: Option<(i64, i64)>) -> String {
    r.map_or_else(|| "None".into(), |(a, b)| format!("({a}, {b})"))
}

/// One delta (spec 6). Build with the static constructors or `decode_delta`.
#[pyclass(module = "tflux", name = "Delta", frozen, eq, hash)]
#[derive(PartialEq, Eq, Hash)]
pub struct PyDelta {
    inner: Delta,
}

#[pymethods]
impl PyDelta {
    #[staticmethod]
    #[pyo3(
        signature = (queue, implementation=None, max_queue_size=None, max_message_size=None, key_range=None),
        text_signature = "(queue, implementation=1, max_queue_size=None, max_message_size=None, key_range=None)"
    )]
    fn create_queue(
        queue: &str,
        implementation: Option<&Bound<'_, PyAny>>,
        max_queue_size: Option<&Bound<'_, PyAny>>,
        max_message_size: Option<&Bound<'_, PyAny>>,
        key_range: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let implementation = match implementation {
            Some(o) => int_arg(o, "implementation", INT32)?,
            None => 1,
        };
        Ok(PyDelta {
            inner: Delta::CreateQueue {
                name: name_arg(queue)?,
                implementation,
                max_queue_size: limit_arg(max_queue_size, "max_queue_size")?,
                max_message_size: limit_arg(max_message_size, "max_message_size")?,
                key_range: key_range_arg(key_range)?,
            },
        })
    }

    #[staticmethod]
    fn delete_queue(queue: &str) -> PyResult<Self> {
        Ok(PyDelta {
            inner: Delta::DeleteQueue {
                name: name_arg(queue)?,
            },
        })
    }

    #[staticmethod]
    fn add_record(queue: &str, key: &Bound<'_, PyAny>, message: PyBackedBytes) -> PyResult<Self> {
        let inner = Delta::AddRecord {
            name: name_arg(queue)?,
            key: int_arg(key, "key", INT64)?,
            message: message.to_vec(),
        };
        inner.validate().map_err(crate::errors::argument_error)?;
        Ok(PyDelta { inner })
    }

    #[staticmethod]
    fn remove_record(queue: &str, record_id: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(PyDelta {
            inner: Delta::RemoveRecord {
                name: name_arg(queue)?,
                id: int_arg(record_id, "record_id", UINT64)?,
            },
        })
    }

    /// "create_queue", "delete_queue", "add_record", "remove_record", or a task-queue kind
    /// (spec section 12): "queue_rules", "add_later", "delivered", "failed", "purge".
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner {
            Delta::CreateQueue { .. } => "create_queue",
            Delta::DeleteQueue { .. } => "delete_queue",
            Delta::AddRecord { .. } => "add_record",
            Delta::RemoveRecord { .. } => "remove_record",
            Delta::QueueRules { .. } => "queue_rules",
            Delta::AddLater { .. } => "add_later",
            Delta::Delivered { .. } => "delivered",
            Delta::Failed { .. } => "failed",
            Delta::Purge { .. } => "purge",
        }
    }

    #[getter]
    fn queue(&self) -> String {
        name_py(self.inner.as_ref().name())
    }

    #[getter]
    fn implementation(&self) -> Option<i32> {
        match self.inner {
            Delta::CreateQueue { implementation, .. } => Some(implementation),
            _ => None,
        }
    }

    #[getter]
    fn max_queue_size(&self) -> Option<i32> {
        match self.inner {
            Delta::CreateQueue { max_queue_size, .. } => limit_py(max_queue_size),
            _ => None,
        }
    }

    #[getter]
    fn max_message_size(&self) -> Option<i32> {
        match self.inner {
            Delta::CreateQueue {
                max_message_size, ..
            } => limit_py(max_message_size),
            _ => None,
        }
    }

    #[getter]
    fn key_range(&self) -> Option<(i64, i64)> {
        match self.inner {
            Delta::CreateQueue { key_range, .. } => key_range,
            _ => None,
        }
    }

    #[getter]
    fn key(&self) -> Option<i64> {
        match self.inner {
            Delta::AddRecord { key, .. } | Delta::AddLater { key, .. } => Some(key),
            _ => None,
        }
    }

    #[getter]
    fn message<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        match &self.inner {
            Delta::AddRecord { message, .. } | Delta::AddLater { message, .. } => {
                Some(PyBytes::new(py, message))
            }
            _ => None,
        }
    }

    #[getter]
    fn record_id(&self) -> Option<u64> {
        match self.inner {
            Delta::RemoveRecord { id, .. }
            | Delta::Delivered { id, .. }
            | Delta::Failed { id, .. } => Some(id),
            _ => None,
        }
    }

    /// AddLater: not before (unix ms); Failed: due (unix ms).
    #[getter]
    fn due(&self) -> Option<i64> {
        match self.inner {
            Delta::AddLater { not_before, .. } => Some(not_before),
            Delta::Failed { due, .. } => Some(due),
            _ => None,
        }
    }

    /// Purge: the ids of the records kept (in flight at the purge).
    #[getter]
    fn kept_ids(&self) -> Option<Vec<u64>> {
        match &self.inner {
            Delta::Purge { kept, .. } => Some(kept.clone()),
            _ => None,
        }
    }

    /// QueueRules: the rules it changes, by name (`dead_letter`, `retry_delay_ms`,
    /// `retry_backoff` in millionths, `retry_max_delay_ms`, `lease_ms`), None for a rule it
    /// clears; a rule it leaves as it is is not a key.
    #[getter]
    fn rules<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyDict>>> {
        let Delta::QueueRules { change, .. } = &self.inner else {
            return Ok(None);
        };
        let dict = pyo3::types::PyDict::new(py);
        if let Some(dead) = &change.dead_letter {
            let value = dead.as_ref().map(|(q, n)| (name_py(q), *n));
            dict.set_item("dead_letter", value)?;
        }
        for (name, value) in [
            ("retry_delay_ms", change.retry_delay_ms),
            ("retry_backoff", change.retry_backoff),
            ("retry_max_delay_ms", change.retry_max_delay_ms),
            ("lease_ms", change.lease_ms),
        ] {
            if let Some(value) = value {
                dict.set_item(name, value)?;
            }
        }
        Ok(Some(dict))
    }

    /// The delta's bytes (the data of a log record).
    fn encode<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.encode())
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let queue = str_repr(py, &self.queue())?;
        Ok(match &self.inner {
            Delta::CreateQueue {
                implementation,
                max_queue_size,
                max_message_size,
                key_range,
                ..
            } => format!(
                "Delta.create_queue({queue}, implementation={implementation}, \
                 max_queue_size={}, max_message_size={}, key_range={})",
                opt(limit_py(*max_queue_size)),
                opt(limit_py(*max_message_size)),
                key_range_repr(*key_range)
            ),
            Delta::DeleteQueue { .. } => format!("Delta.delete_queue({queue})"),
            Delta::AddRecord { key, message, .. } => format!(
                "Delta.add_record({queue}, key={key}, message={})",
                bytes_repr(py, message)?
            ),
            Delta::RemoveRecord { id, .. } => {
                format!("Delta.remove_record({queue}, record_id={id})")
            }
            // The task-queue kinds (spec 12): named, fields shown by `tflux dump`.
            other => format!("<Delta {} of {queue}>", other.as_ref().kind_name()),
        })
    }

    fn __reduce__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let decode = py.import("tflux._tflux")?.getattr("decode_delta")?;
        Ok((decode, (self.encode(py),)))
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "None".into(), |v| v.to_string())
}

/// Python's repr of bytes, shortened past 32 bytes.
pub fn bytes_repr(py: Python<'_>, data: &[u8]) -> PyResult<String> {
    if data.len() > 32 {
        return Ok(format!("<{} bytes>", data.len()));
    }
    Ok(PyBytes::new(py, data).repr()?.to_string())
}

/// Encode a delta to the bytes of a log record.
#[pyfunction]
fn encode_delta<'py>(py: Python<'py>, delta: &PyDelta) -> Bound<'py, PyBytes> {
    delta.encode(py)
}

/// Decode a log record's bytes; bad bytes raise `CorruptionError` with the byte `offset`.
#[pyfunction]
fn decode_delta(py: Python<'_>, data: PyBackedBytes) -> PyResult<PyDelta> {
    match core::decode(&data) {
        Ok(d) => Ok(PyDelta {
            inner: d.to_delta(),
        }),
        Err(e) => Err(corruption_error(
            py,
            format!("bad delta: {e}"),
            Some(e.offset),
        )),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyDelta>()?;
    m.add_function(wrap_pyfunction!(encode_delta, m)?)?;
    m.add_function(wrap_pyfunction!(decode_delta, m)?)?;
    Ok(())
}
