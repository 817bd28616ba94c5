"""What the ``test_log_*.py`` modules share: a log opened with small limits and without
preallocation, its segment layout and the LSNs of a list of entries.
"""

from __future__ import annotations

from tflux import Log

D16 = b"0123456789abcdef"  # 16 data bytes: a 32-byte record


def open_log(path, **kwargs) -> Log:
    kwargs.setdefault("preallocate", False)
    kwargs.setdefault("soft_limit", 1 << 20)
    kwargs.setdefault("hard_limit", 1 << 21)
    return Log.open(path, **kwargs)


def seg_layout(log: Log) -> list[tuple[int, int, bool]]:
    return [(s.start_lsn, s.count, s.sealed) for s in log.segments]


def lsns(entries) -> list[int]:
    return [e.lsn for e in entries]
