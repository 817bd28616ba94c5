"""The paths of a base directory (spec section 1), for the CLI, Spark and the benchmarks.

The core's ``base::Layout`` is the rule; this is its one Python face, to become a thin wrapper
of it once the bindings expose it. Nothing else in Python joins ``data``, ``log`` or the file
names itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SEGMENT_NAME = re.compile(r"^[0-9]{19}\.log$")
SETTINGS_FILE = "taskflux.settings.json"


@dataclass(frozen=True)
class Layout:
    """The files of the base directory ``base``."""

    base: Path

    def __init__(self, base: str | Path) -> None:
        object.__setattr__(self, "base", Path(base))

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.data / "log"

    @property
    def temp(self) -> Path:
        return self.data / "temp"

    @property
    def snapshot(self) -> Path:
        return self.data / "tflux.snapshot"

    @property
    def metadata(self) -> Path:
        return self.data / "tflux.metadata"

    @property
    def settings(self) -> Path:
        return self.base / SETTINGS_FILE

    @classmethod
    def of_data(cls, data: str | Path) -> Layout | None:
        """The layout whose ``data`` directory is ``data``; None if it is not named so."""
        data = Path(data)
        return cls(data.parent) if data.name == "data" else None

    @classmethod
    def of_log(cls, log: str | Path) -> Layout | None:
        """The layout whose log directory is ``log``; None for a log directory outside a base."""
        log = Path(log)
        return cls.of_data(log.parent) if log.name == "log" else None
