"""``tflux.Queue``: a ``queue.Queue``-shaped face over one durable queue of a store."""

from __future__ import annotations

import collections
import json
import os
import pickle
import queue as _stdlib_queue
import threading
import time
from typing import Any, Protocol

from tflux._store import open as _open
from tflux._tflux import Record, Store
from tflux.errors import (
    ArgumentError,
    LockedError,
    PolicyViolation,
    QueueExistsError,
    QueueNotFoundError,
    UnloadableItemError,
)

__all__ = ["Queue", "Serializer"]


class Serializer(Protocol):
    """Anything with ``dumps(obj) -> bytes`` and ``loads(bytes) -> obj`` (``pickle``, ``json``
    wrapped to bytes, msgpack, a custom class)."""

    def dumps(self, obj: Any, /) -> bytes:
        """The payload bytes stored for ``obj``."""
        ...

    def loads(self, data: bytes, /) -> Any:
        """The object ``dumps`` turned into ``data``."""
        ...


class _Bytes:
    """Payloads are bytes-like objects, stored as they are; ``get`` returns ``bytes``."""

    @staticmethod
    def dumps(obj: Any) -> Any:
        return obj

    @staticmethod
    def loads(data: bytes) -> bytes:
        return data


class _Pickle:
    @staticmethod
    def dumps(obj: Any) -> bytes:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def loads(data: bytes) -> Any:
        return pickle.loads(data)


class _Json:
    @staticmethod
    def dumps(obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":")).encode()

    @staticmethod
    def loads(data: bytes) -> Any:
        return json.loads(data)


_SERIALIZERS: dict[str, Any] = {"bytes": _Bytes, "pickle": _Pickle, "json": _Json}

# A full queue (max_size) is polled while ``put`` blocks: no wakeup exists for "room freed".
_FULL_POLL = (0.005, 0.1)


def _serializer(spec: str | Serializer | None) -> Any:
    if spec is None:
        return _Bytes
    if isinstance(spec, str):
        try:
            return _SERIALIZERS[spec]
        except KeyError:
            known = ", ".join(repr(k) for k in _SERIALIZERS)
            raise ArgumentError(
                f"serializer must be {known} or an object with dumps/loads (got {spec!r})"
            ) from None
    if not (callable(getattr(spec, "dumps", None)) and callable(getattr(spec, "loads", None))):
        raise TypeError(f"serializer {spec!r} has no callable dumps and loads")
    return spec


# ``queue.Queue``'s bound and its spellings elsewhere: none is a Queue or tflux.open argument.
_BOUND_ARGS = ("maxsize", "max_size", "max_queue_size")


def _refuse_max_size(name: str, open_kwargs: dict[str, Any]) -> None:
    """A ``maxsize=`` (which would reach ``tflux.open`` as an unknown setting) is refused with
    the way a queue's ``max_size`` is set (issue 43 item 20)."""
    for arg in _BOUND_ARGS:
        if arg in open_kwargs:
            raise TypeError(
                f"tflux.Queue() takes no {arg}: a queue's max_size is part of the queue, "
                f"set when the queue is created: store.create_queue({name!r}, "
                f"max_size={open_kwargs[arg]!r}), then tflux.Queue(store, {name!r}) (put waits, "
                "or raises queue.Full, while max_size records are ready)"
            )


