"""Where tflux data lives: resolving PATH options into sources, listing segments, and opening
one segment (or the tail of a log) through the core without touching the other files.

Nothing here imports pyspark, so ``tflux.parquet`` and the Spark sources share it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import tflux
from tflux.errors import CorruptionError

SEGMENT_NAME = re.compile(r"^\d{19}\.log$")
SNAPSHOT_FILE = "tflux.snapshot"


@dataclass(frozen=True)
class Source:
    """One node's data: ``base`` names it (the ``source`` column); either file may be absent."""

    base: str
    log_dir: str | None
    snapshot: str | None


def split_paths(path: str | Sequence[str] | None) -> list[str]:
    """``"a,b"``, ``["a", "b"]`` or a glob -> existing paths, in a stable order."""
    if path is None or path == "":
        raise ValueError("tflux: no path given (use .load(PATH) or .option('path', PATH))")
    items = [path] if isinstance(path, str) else list(path)
    parts = [p.strip() for item in items for p in item.split(",") if p.strip()]
    out: list[str] = []
    for part in parts:
        part = os.path.expanduser(part)
        if glob.has_magic(part):
            matches = sorted(glob.glob(part))
            if not matches:
                raise FileNotFoundError(f"tflux: no path matches {part!r}")
            out.extend(matches)
        else:
            if not os.path.exists(part):
                raise FileNotFoundError(f"tflux: {part!r} does not exist")
            out.append(part)
    return out


def resolve(path: str | Sequence[str] | None) -> list[Source]:
    """Base directories, log directories (``<base>/data/log`` or a bare log dir) and snapshot
    files -> one :class:`Source` each (duplicates merged, first occurrence wins the order)."""
    sources: dict[str, Source] = {}
    for p in split_paths(path):
        p = os.path.abspath(p)
        if os.path.isfile(p):
            # A snapshot file on its own (e.g. <base>/data/tflux.snapshot).
            data = os.path.dirname(p)
            base = os.path.dirname(data) if os.path.basename(data) == "data" else data
            log_dir = os.path.join(data, "log")
            src = Source(base, log_dir if os.path.isdir(log_dir) else None, p)
        elif os.path.isdir(os.path.join(p, "data")):
            log_dir = os.path.join(p, "data", "log")
            snap = os.path.join(p, "data", SNAPSHOT_FILE)
            src = Source(
                p,
                log_dir if os.path.isdir(log_dir) else None,
                snap if os.path.isfile(snap) else None,
            )
        else:
            parent = os.path.dirname(p)
            in_base = os.path.basename(p) == "log" and os.path.basename(parent) == "data"
            base = os.path.dirname(parent) if in_base else p
            snap = os.path.join(parent, SNAPSHOT_FILE) if in_base else None
            src = Source(base, p, snap if snap and os.path.isfile(snap) else None)
        sources.setdefault(src.base, src)
    return list(sources.values())


def segment_names(log_dir: str) -> list[str]:
    """Segment files of ``log_dir`` in LSN order (names that break the rule are ignored)."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if SEGMENT_NAME.match(n))


def start_lsn(name: str) -> int:
    return int(name[:19])


def _remap(err: CorruptionError, view: str, real: str) -> CorruptionError:
    """The same error with the view's symlink directory replaced by the real log directory."""
    path = err.path.replace(view, real) if err.path else err.path
    return CorruptionError(str(err).replace(view, real), path, err.offset)


@contextlib.contextmanager
def open_view(log_dir: str, names: Sequence[str]) -> Iterator[tflux.Log]:
    """A read-only :class:`tflux.Log` over ``names`` only (symlinked into a private directory).

    Opening a log checks the CRC of every record of every segment, so a task that opened the
    whole log to read one segment would scan all of them: with one partition per segment
    that is quadratic. The view holds just the segments the task needs. Its last segment is
    treated like an active one (a torn tail is ignored), so callers that know a segment is
    sealed must check :attr:`Log.recovery` -- :func:`read_segment` does.
    """
    view = tempfile.mkdtemp(prefix="tflux-view-")
    try:
        for name in names:
            os.symlink(os.path.join(log_dir, name), os.path.join(view, name))
        try:
            log = tflux.Log.open(view, readonly=True)
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
