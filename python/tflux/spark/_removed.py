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
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class _Removed:
    """Step 1's removed ranges, as the driver collects them from :func:`summaries`."""

    # per (source, queue): (LSN of the range's group, first id, last id)
    by_name: dict[tuple[str, str], list[tuple[int, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    covered: int = 0  # RemoveRecords the ranges hold
    overflow: bool = False  # a chunk had too many runs: no ranges


def _merge_ranges(
    removed: _Removed, inc_rows: list[tuple], final_incs: list[int], removes: int, limit: int
) -> dict[int, list[tuple[int, int]]] | None:
    """Each final incarnation's removed ids as merged ranges ``(lo, hi)`` (ascending, apart),
    each range placed in the incarnation whose LSN interval holds its group's LSN (as the scan
    places a RemoveRecord); None when they cannot stand for the removes: a chunk overflowed,
    the ranges do not hold every RemoveRecord step 1 counted, or there are more than
    ``limit`` (``rebuild.RANGE_PLAN_RANGES``). Ids removed twice merge into one range: the set
    of removed (incarnation, id) is what the removes' anti-join uses too, so the live records
    are the same (``validate=True`` checks duplicates on the full frames instead)."""
    if removed.overflow or removed.covered != removes:
        return None
    starts: dict[tuple[str, str], tuple[list[int], list[tuple]]] = {}
    for row in sorted(inc_rows, key=lambda r: (r[0], r[1], r[3])):
        entry = starts.setdefault((row[0], row[1]), ([], []))
        entry[0].append(row[3])
        entry[1].append(row)
    final = set(final_incs)
    per_inc: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for name, rows in removed.by_name.items():
        lsns, incs = starts[name]
        for lsn, lo, hi in rows:
            at = bisect.bisect_right(lsns, lsn) - 1
            _, _, inc, _, end, *_ = incs[at]
            if lsn < end and inc in final:
                per_inc[inc].append((lo, hi))
    out: dict[int, list[tuple[int, int]]] = {}
    total = 0
    for inc, rows in per_inc.items():
        rows.sort()
        merged = [list(rows[0])]
        for lo, hi in rows[1:]:
            if lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        out[inc] = [(lo, hi) for lo, hi in merged]
        total += len(merged)
        if total > limit:
            return None
    return out
