"""The paths of a base directory (spec section 1) as :class:`pathlib.Path`, for the CLI, Spark
and the benchmarks.

The core's ``base::Layout`` (``tflux.Layout``) is the one rule; this wraps it and adds the reverse
look-ups a path argument needs (which base a ``data`` or log directory belongs to), answered by
comparing with the core's paths rather than by a second copy of the names.
"""

from __future__ import annotations

import os
from pathlib import Path

from tflux._tflux import Layout as _CoreLayout
from tflux._tflux import segment_files, segment_first_lsn

SETTINGS_FILE = Path(_CoreLayout(".", detect=False).settings).name


def is_segment_name(name: str) -> bool:
    """Whether ``name`` is a segment file's name (``NNN.log`` or ``NNN.log.z``, spec sections 3
    and 9): the core's rule (``tflux.segment_first_lsn``)."""
    return segment_first_lsn(name) is not None


def segment_names(log_dir: str | Path) -> list[str]:
    """The segment files of ``log_dir`` in LSN order, by name, as the core lists them (one per
    segment, the ``.log.z`` when both exist; ``tflux.segment_files``); none for a missing
    directory."""
    return [os.path.basename(p) for p in segment_files(log_dir)]


class Layout:
    """The files of the base directory ``base`` in ``dialect`` (``None``: the one its files
    say, ``"spec"`` when they say nothing; files that disagree raise ``DialectError``).
    ``detect=False`` reads no file (for path look-ups, where the dialect does not matter)."""

    __slots__ = ("_core",)

    def __init__(self, base: str | Path, dialect: str | None = None, *, detect: bool = True):
        self._core = _CoreLayout(base, dialect, detect=detect)

    def __repr__(self) -> str:
        return f"Layout({self._core.base!r}, {self._core.dialect!r})"

    @property
    def dialect(self) -> str:
        """``tflux.Layout.dialect``: ``"spec"`` or ``"taskflux"``."""
        return self._core.dialect

    @property
    def base(self) -> Path:
        """``tflux.Layout.base`` as a path."""
        return Path(self._core.base)

    @property
    def data(self) -> Path:
        """``tflux.Layout.data`` as a path."""
        return Path(self._core.data)

    @property
    def log(self) -> Path:
        """``tflux.Layout.log`` as a path."""
        return Path(self._core.log)

    @property
    def temp(self) -> Path:
        """``tflux.Layout.temp`` as a path."""
        return Path(self._core.temp)

    @property
    def snapshot(self) -> Path:
        """``tflux.Layout.snapshot`` as a path."""
        return Path(self._core.snapshot)

    @property
    def metadata(self) -> Path:
        """``tflux.Layout.metadata`` as a path."""
        return Path(self._core.metadata)

    @property
    def settings(self) -> Path:
        """``tflux.Layout.settings`` as a path."""
        return Path(self._core.settings)

    @classmethod
    def of_data(cls, data: str | Path) -> Layout | None:
        """The layout whose ``data`` directory is ``data``; None if there is none."""
        data = Path(data)
        layout = cls(data.parent, detect=False)  # only paths are compared
        return layout if layout.data == data else None

    @classmethod
    def of_log(cls, log: str | Path) -> Layout | None:
        """The layout whose log directory is ``log``; None for a log directory outside a base."""
        log = Path(log)
        layout = cls(log.parent.parent, detect=False)  # only paths are compared
        return layout if layout.log == log else None