class Queue:
    """A ``queue.Queue``-shaped face over queue ``name`` of the store in ``base``.

    ``base`` is a base directory (the Queue opens, and on ``close()`` closes, a store of its own,
    passing ``open_kwargs`` to ``tflux.open``) or an open ``tflux.Store`` to share (left open).
    The queue is created (``heap``, no limits) unless it exists; pass ``create=False`` to require
    it.

    A bound (``queue.Queue(maxsize=)``) belongs to the queue, logged when it is created:
    ``store.create_queue(name, max_size=10)`` then ``tflux.Queue(store, name)``; ``put`` then
    waits for room (or raises ``queue.Full``) while ``max_size`` records are ready.

    Items go through ``serializer``: ``"bytes"`` (the default: bytes-like items, ``get`` returns
    ``bytes``), ``"json"`` (the safe choice for objects), ``"pickle"``, or any object with
    ``dumps``/``loads``. ``put(item, priority)`` enqueues durably with ``priority`` as the key
    (smallest first, FIFO among equal priorities).

    Beware: ``"pickle"`` runs ``pickle.loads`` on every payload ``get`` takes, so whoever can
    enqueue into the queue, or write the directory's files, runs code in every consumer. Use it
    only where producers and the directory are as trusted as the consumer itself.

    Delivery is at-least-once: ``get`` dequeues a record, which stays *in flight* until
    ``task_done()`` acknowledges it (logged, gone for good). ``task_done()`` acknowledges the
    oldest record this Queue object handed out and that is not yet done, as ``queue.Queue`` counts
    its tasks: with several consumer threads, call ``task_done()`` once per ``get``; use
    ``get_record``/``ack``/``nack`` to settle one particular record. Records not done when the
    process stops (or, with ``lease=seconds``, not done within the lease) are delivered again.
    """

    def __init__(
        self,
        base: str | os.PathLike[str] | Store,
        name: str = "",
        serializer: str | Serializer | None = "bytes",
        *,
        create: bool = True,
        lease: float | None = None,
        **open_kwargs: Any,
    ) -> None:
        self._serializer = _serializer(serializer)
        _refuse_max_size(name, open_kwargs)
        if isinstance(base, Store):
            if open_kwargs:
                raise TypeError("open arguments apply only when Queue opens the store itself")
            self._store, self._owned = base, False
        else:
            try:
                # ``create`` makes what is missing: the base directory's parents too.
                open_kwargs.setdefault("create", create)
                self._store, self._owned = _open(base, **open_kwargs), True
            except LockedError as exc:
                # Often a second Queue on the same base in this process (issue 30 item 23).
                raise LockedError(
                    f"{exc} -- if another tflux.Queue or tflux.open of this base is open in this "
                    "process, share its store: tflux.Queue(store, name)",
                    exc.path,
                    exc.errno,
                ) from exc
        self.name = name
        self.lease = lease
        self._unfinished: collections.deque[Record] = collections.deque()
        self._lock = threading.Lock()
        self._all_done = threading.Condition(self._lock)
        try:
            if create and all(q.name != name for q in self._store.queues()):
                try:
                    self._store.create_queue(name)
                except QueueExistsError:  # another thread or process created it meanwhile
                    pass
            else:
                self._store.count(name)  # QueueNotFoundError now rather than on first use
        except BaseException:
            self.close()
            raise

    @property
    def store(self) -> Store:
        """The store underneath."""
        return self._store

    # --- queue.Queue ------------------------------------------------------------------------

    def put(
        self, item: Any, priority: int = 0, block: bool = True, timeout: float | None = None
    ) -> None:
        """Enqueue ``item`` with ``priority`` (durable when it returns). When the queue is full
        (its ``max_size``), wait for room up to ``timeout`` (``block=False``: not at all), then
        raise ``queue.Full``."""
        payload = self._serializer.dumps(item)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        pause = _FULL_POLL[0]
        while True:
            try:
                self._store.enqueue(self.name, priority, payload)
                return
            except PolicyViolation as e:
                if e.policy != "max_queue_size":
                    raise
                left = None if deadline is None else deadline - time.monotonic()
                if not block or (left is not None and left <= 0):
                    raise _stdlib_queue.Full(str(e)) from None
                time.sleep(pause if left is None else min(pause, left))
                pause = min(pause * 2, _FULL_POLL[1])

    def put_nowait(self, item: Any, priority: int = 0) -> None:
        """``put(item, priority, block=False)``."""
        self.put(item, priority, block=False)

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """Take the next item (smallest priority first). Waits up to ``timeout`` seconds
        (``None``: forever; ``block=False``: not at all), then raises ``queue.Empty``. The record
        stays in flight until ``task_done()``.

        An item the serializer cannot load raises :class:`tflux.UnloadableItemError` once, with
        the record in ``.record``, still in flight but no longer this queue's ``task_done()``'s
        to settle: ``ack(err.record)`` drops it, ``nack(err.record)`` puts it back, and a lease
        that runs out puts it back (a failed delivery, counted by a dead-letter rule). The next
        ``get`` moves on. (Putting it back at once made it the next ``get`` forever.)"""
        record = self.get_record(block, timeout)
        try:
            item = self._serializer.loads(record.payload)
        except Exception as exc:
            self._forget(record)
            raise UnloadableItemError(
                f"queue {self.name!r}: record {record.id} does not load with the serializer "
                f"({type(exc).__name__}: {exc}); it is in flight in .record: ack it to drop it, "
                "nack it to put it back",
                record,
            ) from exc
        except BaseException:  # KeyboardInterrupt and the like: the record goes back
            self._forget(record)
            self._store.nack(record)
            raise
        return item

    def get_nowait(self) -> Any:
        """``get(block=False)``."""
        return self.get(block=False)

    def get_record(self, block: bool = True, timeout: float | None = None) -> Record:
        """Like ``get`` but returns the ``tflux.Record`` (payload not deserialized); settle it
        with ``task_done()``, ``ack(record)`` or ``nack(record)``."""
        if not block:
            wait: float | None = 0
        elif timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        else:
            wait = timeout
        record = self._store.dequeue(self.name, timeout=wait, lease=self.lease)
        if record is None:
            raise _stdlib_queue.Empty
        with self._lock:
            self._unfinished.append(record)
        return record

    def task_done(self) -> None:
        """Acknowledge the oldest record handed out by ``get`` and not done yet (logged; it is
        never delivered again). Raises ``ValueError`` when every get is already done."""
        with self._lock:
            if not self._unfinished:
                raise ValueError("task_done() called too many times")
            record = self._unfinished.popleft()
        try:
            self._store.ack(record)
        except BaseException:
            with self._lock:
                self._unfinished.appendleft(record)
            raise
        self._notify_if_done()

    def ack(self, record: Record) -> None:
        """Acknowledge this particular record (from ``get_record``)."""
        self._store.ack(record)
        self._forget(record)

    def nack(self, record: Record) -> None:
        """Put this particular record back (from ``get_record``): it is delivered again."""
        self._store.nack(record)
        self._forget(record)

    def join(self, timeout: float | None = None) -> bool:
        """Wait until the queue has no ready records and every record this object handed out is
        done; ``False`` if ``timeout`` seconds passed first. Items put by other processes count
        as they arrive (the ready count is polled)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._all_done:
            while self._unfinished or self._store.count(self.name):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._all_done.wait(0.05 if left is None else min(0.05, left))
        return True

    def qsize(self) -> int:
        """Ready records (in-flight ones are not counted)."""
        return self._store.count(self.name)

    def __len__(self) -> int:
        """Ready and delayed records (in-flight ones are not counted)."""
        stats = self._store.stats(self.name)
        return stats.ready + stats.delayed

    def empty(self) -> bool:
        """No ready record right now."""
        return self.qsize() == 0

    def full(self) -> bool:
        """The ready records reached the queue's ``max_size`` (never, without one)."""
        for q in self._store.queues():
            if q.name == self.name:
                return q.max_size is not None and q.count >= q.max_size
        raise QueueNotFoundError(f"no queue named {self.name!r}", self.name)

    @property
    def unfinished_tasks(self) -> int:
        """Records handed out by this object and not done yet."""
        with self._lock:
            return len(self._unfinished)

    # --- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close the store if this Queue opened it. Records not done stay in flight and are
        delivered again after a restart."""
        if getattr(self, "_owned", False):
            self._store.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"tflux.Queue({self._store.path!r}, {self.name!r})"

    def _forget(self, record: Record) -> None:
        with self._lock:
            try:
                self._unfinished.remove(record)
            except ValueError:
                pass
        self._notify_if_done()

    def _notify_if_done(self) -> None:
        with self._all_done:
            if not self._unfinished:
                self._all_done.notify_all()
