"""``tflux.open``: the embedded durable queue over a base directory."""

from __future__ import annotations

import json
import os
from typing import Any

from tflux._tflux import Store
from tflux._tflux import load_settings as _load_settings

# Keyword arguments are the snake_case forms of the settings file's PascalCase keys.
SETTINGS = {
    "log_file_soft_limit": "LogFileSoftLimit",
    "log_file_hard_limit": "LogFileHardLimit",
    "log_preallocate_segments": "LogPreallocateSegments",
    "snapshot_creation_segments_threshold": "SnapshotCreationSegmentsThreshold",
    "log_sync_policy": "LogSyncPolicy",
    "log_sync_interval_ms": "LogSyncIntervalMs",
}


def open(
    base_dir: str | os.PathLike[str],
    *,
    readonly: bool = False,
    lock_timeout: float | None = None,
    **settings: Any,
) -> Store:
    """Open (creating it if needed) the TaskFlux base directory ``base_dir``.

    Settings come from ``taskflux.settings.json`` in the base directory, overridden by keyword
    arguments in snake_case (``log_file_soft_limit=1 << 20``). The store holds the directory's
    writer lock until closed; ``readonly=True`` opens for inspection without the lock: it
    refuses writes and deliveries (``dequeue``/``nack``) and catches up with a writer's log on
    ``store.refresh()``. Use it as a context manager.

    ``lock_timeout`` (seconds; ``None`` = fail at once) makes a writable open wait for another
    process to release the writer lock, retrying with a growing pause, before raising
    :class:`tflux.LockedError`. ``float("inf")`` waits as long as it takes.
    """
    if base_dir is None:
        raise TypeError("open() needs the base directory (e.g. tflux.open('path/to/base'))")
    base, overrides = _resolve(base_dir, settings, "open")
    return Store._open(base, overrides, readonly, lock_timeout)


def settings(base_dir: str | os.PathLike[str] | None = None, **overrides: Any) -> dict[str, str]:
    """The settings ``tflux.open(base_dir, **overrides)`` would use (PascalCase keys -> values),
    without opening or replaying anything."""
    base, json_overrides = _resolve(base_dir, overrides, "settings")
    return _load_settings(base, json_overrides)


def _resolve(base_dir, settings: dict[str, Any], caller: str) -> tuple[str, str | None]:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        known = ", ".join(SETTINGS)
        raise TypeError(f"{caller}() got unknown setting(s) {', '.join(unknown)} (known: {known})")
    overrides = {SETTINGS[k]: v for k, v in settings.items()}
    base = os.fspath(base_dir) if base_dir is not None else os.getcwd()
    return base, json.dumps(overrides) if overrides else None
