"""The exception tree of tflux.

Every error tflux raises on purpose derives from :class:`TfluxError`. Each category also
derives from the builtin it refines, so ``except ValueError`` or ``except OSError`` keeps
working for callers that do not know tflux. Exceptions carry the location of the problem as
attributes and survive pickling (Spark ships worker exceptions to the driver).
"""

from __future__ import annotations

__all__ = [
    "ClosedError",
    "CorruptionError",
    "LockedError",
    "ReadOnlyError",
    "TfluxError",
    "TfluxIOError",
]


class TfluxError(Exception):
    """Root of every error raised by tflux."""


class CorruptionError(TfluxError, ValueError):
    """Bytes on disk do not follow the format: bad marker, checksum, length, term order, gap...

    ``path`` names the file and ``offset`` the byte where the bad record or header starts
    (either may be ``None`` when the problem is not tied to one place).
    """

    def __init__(self, message: str, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.offset = offset

    def __reduce__(self):  # keep path/offset across pickling
        return (type(self), (self.message, self.path, self.offset))

    def __str__(self) -> str:
        return self.message


class TfluxIOError(TfluxError, OSError):
    """An operating-system error while reading or writing tflux files.

    After an I/O error on the write path the log refuses further writes until it is reopened,
    so that nothing is acknowledged on top of a write that may not have reached the disk.
    """

    def __init__(self, message: str, path: str | None = None, errno: int | None = None) -> None:
        if errno is None:
            super().__init__(message)
        else:
            super().__init__(errno, message)
        self.message = message
        self.path = path
        self.filename = path
        self.errno = errno

    def __reduce__(self):
        return (type(self), (self.message, self.path, self.errno))

    def __str__(self) -> str:
        return self.message


class LockedError(TfluxIOError):
    """Another writer holds the directory's lock (one writer per directory)."""


class ReadOnlyError(TfluxError, PermissionError):
    """A write was attempted through a log opened with ``readonly=True``."""


class ClosedError(TfluxError, ValueError):
    """An operation on a log that was already closed (like I/O on a closed file)."""
