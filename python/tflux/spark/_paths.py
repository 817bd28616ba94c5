"""Where tflux data lives: resolving PATH options into sources, listing segments, and opening
one segment (or the tail of a log) through the core without touching the other files.

Nothing here imports pyspark, so ``tflux.parquet`` and the Spark sources share it.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from dataclasses import dataclass

import tflux
from tflux._layout import Layout
from tflux._layout import segment_names as _segment_names
from tflux._view import open_view  # noqa: F401  (the sources' name for it)


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
    that disagree raise :class:`tflux.DialectError`)."""
    sources: dict[str, Source] = {}
    for p in split_paths(path):
        p = os.path.abspath(p)
        if os.path.isfile(p):
            # A snapshot file on its own: <base>/data/tflux.snapshot reads <base>'s log too.
            layout = Layout.of_data(os.path.dirname(p))
            if layout is None:
                src = Source(os.path.dirname(p), None, p)
            else:
                log_dir = str(layout.log) if layout.log.is_dir() else None
                src = Source(str(layout.base), log_dir, p)
        elif Layout(p, detect=False).data.is_dir():
            layout = Layout(p, dialect)
            src = Source(
                p,
                str(layout.log) if layout.log.is_dir() else None,
                str(layout.snapshot) if layout.snapshot.is_file() else None,
            )
        else:
            layout = Layout.of_log(p)
            base = str(layout.base) if layout is not None else p
            snap = layout.snapshot if layout is not None else None
            src = Source(base, p, str(snap) if snap is not None and snap.is_file() else None)
        if src.base not in sources:
            # The base decides when there is one; a log alone by its first segment; a lone
            # snapshot file by its header.
            has_base = src.log_dir is None or Layout.of_log(src.log_dir) is not None
            where = src.base if has_base and os.path.isdir(src.base) else (src.log_dir or p)
            found = tflux.dialect_of(where, dialect=dialect)
            sources[src.base] = Source(src.base, src.log_dir, src.snapshot, found)
    return list(sources.values())


def segment_names(log_dir: str) -> list[str]:
    """Segment files of ``log_dir`` in LSN order, one per segment (the ``.log.z`` when both
    exist), as the core lists them."""
    return _segment_names(log_dir)


def start_lsn(name: str) -> int:
    return int(name[:19])
