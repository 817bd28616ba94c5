//! `tflux.verify`, `tflux.verify_base`, `tflux.plan_repair`, `tflux.Layout` and their report
//! types: wrappers of the core's recovery scanner and base-directory checks.

use std::path::PathBuf;

use pyo3::prelude::*;
use tflux_core::base as core_base;
use tflux_core::log::recovery as core_recovery;
use tflux_core::log::verify as core;

use crate::errors::{py_result, Fail};
use crate::log::PySegmentInfo;
use crate::metadata::PyMetadata;
use crate::store::PyQueueInfo;

#[pyclass(module = "tflux", name = "Problem", frozen, get_all)]
pub struct PyProblem {
    path: String,
    offset: Option<u64>,
    kind: &'static str,
    message: String,
    reason: String,
    fatal: bool,
    lsn: Option<i64>,
    in_log: bool,
}

impl From<&core_recovery::Finding> for PyProblem {
    fn from(p: &core_recovery::Finding) -> Self {
        PyProblem {
            path: p.path.display().to_string(),
            offset: p.offset,
            kind: p.kind.as_str(),
            message: p.message.clone(),
            reason: p.reason.clone(),
            fatal: p.fatal,
            lsn: p.lsn,
            in_log: p.in_log(),
        }
    }
}

#[pymethods]
impl PyProblem {
    fn __repr__(&self) -> String {
        format!(
            "Problem(kind={:?}, path={:?}, offset={}, fatal={})",
            self.kind,
            self.path,
            crate::tools::py_opt(self.offset),
            crate::tools::py_bool(self.fatal)
        )
    }
}

#[pyclass(module = "tflux", name = "VerifyReport", frozen)]
pub struct PyVerifyReport {
    inner: core::VerifyReport,
}

#[pymethods]
impl PyVerifyReport {
    #[getter]
    fn path(&self) -> String {
        self.inner.dir.display().to_string()
    }
    /// The dialect its records were read in (`"spec"` or `"taskflux"`).
    #[getter]
    fn dialect(&self) -> &'static str {
        self.inner.dialect.name()
    }
    #[getter]
    fn segments(&self) -> Vec<PySegmentInfo> {
        segment_infos(&self.inner.segments)
    }
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records
    }
    #[getter]
    fn bytes(&self) -> u64 {
        self.inner.bytes
    }
    #[getter]
    fn problems(&self) -> Vec<PyProblem> {
        self.inner.problems.iter().map(PyProblem::from).collect()
    }
    #[getter]
    fn ok(&self) -> bool {
        self.inner.ok()
    }
    fn __repr__(&self) -> String {
        format!(
            "VerifyReport(path={:?}, segments={}, records={}, problems={}, ok={})",
            self.inner.dir.display().to_string(),
            self.inner.segments.len(),
            self.inner.records,
            self.inner.problems.len(),
            crate::tools::py_bool(self.inner.ok())
        )
    }
}

fn segment_infos(segments: &[tflux_core::SegmentInfo]) -> Vec<PySegmentInfo> {
    segments.iter().cloned().map(PySegmentInfo::from).collect()
}

/// Checks every record of every segment under `path` (base or log directory) without writing,
/// in `dialect` (`None`: the one its first segment says).
#[pyfunction]
#[pyo3(signature = (path, *, dialect=None))]
fn verify(py: Python<'_>, path: PathBuf, dialect: Option<&str>) -> PyResult<PyVerifyReport> {
    let dialect = crate::tools::dialect_arg(dialect)?;
    let report = py.detach(|| core_base::verify_in(&path, dialect).map_err(Fail::from));
    py_result(py, report).map(|inner| PyVerifyReport { inner })
}

/// The paths of a base directory (spec section 1): the one layout the library, the CLI, the
/// Spark reader and the benches use.
#[pyclass(module = "tflux", name = "Layout", frozen)]
pub struct PyLayout {
    inner: core_base::Layout,
}

fn path_str(p: &std::path::Path) -> String {
    p.display().to_string()
}

