"""Where things are: the base and log directories a verb is given, and opening them read-only."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

import tflux
from tflux._layout import Layout, segment_names
from tflux._store import settings_for_reading
from tflux.cli._render import CliError, err
from tflux.errors import SettingsWarning

DIALECTS = ("spec", "taskflux")


def dialect_option(command: Callable[..., None]) -> Callable[..., None]:
    """The ``--dialect`` option every verb takes (spec section 11)."""
    return click.option(
        "--dialect",
        type=click.Choice(DIALECTS),
        default=None,
        help="The directory's dialect: spec (the format document, tflux's own) or taskflux "
        "(what TaskFlux's own code writes). Default: detected from its files; a choice the "
        "files contradict is an error (exit 2) and nothing is read as damage.",
    )(command)


def _dialect(base: Path | None, dialect: str | None) -> str | None:
    """The dialect a verb reads a base directory's log in: the one the base's files say,
    agreeing with ``dialect`` (the core decides: ``tflux.Layout``); for a log alone, the
    choice (``None``: its first segment says)."""
    return Layout(base, dialect).dialect if base is not None else dialect


def _log_dir(path: Path) -> Path:
    """The log directory of ``path``: a base directory (holding ``data/log``) or a log directory."""
    if not path.exists():
        raise CliError(f"{path}: no such directory")
    if not path.is_dir():
        raise CliError(f"{path}: not a directory (give a base directory or its data/log directory)")
    candidate = Layout(path, detect=False).log  # only the path: no file is read
    if candidate.is_dir():  # a base directory: an empty log is the store's to judge
        return candidate
    log_dir = path
    if not segment_names(log_dir):
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


def _is_channel(base: Path) -> bool:
    """A channel directory (spec section 10): its records are opaque messages, it has no
    snapshot or metadata, and data/cursors marks it. The core decides (``tflux.base_kind``;
    a store's files beside cursors raise ``CorruptionError``, never a lowered check)."""
    return tflux.base_kind(base) == "channel"


def _base_dir(path: Path) -> tuple[Path, Path]:
    """``(base directory, log directory)`` of a base directory (or of its ``data/log``)."""
    base, log_dir = _locate(path)
    if base is None:
        raise CliError(f"{path}: not a base directory (expected a directory holding data/log/)")
    return base, log_dir


def _open_store(base: Path, dialect: str | None = None) -> tflux.Store:
    """``tflux.open(base, readonly=True)``: restore without the writer lock, write nothing.

    A bad settings file does not stop it (the defaults are used); the verbs say so once, through
    :func:`_settings_for_reading`, so the library's ``SettingsWarning`` is not repeated here.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SettingsWarning)
        return tflux.open(base, readonly=True, dialect=dialect)


def _settings_for_reading(base: Path) -> tuple[dict[str, Any], str | None]:
    """The settings a read-only look at ``base`` uses; the one place the read-only verbs
    (inspect, replay, dump) decide about a bad settings file -- by asking the core's
    ``Settings::load_for_reading``, as a read-only open and ``tflux verify`` do: a ``warning:``
    line on stderr naming the file, then the defaults, and the verb goes on. Returns the
    settings and the warning (None: the file, if any, is in force)."""
    settings, warning = settings_for_reading(base)
    if warning is not None:
        err.print(f"[yellow]warning:[/] {escape(warning)} (ignored: the defaults are used)")
    return settings, warning
