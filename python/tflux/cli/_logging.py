"""``--log-level``: what the core reports on its own (logger ``tflux``: owner changes and
takeovers, lease expiries, dead letters, torn tails cut; docs/guide/operations.md) printed on
stderr, never stdout, so ``--json`` and piped reports stay parseable.

The group takes the option (``tflux --log-level info VERB``) and so do the long-running verbs
(``tflux serve BASE --log-level debug``); the verb's own wins. Without either, ``serve`` logs
at INFO (a server's log is what it has to say) and every other verb at WARNING.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

import click

LEVELS = ("debug", "info", "warning", "error")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DEFAULT = "warning"

#: Where the group leaves the level it was given (None: not given) for the verb.
_GIVEN = "tflux.log_level"

F = TypeVar("F", bound=Callable[..., Any])


def log_level_option(f: F) -> F:
    """The ``--log-level`` option (default: the verb's)."""
    return click.option(
        "--log-level",
        type=click.Choice(LEVELS, case_sensitive=False),
        default=None,
        help="Print tflux's own events (logger tflux) of this level and above on stderr "
        "(default: info for serve, warning otherwise).",
    )(f)


class _StderrHandler(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a line is logged (click's test runner swaps it
    per invocation), never to stdout."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: TextIO) -> None:
        pass


def use_log_level(given: str | None, default: str = DEFAULT) -> None:
    """Logs the ``tflux`` logger at ``given``, else the group's ``--log-level``, else
    ``default``, on stderr, until the command ends (then the logger is as it was: a command
    run in-process leaves no handler behind)."""
    ctx = click.get_current_context()
    level = (given or ctx.find_root().meta.get(_GIVEN) or default).upper()
    logger = logging.getLogger("tflux")
    handler = next((h for h in logger.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(FORMAT))
        before = logger.level
        logger.addHandler(handler)

        def restore() -> None:
            logger.removeHandler(handler)
            logger.setLevel(before)

        ctx.find_root().call_on_close(restore)
    logger.setLevel(level)


def remember_group_level(given: str | None) -> None:
    """The group's ``--log-level``, applied now (WARNING if not given) and left for the verb."""
    click.get_current_context().meta[_GIVEN] = given
    use_log_level(given)
