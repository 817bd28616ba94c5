"""A base directory owned by another process, for tests of a client (tests/api, tests/cli).

The owner opens BASE writable, runs the test's setup lines on ``store``, prints "ready" and
holds the base until its stdin closes (or a test kills it). One helper for every such test, so
a change to how an owner is started or stopped is made once."""

from __future__ import annotations

import selectors
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

START = 60.0  # seconds a cold interpreter, import and restore may take on a loaded CI host

_SCRIPT = """\
import sys, tflux
with tflux.open(sys.argv[1]{options}) as store:
{setup}
    print("ready", flush=True)
    sys.stdin.read()
"""


def readline(proc: subprocess.Popen, timeout: float = START) -> str:
    """The next line of ``proc``'s stdout; fails the test (and kills ``proc``) after
    ``timeout`` seconds without one."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=timeout):
            proc.kill()
            pytest.fail(f"the process printed nothing in {timeout} s")
    return proc.stdout.readline()


@contextmanager
def owner_process(base: Path, setup: str = "pass", options: str = "") -> Iterator[subprocess.Popen]:
    """Another process that owns ``base``: ``tflux.open(base, <options>)`` (``options``: keyword
    arguments as source text, such as ``'log_sync_policy="never"'``), then the statements of
    ``setup`` on ``store``. Yields the process once it is ready; stops it after."""
    script = _SCRIPT.format(
        options=f", {options}" if options else "",
        setup=textwrap.indent(textwrap.dedent(setup).strip(), "    "),
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(base)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert readline(proc).strip() == "ready"
        yield proc
    finally:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()  # the owner's signal to close (a killed one is gone already)
        proc.wait(timeout=START)
        proc.stdout.close()
