"""Where things are: the base and log directories a verb is given, and opening them read-only."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

import tflux
from tflux._layout import Layout, is_segment_name, segment_names
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


def _located(path: Path, dialect: str | None = None) -> tflux.Located:
    """What ``path`` is, as the core decides (``tflux.locate``): a base directory, its
    ``data/log``, a bare log directory, one segment file or a snapshot file, made absolute (a
    relative path, ``.`` inside ``data/log`` and a symlinked base name the same files)."""
    if not os.path.lexists(path):
        raise CliError(f"{path}: no such {'file' if is_segment_name(path.name) else 'directory'}")
    return tflux.locate(path, dialect=dialect)


def _locate(path: Path, dialect: str | None = None) -> tuple[Path | None, Path]:
    """``(base directory, log directory)`` of ``path`` (a base directory or a log directory,
    ``tflux.locate``); no base for a log outside ``data/log``."""
    found = _located(path, dialect)
    if found.kind in ("segment", "snapshot"):
        raise CliError(f"{path}: not a directory (give a base directory or its data/log directory)")
    if found.log is None:
        raise CliError(
            f"{path}: no log segments found "
            "(expected a base directory with data/log/ or a log directory with NNN...N.log files)"
        )
    log_dir = Path(found.log)
    if found.kind == "bare_log" and not segment_names(log_dir):
        raise CliError(
            f"{path}: no log segments found "
            "(expected a base directory with data/log/ or a log directory with NNN...N.log files)"
        )
    return (Path(found.base) if found.base is not None else None), log_dir


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