#[pymethods]
impl PyLayout {
    /// The layout of `base` in `dialect` (`None`: the dialect its files say, `spec` for a new
    /// directory; files that disagree with each other or with `dialect` raise `DialectError`).
    /// `detect=False` reads no file: the paths of `dialect` (`spec` when `None`).
    #[new]
    #[pyo3(signature = (base, dialect=None, *, detect=true))]
    fn new(py: Python<'_>, base: PathBuf, dialect: Option<&str>, detect: bool) -> PyResult<Self> {
        let chosen = crate::tools::dialect_arg(dialect)?;
        if !detect {
            let inner = core_base::Layout::in_dialect(&base, chosen.unwrap_or_default());
            return Ok(PyLayout { inner });
        }
        let inner = py.detach(|| core_base::Layout::detect(&base, chosen).map_err(Fail::from));
        py_result(py, inner).map(|inner| PyLayout { inner })
    }
    /// `"spec"` or `"taskflux"` (spec section 11).
    #[getter]
    fn dialect(&self) -> &'static str {
        self.inner.dialect.name()
    }
    #[getter]
    fn base(&self) -> String {
        path_str(&self.inner.base)
    }
    #[getter]
    fn data(&self) -> String {
        path_str(&self.inner.data)
    }
    #[getter]
    fn log(&self) -> String {
        path_str(&self.inner.log)
    }
    #[getter]
    fn temp(&self) -> String {
        path_str(&self.inner.temp)
    }
    #[getter]
    fn snapshot(&self) -> String {
        path_str(&self.inner.snapshot)
    }
    #[getter]
    fn metadata(&self) -> String {
        path_str(&self.inner.metadata)
    }
    #[getter]
    fn settings(&self) -> String {
        path_str(&self.inner.settings)
    }
    fn __repr__(&self) -> String {
        format!("Layout({:?})", path_str(&self.inner.base))
    }
}

/// What `verify_base` found.
#[pyclass(module = "tflux", name = "BaseReport", frozen)]
pub struct PyBaseReport {
    inner: core_base::BaseReport,
}

#[pymethods]
impl PyBaseReport {
    #[getter]
    fn path(&self) -> String {
        path_str(&self.inner.layout.base)
    }
    #[getter]
    fn layout(&self) -> PyLayout {
        PyLayout {
            inner: self.inner.layout.clone(),
        }
    }
    /// The dialect the directory was checked in (`"spec"` or `"taskflux"`).
    #[getter]
    fn dialect(&self) -> &'static str {
        self.inner.layout.dialect.name()
    }
    #[getter]
    fn ok(&self) -> bool {
        self.inner.ok()
    }
    #[getter]
    fn problems(&self) -> Vec<PyProblem> {
        self.inner.problems.iter().map(PyProblem::from).collect()
    }
    #[getter]
    fn segments(&self) -> Vec<PySegmentInfo> {
        segment_infos(&self.inner.segments)
    }
    #[getter]
    fn records(&self) -> u64 {
        self.inner.records
    }
    #[getter]
    fn bytes(&self) -> u64 {
        self.inner.bytes
    }
    /// `(first, last)` LSN of the log as a read-only open holds it; None when it is damaged.
    #[getter]
    fn log_bounds(&self) -> Option<(i64, i64)> {
        self.inner.log_bounds
    }
    /// How the log meets the snapshot, by the restore's rule: "from_zero" (no snapshot, the
    /// log starts at 0), "continues", "snapshot_ahead" (the log restarts after it), "gap"
    /// (refused) or "unknown" (the snapshot or the log could not be read).
    #[getter]
    fn continuity(&self) -> &'static str {
        self.inner.continuity.name()
    }
    #[getter]
    fn metadata(&self) -> Option<PyMetadata> {
        self.inner.metadata.map(PyMetadata::from)
    }
    #[getter]
    fn metadata_present(&self) -> bool {
        self.inner.metadata_present
    }
    /// `(last_index, last_term, queues, records)` of the snapshot; None without one.
    #[getter]
    fn snapshot(&self) -> Option<(i64, i64, u64, u64)> {
        self.inner
            .snapshot
            .as_ref()
            .map(|s| (s.last_index, s.last_term, s.queues, s.records))
    }
    /// The snapshot's queues, by name, without their records: dicts with name, implementation,
    /// records (a count), last_id, max_queue_size and max_message_size (None = no limit) and
    /// key_range; None without a snapshot.
    #[getter]
    fn snapshot_queues<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, pyo3::types::PyList>>> {
        let Some(s) = self.inner.snapshot.as_ref() else {
            return Ok(None);
        };
        let out = pyo3::types::PyList::empty(py);
        for q in &s.queue_list {
            let d = crate::columns::queue_dict(
                py,
                &q.name,
                q.implementation,
                q.last_id,
                (q.max_queue_size, q.max_message_size),
                q.key_range,
            )?;
            d.set_item("records", q.records)?;
            out.append(d)?;
        }
        Ok(Some(out))
    }
    #[getter]
    fn queues(&self) -> Option<Vec<PyQueueInfo>> {
        self.inner
            .queues
            .as_ref()
            .map(|qs| qs.iter().cloned().map(PyQueueInfo::from).collect())
    }
    #[getter]
    fn replayed(&self) -> Option<u64> {
        self.inner.replayed
    }
    #[getter]
    fn log_seconds(&self) -> f64 {
        self.inner.log_seconds
    }
    #[getter]
    fn replay_seconds(&self) -> f64 {
        self.inner.replay_seconds
    }
    fn __repr__(&self) -> String {
        format!(
            "BaseReport(path={:?}, segments={}, records={}, problems={}, ok={})",
            path_str(&self.inner.layout.base),
            self.inner.segments.len(),
            self.inner.records,
            self.inner.problems.len(),
            crate::tools::py_bool(self.inner.ok())
        )
    }
}

