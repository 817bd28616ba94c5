"""``tflux.open``: the embedded durable queue over a base directory."""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

from tflux._tflux import SETTINGS_KEYWORDS as _SETTINGS_KEYWORDS
from tflux._tflux import Store
from tflux._tflux import load_settings as _load_settings
from tflux.errors import SettingsWarning

# Keyword arguments are the snake_case forms of the settings file's PascalCase keys (the
# core's table, in its order).
SETTINGS = dict(_SETTINGS_KEYWORDS)


def open(
    base_dir: str | os.PathLike[str],
    *,
    readonly: bool = False,
    lock_timeout: float | None = None,
    dialect: str | None = None,
    share: bool = True,
    create: bool = False,
    **settings: Any,
) -> Store:
    """Open (creating it if needed) the TaskFlux base directory ``base_dir``.

    A writable open creates the base directory itself, not its missing parents, as ``mkdir``
    does (a typo in the path is an error, not a new queue): ``create=True`` also creates the
    missing parents, as ``mkdir -p``. A missing parent raises :class:`tflux.TfluxIOError`
    (``ENOENT``) naming it, and nothing is created (``Channel.open`` and ``Log.open`` follow
    the same rule).

    Settings come from ``taskflux.settings.json`` in the base directory, overridden by keyword
    arguments in snake_case (``log_file_soft_limit=1 << 20``). The store holds the directory's
    writer lock until closed; ``readonly=True`` opens for inspection without the lock: it
    refuses writes and deliveries (``dequeue``/``nack``) and catches up with a writer's log on
    ``store.refresh()``; a bad settings file is then a :class:`tflux.SettingsWarning` and the
    defaults are used, so a typo never blocks a look (a writable open raises
    :class:`tflux.SettingsError`). Use it as a context manager.

    ``dead_letter={"jobs": ("jobs-dead", 3)}`` (setting ``DeadLetter``) moves a record of
    ``jobs`` to the queue ``jobs-dead`` after 3 failed deliveries (nacks, expired leases, dead
    takers), with one logged batch; see docs/format.md, "Deliveries". It sets the queue's logged
    rule (``create_queue(dead_letter=...)``; spec dialect), which every later open obeys.

    ``lock_timeout`` (seconds; ``None`` = fail at once) makes a writable open wait for a writer
    that is not a shared store (a ``tflux.Log``, ``tflux repair``, a store opened with
    ``share=False``) to release the log's lock, retrying with a growing pause, before raising
    :class:`tflux.LockedError`. ``float("inf")`` waits as long as it takes. It also bounds how
    long a client waits for an owner that is still restoring the store, when longer than the
    60 s it waits anyway.

    ``dialect`` is how the files are laid out (spec section 11): ``"spec"`` (the format
    document, tflux's own) or ``"taskflux"`` (what TaskFlux's own code writes). ``None``
    detects it from the files (a new directory is ``"spec"``); files that disagree with each
    other or with the choice raise :class:`tflux.DialectError` and nothing is changed.
    ``store.dialect`` says which it is.

    Several processes can open the same base directory at once (``share=True``, the
    default). The first writable open becomes the directory's **owner** (``store.is_owner``):
    it holds the writer lock and serves the others over a Unix socket beside the data
    (``data/tflux.sock``, this user only). Every other writable open, in this process or
    another, is a **client** of the owner with the same methods: its enqueues return once the
    owner made them durable (sharing the owner's fsyncs), a record is delivered to one
    consumer at a time, and records in flight to a client that closes or dies go back to
    their queue. If the owner goes, the client's call in flight raises
    :class:`tflux.OwnerLostError` (retry it) and its next call reconnects to the new owner or
    becomes the owner itself. A store opened before ``fork()`` becomes a client of the parent
    in the child. ``share=False`` keeps one process per directory: another writer gets
    :class:`tflux.LockedError`. Settings given to a client are ignored: the owner's are in
    force. See the README, "Several processes".
    """
    if base_dir is None:
        raise TypeError("open() needs the base directory (e.g. tflux.open('path/to/base'))")
    store, said = _open_saying(
        base_dir,
        readonly=readonly,
        lock_timeout=lock_timeout,
        dialect=dialect,
        share=share,
        create=create,
        **settings,
    )
    warn_at_caller(said)
    return store


