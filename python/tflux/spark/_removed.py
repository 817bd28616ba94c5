"""Replay's removed ids: what step 1's ``summary`` scan says was removed, placed in the final
incarnations on the driver (see :mod:`tflux.spark.rebuild`).

Removes as id ranges (issue 31). At the end of a replay the removed ids of an incarnation are
its ids minus the live ones (minus ids never added), so merged over the whole log they are at
most about one range per live record, whatever the order of the acks. Step 1 (the JVM
reader's ``summary`` scan, with its ``rm_*`` columns) gives per queue, chunk and group (the
removes between two CreateQueue/DeleteQueue of the name) the removed ids merged into runs,
each with the group's first LSN and its count of removes; :func:`_merge_ranges` places each
run in the incarnation whose LSN interval holds that LSN (where the scan places a
RemoveRecord), keeps the final incarnations', and merges them. When every RemoveRecord is in a
range (no chunk overflowed past ``rebuild.SUMMARY_RUNS`` runs) and the merged ranges are at
most ``rebuild.RANGE_PLAN_RANGES``, they travel in ``replayPlan`` (``r LO HI`` lines) and the JVM
readers drop, in the scan, every AddRecord and snapshot record in a removed range of its
incarnation (``ReplayIds.Queue.removed``, the one place of that rule): step 4 is then the final
incarnations' filter alone, with no removes' scan and no join. The set of removed
(incarnation, id) is what the anti-join uses, so the rows are the same: an id removed twice
merges into one range, a remove of an id never added removes nothing, one logged before its
add removes it, as with the join. ``validate=True`` builds the frames without ranges, so
:meth:`rebuild._Frames.check` sees every add and remove, unchanged. Otherwise (too many ranges, an
overflow, the broadcast joins of step 3, the Python source) the join serves as above.

Removes as bitmaps (issue 45). Acks in priority order remove scattered ids: about one run per
remove. The removed ids of an incarnation are a subset of ``1..last id``, so a bitmap of
``last id`` bits holds them whatever the order. The summary scan turns a group of more than
1,024 runs into a bitmap (``rm_bits``, ``Summary.java``); :func:`_merge_ranges` places each bitmap
like a run and ORs an incarnation's ranges and bitmaps into one :class:`_Bitmap` of its ids
from the first removed one to its last id when step 1 gave it a bitmap or the ranges would
pass ``RANGE_PLAN_RANGES``, within ``rebuild.PLAN_BITS`` bits in all. They travel as
``b BASE BITS`` lines and the readers drop what a range or a bitmap holds
(``ReplayIds.Queue.removed``). A chunk's bitmap is about as long as the queue's ids, so the
summary folds the bitmaps of consecutive chunks of one incarnation into one on the executors
(``BitsFold.java``, :func:`~tflux.spark.rebuild.summaries`) before the driver collects them.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class _Bitmap:
    """One incarnation's removed ids as a bitmap: bit ``i`` (of little-endian 64-bit words) is
    id ``base + i`` (the plan's ``b BASE BITS`` line, ``ReplayIds.java``)."""

    base: int
    bits: bytes


@dataclass
class _Removed:
    """Step 1's removed ranges and bitmaps, as the driver collects them from
    :func:`~tflux.spark.rebuild.summaries`."""

    # per (source, queue): (LSN of the range's group, first id, last id)
    by_name: dict[tuple[str, str], list[tuple[int, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # per (source, queue): (LSN of the bitmap's group, id of its bit 0, its bytes)
    bits: dict[tuple[str, str], list[tuple[int, int, bytes]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    covered: int = 0  # RemoveRecords the ranges and bitmaps hold
    overflow: bool = False  # a chunk had too many runs or bits: no ranges


def _set_bits(buf: bytearray, lo: int, hi: int) -> None:
    """Sets bits ``lo..hi`` (inclusive) of ``buf`` (bit ``i``: byte ``i // 8``, bit ``i % 8``)."""
    while lo <= hi and lo % 8:
        buf[lo >> 3] |= 1 << (lo & 7)
        lo += 1
    while hi >= lo and (hi + 1) % 8:
        buf[hi >> 3] |= 1 << (hi & 7)
        hi -= 1
    if lo <= hi:
        buf[lo >> 3 : (hi + 1) >> 3] = b"\xff" * ((hi + 1 - lo) >> 3)


def _first_removed(
    ranges: list[tuple[int, int]], pieces: list[tuple[int, bytes]], span: int
) -> int | None:
    """The smallest id in ``1..span`` that ``ranges`` or the bitmap ``pieces`` may hold (to the
    byte for a piece), rounded down to a multiple of 64; None when none can."""
    lows = [max(lo, 1) for lo, hi in ranges if max(lo, 1) <= min(hi, span)]
    for base, bits in pieces:
        zeros = len(bits) - len(bits.lstrip(b"\0"))
        if zeros < len(bits) and base + zeros * 8 <= span:
            lows.append(max(base + zeros * 8, 1))
    return min(lows) // 64 * 64 if lows else None


def _bitmap(
    ranges: list[tuple[int, int]], pieces: list[tuple[int, bytes]], span: int, start: int
) -> _Bitmap | None:
    """The ids of ``ranges`` and of the bitmap ``pieces`` (id of bit 0, bytes) within
    ``1..span`` (the ids the incarnation can hold: any other id removes nothing), as one
    bitmap from id ``start`` (:func:`_first_removed`); None when it holds none."""
    width = span - start + 1
    size = (width + 63) // 64 * 8
    buf = bytearray(size)
    for lo, hi in ranges:
        lo, hi = max(lo, 1, start), min(hi, span)
        if lo <= hi:
            _set_bits(buf, lo - start, hi - start)
    acc = int.from_bytes(buf, "little")
    for base, bits in pieces:
        if base > span or base + len(bits) * 8 <= start:
            continue
        cut = (span - base) // 8 + 1  # no byte wholly past span
        value = int.from_bytes(bits[:cut], "little")
        acc |= value << (base - start) if base >= start else value >> (start - base)
    acc &= (1 << width) - 1  # ids up to span
    if start == 0:
        acc &= ~1  # id 0 is no record's
    return _Bitmap(start, acc.to_bytes(size, "little")) if acc else None


def _merge_ranges(
    removed: _Removed,
    inc_rows: list[tuple],
    final_incs: list[int],
    removes: int,
    limit: int,
    spans: dict[int, int] | None = None,
    max_bits: int = 0,
) -> dict[int, list[tuple[int, int]] | _Bitmap] | None:
    """Each final incarnation's removed ids as merged ranges ``(lo, hi)`` (ascending, apart) or
    as a :class:`_Bitmap`, each range or bitmap placed in the incarnation whose LSN interval
    holds its group's LSN (as the scan places a RemoveRecord). An incarnation with a bitmap
    from step 1, or whose ranges would pass ``limit`` (``rebuild.RANGE_PLAN_RANGES``) in all,
    gets a bitmap of its ids ``1..spans[inc]`` (the ids it can hold) from its first removed one,
    while the bitmaps hold at most ``max_bits`` (``rebuild.PLAN_BITS``) in all. None when they
    cannot stand for the removes: a chunk overflowed, they do not hold every RemoveRecord step
    1 counted, or they pass those bounds. Ids removed twice merge: the set of removed
    (incarnation, id) is what the removes' anti-join uses too, so the live records are the same
    (``validate=True`` checks duplicates on the full frames instead)."""
    if removed.overflow or removed.covered != removes:
        return None
    starts: dict[tuple[str, str], tuple[list[int], list[tuple]]] = {}
    for row in sorted(inc_rows, key=lambda r: (r[0], r[1], r[3])):
        entry = starts.setdefault((row[0], row[1]), ([], []))
        entry[0].append(row[3])
        entry[1].append(row)
    final = set(final_incs)

    def place(name: tuple[str, str], lsn: int) -> int | None:
        lsns, incs = starts[name]
        at = bisect.bisect_right(lsns, lsn) - 1
        _, _, inc, _, end, *_ = incs[at]
        return inc if lsn < end and inc in final else None

    per_inc: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for name, rows in removed.by_name.items():
        for lsn, lo, hi in rows:
            inc = place(name, lsn)
            if inc is not None:
                per_inc[inc].append((lo, hi))
    pieces: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for name, bit_rows in removed.bits.items():
        for lsn, base, bits in bit_rows:
            inc = place(name, lsn)
            if inc is not None:
                pieces[inc].append((base, bits))
    merged_by_inc: dict[int, list[tuple[int, int]]] = {}
    for inc, rows in per_inc.items():
        rows.sort()
        merged = [list(rows[0])]
        for lo, hi in rows[1:]:
            if lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        merged_by_inc[inc] = [(lo, hi) for lo, hi in merged]
    total = sum(len(rows) for inc, rows in merged_by_inc.items() if inc not in pieces)
    out: dict[int, list[tuple[int, int]] | _Bitmap] = {}
    bits_total = 0
    for inc in sorted(set(merged_by_inc) | set(pieces)):
        ranges = merged_by_inc.get(inc, [])
        if inc not in pieces and total <= limit:
            out[inc] = ranges
            continue
        if spans is None:
            return None
        first = _first_removed(ranges, pieces.get(inc, []), spans[inc])
        if first is None:
            continue  # nothing it holds is removed
        bits_total += spans[inc] - first + 1
        if bits_total > max_bits:
            return None
        bitmap = _bitmap(ranges, pieces.get(inc, []), spans[inc], first)
        if bitmap is not None:
            out[inc] = bitmap
    return out