/// Checks a base directory exactly as a restore does (settings, metadata, snapshot, every
/// segment, how they agree and, with `replay`, the rebuilt state), reading only. `progress`,
/// when given, is called on the calling thread about ten times a second with the bytes of
/// segment files the log's scan has read so far (the core runs on a thread of its own
/// meanwhile); an exception it raises is raised once the check is done.
#[pyfunction]
#[pyo3(signature = (base, *, replay=true, dialect=None, progress=None))]
fn verify_base(
    py: Python<'_>,
    base: PathBuf,
    replay: bool,
    dialect: Option<&str>,
    progress: Option<Bound<'_, PyAny>>,
) -> PyResult<PyBaseReport> {
    let dialect = crate::tools::dialect_arg(dialect)?;
    let depth = if replay {
        core_base::VerifyDepth::Replay
    } else {
        core_base::VerifyDepth::Files
    };
    let Some(callback) = progress else {
        let options = core_base::VerifyOptions {
            depth,
            dialect,
            progress: None,
        };
        let report = py.detach(|| core_base::verify_base(&base, options).map_err(Fail::from));
        return py_result(py, report).map(|inner| PyBaseReport { inner });
    };
    let done = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let options = core_base::VerifyOptions {
        depth,
        dialect,
        progress: Some(done.clone()),
    };
    let (send, mut receive) = std::sync::mpsc::channel();
    let mut raised: Option<PyErr> = None;
    let report = std::thread::scope(|scope| {
        let base = &base;
        scope.spawn(move || {
            let _ = send.send(core_base::verify_base(base, options).map_err(Fail::from));
        });
        loop {
            let tick = std::time::Duration::from_millis(100);
            // Moved in and back out: a receiver is Send, not Sync.
            let (got, back) = py.detach(move || (receive.recv_timeout(tick), receive));
            receive = back;
            if raised.is_none() {
                let bytes = done.load(std::sync::atomic::Ordering::Relaxed);
                if let Err(e) = callback.call1((bytes,)) {
                    raised = Some(e);
                }
            }
            match got {
                Ok(report) => break report,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(Fail::from(tflux_core::Error::InvalidArgument(
                        "the verify thread stopped without a report".into(),
                    )))
                }
            }
        }
    });
    if let Some(e) = raised {
        return Err(e);
    }
    py_result(py, report).map(|inner| PyBaseReport { inner })
}

