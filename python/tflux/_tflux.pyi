"""Type stubs of the native module ``tflux._tflux`` (the Rust core's Python face)."""

import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from os import PathLike
from typing import Any, Literal, final

import pyarrow
from typing_extensions import Buffer

from tflux._tasks import QueueRules, QueueStats

__version__: str
# The protocol an owner and its clients speak (a fingerprint of every request and reply).
PROTOCOL_VERSION: int

# The store's words (LogSyncPolicy); "batch" is another name for "interval".
SyncPolicy = Literal["always", "interval", "never", "batch"]
Dialect = Literal["spec", "taskflux"]

@final
class Entry:
    """One log record: its LSN, its Raft term and its data bytes."""

    def __new__(cls, lsn: int, term: int, data: bytes) -> Entry: ...
    @property
    def lsn(self) -> int:
        """The entry's log sequence number."""
    @property
    def term(self) -> int:
        """The Raft term the entry was written in."""
    @property
    def data(self) -> bytes:
        """The entry's data bytes (a delta, in a store's log)."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class SegmentInfo:
    """One segment file of a log."""

    @property
    def name(self) -> str:
        """The file name: the 19-digit zero-padded first LSN plus ``.log`` (or ``.log.z``)."""
    @property
    def path(self) -> str:
        """The file's full path."""
    @property
    def start_lsn(self) -> int:
        """LSN of the segment's first record."""
    @property
    def count(self) -> int:
        """Number of records in the segment."""
    @property
    def last_lsn(self) -> int:
        """``start_lsn + count - 1`` (``start_lsn - 1`` for an empty segment)."""
    @property
    def size(self) -> int:
        """Offset just past the last record (header included, end marker excluded)."""
    @property
    def file_size(self) -> int:
        """Physical size of the file (preallocated segments are larger than ``size``; a
        compressed ``.log.z`` is usually smaller)."""
    @property
    def sealed(self) -> bool:
        """True for every segment but the last one (the one appends go to)."""
    @property
    def compression(self) -> str | None:
        """``"zstd"`` or ``"lz4"`` for a compressed ``.log.z`` segment, else None."""

@final
class RecoveryReport:
    """What opening the log had to do to the tail of the last segment (and what repair moved)."""

    @property
    def truncated(self) -> bool:
        """True when a torn or corrupt tail was cut."""
    @property
    def cut_path(self) -> str | None:
        """The segment that was cut (``None``: nothing was cut)."""
    @property
    def cut_offset(self) -> int | None:
        """Offset where the cut started (``None``: nothing was cut)."""
    @property
    def bytes_cut(self) -> int:
        """Bytes of data discarded after the cut (up to the last non-zero byte)."""
    @property
    def records_kept(self) -> int:
        """Records kept in the segment that was cut."""
    @property
    def reason(self) -> str | None:
        """Why the tail was cut (``None``: nothing was cut)."""
    @property
    def moved(self) -> list[str]:
        """Files put under ``data/temp`` by this open: a copy of the bytes a torn-tail cut
        removed (``cut-...-<segment>.at-<offset>``; none for a cut of zeros or a read-only
        open), and what ``repair=True`` moved aside or backed up."""

@final
class Problem:
    """One finding of :func:`verify`."""

    @property
    def path(self) -> str:
        """The file concerned."""
    @property
    def offset(self) -> int | None:
        """Byte offset in the file, when known."""
    @property
    def kind(
        self,
    ) -> Literal[
        "torn_tail",
        "uninitialised_header",
        "corruption",
        "term_order",
        "gap",
        "overlap",
        "not_regular_file",
        "ignored_file",
        "snapshot_gap",
        "term_above_metadata",
        "settings",
        "replay",
        "io_error",
        "compressed_twin",
        "twin_conflict",
    ]:
        """What was found, as a fixed word programs can test."""
    @property
    def message(self) -> str:
        """A human-readable description of the finding."""
    @property
    def reason(self) -> str:
        """What is wrong, without where: the file and offset are :attr:`path` and
        :attr:`offset` (what a reader prints beside its own location)."""
    @property
    def fatal(self) -> bool:
        """False for a torn tail (the next open trims it) and ignored files."""
    @property
    def lsn(self) -> int | None:
        """The entry concerned, when known (a replay failure)."""
    @property
    def in_log(self) -> bool:
        """Whether it is a problem of a segment file itself, which repair can cut away."""

@final
class VerifyReport:
    """What :func:`verify` found in a log directory."""

    @property
    def path(self) -> str:
        """The log directory that was checked."""
    @property
    def dialect(self) -> Dialect:
        """The dialect its records were read in: ``"spec"`` or ``"taskflux"``."""
    @property
    def segments(self) -> list[SegmentInfo]:
        """Every segment file scanned, in LSN order."""
    @property
    def records(self) -> int:
        """Records scanned, all segments together."""
    @property
    def bytes(self) -> int:
        """Bytes of records scanned (sum of segment sizes)."""
    @property
    def problems(self) -> list[Problem]:
        """Every finding, fatal or not."""
    @property
    def ok(self) -> bool:
        """No fatal problem (a torn tail alone is not fatal)."""

@final
class EntryBatch:
    """A contiguous run of entries in columnar form: a few buffers, not one object per record.

    ``lsn`` and ``term`` are native-endian ``int64``/``int32`` memoryviews, ``offsets`` an ``int32``
    memoryview of ``len(batch) + 1`` positions into ``data`` (Arrow's binary layout).
    """

    def __len__(self) -> int: ...
    def __getitem__(self, index: int, /) -> Entry: ...
    def __iter__(self) -> Iterator[Entry]: ...
    @property
    def lsn(self) -> memoryview:
        """Native-endian ``int64`` LSNs, one per entry."""
    @property
    def term(self) -> memoryview:
        """Native-endian ``int32`` terms, one per entry."""
    @property
    def offsets(self) -> memoryview:
        """``len + 1`` native-endian ``int32`` positions into ``data``."""
    @property
    def data(self) -> bytes:
        """Every entry's data back to back, as ``bytes`` (a copy made on first use; ``data_view``
        and ``to_arrow()`` need none)."""
    @property
    def data_view(self) -> memoryview:
        """``data`` as a read-only memoryview of tflux's buffer (no copy)."""
    @property
    def nbytes(self) -> int:
        """Length of ``data`` in bytes."""
    def _buffers(self) -> list[ColumnBuffer]:
        """The column buffers: lsn, term, offsets, data."""
    def to_arrow(self) -> pyarrow.RecordBatch:
        """Columns ``lsn`` (int64), ``term`` (int32), ``data`` (binary), without copying."""

@final
class EntryIterator:
    """Iterator returned by :meth:`Log.entries` (fetches entries from the core in chunks)."""

    def __iter__(self) -> EntryIterator: ...
    def __next__(self) -> Entry: ...

