"""Child process of the memory benchmark: memory before and after filling a store.

    python benches/_memchild.py restore BASE
    python benches/_memchild.py enqueue_many BASE N PAYLOAD

``restore`` opens the store in BASE (replaying its log); ``enqueue_many`` creates a store in
BASE with ``log_sync_policy="never"`` and enqueues N records of PAYLOAD bytes into the default
queue, 10,000 per call, from a pool made before the first reading. Prints one JSON object: the
``/proc/self/status`` fields (kB) before and after, the seconds the fill took and what the store
holds. A fresh process per measurement, so the peak (``VmHWM``) is this fill's own.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile")


def status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in FIELDS:
            out[name] = int(rest.split()[0])
    return out


def main(argv: list[str]) -> int:
    import tflux  # before the first reading: the module is not part of the growth

    mode, base = argv[0], Path(argv[1])
    if mode == "enqueue_many":
        n, payload = int(argv[2]), int(argv[3])
        rng = random.Random(n)
        batch = [(rng.randrange(1024), rng.randbytes(payload)) for _ in range(min(n, 10_000))]
    before = status()
    started = time.perf_counter()
    if mode == "restore":
        store = tflux.open(base)
    elif mode == "enqueue_many":
        store = tflux.open(base, log_sync_policy="never", snapshot_creation_segments_threshold=0)
        left = n
        while left:
            k = min(left, len(batch))
            store.enqueue_many("", batch if k == len(batch) else batch[:k])
            left -= k
    else:
        raise SystemExit(f"unknown mode {mode}")
    seconds = time.perf_counter() - started
    after = status()
    infos = {q.name: (q.count, q.last_id) for q in store.queues()}
    replayed = store.replayed
    store.close()
    json.dump(
        {
            "before": before,
            "after": after,
            "seconds": seconds,
            "replayed": replayed,
            "queues": infos,
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
