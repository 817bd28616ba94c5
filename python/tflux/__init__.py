"""tflux: TaskFlux's storage engine (segmented log, snapshot, metadata, queues) with a Rust core."""

from tflux._tflux import (
    Entry,
    EntryBatch,
    Log,
    Problem,
    RecoveryReport,
    SegmentInfo,
    VerifyReport,
    __version__,
    crc32,
    verify,
)
from tflux.errors import (
    ClosedError,
    CorruptionError,
    LockedError,
    ReadOnlyError,
    TfluxError,
    TfluxIOError,
)

__all__ = [
    "ClosedError",
    "CorruptionError",
    "Entry",
    "EntryBatch",
    "LockedError",
    "Log",
    "Problem",
    "ReadOnlyError",
    "RecoveryReport",
    "SegmentInfo",
    "TfluxError",
    "TfluxIOError",
    "VerifyReport",
    "__version__",
    "crc32",
    "verify",
]
