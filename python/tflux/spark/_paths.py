"""Where tflux data lives: resolving PATH options into sources, listing segments, and opening
one segment (or the tail of a log) through the core without touching the other files.

Nothing here imports pyspark, so ``tflux.parquet`` and the Spark sources share it.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import tflux
from tflux._layout import segment_names as _segment_names


@dataclass(frozen=True)
class Source:
    """One node's data: ``base`` names it (the ``source`` column); either file may be absent."""

    base: str
    log_dir: str | None
    snapshot: str | None
    # "spec" or "taskflux" (spec section 11): what the node's files say (``tflux.dialect_of``).
    dialect: str = "spec"


def is_channel(base: str) -> bool:
    """Whether ``base`` is a channel directory (its records are opaque messages, not deltas):
    the core's rule (``tflux.base_kind``)."""
    return tflux.base_kind(base) == "channel"


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


def resolve(path: str | Sequence[str] | None, dialect: str | None = None) -> list[Source]:
    """Base directories, log directories (``<base>/data/log`` or a bare log dir) and snapshot
    files -> one :class:`Source` each (duplicates merged, first occurrence wins the order),
    each in the dialect its files say, agreeing with ``dialect`` (``None``: detected; files
    that disagree raise :class:`tflux.DialectError`). What each path is, is the core's answer
    (``tflux.locate``)."""
    sources: dict[str, Source] = {}
    for p in split_paths(path):
        found = tflux.locate(p, dialect=dialect)
        if found.kind == "segment":
            raise ValueError(
                f"tflux: {p!r} is one segment file; give its log directory or base directory"
            )
        if found.kind == "snapshot" and found.base is None:
            base = os.path.dirname(found.path)  # a snapshot file on its own names its folder
        else:
            base = found.base if found.base is not None else found.path
        if base not in sources:
            sources[base] = Source(base, found.log, found.snapshot, found.dialect)
    return list(sources.values())


@contextlib.contextmanager
def open_view(
    log_dir: str, names: Sequence[str], dialect: str | None = None
) -> Iterator[tflux.Log]:
    """A read-only :class:`tflux.Log` over the segment files ``names`` of ``log_dir`` only
    (``tflux.open_segments``; one compressed since it was listed is read from its ``.log.z``).

    Opening a log checks the CRC of every record of every segment, so a task that opened the
    whole log to read one segment would scan all of them: with one partition per segment
    that is quadratic. Its last segment is treated like an active one (a torn tail is
    ignored), so callers that know a segment is sealed must check :attr:`Log.recovery`.
    """
    with tflux.open_segments(log_dir, [start_lsn(n) for n in names], dialect=dialect) as log:
        yield log


def segment_names(log_dir: str) -> list[str]:
    """Segment files of ``log_dir`` in LSN order, one per segment (the ``.log.z`` when both
    exist), as the core lists them."""
    return _segment_names(log_dir)


def start_lsn(name: str) -> int:
    return int(name[:19])