@final
class Log:
    """The segmented Raft log of one directory (``data/log``). One writer per directory."""

    @staticmethod
    def open(
        path: str | PathLike[str],
        *,
        soft_limit: int = 16 << 20,
        hard_limit: int = 32 << 20,
        preallocate: bool = True,
        sync: SyncPolicy = "always",
        repair: bool = False,
        readonly: bool = False,
        commit_index: int | None = None,
        empty_entries: bool = True,
        sync_interval_ms: int = 100,
        dialect: Dialect | None = None,
        create: bool = False,
    ) -> Log:
        """Open (or create) the log in ``path``.

        A writable open creates ``path`` itself, not its missing parents, as ``mkdir`` does: a
        missing parent raises ``TfluxIOError`` (``ENOENT``) naming it, and nothing is created;
        ``create=True`` also creates the missing parents, as ``mkdir -p``.

        ``dialect`` is how its records are framed (spec section 11): ``None`` detects it from
        the first segment (a new or empty log is ``"spec"``); a choice the files contradict
        raises ``DialectError``.

        ``sync`` uses the store's words (``LogSyncPolicy``): ``"always"`` (fsync before each
        append returns), ``"interval"`` (fsync at roll-over, close and ``sync()``, and in the
        background every ``sync_interval_ms``), ``"never"`` (only ``sync()``); ``"batch"`` is
        another name for ``"interval"``.

        ``empty_entries=False`` refuses empty data and lets recovery treat a trailing empty
        record as a header torn after its term (the two are identical on disk).
        """
    def append(self, term: int, data: bytes) -> int:
        """Append one entry; returns its LSN (durable on return with ``sync="always"``)."""
    def append_many(self, term: int, items: Sequence[bytes]) -> int:
        """Append entries of one term with one write and one sync; returns the first LSN."""
    def insert_range(self, start: int, entries: Sequence[tuple[int, bytes]]) -> None:
        """Follower path: the entries replace the log from ``start`` on (later ones are
        discarded); ``start`` past the end restarts the log there. Committed entries are never
        overwritten (``ValueError``)."""
    def commit(self, lsn: int) -> None:
        """Raise the commit index (never lowers it; past the last LSN: ``ValueError``)."""
    def truncate_after(self, lsn: int) -> None:
        """Drop the uncommitted entries after ``lsn`` (below the commit index: ``ValueError``)."""
    def read(self, start: int, max_bytes: int | None = None) -> list[Entry]:
        """Contiguous entries from ``start``: at least one, then while the data bytes stay
        within ``max_bytes``. ``read(last_index + 1) == []``; compacted LSNs: ``IndexError``."""
    def read_batch(
        self, start: int | None = None, end: int | None = None, max_bytes: int = 4 << 20
    ) -> EntryBatch:
        """Entries ``start..end`` (end exclusive) as columnar buffers, within ``max_bytes``."""
    def entries(self, start: int | None = None, end: int | None = None) -> EntryIterator:
        """Iterate over entries ``start..end`` (end exclusive), fetched in chunks."""
    def read_deltas(
        self,
        start: int | None = None,
        end: int | None = None,
        max_bytes: int = 4 << 20,
        raw: bool = False,
    ) -> DeltaBatch:
        """Entries ``start..end`` decoded into columns (at least one; bad data: CorruptionError)."""
    def term_at(self, lsn: int) -> int:
        """Term of the entry at ``lsn`` (outside the log: ``IndexError``)."""
    def compress(self, method: str = "zstd") -> list[str]:
        """Replace every sealed segment not yet compressed by ``NNN.log.z`` (``"zstd"`` or
        ``"lz4"``; spec section 9, crash-safe); never the active segment. Returns the new files."""
    def compressible(self) -> list[int]:
        """First LSNs of the sealed segments not yet compressed."""
    def compress_one(self, first_lsn: int, method: str = "zstd") -> str | None:
        """Compress the sealed segment starting at ``first_lsn``; None when there is none to
        compress (compacted, already compressed, or the active segment)."""
    def compact(self, snapshot_index: int) -> int:
        """Delete the leading sealed segments whose entries are all ``<= snapshot_index`` (which
        must be committed); returns how many files were deleted."""
    def sync(self) -> None:
        """Make every written entry durable (fsync of the active segment)."""
    def close(self) -> None:
        """Sync per policy and release the directory lock; later calls raise ``ClosedError``."""
    @property
    def path(self) -> str:
        """The log directory, as given to ``open``."""
    @property
    def closed(self) -> bool:
        """True after ``close()``."""
    @property
    def readonly(self) -> bool:
        """True when opened with ``readonly=True`` (writes are refused)."""
    @property
    def dialect(self) -> Dialect:
        """How its records are framed: ``"spec"`` or ``"taskflux"`` (spec section 11)."""
    @property
    def start_index(self) -> int:
        """LSN of the first entry held (of the first segment, even when it is empty)."""
    @property
    def last_index(self) -> int:
        """LSN of the last entry; ``start_index - 1`` when the log holds none."""
    @property
    def commit_index(self) -> int:
        """The highest committed LSN (raised by ``commit``, never lowered)."""
    @property
    def last_entry(self) -> tuple[int, int] | None:
        """``(lsn, term)`` of the last entry; ``None`` when the log holds none."""
    @property
    def segments(self) -> list[SegmentInfo]:
        """Every segment file, in LSN order."""
    @property
    def recovery(self) -> RecoveryReport:
        """What opening had to do to the tail of the last segment."""
    def __len__(self) -> int: ...
    def __enter__(self) -> Log: ...
    def __exit__(self, *exc: object) -> None: ...

def verify(path: str | PathLike[str], *, dialect: Dialect | None = None) -> VerifyReport:
    """Check every record of every segment without writing anything (``dialect=None``: the
    dialect the first segment says, ``"spec"`` when it says nothing)."""

def crc32(data: bytes) -> int:
    """CRC-32 (ISO-HDLC) as used by every tflux checksum."""

def crc32_mpeg2(data: bytes) -> int:
    """CRC-32/MPEG-2, the checksum of the taskflux dialect (spec section 11)."""

# ----- queues -----

Implementation = Literal["heap", "array"]

IMPLEMENTATIONS: Mapping[int, str]
"""Queue implementation codes (as in deltas and snapshots) to names: ``{1: "heap", 2: "array"}``."""

SETTINGS_KEYWORDS: Mapping[str, str]
"""``tflux.open``'s setting keyword arguments to the settings file's keys, in the core's order:
``{"log_file_soft_limit": "LogFileSoftLimit", ...}``."""

