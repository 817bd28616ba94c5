"""``tflux.aio``: the embedded queue for asyncio.

``async with tflux.aio.open(base) as astore:`` gives a :class:`AsyncStore` whose methods are
the :class:`tflux.Store` methods as coroutines. Calls that write (and wait for an fsync) run in
a small thread pool owned by the store (``max_workers``, 4 by default), never a thread per call.

``dequeue`` is cancellation-safe: a record is only ever taken by a non-blocking
``Store.dequeue(queue, timeout=0)`` on the event loop's own thread, returned at once, so no
``await`` lies between taking a record and handing it to the caller. Waiting for a record is done
by one watcher per queue in the pool (``Store.wait``, which releases the GIL) that wakes every
coroutine waiting on that queue; cancelling a waiting coroutine therefore never loses, takes or
leaks a record.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tflux._store import _open_saying, warn_at_caller
from tflux._tasks import QueueRules, QueueStats
from tflux._tflux import QueueInfo, Record, Store

__all__ = ["AsyncStore", "open"]

T = TypeVar("T")

# How long one watcher call waits before it checks whether anyone still waits (seconds).
_WATCH_SLICE = 0.25


class _Watcher:
    """Wakes the coroutines waiting for records of one queue."""

    def __init__(self) -> None:
        self.waiters = 0
        self.event = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class AsyncStore:
    """A :class:`tflux.Store` for asyncio (see the module docstring). Build it with
    :func:`tflux.aio.open`; use it as ``async with``."""

    def __init__(self, opener: Callable[[], tuple[Store, list[str]]], max_workers: int = 4) -> None:
        self._opener = opener
        self._store: Store | None = None
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="tflux-aio")
        self._watchers: dict[str, _Watcher] = {}

    # --- lifetime ---------------------------------------------------------------------------

    async def __aenter__(self) -> AsyncStore:
        if self._store is None:
            self._store, said = await self._run(self._opener)
            warn_at_caller(said)  # on the loop's thread, naming the user's line
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __await__(self):  # ``astore = await tflux.aio.open(base)``
        return self.__aenter__().__await__()

    @property
    def store(self) -> Store:
        """The synchronous store underneath."""
        if self._store is None:
            raise RuntimeError("the AsyncStore is not open yet: use 'async with' or 'await'")
        return self._store

    async def close(self) -> None:
        """Close the store (waiting dequeues raise ``ClosedError``) and the thread pool."""
        if self._store is not None:
            await self._run(self._store.close)
        for w in self._watchers.values():
            if w.task is not None:
                w.task.cancel()
        self._pool.shutdown(wait=False)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    # --- deliveries -------------------------------------------------------------------------

    async def dequeue(
        self, queue: str, timeout: float | None = None, lease: float | None = None
    ) -> Record | None:
        """Take the next record of ``queue``, waiting up to ``timeout`` seconds (``None``: forever;
        0: never). Cancelling it while it waits takes nothing."""
        store = self.store
        if timeout is not None and not timeout >= 0:
            store.dequeue(queue, timeout=timeout)  # raises the store's ArgumentError
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            record = store.dequeue(queue, timeout=0, lease=lease)
            if record is not None:
                return record
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            await self._wait_ready(queue, left)

    async def dequeue_many(
        self, queue: str, n: int, timeout: float | None = None, lease: float | None = None
    ) -> list[Record]:
        """Take up to ``n`` records of ``queue`` (:meth:`tflux.Store.dequeue_many`), waiting up to
        ``timeout`` seconds for the first as :meth:`dequeue` does; ``[]`` when none came.
        Cancelling it while it waits takes nothing."""
        store = self.store
        if timeout is not None and not timeout >= 0:
            store.dequeue_many(queue, n, timeout=timeout)  # raises the store's ArgumentError
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            records = store.dequeue_many(queue, n, timeout=0, lease=lease)
            if records:
                return records
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return []
            await self._wait_ready(queue, left)

    async def _wait_ready(self, queue: str, timeout: float | None) -> None:
        w = self._watchers.get(queue)
        if w is None:
            w = self._watchers[queue] = _Watcher()
        if w.task is None or w.task.done():
            w.event.clear()
            w.task = asyncio.get_running_loop().create_task(self._watch(queue, w))
        w.waiters += 1
        try:
            await asyncio.wait_for(asyncio.shield(w.event.wait()), timeout)
        except TimeoutError:
            pass
        finally:
            w.waiters -= 1
        if w.task.done() and not w.task.cancelled():
            failure = w.task.exception()
            if failure is not None:
                raise failure

    async def _watch(self, queue: str, w: _Watcher) -> None:
        """One pool thread at a time waits (GIL released) for a ready record of ``queue``."""
        try:
            while w.waiters > 0:
                if await self._run(self.store.wait, queue, _WATCH_SLICE):
                    w.event.set()
                    # Let the woken coroutines try their non-blocking dequeue first.
                    await asyncio.sleep(0)
                    w.event.clear()
        except BaseException:
            w.event.set()  # the waiters see the failure (ClosedError...) at once
            raise

    # --- the rest of Store, as coroutines ----------------------------------------------------

    async def create_queue(self, name: str, **kwargs: Any) -> None:
        """:meth:`tflux.Store.create_queue`."""
        await self._run(self.store.create_queue, name, **kwargs)

    async def delete_queue(self, name: str) -> None:
        """:meth:`tflux.Store.delete_queue`."""
        await self._run(self.store.delete_queue, name)

    async def enqueue(
        self,
        queue: str,
        key: int,
        payload: Any,
        *,
        delay: float | None = None,
        at: float | None = None,
    ) -> int:
        """:meth:`tflux.Store.enqueue` (a cancelled call may still have enqueued)."""
        return await self._run(self.store.enqueue, queue, key, payload, delay=delay, at=at)

    async def enqueue_many(
        self,
        queue: str,
        items: Iterable[tuple[int, Any]],
        *,
        delay: float | None = None,
        at: float | None = None,
    ) -> list[int]:
        """:meth:`tflux.Store.enqueue_many` (items are collected before the call)."""
        return await self._run(self.store.enqueue_many, queue, list(items), delay=delay, at=at)

    async def ack(self, record: Record) -> None:
        """:meth:`tflux.Store.ack`."""
        await self._run(self.store.ack, record)

    async def ack_many(self, records: Iterable[Record]) -> None:
        """:meth:`tflux.Store.ack_many`."""
        await self._run(self.store.ack_many, list(records))

    async def nack(self, record: Record, delay: float | None = None) -> None:
        """:meth:`tflux.Store.nack`."""
        await self._run(self.store.nack, record, delay)

    async def extend(self, record: Record, seconds: float) -> None:
        """:meth:`tflux.Store.extend`."""
        await self._run(self.store.extend, record, seconds)

    async def purge(self, queue: str) -> int:
        """:meth:`tflux.Store.purge`."""
        return await self._run(self.store.purge, queue)

    async def stats(self, queue: str) -> QueueStats:
        """:meth:`tflux.Store.stats` (a client asks the owner)."""
        return await self._run(self.store.stats, queue)

    async def set_queue_rules(self, queue: str, **rules: Any) -> None:
        """:meth:`tflux.Store.set_queue_rules` (only the rules named change)."""
        await self._run(self.store.set_queue_rules, queue, **rules)

    async def queue_rules(self, queue: str) -> QueueRules:
        """:meth:`tflux.Store.queue_rules`."""
        return await self._run(self.store.queue_rules, queue)

    async def count(self, queue: str) -> int:
        """:meth:`tflux.Store.count`."""
        return self.store.count(queue)

    async def peek(self, queue: str) -> Record | None:
        """:meth:`tflux.Store.peek`."""
        return self.store.peek(queue)

    async def queues(self) -> list[QueueInfo]:
        """:meth:`tflux.Store.queues`."""
        return self.store.queues()

    async def records(self, queue: str) -> list[Record]:
        """:meth:`tflux.Store.records`."""
        return await self._run(self.store.records, queue)

    async def refresh(self) -> int:
        """:meth:`tflux.Store.refresh`."""
        return await self._run(self.store.refresh)

    async def snapshot(self) -> bool:
        """:meth:`tflux.Store.snapshot`."""
        return await self._run(self.store.snapshot)


def open(base_dir: str | os.PathLike[str], *, max_workers: int = 4, **kwargs: Any) -> AsyncStore:
    """An :class:`AsyncStore` over ``base_dir``; ``kwargs`` go to :func:`tflux.open`. Open it
    with ``async with tflux.aio.open(base) as astore:`` (or ``await tflux.aio.open(base)``)."""
    return AsyncStore(functools.partial(_open_saying, base_dir, **kwargs), max_workers)
