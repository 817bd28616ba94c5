//! `tflux._tflux`: the thin Python face of `tflux-core`. Each file wraps one concept; all logic
//! stays in the core. The public API is curated by `python/tflux/__init__.py`.

use pyo3::prelude::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Returns to the system the pages a restore's temporary buffers (scan chunks, the pending record
/// columns before the heaps are built) freed: mimalloc keeps freed pages for reuse, which a
/// long-lived store would otherwise hold as resident anonymous memory for good.
pub(crate) fn release_freed_memory() {
    // SAFETY: `mi_collect` takes no pointers; it only walks mimalloc's own free lists.
    unsafe { libmimalloc_sys::mi_collect(true) }
}

mod buffer;
mod channel;
mod columns;
mod delta;
mod errors;
mod log;
mod metadata;
mod snapshot;
mod state;
mod store;
mod tools;
mod verify;

/// The `dialect=` argument of every open and reader: `None` (detect), `"spec"` or `"taskflux"`.
pub(crate) fn dialect_arg(
    name: Option<&str>,
) -> PyResult<Option<tflux_core::format::dialect::Dialect>> {
    name.map(|n| {
        tflux_core::format::dialect::Dialect::parse(n).map_err(|e| match e {
            tflux_core::Error::InvalidArgument(m) => errors::argument_error(m),
            other => errors::argument_error(other.to_string()),
        })
    })
    .transpose()
}

#[pyfunction]
/// CRC-32/MPEG-2, the checksum of the taskflux dialect (spec section 11).
fn crc32_mpeg2(py: Python<'_>, data: pyo3::pybacked::PyBackedBytes) -> u32 {
    py.detach(|| tflux_core::codec::crc32_mpeg2(&data))
}

#[pyfunction]
/// CRC-32 (ISO-HDLC), the checksum of every tflux file.
fn crc32(py: Python<'_>, data: pyo3::pybacked::PyBackedBytes) -> u32 {
    py.detach(|| tflux_core::codec::crc32(&data))
}

#[pymodule]
fn _tflux(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("PROTOCOL_VERSION", tflux_core::share::wire::VERSION)?;
    m.add_function(wrap_pyfunction!(crc32, m)?)?;
    m.add_function(wrap_pyfunction!(crc32_mpeg2, m)?)?;
    buffer::register(m)?;
    log::register(m)?;
    columns::register(m)?;
    delta::register(m)?;
    snapshot::register(m)?;
    metadata::register(m)?;
    verify::register(m)?;
    store::register(m)?;
    state::register(m)?;
    channel::register(m)?;
    Ok(())
}

/// Drops `value` with the GIL released (a shared store's or channel's owner stops serving when
/// its last handle goes, waiting for its clients: other Python threads must not wait with it).
pub fn drop_detached<T: Send>(value: T) {
    Python::attach(|py| py.detach(move || drop(value)));
}