@final
class Record:
    """A queued message: ``id`` (unique in its queue), ``key``, ``payload``, ``queue``.

    A record returned by ``dequeue`` remembers which life of its queue handed it out, so it
    cannot settle a delivery after the queue was re-created or the store reopened.
    """

    def __new__(
        cls,
        id: int,
        key: int,
        payload: bytes,
        queue: str,
        _incarnation: int | None = None,
        _attempts: int = 0,
        _enqueued_at_ms: int | None = None,
    ) -> Record: ...
    @property
    def id(self) -> int:
        """Unique in its queue; ids grow with each enqueue and are never reused."""
    @property
    def key(self) -> int:
        """The priority: smaller keys are dequeued first (a signed 64-bit int)."""
    @property
    def payload(self) -> bytes:
        """The message bytes."""
    @property
    def queue(self) -> str:
        """The name of the queue the record belongs to."""
    @property
    def attempts(self) -> int:
        """Deliveries of the record so far, this one included; for a record listed by
        ``peek``/``records``/``iter_records``, its failed deliveries so far (0: never
        delivered, or built by hand). Exact across restarts and dead takers on a queue with a
        dead-letter rule; otherwise counted since the owner started."""
    @property
    def enqueued_at(self) -> float | None:
        """When the record was enqueued (unix seconds, to the millisecond), as the owner that
        handed it out (or listed it: ``peek``, ``records``) saw it; ``None`` when it was
        enqueued before that owner started (a restart, a takeover: not logged), the store is
        read-only, or the record was built by hand."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class QueueInfo:
    """A summary of one queue (``Store.queues()``); picklable."""

    def __new__(
        cls,
        name: str,
        implementation: Implementation = "heap",
        count: int = 0,
        in_flight: int = 0,
        last_id: int = 0,
        max_size: int | None = None,
        max_message_size: int | None = None,
        key_range: tuple[int, int] | None = None,
    ) -> QueueInfo: ...
    @property
    def name(self) -> str:
        """The queue's name; ``""`` is the default queue."""
    @property
    def implementation(self) -> Implementation:
        """``"heap"`` (any key) or ``"array"`` (one FIFO per key of ``key_range``)."""
    @property
    def count(self) -> int:
        """Ready records (what ``max_size`` limits); in-flight records are not counted."""
    @property
    def in_flight(self) -> int:
        """Dequeued records not yet acked or nacked."""
    @property
    def last_id(self) -> int:
        """The id given to the newest record (0: none yet)."""
    @property
    def max_size(self) -> int | None:
        """The most ready records the queue accepts (``None``: no limit)."""
    @property
    def max_message_size(self) -> int | None:
        """The largest payload in bytes (``None``: no limit)."""
    @property
    def key_range(self) -> tuple[int, int] | None:
        """``(min, max)`` keys the queue accepts (``None``: any key)."""
    def __eq__(self, other: object, /) -> bool: ...

DeltaKind = Literal[
    "create_queue",
    "delete_queue",
    "add_record",
    "remove_record",
    "queue_rules",
    "add_later",
    "delivered",
    "failed",
    "purge",
]

