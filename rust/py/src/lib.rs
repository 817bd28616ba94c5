//! `tflux._tflux`: the thin Python face of `tflux-core`. Each file wraps one concept; all logic
//! stays in the core. The public API is curated by `python/tflux/__init__.py`.

use pyo3::prelude::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod buffer;
mod channel;
mod columns;
mod delta;
mod errors;
mod locate;
mod log;
mod logging;
mod metadata;
mod snapshot;
mod state;
mod store;
mod tools;
mod verify;

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
    logging::register(m)?;
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
    locate::register(m)?;
    store::register(m)?;
    state::register(m)?;
    channel::register(m)?;
    Ok(())
}