def _open_saying(
    base_dir: str | os.PathLike[str], *, readonly: bool = False, **kwargs: Any
) -> tuple[Store, list[str]]:
    """:func:`open`, returning its :class:`SettingsWarning` messages instead of warning: the
    caller warns where its user called (``tflux.aio`` opens on a worker thread, whose stack
    holds no line of the user's)."""
    lock_timeout, dialect = kwargs.pop("lock_timeout", None), kwargs.pop("dialect", None)
    share, create = kwargs.pop("share", True), kwargs.pop("create", False)
    base, overrides = _resolve(base_dir, kwargs, "open")
    store = Store._open(base, overrides, readonly, lock_timeout, dialect, share, create)
    said = []
    if store.settings_warning is not None:  # read-only only: writers refuse a bad file
        said.append(
            f"{store.settings_warning} (ignored by this read-only open: the defaults are used)"
        )
    if overrides is not None and not readonly and not store.is_owner:
        asked = json.loads(overrides)
        _route_dead_letter(store, asked)
        said.extend(_ignored(store, asked))
    return store, said


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def warn_at_caller(messages: list[str]) -> None:
    """Each message as a :class:`SettingsWarning` naming the first line outside tflux that led
    here (``tflux.Queue`` or ``tflux.aio`` named their own lines: issue 43 item 16)."""
    if not messages:
        return
    level, frame = 2, sys._getframe(1)  # 1 is this function, 2 its caller
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    for message in messages:
        warnings.warn(message, SettingsWarning, stacklevel=level)


def _route_dead_letter(store: Store, asked: dict[str, Any]) -> None:
    """A client's ``dead_letter=`` becomes the logged rule of each named queue that exists
    (through the owner, spec dialect; issue 44); the rules it could route are not "ignored"."""
    rules = asked.get("DeadLetter")
    if not rules or store.dialect != "spec":
        return
    existing = {q.name for q in store.queues()}
    left = {}
    for queue, rule in rules.items():
        if queue not in existing:
            left[queue] = rule
            continue
        wanted = (rule["Queue"], rule["MaxNacks"])
        if store.queue_rules(queue).dead_letter != wanted:
            store.set_queue_rules(queue, dead_letter=wanted)
    if left:
        asked["DeadLetter"] = left
    else:
        del asked["DeadLetter"]


def _ignored(store: Store, asked: dict[str, Any]) -> list[str]:
    """A client runs with the owner's settings: which of the caller's differ."""
    in_force = store.settings
    differ = sorted(k for k, v in asked.items() if in_force.get(k) != v)
    if not differ:
        return []
    shown = ", ".join(f"{k}={asked[k]!r} (owner: {in_force.get(k)!r})" for k in differ)
    return [
        f"{store.path} is owned by process {store.owner_pid}: this open is its client and "
        f"runs with the owner's settings, so these were ignored: {shown}"
    ]


def settings(
    base_dir: str | os.PathLike[str] | None = None, **overrides: Any
) -> dict[str, int | bool | str | dict[str, Any]]:
    """The settings ``tflux.open(base_dir, **overrides)`` would use, without opening or
    replaying anything: PascalCase keys, values typed as in the JSON file (``int``, ``bool``,
    the sync policy as ``str``). A bad settings file raises :class:`tflux.SettingsError`
    naming it."""
    base, json_overrides = _resolve(base_dir, overrides, "settings")
    return _load_settings(base, json_overrides)[0]


def settings_for_reading(
    base_dir: str | os.PathLike[str],
) -> tuple[dict[str, int | bool | str | dict[str, Any]], str | None]:
    """What a read-only open of ``base_dir`` uses: the settings, and the problem of a bad
    settings file (then ignored: the defaults are used) or ``None``."""
    return _load_settings(os.fspath(base_dir), None, True)


def _resolve(base_dir, settings: dict[str, Any], caller: str) -> tuple[str, str | None]:
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        known = ", ".join(SETTINGS)
        raise TypeError(f"{caller}() got unknown setting(s) {', '.join(unknown)} (known: {known})")
    overrides = {SETTINGS[k]: v for k, v in settings.items()}
    if "DeadLetter" in overrides:
        overrides["DeadLetter"] = _dead_letter(overrides["DeadLetter"])
    base = os.fspath(base_dir) if base_dir is not None else os.getcwd()
    return base, json.dumps(overrides) if overrides else None


def _dead_letter(rules: Any) -> Any:
    """``{"jobs": ("jobs-dead", 3)}`` as the settings file spells it (other shapes pass through
    for the core to refuse with a message that names the setting)."""
    if not isinstance(rules, dict):
        return rules
    out = {}
    for name, rule in rules.items():
        if isinstance(rule, (tuple, list)) and len(rule) == 2:
            rule = {"Queue": rule[0], "MaxNacks": rule[1]}
        out[name] = rule
    return out