@final
class Delta:
    """One delta (the data of a log record). Fields of other kinds are ``None``."""

    @staticmethod
    def create_queue(
        queue: str,
        implementation: int = 1,
        max_queue_size: int | None = None,
        max_message_size: int | None = None,
        key_range: tuple[int, int] | None = None,
    ) -> Delta:
        """Implementation 1 is the heap, 2 the array; ``None`` sizes: no limit (-1 on disk)."""
    @staticmethod
    def delete_queue(queue: str) -> Delta:
        """A delta that deletes queue ``queue`` with its records."""
    @staticmethod
    def add_record(queue: str, key: int, message: bytes) -> Delta:
        """A delta that adds a record with priority ``key`` to ``queue``."""
    @staticmethod
    def remove_record(queue: str, record_id: int) -> Delta:
        """A delta that removes record ``record_id`` from ``queue`` (an ack)."""
    @property
    def kind(self) -> DeltaKind:
        """``"create_queue"``, ``"delete_queue"``, ``"add_record"`` or ``"remove_record"``."""
    @property
    def queue(self) -> str:
        """Queue name; ``""`` is the default queue."""
    @property
    def implementation(self) -> int | None:
        """``create_queue``: 1 (heap) or 2 (array)."""
    @property
    def max_queue_size(self) -> int | None:
        """``create_queue``: the most ready records (``None``: no limit)."""
    @property
    def max_message_size(self) -> int | None:
        """``create_queue``: the largest payload in bytes (``None``: no limit)."""
    @property
    def key_range(self) -> tuple[int, int] | None:
        """``create_queue``: ``(min, max)`` keys accepted (``None``: any key)."""
    @property
    def key(self) -> int | None:
        """``add_record``: the record's priority."""
    @property
    def message(self) -> bytes | None:
        """``add_record``: the record's payload."""
    @property
    def record_id(self) -> int | None:
        """``remove_record``: the id of the record removed."""
    @property
    def due(self) -> int | None:
        """AddLater: not before; Failed: due (unix milliseconds)."""
    @property
    def kept_ids(self) -> list[int] | None:
        """Purge: the ids of the records kept (in flight at the purge)."""
    @property
    def rules(self) -> dict[str, Any] | None:
        """QueueRules: the rules it changes by name (None: cleared); unchanged rules are absent."""
    def encode(self) -> bytes:
        """The delta's bytes (the data of a log record)."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Store:
    """The embedded durable priority queue of one base directory (see ``tflux.open``).

    Every change (create/delete queue, enqueue, ack) is logged before the call returns and made
    durable per ``LogSyncPolicy``; the state is rebuilt from the snapshot and the log on open.
    Dequeue and nack write nothing unless a queue rule needs it (a dead-letter rule logs each
    delivery, a delayed retry logs the failure): a dequeued record is *in flight* until acked,
    and comes back after a restart if it never was (at-least-once delivery). Methods are
    thread-safe and release the GIL while they work or wait. Use the store as a context manager,
    or call ``close()``.
    """

    @staticmethod
    def _open(
        base_dir: str,
        settings_json: str | None = None,
        readonly: bool = False,
        lock_timeout: float | None = None,
        dialect: Dialect | None = None,
        share: bool = True,
        create: bool = False,
    ) -> Store:
        """Use ``tflux.open``; ``settings_json`` holds the PascalCase setting overrides."""
    @property
    def dialect(self) -> Dialect:
        """The base directory's dialect: ``"spec"`` or ``"taskflux"`` (spec section 11)."""
    @property
    def is_owner(self) -> bool:
        """True in the process that owns the base directory (holds its writer lock and serves
        the other processes); False in a client of the owner and in a read-only store. A
        client becomes the owner by itself when the owner goes."""
    @property
    def owner_pid(self) -> int:
        """The process id of the directory's owner (this process's own when ``is_owner``)."""
    def create_queue(
        self,
        name: str,
        implementation: Implementation = "heap",
        max_size: int | None = None,
        max_message_size: int | None = None,
        key_range: tuple[int, int] | None = None,
        *,
        exist_ok: bool = False,
        dead_letter: tuple[str, int] | None = None,
        retry_delay: float | None = None,
        retry_backoff: float | None = None,
        retry_max_delay: float | None = None,
        lease: float | None = None,
    ) -> None:
        """Create queue ``name`` (printable ASCII without spaces, 1-255 bytes).

        Task-queue rules (logged with the queue; spec dialect): ``dead_letter=(queue, n)`` moves a
        record there after its n-th failed delivery, ``retry_delay`` seconds (x ``retry_backoff``
        per further failure, capped by ``retry_max_delay``) before a failed record is ready
        again, ``lease`` the default lease of a delivery.

        ``implementation`` is ``"heap"`` (any key) or ``"array"`` (one FIFO per key; needs
        ``key_range=(min, max)``). ``max_size`` limits the ready records, ``max_message_size`` the
        payload bytes (``None``: no limit). An existing name raises ``QueueExistsError``, unless
        ``exist_ok`` and the queue has exactly these settings (then nothing is written); a bad
        argument ``ArgumentError``.
        """
    def delete_queue(self, name: str) -> None:
        """Delete queue ``name`` with its records (logged). The default queue ``""`` stays."""
    def enqueue(
        self,
        queue: str,
        key: int,
        payload: Buffer,
        *,
        delay: float | None = None,
        at: float | None = None,
    ) -> int:
        """Add a record with priority ``key`` (smallest first; a signed 64-bit int) and return
        its id. ``payload`` is bytes or any bytes-like object. Policies of the queue are checked
        first (``PolicyViolation``; nothing is written). ``delay`` (seconds from now) or ``at``
        (unix seconds): the record is not delivered before then (spec dialect)."""
    def enqueue_many(
        self,
        queue: str,
        items: Iterable[tuple[int, Buffer]],
        *,
        delay: float | None = None,
        at: float | None = None,
    ) -> list[int]:
        """Add several ``(key, payload)`` records with one log write and one fsync; returns their
        ids. ``items`` may be any iterable (a generator too). All or none: one record refused by
        a policy refuses the batch. ``delay`` (seconds from now) or ``at`` (unix seconds): none
        of them is delivered before then (spec dialect)."""
    def dequeue(
        self, queue: str, timeout: float | None = None, lease: float | None = None
    ) -> Record | None:
        """Take the next record (smallest key, then oldest) of ``queue``.

        ``timeout=None`` (the default) waits forever for a record to arrive; ``timeout=0`` never
        waits; otherwise it waits up to ``timeout`` seconds and returns ``None`` when nothing
        came. The wait releases the GIL and handles Ctrl-C.

        The record is in flight until ``ack`` (logged: gone for good) or ``nack`` (back in the
        queue). With ``lease=seconds``, a record neither acked nor nacked within the lease goes
        back by itself (a visibility timeout; counted as a failed delivery for ``DeadLetter``),
        and ``ack``/``nack`` of that delivery raise ``NotInFlightError`` until it is dequeued
        again. Leases are not logged: after a restart every un-acked record is ready anyway.
        Read-only stores refuse it (``ReadOnlyError``).
        """
    def dequeue_many(
        self, queue: str, n: int, timeout: float | None = None, lease: float | None = None
    ) -> list[Record]:
        """Take up to ``n`` records of ``queue`` in one call: waits like ``dequeue`` for the first
        (``timeout``, ``lease`` and due times alike), then takes up to ``n - 1`` more ready ones
        without waiting; ``[]`` when nothing came in time. Each record is its own delivery (its
        own lease, ``attempts`` and receipt: ack, nack or extend them one by one, or
        ``ack_many``). A client gets them in one round trip; on a queue with a dead-letter rule
        their deliveries are counted with one logged write, durable before they are returned.
        ``n < 1`` raises ``ArgumentError``; a larger ``n`` than 1024, or a record that would
        carry the batch's payloads past 16 MiB (one larger record comes alone), make a smaller
        batch. Read-only stores refuse it (``ReadOnlyError``)."""
    def wait(self, queue: str, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (``None``: forever) until ``queue`` has a ready record,
        without taking it; ``True`` when one is ready. Another consumer may take it first, so
        callers retry ``dequeue(queue, timeout=0)`` (``tflux.aio`` waits this way)."""
    def ack(self, record: Record) -> None:
        """Acknowledge an in-flight record: logs its removal and makes it durable. A record that
        is not in flight (acked, nacked, lease expired, queue re-created, store reopened) raises
        ``NotInFlightError`` and writes nothing."""
    def ack_many(self, records: Sequence[Record]) -> None:
        """Acknowledge several records with one log write and one fsync (all or none)."""
    def set_queue_rules(
        self,
        queue: str,
        *,
        dead_letter: tuple[str, int] | None = ...,
        retry_delay: float | None = ...,
        retry_backoff: float | None = ...,
        retry_max_delay: float | None = ...,
        lease: float | None = ...,
    ) -> None:
        """Change the rules named (``None`` clears one); the others stay (logged)."""
    def queue_rules(self, queue: str) -> QueueRules:
        """The rules of ``queue``."""
    def extend(self, record: Record, seconds: float) -> None:
        """The lease of ``record``'s delivery now ends ``seconds`` from now
        (``NotInFlightError`` when the delivery is over)."""
    def purge(self, queue: str) -> int:
        """Remove every ready and delayed record of ``queue`` (one logged write); how many."""
    def stats(self, queue: str) -> QueueStats:
        """The owner's live figures of ``queue``."""
    def nack(self, record: Record, delay: float | None = None) -> None:
        """Put an in-flight record back where it was (same id, so before later records of the
        same key): a failed delivery. ``delay=None`` follows the queue's retry rule (none: ready
        at once), ``delay=0`` makes it ready now, another number ready in that many seconds (a
        delayed retry is logged). Under a dead-letter rule the record's N-th failed delivery
        moves it to the dead-letter queue instead (logged). Otherwise nothing is written.
        Read-only stores refuse it."""
    def count(self, queue: str) -> int:
        """Ready records of ``queue`` (in-flight records are not counted; a delayed record
        counts once it is due, in a writable store)."""
    def peek(self, queue: str) -> Record | None:
        """The record ``dequeue`` would take next, without taking it (``None``: none ready)."""
    def iter_records(self, queue: str) -> RecordIter:
        """An iterator over the ready records of ``queue`` in dequeue order: a copy taken now,
        handed out one ``Record`` at a time. Nothing is dequeued."""
    def queues(self) -> list[QueueInfo]:
        """A summary of every queue, sorted by name (the default queue ``""`` first)."""
    def records(self, queue: str) -> list[Record]:
        """Ready records of ``queue`` in dequeue order (nothing is dequeued)."""
    def refresh(self) -> int:
        """Read-only stores: apply what the writer logged since the open or the last refresh
        and return how many deltas were applied (after the writer compacted records this store
        never saw, it reloads from the snapshot instead). A writable store raises
        ``ArgumentError``: it is always current."""
    def snapshot(self) -> bool:
        """Write a snapshot and compact the log; ``False`` when nothing was logged since the
        last one."""
    def close(self) -> None:
        """Sync, release the writer lock and wake waiting dequeues (they raise ``ClosedError``).
        Idempotent; later calls raise ``ClosedError``."""
    @property
    def path(self) -> str:
        """The base directory, as given to ``tflux.open``."""
    @property
    def replayed(self) -> int:
        """Deltas replayed from the log when the store was opened."""
    @property
    def restored_snapshot_index(self) -> int | None:
        """Last index of the snapshot the store was restored from (``None``: no snapshot)."""
    @property
    def moved_aside(self) -> list[str]:
        """Files put into ``data/temp`` at open: a copy of the bytes a torn-tail cut removed,
        and segments moved because the snapshot was ahead of the whole log."""
    @property
    def log_bounds(self) -> tuple[int, int, int]:
        """``(start_index, last_index, snapshot_index)`` of the log right now."""
    @property
    def term(self) -> int:
        """The current Raft term (from the metadata file)."""
    @property
    def settings(self) -> dict[str, int | bool | str | dict[str, Any]]:
        """The settings in force: PascalCase keys, values typed as in the JSON file."""
    @property
    def settings_warning(self) -> str | None:
        """Why a read-only open ignored a bad settings file (the defaults are in force)."""
    def __enter__(self) -> Store: ...
    def __exit__(self, *exc: object) -> None: ...

@final
class RecordIter:
    """Ready records of one queue handed out one at a time (``Store.iter_records``)."""

    def __iter__(self) -> RecordIter: ...
    def __next__(self) -> Record: ...
    def __length_hint__(self) -> int:
        """Records not yet handed out."""

def owner_holds(base_dir: str | PathLike[str]) -> bool:
    """Whether a process (this one included) owns the base directory ``base_dir`` now: a
    probe of its owner lock, released at once (nothing is created; a directory that does not
    exist has no owner). The rule ``tflux.open`` applies to choose between owner and client."""

def load_settings(
    base_dir: str, settings_json: str | None = None, readonly: bool = False
) -> tuple[dict[str, int | bool | str | dict[str, Any]], str | None]:
    """Settings in force for ``base_dir`` (PascalCase keys, typed values) and, with
    ``readonly=True``, the warning of a bad settings file (then ignored), without opening
    anything."""

@final
class QueueState:
    """The queue state machine alone: apply deltas or replay a log without a store."""

    def __init__(self) -> None: ...
    def apply(self, data: bytes, lsn: int | None = None) -> None:
        """Decode and apply one delta (``lsn`` names it in a ``ReplayError``)."""
    def replay(self, log: Log, start: int | None = None) -> int:
        """Apply every entry of ``log`` from ``start`` (default: its start); returns how many."""
    def queues(self) -> list[QueueInfo]:
        """A summary of every queue, sorted by name."""
    def records(self, queue: str) -> list[Record]:
        """Ready records of ``queue`` in dequeue order."""
    def __len__(self) -> int: ...

def encode_delta(delta: Delta) -> bytes:
    """The bytes of a delta (same as ``delta.encode()``)."""

def decode_delta(data: bytes) -> Delta:
    """Decode a log record's data; bad bytes raise ``CorruptionError`` with ``offset``."""

@final
class SnapshotQueue:
    """One queue of a snapshot; ``records`` are ``(id, key, data)`` kept in ascending id order."""

    def __new__(
        cls,
        name: str,
        implementation: int = 1,
        last_id: int = 0,
        max_queue_size: int | None = None,
        max_message_size: int | None = None,
        key_range: tuple[int, int] | None = None,
        records: Iterable[tuple[int, int, bytes]] | None = None,
    ) -> SnapshotQueue: ...
    @property
    def name(self) -> str:
        """The queue's name; ``""`` is the default queue."""
    @property
    def implementation(self) -> int:
        """1 (heap) or 2 (array)."""
    @property
    def last_id(self) -> int:
        """The id given to the queue's newest record (0: none yet)."""
    @property
    def max_queue_size(self) -> int | None:
        """The most ready records (``None``: no limit)."""
    @property
    def max_message_size(self) -> int | None:
        """The largest payload in bytes (``None``: no limit)."""
    @property
    def key_range(self) -> tuple[int, int] | None:
        """``(min, max)`` keys accepted (``None``: any key)."""
    @property
    def records(self) -> list[tuple[int, int, bytes]]:
        """``(id, key, data)`` tuples in ascending id order."""
    def __eq__(self, other: object, /) -> bool: ...

@final
class Snapshot:
    """The queue state up to ``last_index``; must hold the default queue (``""``)."""

    def __new__(
        cls, last_index: int, last_term: int, queues: Iterable[SnapshotQueue]
    ) -> Snapshot: ...
    @property
    def last_index(self) -> int:
        """LSN of the last log entry the snapshot includes."""
    @property
    def last_term(self) -> int:
        """Term of that entry."""
    @property
    def queues(self) -> list[SnapshotQueue]:
        """The queues, in file order."""
    def __eq__(self, other: object, /) -> bool: ...

def read_snapshot(path: str | PathLike[str], *, dialect: Dialect | None = None) -> Snapshot | None:
    """Read a snapshot file; ``None`` when it is absent or empty (0 bytes). ``dialect=None``
    reads the dialect its header says (else ``"spec"``)."""

def write_snapshot(
    path: str | PathLike[str],
    last_index: int,
    last_term: int,
    queues: Iterable[SnapshotQueue],
    *,
    dialect: Dialect = "spec",
) -> None:
    """Atomically replace ``path`` (written under ``<parent>/temp/``, or ``temporary/`` in the
    taskflux dialect; fsynced, renamed).

    Refuses (``ValueError``) every snapshot ``tflux.open`` would refuse. Index and term are
    ``0..2**63-1``; past Int32 the spec dialect writes the wide layout (spec 4.1)."""

@final
class Metadata:
    """Raft term and vote of this node (``voted_for`` None = no vote; -1 is accepted as None)."""

    def __new__(cls, term: int, voted_for: int | None = None) -> Metadata: ...
    @property
    def term(self) -> int:
        """The current Raft term."""
    @property
    def voted_for(self) -> int | None:
        """The node voted for in this term (``None``: no vote)."""
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

def read_metadata(path: str | PathLike[str], *, dialect: Dialect | None = None) -> Metadata:
    """Read a metadata file; absent or empty means term 1, no vote. ``dialect=None`` reads the
    dialect its length and checksum say (24 bytes: ``"taskflux"``), else ``"spec"``."""

def write_metadata(
    path: str | PathLike[str],
    term: int,
    voted_for: int | None = None,
    *,
    dialect: Dialect = "spec",
) -> None:
    """Atomically replace ``path`` (written under ``<parent>/temp/``, or ``temporary/`` in the
    taskflux dialect; fsynced, renamed, directory fsynced): 20 bytes, or TaskFlux's 24."""

# ----- columnar (Arrow) views -----

@final
class ColumnBuffer:
    """Read-only memory owned by tflux (one column of a batch), exposed through the buffer
    protocol: ``memoryview(buf)`` and ``pyarrow.py_buffer(buf)`` wrap it without copying, and keep
    it alive after the log is closed or its files are gone."""

    def __len__(self) -> int:
        """Number of items."""
    @property
    def nbytes(self) -> int:
        """Size in bytes."""
    @property
    def format(self) -> str:
        """Struct format of one item: ``"B"``, ``"i"`` (int32) or ``"q"`` (int64), native order."""
    def tobytes(self) -> bytes:
        """A copy as ``bytes``."""
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class DeltaBatch:
    """Decoded log entries as Arrow-layout buffers (the Spark and Parquet path)."""

    def __len__(self) -> int: ...
    def _buffers(
        self,
    ) -> list[tuple[str, tuple[str, ColumnBuffer | None, ColumnBuffer, ColumnBuffer | None]]]: ...
    def to_arrow(self) -> pyarrow.RecordBatch:
        """Columns lsn, term, kind, queue, key, record_id, message, implementation,
        max_queue_size, max_message_size, key_min, key_max (and data when raw)."""

@final
class SnapshotBatch:
    """A snapshot's records as Arrow-layout buffers."""

    def __len__(self) -> int: ...
    @property
    def last_index(self) -> int:
        """LSN of the last log entry the snapshot includes."""
    @property
    def last_term(self) -> int:
        """Term of that entry."""
    @property
    def queues(self) -> list[dict[str, Any]]:
        """Every queue (with or without records): name, implementation, last_id,
        max_queue_size, max_message_size, key_range."""
    @property
    def task_queues(self) -> list[str]:
        """Queues whose task-queue state (rules, delayed records, delivery counts; spec 12) a
        task-layout snapshot holds, by name (empty for other snapshots)."""
    @property
    def rules(self) -> dict[str, str]:
        """Each of ``task_queues``' rules as JSON text, every rule named (``null``: none):
        ``dead_letter`` ``[queue, deliveries]``, ``retry_delay_ms``, ``retry_backoff`` (in
        millionths), ``retry_max_delay_ms``, ``lease_ms`` (the log columns' ``rules`` text)."""
    def _buffers(
        self, tasks: bool = False
    ) -> list[tuple[str, tuple[str, ColumnBuffer | None, ColumnBuffer, ColumnBuffer | None]]]: ...
    def to_arrow(self, tasks: bool = False) -> pyarrow.RecordBatch:
        """Columns queue, implementation, record_id, key, message; with ``tasks=True`` also
        ``due`` (int64: unix ms of a delayed record, null when ready) and ``attempts`` (int32:
        its counted deliveries, 0 when none), from a task-layout snapshot (spec 12; every
        record ready and 0 in other snapshots). Without it the schema is the same for every
        layout."""

def read_segment_deltas(
    path: str | PathLike[str],
    *,
    last: bool = False,
    from_lsn: int | None = None,
    to_lsn: int | None = None,
    raw: bool = False,
    dialect: Dialect | None = None,
) -> DeltaBatch:
    """Decode one segment file alone (no log opened); ``to_lsn`` is inclusive. ``dialect=None``
    reads the dialect its first record says (else ``"spec"``)."""

def read_snapshot_batch(
    path: str | PathLike[str], *, dialect: Dialect | None = None
) -> SnapshotBatch | None:
    """Read a snapshot file into columns; ``None`` when absent or empty."""

@final
class Layout:
    """The paths of a base directory (spec section 1) in its dialect; nothing is created.

    ``dialect=None`` uses the dialect the directory's files say (``"spec"`` when they say
    nothing); files that disagree, or a written record no file can decide, raise
    ``DialectError``."""

    def __new__(
        cls, base: str | PathLike[str], dialect: Dialect | None = None, *, detect: bool = True
    ) -> Layout:
        """``detect=False`` reads no file: the paths of ``dialect`` (``"spec"`` when None)."""
    @property
    def dialect(self) -> Dialect:
        """``"spec"`` or ``"taskflux"``: says the temp directory and the files' layouts."""
    @property
    def base(self) -> str:
        """The base directory, as given."""
    @property
    def data(self) -> str:
        """``<base>/data``."""
    @property
    def log(self) -> str:
        """``<base>/data/log``: the segments."""
    @property
    def temp(self) -> str:
        """``<base>/data/temp`` (``data/temporary`` in the taskflux dialect): files being
        written, and files repair moved aside."""
    @property
    def snapshot(self) -> str:
        """``<base>/data/tflux.snapshot``."""
    @property
    def metadata(self) -> str:
        """``<base>/data/tflux.metadata``."""
    @property
    def settings(self) -> str:
        """``<base>/taskflux.settings.json``."""

@final
class BaseReport:
    """What :func:`verify_base` found."""

    @property
    def path(self) -> str:
        """The base directory that was checked."""
    @property
    def layout(self) -> Layout:
        """The paths of that directory."""
    @property
    def dialect(self) -> Dialect:
        """The dialect it was checked in: ``"spec"`` or ``"taskflux"``."""
    @property
    def ok(self) -> bool:
        """True exactly when a read-only ``tflux.open`` succeeds (and, with replay, restores)."""
    @property
    def problems(self) -> list[Problem]:
        """Every finding: settings, metadata, snapshot, each segment, their agreement, replay."""
    @property
    def segments(self) -> list[SegmentInfo]:
        """Every segment file of the log, in LSN order."""
    @property
    def records(self) -> int:
        """Records scanned, all segments together."""
    @property
    def bytes(self) -> int:
        """Bytes of records scanned (sum of segment sizes)."""
    @property
    def log_bounds(self) -> tuple[int, int] | None:
        """``(first, last)`` LSN of the log as a read-only open holds it; ``None`` when the log is
        damaged."""
    @property
    def continuity(
        self,
    ) -> Literal["from_zero", "continues", "snapshot_ahead", "gap", "unknown"]:
        """How the log meets the snapshot, by the restore's rule: no snapshot and the log starts
        at 0; the log continues it; the snapshot is ahead of the whole log (the log restarts
        after it); LSNs are missing (refused); or unknown (the snapshot or the log is
        unreadable)."""
    @property
    def metadata(self) -> Metadata | None:
        """The metadata file's content; ``None`` when it could not be read."""
    @property
    def metadata_present(self) -> bool:
        """Whether the metadata file exists (absent means the defaults)."""
    @property
    def snapshot(self) -> tuple[int, int, int, int] | None:
        """``(last_index, last_term, queues, records)``; None without a snapshot."""
    @property
    def snapshot_queues(self) -> list[dict[str, Any]] | None:
        """The snapshot's queues by name, without their records: name, implementation,
        records (a count), last_id, max_queue_size, max_message_size (None: no limit) and
        key_range; None without a snapshot."""
    @property
    def queues(self) -> list[QueueInfo] | None:
        """The rebuilt queues (``replay=True`` and no fatal finding before the replay), else
        ``None``."""
    @property
    def replayed(self) -> int | None:
        """Deltas replayed onto the snapshot's state (``None``: no replay was done)."""
    @property
    def log_seconds(self) -> float:
        """Seconds spent scanning the log."""
    @property
    def replay_seconds(self) -> float:
        """Seconds spent replaying the log (0 without a replay)."""

def verify_base(
    base: str | PathLike[str],
    *,
    replay: bool = True,
    dialect: Dialect | None = None,
    progress: Callable[[int], object] | None = None,
) -> BaseReport:
    """Check a base directory exactly as a restore does, reading only (``dialect=None``:
    detected from its files). ``progress`` is called on this thread about ten times a second
    with the bytes of segment files the log's scan has read (an exception it raises is raised
    once the check is done)."""

@final
class ConvertReport:
    """What :func:`convert` did."""

    @property
    def source(self) -> str:
        """The base directory that was read."""
    @property
    def destination(self) -> str:
        """The base directory that was written."""
    @property
    def from_dialect(self) -> Dialect:
        """The source's dialect."""
    @property
    def to_dialect(self) -> Dialect:
        """The destination's dialect."""
    @property
    def entries(self) -> int:
        """Log entries converted."""
    @property
    def segments(self) -> int:
        """Segment files written (each keeps its source's name)."""
    @property
    def bytes_read(self) -> int:
        """Bytes of the source's segments (records)."""
    @property
    def bytes_written(self) -> int:
        """Bytes of the destination's segments."""
    @property
    def snapshot(self) -> bool:
        """Whether a snapshot was written."""
    @property
    def metadata(self) -> bool:
        """Whether a metadata file was written."""
    @property
    def torn_tail(self) -> tuple[str, int] | None:
        """``(path, offset)`` of the source's torn tail, which was not converted."""
    @property
    def leftovers_removed(self) -> list[str]:
        """Half-built copies of the destination that conversions killed before cleaning up
        left beside it (no process held their lock): removed before this one started."""
    @property
    def fingerprint(self) -> int:
        """A hash of every entry's LSN, term, length and data checksum (in the destination's
        dialect), computed from the source and found again in the copy."""
    @property
    def seconds(self) -> float:
        """Wall time of the whole conversion, verification included."""

def convert(
    src: str | PathLike[str],
    dst: str | PathLike[str],
    *,
    to: Dialect,
    dialect: Dialect | None = None,
    create: bool = False,
    progress: Callable[[int, int], object] | None = None,
) -> ConvertReport:
    """Write the base directory ``src`` again as the new base directory ``dst`` in the dialect
    ``to`` (log, snapshot, metadata, settings); ``src`` is only read (``dialect``: its
    dialect, ``None`` detects it). ``dst`` must not exist or be an empty directory, apart from
    ``src`` (neither inside the other); its parent must exist (else ``TfluxIOError`` naming
    it, nothing made), unless ``create=True`` makes the missing parents, as ``mkdir -p``. The
    copy is built beside it, fsynced, verified and compared with the source before it is
    renamed into place, so a failure (or an exception raised by ``progress(done, total)``,
    called after each segment with bytes of the log) leaves no ``dst``."""

def create_named_dir(path: str | PathLike[str], *, create: bool = False) -> None:
    """Make the directory ``path`` as a writable open makes a base, as ``mkdir`` does: ``path``
    itself when its parent exists; else ``TfluxIOError`` (ENOENT, ``.path`` the parent) and
    nothing made, unless ``create=True`` makes the missing parents too. An existing directory
    is left as it is. For the writers of a directory a user names (``tflux.parquet.export``)."""

def dialect_of(path: str | PathLike[str], *, dialect: Dialect | None = None) -> Dialect:
    """The dialect of ``path`` (a base directory, a log directory or one file), agreeing with
    ``dialect`` (spec section 11): what its files say, else ``dialect``, else ``"spec"``.
    Files that disagree raise ``DialectError``."""

@final
class Located:
    """What a path handed to a reader is (:func:`locate`): the core's one answer, for the CLI
    and the Spark reader."""

    @property
    def path(self) -> str:
        """The path as given, made absolute (a symlink keeps its name, ``.`` is dropped)."""
    @property
    def kind(self) -> Literal["base", "log", "bare_log", "segment", "snapshot"]:
        """A base directory, its ``data/log``, a log directory outside a base, one segment
        file (``NNN.log`` or ``.log.z``), or any other file (read as a snapshot file)."""
    @property
    def base(self) -> str | None:
        """The base directory it is or belongs to; None outside one."""
    @property
    def log(self) -> str | None:
        """The log directory a reader reads; None when there is none."""
    @property
    def snapshot(self) -> str | None:
        """The snapshot file a reader reads, when it exists."""
    @property
    def segments(self) -> list[int] | None:
        """First LSNs of the segments chosen (a segment path: that one); None: every one."""
    @property
    def dialect(self) -> Dialect:
        """What its files say (the base's, else the log's or the file's)."""
    def open_log(self) -> Log:
        """A read-only :class:`Log` over the chosen segments (every segment when none)."""

def locate(path: str | PathLike[str], *, dialect: Dialect | None = None) -> Located:
    """What ``path`` is, its base and log directories, its snapshot file and its dialect
    (agreeing with ``dialect``; files that disagree raise ``DialectError``, a missing path
    ``TfluxIOError``)."""

def open_segments(
    log_dir: str | PathLike[str], first_lsns: list[int], *, dialect: Dialect | None = None
) -> Log:
    """A read-only :class:`Log` over the segments of ``log_dir`` starting at ``first_lsns``
    only (the ``.log.z`` of one compressed since). Its last segment is read as a log's last:
    a torn tail is in :attr:`Log.recovery`, not refused. Errors name the real files."""

def base_kind(base: str | PathLike[str]) -> Literal["store", "channel"] | None:
    """What ``base`` is: ``"store"`` (it holds a metadata file or a snapshot), ``"channel"``
    (it holds ``data/cursors``) or None (neither yet). Both at once raises ``CorruptionError``;
    ``tflux.open`` and ``Channel.open`` each refuse the other's directory."""

def segment_files(log_dir: str | PathLike[str]) -> list[str]:
    """The segment files of ``log_dir`` in LSN order, one path per segment (the ``.log.z`` when
    both files of a segment exist), as the core lists them; names that are not segment names
    are left out, and a missing directory has none."""

def record_offset(path: str | PathLike[str], index: int) -> int | None:
    """Byte offset of record ``index`` (0-based) of the plain segment file ``path``, in the
    dialect its first record says; None for a ``.log.z`` (offsets there are the original's) or
    a file holding fewer whole records."""

def segment_first_lsn(name: str) -> int | None:
    """The first LSN a segment file name says (``NNN.log`` or ``NNN.log.z``); None when
    ``name`` is not a segment name."""

@final
class RepairPlan:
    """What ``Log.open(path, repair=True)`` would do."""

    @property
    def reason(self) -> Problem:
        """The finding that decides the plan."""
    @property
    def cut_path(self) -> str | None:
        """The segment to cut at its first bad record (``None``: no cut)."""
    @property
    def cut_offset(self) -> int | None:
        """Where the cut starts: the first bad record (``None``: no cut)."""
    @property
    def records_kept(self) -> int | None:
        """Records of that segment kept before the cut (``None``: no cut)."""
    @property
    def first_lost_lsn(self) -> int | None:
        """LSN of the first entry that leaves the log (``None``: no cut)."""
    @property
    def moved(self) -> list[str]:
        """Segment files moved whole into the temp directory."""

def plan_repair(
    log_dir: str | PathLike[str], *, empty_entries: bool = True, dialect: Dialect | None = None
) -> RepairPlan | None:
    """The plan ``Log.open(log_dir, repair=True)`` would execute; None if nothing to repair."""

# ----- channels (the file-channel face of the log) -----

ChannelSync = Literal["always", "interval", "never", "batch"]

@final
class Message:
    """One message of a channel: its LSN and its bytes."""

    def __new__(cls, lsn: int, data: bytes) -> Message: ...
    def __eq__(self, other: object, /) -> bool: ...
    @property
    def lsn(self) -> int:
        """The message's LSN in the channel's log."""
    @property
    def data(self) -> bytes:
        """The message bytes."""
    def __hash__(self) -> int: ...
    def __reduce__(self) -> tuple[type[Message], tuple[int, bytes]]: ...

@final
class MessageBatch:
    """Messages received together, in columnar form: message ``i`` has LSN ``first_lsn + i``."""

    @property
    def first_lsn(self) -> int:
        """LSN of the first message of the batch."""
    def __len__(self) -> int: ...
    def __getitem__(self, key: int, /) -> Message: ...
    def payloads(self) -> list[bytes]:
        """The payloads as a list of bytes."""
    @property
    def data(self) -> bytes:
        """Every payload back to back (Arrow's binary values buffer)."""
    @property
    def offsets(self) -> bytes:
        """``len + 1`` int32 positions into ``data``, native byte order."""

@final
class Sender:
    """Appends messages to a channel."""

    def send(self, data: bytes) -> int:
        """Append one message; returns its LSN (durable per the channel's sync policy)."""
    def send_many(self, items: Sequence[bytes]) -> int:
        """Append messages, all or nothing, with one write and one fsync; returns the first LSN."""

@final
class Receiver:
    """A named receiver with a durable cursor (``data/cursors/NAME.cursor``)."""

    @property
    def name(self) -> str:
        """The receiver's name (its cursor is ``data/cursors/NAME.cursor``)."""
    @property
    def position(self) -> int:
        """The next LSN to deliver."""
    @property
    def acked(self) -> int:
        """The first unacknowledged LSN (what the cursor file holds)."""
    @property
    def closed(self) -> bool:
        """True after ``close()``."""
    def recv(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (``None``: forever); ``None`` on
        timeout."""
    def recv_many(
        self, max_messages: int = 1024, timeout: float | None = None, max_bytes: int | None = None
    ) -> MessageBatch:
        """Up to ``max_messages`` messages (and about ``max_bytes`` of data), waiting up to
        ``timeout`` for the first; an empty batch on timeout."""
    def ack(self, n: int = 1) -> None:
        """Acknowledge the ``n`` oldest received messages (the cursor file is replaced
        atomically)."""
    def close(self) -> None:
        """Release the name (another process may open it); later calls raise ``ClosedError``."""
    def __enter__(self) -> Receiver: ...
    def __exit__(self, *_exc: object) -> None: ...

@final
class Channel:
    """A channel directory: ``data/log``, ``data/cursors``, ``data/temp``."""

    @staticmethod
    def open(
        dir: str | PathLike[str],
        sync: ChannelSync = "always",
        retention_bytes: int | None = None,
        retention_ms: int | None = None,
        compress_sealed: Literal["zstd", "lz4"] | None = None,
        readonly: bool = False,
        *,
        sync_interval_ms: int = 100,
        soft_limit: int = ...,
        hard_limit: int = ...,
        preallocate: bool = True,
        disk_high_ratio: float | None = ...,
        disk_low_ratio: float | None = ...,
        disk_clean_ratio: float | None = ...,
        share: bool = True,
        create: bool = False,
    ) -> Channel:
        """Open (creating it unless ``readonly``) the channel directory ``dir``.

        ``dir`` itself is created, not its missing parents, as ``mkdir`` does: a missing
        parent raises ``TfluxIOError`` (``ENOENT``) naming it, and nothing is created;
        ``create=True`` also creates the missing parents, as ``mkdir -p``.

        Several processes may open it for sending at once (``share=True``): the first is
        the owner and appends every process's messages; the others' senders send through it
        (durable when ``send`` returns, per the owner's sync policy), and take over when it
        goes. Each process's receivers read the files themselves. ``share=False``: one
        sending process per directory (``LockedError`` for the next)."""
    @property
    def is_owner(self) -> bool:
        """True in the process that appends to the channel's log (the owner, or an unshared
        channel); a client's senders send through the owner. False when read-only."""
    @property
    def path(self) -> str:
        """The channel directory, as given to ``open``."""
    @property
    def readonly(self) -> bool:
        """True when opened with ``readonly=True`` (no sender)."""
    @property
    def closed(self) -> bool:
        """True after ``close()``."""
    @property
    def start_lsn(self) -> int:
        """LSN of the first message the channel still holds."""
    @property
    def next_lsn(self) -> int:
        """The LSN the next message sent gets."""
    @property
    def disk_full(self) -> bool:
        """Whether sends are refused for lack of disk space (until below the low ratio)."""
    def sender(self) -> Sender:
        """A sender (refused on a read-only channel)."""
    def receiver(
        self, name: str, start: Literal["earliest", "latest"] | int | None = None
    ) -> Receiver:
        """Receiver ``name``: resumes at its first unacknowledged message; ``start``
        (``"earliest"``, ``"latest"`` or an LSN) applies only when it has no cursor yet."""
    def receivers(self) -> dict[str, int]:
        """``{name: first unacknowledged LSN}`` of every receiver of the directory."""
    def drop_receiver(self, name: str) -> bool:
        """Delete receiver ``name``'s cursor; ``False`` when it had none."""
    def collect(self) -> int:
        """Delete the oldest sealed segments every receiver has acknowledged and retention lets
        go; returns how many."""
    def sync(self) -> None:
        """Make every sent message durable now."""
    def close(self) -> None:
        """Close the channel: waiting ``recv`` calls raise ``ClosedError``, later sends are
        refused, sent messages are synced per policy and the directory lock is released."""
    def __enter__(self) -> Channel: ...
    def __exit__(self, *_exc: object) -> None: ...
