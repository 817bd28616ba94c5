"""Child process of the memory benchmark: memory before and after filling a store.

    python benches/suite/_memchild.py restore BASE
    python benches/suite/_memchild.py enqueue_many BASE N PAYLOAD

``restore`` opens the store in BASE (replaying its log); ``enqueue_many`` creates a store in
BASE with ``log_sync_policy="never"`` and enqueues N records of PAYLOAD bytes into the default
queue, 10,000 per call, from a pool made before the first reading. Prints one JSON object: the
``/proc/self/status`` fields (kB) before and after, the seconds the fill took and what the store
holds. A fresh process per measurement, so the peak (``VmHWM``) is this fill's own.

``VmHWM`` counts file-backed pages too, and a restore maps the whole log (borrowed payloads), so
it cannot say what the restore's anonymous memory peaked at; the kernel keeps no high-water mark
of ``RssAnon``. ``restore`` therefore also samples anonymous residence (``/proc/self/statm``:
resident minus shared pages) every ``SAMPLE_SECONDS`` from a second thread while the open runs
with the GIL released, and reports the largest sample (``anon_peak_kb``) and how many samples
were taken: a lower bound of the true peak, missing only a rise and fall shorter than a period.
Each sample is one ``pread`` of ``statm`` (about 3 us) and a wake-up: 3.3% of one core measured
(2,662 samples while the main thread slept 3 s, load 7), taken from a restore that keeps both
cores busy, so the scaling rows' times include it.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from pathlib import Path

FIELDS = ("VmHWM", "VmRSS", "RssAnon", "RssFile")
SAMPLE_SECONDS = 0.001


def status() -> dict[str, int]:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in FIELDS:
            out[name] = int(rest.split()[0])
    return out


class AnonPeak:
    """Samples anonymous resident memory (kB) on a thread until stopped; keeps the largest."""

    def __init__(self) -> None:
        self.page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
        self.fd = os.open("/proc/self/statm", os.O_RDONLY)
        self.start_kb = self.read_kb()
        self.peak_kb = self.start_kb
        self.samples = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def read_kb(self) -> int:
        # statm: size resident shared text lib data dt, in pages; shared = file-backed + shmem.
        fields = os.pread(self.fd, 256, 0).split()
        return (int(fields[1]) - int(fields[2])) * self.page_kb

    def run(self) -> None:
        while not self.done.wait(SAMPLE_SECONDS):
            self.peak_kb = max(self.peak_kb, self.read_kb())
            self.samples += 1

    def __enter__(self) -> AnonPeak:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()
        self.peak_kb = max(self.peak_kb, self.read_kb())
        os.close(self.fd)


def main(argv: list[str]) -> int:
    import tflux  # before the first reading: the module is not part of the growth

    mode, base = argv[0], Path(argv[1])
    if mode == "enqueue_many":
        n, payload = int(argv[2]), int(argv[3])
        rng = random.Random(n)
        batch = [(rng.randrange(1024), rng.randbytes(payload)) for _ in range(min(n, 10_000))]
    before = status()
    sampled: dict[str, int] = {}
    started = time.perf_counter()
    if mode == "restore":
        with AnonPeak() as peak:
            store = tflux.open(base)
        sampled = {
            "anon_start_kb": peak.start_kb,
            "anon_peak_kb": peak.peak_kb,
            "anon_samples": peak.samples,
            "anon_sample_seconds": SAMPLE_SECONDS,
        }
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
            **sampled,
        },
        sys.stdout,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