/// The dialect of `path` (a base directory, a log directory or one file), agreeing with
/// `dialect`: `"spec"` or `"taskflux"` (spec section 11). Files that disagree raise
/// `DialectError`; what says nothing is `dialect`, else `"spec"`.
#[pyfunction]
#[pyo3(signature = (path, *, dialect=None))]
fn dialect_of(py: Python<'_>, path: PathBuf, dialect: Option<&str>) -> PyResult<&'static str> {
    let chosen = crate::tools::dialect_arg(dialect)?;
    let found = py.detach(|| core_base::dialect_of(&path, chosen).map_err(Fail::from));
    py_result(py, found).map(|d| d.name())
}

/// What the base directory `base` is: "store" (it holds a metadata file or a snapshot),
/// "channel" (it holds data/cursors) or None (neither yet). Both at once is `CorruptionError`.
#[pyfunction]
fn base_kind(py: Python<'_>, base: PathBuf) -> PyResult<Option<&'static str>> {
    py_result(py, core_base::kind(&base).map_err(Fail::from)).map(|k| k.name())
}

/// The segment files of the log directory `log_dir` in LSN order, one per segment (the
/// `.log.z` when both files of a segment exist), as the core lists them: names that are not
/// segment names are left out. A missing directory has none.
#[pyfunction]
fn segment_files(py: Python<'_>, log_dir: PathBuf) -> PyResult<Vec<String>> {
    if !log_dir.is_dir() {
        return Ok(Vec::new());
    }
    let listed = py.detach(|| {
        tflux_core::io::fsutil::list_segments(&tflux_core::io::storage::RealStorage, &log_dir)
    });
    let (segments, _) = py_result(py, listed.map_err(Fail::from))?;
    Ok(segments.iter().map(|s| path_str(&s.path)).collect())
}

/// Byte offset of record `index` (0-based) of the plain segment file at `path`, in the dialect
/// its first record says; None for a `.log.z` (offsets there are the original's) or a file
/// holding fewer whole records.
#[pyfunction]
fn record_offset(py: Python<'_>, path: PathBuf, index: usize) -> PyResult<Option<u64>> {
    let found = py.detach(|| -> tflux_core::Result<Option<u64>> {
        if tflux_core::format::compressed::is_compressed_path(&path) {
            return Ok(None);
        }
        let says = tflux_core::log::dialect::plain_segment_says(&path)?;
        let dialect = tflux_core::log::dialect::file_dialect(says, None)?;
        tflux_core::segment::record_offset_in_file(&path, dialect, index)
    });
    py_result(py, found.map_err(Fail::from))
}

/// The first LSN a segment file's name says (`NNN.log` or `NNN.log.z`), or None when `name` is
/// not a segment name.
#[pyfunction]
fn segment_first_lsn(name: &str) -> Option<i64> {
    tflux_core::format::compressed::parse_any_file_name(name)
}

/// What `Log.open(path, repair=True)` would do.
#[pyclass(module = "tflux", name = "RepairPlan", frozen)]
pub struct PyRepairPlan {
    inner: core_recovery::RepairPlan,
}

#[pymethods]
impl PyRepairPlan {
    /// The finding that decides the plan.
    #[getter]
    fn reason(&self) -> PyProblem {
        PyProblem::from(&self.inner.reason)
    }
    #[getter]
    fn cut_path(&self) -> Option<String> {
        self.inner.cut.as_ref().map(|c| path_str(&c.path))
    }
    #[getter]
    fn cut_offset(&self) -> Option<u64> {
        self.inner.cut.as_ref().map(|c| c.offset)
    }
    #[getter]
    fn records_kept(&self) -> Option<u64> {
        self.inner.cut.as_ref().map(|c| c.records_kept)
    }
    #[getter]
    fn first_lost_lsn(&self) -> Option<i64> {
        self.inner.cut.as_ref().map(|c| c.first_lost_lsn)
    }
    /// Segment files moved whole into the temp directory.
    #[getter]
    fn moved(&self) -> Vec<String> {
        self.inner.moved.iter().map(|p| path_str(p)).collect()
    }
    fn __repr__(&self) -> String {
        format!(
            "RepairPlan(reason={:?}, cut_path={}, cut_offset={}, moved={})",
            self.inner.reason.kind.as_str(),
            self.cut_path()
                .map_or("None".to_string(), |p| format!("{p:?}")),
            crate::tools::py_opt(self.cut_offset()),
            self.inner.moved.len()
        )
    }
}

/// The plan `Log.open(log_dir, repair=True, empty_entries=...)` would execute, computed
/// without writing anything; None when there is nothing to repair.
#[pyfunction]
#[pyo3(signature = (log_dir, *, empty_entries=true, dialect=None))]
fn plan_repair(
    py: Python<'_>,
    log_dir: PathBuf,
    empty_entries: bool,
    dialect: Option<&str>,
) -> PyResult<Option<PyRepairPlan>> {
    let dialect = crate::tools::dialect_arg(dialect)?;
    let plan = py.detach(|| {
        core_recovery::plan_repair(&log_dir, empty_entries, dialect).map_err(Fail::from)
    });
    py_result(py, plan).map(|p| p.map(|inner| PyRepairPlan { inner }))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyProblem>()?;
    m.add_class::<PyVerifyReport>()?;
    m.add_class::<PyLayout>()?;
    m.add_class::<PyBaseReport>()?;
    m.add_class::<PyRepairPlan>()?;
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(verify_base, m)?)?;
    m.add_function(wrap_pyfunction!(base_kind, m)?)?;
    m.add_function(wrap_pyfunction!(segment_files, m)?)?;
    m.add_function(wrap_pyfunction!(segment_first_lsn, m)?)?;
    m.add_function(wrap_pyfunction!(record_offset, m)?)?;
    m.add_function(wrap_pyfunction!(dialect_of, m)?)?;
    m.add_class::<PyConvertReport>()?;
    m.add_function(wrap_pyfunction!(convert, m)?)?;
    m.add_function(wrap_pyfunction!(create_named_dir, m)?)?;
    m.add_function(wrap_pyfunction!(plan_repair, m)?)?;
    Ok(())
}

/// What `tflux.convert` did.
#[pyclass(module = "tflux", name = "ConvertReport", frozen)]
pub struct PyConvertReport {
    inner: tflux_core::base::convert::ConvertReport,
}

#[pymethods]
impl PyConvertReport {
    #[getter]
    fn source(&self) -> String {
        path_str(&self.inner.source)
    }
    #[getter]
    fn destination(&self) -> String {
        path_str(&self.inner.destination)
    }
    /// The source's dialect.
    #[getter(from_dialect)]
    fn source_dialect(&self) -> &'static str {
        self.inner.from.name()
    }
    /// The destination's dialect.
    #[getter]
    fn to_dialect(&self) -> &'static str {
        self.inner.to.name()
    }
    #[getter]
    fn entries(&self) -> u64 {
        self.inner.entries
    }
    #[getter]
    fn segments(&self) -> usize {
        self.inner.segments
    }
    #[getter]
    fn bytes_read(&self) -> u64 {
        self.inner.bytes_read
    }
    #[getter]
    fn bytes_written(&self) -> u64 {
        self.inner.bytes_written
    }
    #[getter]
    fn snapshot(&self) -> bool {
        self.inner.snapshot
    }
    #[getter]
    fn metadata(&self) -> bool {
        self.inner.metadata
    }
    /// `(path, offset)` of the source's torn tail, which was not converted; None without one.
    #[getter]
    fn torn_tail(&self) -> Option<(String, u64)> {
        self.inner
            .torn_tail
            .as_ref()
            .map(|(p, o)| (path_str(p), *o))
    }
    /// Half-built copies of the destination that dead conversions left (removed first).
    #[getter]
    fn leftovers_removed(&self) -> Vec<String> {
        self.inner
            .leftovers_removed
            .iter()
            .map(|p| path_str(p))
            .collect()
    }
    /// A hash of every entry's LSN, term, length and data checksum (in the destination's
    /// dialect), computed from the source and found again in the copy.
    #[getter]
    fn fingerprint(&self) -> u64 {
        self.inner.fingerprint
    }
    #[getter]
    fn seconds(&self) -> f64 {
        self.inner.seconds
    }
    fn __repr__(&self) -> String {
        format!(
            "ConvertReport(source={:?}, destination={:?}, {} -> {}, entries={}, segments={})",
            self.source(),
            self.destination(),
            self.source_dialect(),
            self.to_dialect(),
            self.inner.entries,
            self.inner.segments
        )
    }
}

