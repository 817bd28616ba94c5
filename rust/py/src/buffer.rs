//! `tflux.ColumnBuffer`: a column built in Rust handed to Python without a copy. The object owns the
//! column's memory (moved in, never copied) and exposes it read-only through the buffer
//! protocol, so `memoryview(buf)`, `pyarrow.py_buffer(buf)` and `numpy.frombuffer(buf)` all
//! wrap it in place; the memory lives as long as any of them (each holds a reference to the
//! object), whatever happens to the log or segment it was read from.

use std::ffi::{c_int, CStr};

use pyo3::exceptions::PyBufferError;
use pyo3::prelude::*;
use pyo3::{ffi, IntoPyObjectExt};

/// A column's values (the element type sets the buffer's format).
#[derive(Debug)]
pub enum Column {
    U8(Vec<u8>),
    I32(Vec<i32>),
    I64(Vec<i64>),
}

impl Column {
    fn bytes(&self) -> &[u8] {
        fn as_bytes<T: Copy>(v: &[T]) -> &[u8] {
            // SAFETY: i32 and i64 have no padding and every bit pattern of u8 is valid; the
            // slice covers exactly the vector's initialised elements and borrows it.
            unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
        }
        match self {
            Column::U8(v) => v,
            Column::I32(v) => as_bytes(v),
            Column::I64(v) => as_bytes(v),
        }
    }

    fn format(&self) -> &'static CStr {
        match self {
            Column::U8(_) => c"B",
            Column::I32(_) => c"i",
            Column::I64(_) => c"q",
        }
    }

    fn itemsize(&self) -> usize {
        match self {
            Column::U8(_) => 1,
            Column::I32(_) => 4,
            Column::I64(_) => 8,
        }
    }
}

/// Read-only memory owned by tflux (a column of a batch), exposed through the buffer protocol:
/// `memoryview(buffer)` and `pyarrow.py_buffer(buffer)` wrap it without copying.
#[pyclass(module = "tflux", name = "ColumnBuffer", frozen)]
pub struct PyColumnBuffer {
    column: Column,
    /// Items, for the buffer's shape (kept here: the shape must outlive every view).
    items: ffi::Py_ssize_t,
}

impl PyColumnBuffer {
    pub fn new(column: Column) -> Self {
        let items = (column.bytes().len() / column.itemsize()) as ffi::Py_ssize_t;
        PyColumnBuffer { column, items }
    }

    pub fn column(&self) -> &Column {
        &self.column
    }

    pub fn bytes(&self) -> &[u8] {
        self.column.bytes()
    }

    /// The column as a Python `Buffer` object.
    pub fn py(py: Python<'_>, column: Column) -> PyResult<Py<PyColumnBuffer>> {
        Py::new(py, PyColumnBuffer::new(column))
    }

    /// `memoryview(buffer)`: typed (`B`, `i` or `q`), read-only, no copy.
    pub fn view<'py>(buffer: &Py<PyColumnBuffer>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let obj = buffer.bind(py).as_any();
        // SAFETY: `obj` is a valid object; the memoryview holds a reference to it.
        unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyMemoryView_FromObject(obj.as_ptr())) }
    }
}

impl Drop for PyColumnBuffer {
    /// Hands the column to the pool of the next bulk read (no view can be left: each holds a
    /// reference to this object).
    fn drop(&mut self) {
        use tflux_core::log::columns::pool;
        match std::mem::replace(&mut self.column, Column::U8(Vec::new())) {
            Column::U8(v) => pool::give(v),
            Column::I32(v) => pool::give(v),
            Column::I64(v) => pool::give(v),
        }
    }
}

#[pymethods]
impl PyColumnBuffer {
    /// Number of items (bytes for a byte buffer).
    fn __len__(&self) -> usize {
        self.items as usize
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.column.bytes().len()
    }

    /// The struct format of one item: `"B"`, `"i"` (int32) or `"q"` (int64), native order.
    #[getter]
    fn format(&self) -> &'static str {
        self.column.format().to_str().unwrap_or("B")
    }

    /// A copy as `bytes`.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        pyo3::types::PyBytes::new(py, self.column.bytes()).into_bound_py_any(py)
    }

    fn __repr__(&self) -> String {
        format!(
            "ColumnBuffer(format={:?}, len={}, nbytes={})",
            self.format(),
            self.items,
            self.nbytes()
        )
    }

    /// # Safety
    /// Called by Python with a valid `view` to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("View is null"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("tflux buffers are read-only"));
        }
        let me = slf.get();
        let bytes = me.column.bytes();
        // SAFETY: `view` is valid (checked non-null, provided by Python); the pointer and
        // length describe memory owned by `slf`, which the view keeps alive (FillInfo takes a
        // reference to `obj`) and which is never written or moved: the class is frozen and
        // the vector is never touched again.
        unsafe {
            let rc = ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                bytes.as_ptr() as *mut std::ffi::c_void,
                bytes.len() as ffi::Py_ssize_t,
                1,
                flags,
            );
            if rc != 0 {
                return Err(PyErr::fetch(slf.py()));
            }
            if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                // Typed items: FillInfo pointed `strides` at `itemsize` and `shape` at `len`.
                (*view).format = me.column.format().as_ptr() as *mut _;
                (*view).itemsize = me.column.itemsize() as ffi::Py_ssize_t;
                if !(*view).shape.is_null() {
                    (*view).shape = &me.items as *const ffi::Py_ssize_t as *mut _;
                }
            }
        }
        Ok(())
    }

    /// # Safety
    /// Nothing to release: the format is static and the memory belongs to the object.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyColumnBuffer>()
}
