"""A read-only :class:`tflux.Log` over some segment files of a log directory only: what the
Spark sources read one partition with, and what ``tflux dump`` reads a damaged log with, one
segment at a time."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence

import tflux
from tflux.errors import CorruptionError


def _current_name(log_dir: str, name: str) -> str:
    """``name``, or its ``.log.z`` when the segment was compressed since it was listed."""
    if name.endswith(".log") and os.path.exists(os.path.join(log_dir, name + ".z")):
        return name + ".z"
    return name


def _remap(err: CorruptionError, view: str, real: str) -> CorruptionError:
    """The same error with the view's symlink directory replaced by the real log directory."""
    path = err.path.replace(view, real) if err.path else err.path
    return CorruptionError(str(err).replace(view, real), path, err.offset)


@contextlib.contextmanager
def open_view(
    log_dir: str, names: Sequence[str], dialect: str | None = None
) -> Iterator[tflux.Log]:
    """A read-only :class:`tflux.Log` over ``names`` only (symlinked into a private directory).

    Opening a log checks the CRC of every record of every segment, so a task that opened the
    whole log to read one segment would scan all of them: with one partition per segment
    that is quadratic. The view holds just the segments the task needs. Its last segment is
    treated like an active one (a torn tail is ignored), so callers that know a segment is
    sealed must check :attr:`Log.recovery` -- :func:`read_segment` does.
    """
    view = tempfile.mkdtemp(prefix="tflux-view-")
    try:
        names = [_current_name(log_dir, n) for n in names]
        for name in names:
            os.symlink(os.path.join(log_dir, name), os.path.join(view, name))
        try:
            log = tflux.Log.open(view, readonly=True, dialect=dialect)
        except CorruptionError as err:
            raise _remap(err, view, log_dir) from err
        seen = {os.path.basename(seg.path) for seg in log.segments}
        missing = [n for n in names if n not in seen]
        if missing:
            log.close()
            path = os.path.join(log_dir, missing[0])
            os.stat(path)  # a vanished or unreadable file raises its own OSError here
            raise tflux.TfluxIOError(f"{path}: the core did not list this segment file", path)
        try:
            yield log
        except CorruptionError as err:
            raise _remap(err, view, log_dir) from err
        finally:
            log.close()
    finally:
        shutil.rmtree(view, ignore_errors=True)