/// Converts the base directory `src` into a new base directory `dst` in the dialect `to`
/// (`"spec"` or `"taskflux"`): log, snapshot, metadata and settings. The source is only read
/// (`dialect`: its dialect, `None` detects it); `dst` must not exist or be an empty directory,
/// apart from `src` (neither inside the other), its parent must exist unless `create`, and a
/// failure leaves none. `progress(done, total)` is called with bytes of the log converted after each segment.
#[pyfunction]
#[pyo3(signature = (src, dst, *, to, dialect=None, create=false, progress=None))]
fn convert(
    py: Python<'_>,
    src: PathBuf,
    dst: PathBuf,
    to: &str,
    dialect: Option<&str>,
    create: bool,
    progress: Option<Py<PyAny>>,
) -> PyResult<PyConvertReport> {
    let to = crate::tools::dialect_arg(Some(to))?.unwrap_or_default();
    let from = crate::tools::dialect_arg(dialect)?;
    let mut failed: Option<PyErr> = None;
    let report = py.detach(|| {
        let mut tell = |done: u64, total: u64| {
            let Some(cb) = &progress else {
                return true;
            };
            // An exception in the callback (KeyboardInterrupt included) stops the conversion.
            Python::attach(|py| match cb.call1(py, (done, total)) {
                Ok(_) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            })
        };
        tflux_core::base::convert::convert_base(&src, &dst, to, from, create, &mut tell)
            .map_err(Fail::from)
    });
    if let Some(e) = failed {
        return Err(e);
    }
    py_result(py, report).map(|inner| PyConvertReport { inner })
}

/// Makes the directory `path` a user named for tflux to write in, as a base is made
/// (`io::fsutil::create_named_dir`): `path` itself when its parent exists, else `TfluxIOError`
/// naming the parent and nothing made, unless `create` makes the missing parents too.
#[pyfunction]
#[pyo3(signature = (path, *, create=false))]
fn create_named_dir(py: Python<'_>, path: PathBuf, create: bool) -> PyResult<()> {
    let made = py.detach(|| {
        let storage = tflux_core::io::storage::real();
        tflux_core::io::fsutil::create_named_dir(&*storage, &path, create).map_err(Fail::from)
    });
    py_result(py, made)
}
