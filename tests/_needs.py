"""What the suite does when a tool it uses is missing: skip with the reason, or fail where the
machine is known to have the tool.

A user without a JDK (or strace) gets skips that say what is missing. CI's machine has them:
``.ci/run`` sets ``TFLUX_REQUIRE_TOOLS=1``, and there a missing tool, a JVM reader that does not
build or Spark that cannot start is a failure, never a silent skip.
"""

from __future__ import annotations

import os
import shutil
from types import ModuleType

import pytest

REQUIRE_VARIABLE = "TFLUX_REQUIRE_TOOLS"


def required() -> bool:
    """Whether this run says every tool of the suite is installed (``TFLUX_REQUIRE_TOOLS=1``)."""
    return os.environ.get(REQUIRE_VARIABLE, "") not in ("", "0")


def missing(reason: str, *, module: bool = False) -> None:
    """Skips the test (or the module) for ``reason``, or fails it where tools are required."""
    if required():
        pytest.fail(f"{reason}, but {REQUIRE_VARIABLE} says this machine has it", pytrace=False)
    pytest.skip(reason, allow_module_level=module)


def has_java() -> bool:
    return bool(shutil.which("java") or os.environ.get("JAVA_HOME"))


def pyspark() -> ModuleType:
    """pyspark, after checking Java is there too (Spark cannot start without it)."""
    try:
        import pyspark
    except ImportError:
        missing("pyspark is not installed (pip install '.[spark]')", module=True)
    if not has_java():
        missing("Spark needs Java (no java on PATH, no JAVA_HOME)", module=True)
    return pyspark
