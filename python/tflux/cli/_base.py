"""Where things are: the base and log directories a verb is given, and opening them read-only."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import tflux
from tflux._layout import SEGMENT_NAME, Layout
from tflux.cli._render import CliError
from tflux.errors import TfluxError


def _log_dir(path: Path) -> Path:
    """The log directory of ``path``: a base directory (holding ``data/log``) or a log directory."""
    if not path.exists():
        raise CliError(f"{path}: no such directory")
    if not path.is_dir():
        raise CliError(f"{path}: not a directory (give a base directory or its data/log directory)")
    candidate = Layout(path).log
    if candidate.is_dir():  # a base directory: an empty log is the store's to judge
        return candidate
    log_dir = path
    if not any(SEGMENT_NAME.match(name) for name in os.listdir(log_dir)):
        raise CliError(
            f"{path}: no log segments found "
            "(expected a base directory with data/log/ or a log directory with NNN...N.log files)"
        )
    return log_dir


def _locate(path: Path) -> tuple[Path | None, Path]:
    """``(base directory, log directory)`` of ``path``; no base for a log outside ``data/log``."""
    log_dir = _log_dir(path)
    if log_dir != path:
        return path, log_dir
    layout = Layout.of_log(path)
    return (layout.base if layout is not None else None), log_dir


def _base_dir(path: Path) -> tuple[Path, Path]:
    """``(base directory, log directory)`` of a base directory (or of its ``data/log``)."""
    base, log_dir = _locate(path)
    if base is None:
        raise CliError(f"{path}: not a base directory (expected a directory holding data/log/)")
    return base, log_dir


def _open_store(base: Path) -> tflux.Store:
    """``tflux.open(base, readonly=True)``: restore without the writer lock, write nothing.

    A bad settings file raises a plain ``ValueError``; it becomes a usage error here.
    """
    try:
        return tflux.open(base, readonly=True)
    except ValueError as exc:
        if isinstance(exc, TfluxError):
            raise
        raise CliError(str(exc)) from exc


def _settings_in_force(base: Path) -> dict[str, str]:
    """The settings a store opened on ``base`` would use, without restoring its state.

    ``tflux.open`` resolves the settings file against the defaults; opening read-only a scratch
    directory that holds only a copy of the settings file gets them without replaying the log.
    """
    source = Layout(base).settings
    with tempfile.TemporaryDirectory(prefix="tflux-settings-") as scratch:
        Layout(scratch).log.mkdir(parents=True)
        if source.is_file():
            shutil.copyfile(source, Layout(scratch).settings)
        with _open_store(Path(scratch)) as store:
            return dict(store.settings)
