"""The value types of the task-queue layer (issue 44): a queue's rules and its live figures."""

from __future__ import annotations

from typing import NamedTuple


class QueueRules(NamedTuple):
    """A queue's rules (`Store.queue_rules`); None: no such rule. Times in seconds."""

    dead_letter: tuple[str, int] | None
    retry_delay: float | None
    retry_backoff: float | None
    retry_max_delay: float | None
    lease: float | None


class QueueStats(NamedTuple):
    """A queue's live figures (`Store.stats`), from the owner. The counters count since the
    owner opened; `oldest_ready_age` is how long (seconds) the oldest ready record has
    waited, None when no record is ready or the oldest was enqueued before the owner started
    (enqueue times are not logged: docs/format.md)."""

    ready: int
    delayed: int
    in_flight: int
    dead_lettered: int
    oldest_ready_age: float | None
    enqueued: int
    acked: int
    nacked: int
    expired: int
