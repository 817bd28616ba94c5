"""The exception tree of tflux.

Every error tflux raises on purpose derives from :class:`TfluxError`. Each category also
derives from the builtin it refines, so ``except ValueError`` or ``except OSError`` keeps
working for callers that do not know tflux. Exceptions carry the location of the problem as
attributes and survive pickling (Spark ships worker exceptions to the driver).
"""

from __future__ import annotations

import errno as _errno

__all__ = [
    "ArgumentError",
    "ClosedError",
    "CorruptionError",
    "DialectError",
    "DiskFullError",
    "ForkedError",
    "LockedError",
    "NotInFlightError",
    "OutOfRangeError",
    "OwnerLostError",
    "PolicyViolation",
    "QueueExistsError",
    "QueueNotFoundError",
    "ReadOnlyError",
    "ReplayError",
    "SettingsError",
    "SettingsWarning",
    "StaleReadError",
    "TfluxError",
    "TfluxIOError",
    "UnloadableItemError",
]


class TfluxError(Exception):
    """Root of every error raised by tflux."""


class _Located(TfluxError):
    """An error about a place in a file: ``message``, ``path`` and ``offset`` (either may be
    ``None``), kept across pickling (Spark ships worker exceptions to the driver)."""

    def __init__(self, message: str, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.offset = offset

    def __reduce__(self):
        return (type(self), (self.message, self.path, self.offset))

    def __str__(self) -> str:
        return self.message


class CorruptionError(_Located, ValueError):
    """Bytes on disk do not follow the format: bad marker, checksum, length, term order, gap...

    ``path`` names the file and ``offset`` the byte where the bad record or header starts
    (either may be ``None`` when the problem is not tied to one place).
    """


class DialectError(_Located, ValueError):
    """A directory in another dialect than this version reads or the caller asked for, or
    whose files disagree about their dialect (spec section 11: ``spec`` is the format
    document's layout, ``taskflux`` what TaskFlux's own code writes). Nothing was changed.

    ``path`` names the file whose bytes said the dialect.
    """


class StaleReadError(_Located):
    """A read-only reader found a file changed under it: a writer cut, replaced or deleted a
    segment while the log was being opened or read. The log is healthy; reopen and retry.

    Not a :class:`CorruptionError` (nothing on disk is damaged). ``path`` names the file and
    ``offset`` the record being read (either may be ``None``).
    """


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


class DiskFullError(TfluxIOError):
    """The file system is full, or fuller than a configured used-space ratio: the write was
    refused (``errno`` is ``ENOSPC``). Channel sends resume by themselves once space is freed
    below the low ratio; after a write that failed for lack of space, reopen to continue."""

    def __init__(
        self, message: str, path: str | None = None, errno: int | None = _errno.ENOSPC
    ) -> None:
        super().__init__(message, path, errno)


class LockedError(TfluxIOError):
    """Another writer holds the directory's lock (one writer per directory)."""


class OwnerLostError(TfluxIOError):
    """A client of a shared base directory lost its owner in the middle of a call: the owner
    closed the store or its process died. The call may or may not have taken effect (an
    enqueue may have been made durable just before); retry it. The next call reconnects to
    the new owner, or makes this process the owner (restoring the store from disk): the store
    need not be reopened."""


class ReadOnlyError(TfluxError, PermissionError):
    """A write was attempted through a log opened with ``readonly=True``."""


class ForkedError(TfluxError, RuntimeError):
    """A ``Store``, ``Log``, ``Channel``, ``Sender`` or ``Receiver`` used in a process forked
    after it was opened. The child's copy refuses every use (it would write where the parent
    writes) and its ``close`` lets go without writing; open it again in the child, or start the
    workers with the ``spawn`` method."""


class UnloadableItemError(TfluxError, ValueError):
    """``tflux.Queue.get`` took an item its serializer cannot load. ``record`` is the record,
    still in flight: ``ack`` it to drop it, ``nack`` it to put it back. Raised once per
    delivery, so the next ``get`` moves on."""

    def __init__(self, message: str, record: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.record = record

    def __reduce__(self):
        return (type(self), (self.message, self.record))

    def __str__(self) -> str:
        return self.message


class ClosedError(TfluxError, ValueError):
    """An operation on a log that was already closed (like I/O on a closed file)."""


class ReplayError(TfluxError):
    """A log entry that cannot be applied to the queue state.

    ``lsn`` names the entry (``None`` when applied without one); when the delta's bytes were
    undecodable, ``__cause__`` is the :class:`CorruptionError` that says why.
    """

    def __init__(self, message: str, lsn: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.lsn = lsn

    def __reduce__(self):
        return (type(self), (self.message, self.lsn))

    def __str__(self) -> str:
        return self.message


class QueueNotFoundError(TfluxError, KeyError):
    """A request on a queue that does not exist (also a ``KeyError``)."""

    def __init__(self, message: str, queue: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.queue = queue

    def __reduce__(self):
        return (type(self), (self.message, self.queue))

    def __str__(self) -> str:  # KeyError would show the repr of the message
        return self.message


class QueueExistsError(TfluxError, ValueError):
    """``create_queue`` of a name that is already taken."""


class PolicyViolation(TfluxError, ValueError):
    """An enqueue refused by a queue policy; nothing was written.

    ``policy`` is ``"max_queue_size"``, ``"max_message_size"``, ``"key_range"``, or ``"ids"`` when
    the queue has used every record id (2^64 - 1; ids are never reused).
    """

    def __init__(self, message: str, queue: str | None = None, policy: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.queue = queue
        self.policy = policy

    def __reduce__(self):
        return (type(self), (self.message, self.queue, self.policy))

    def __str__(self) -> str:
        return self.message


class NotInFlightError(TfluxError, ValueError):
    """``ack``/``nack`` of a record that is not in flight (never dequeued, already acked or
    nacked, its lease expired, or its queue was deleted); nothing was written. The message says
    when the delivery's lease expired (the owner remembers the latest few thousand)."""


class SettingsError(TfluxError, ValueError):
    """A bad ``taskflux.settings.json`` or settings argument: unknown key, wrong type, bad value."""


class ArgumentError(TfluxError, ValueError):
    """An argument outside its valid domain: a bad queue name, ``delete_queue("")``, an unknown
    ``implementation``, a key or size that does not fit its field (the message names it)."""


class OutOfRangeError(TfluxError, IndexError):
    """An index outside the entries a log holds (also an ``IndexError``)."""


class SettingsWarning(UserWarning):
    """A read-only open ignored a bad ``taskflux.settings.json`` and used the defaults (a typo
    in the settings must not block reading the data; a writable open refuses the file)."""
