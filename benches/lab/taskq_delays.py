"""Delayed records (issue 44, targets 3 and 4): the ready path beside 1M delayed records, the
memory of a delayed record against a ready one, and how late a waiting consumer gets a record
after its due time.

Not a test (pytest collects ``bench_*.py`` only): run it by hand, in the venv whose tflux it
measures::

    python benches/lab/taskq_delays.py ready [--delayed 1000000] [--ready 200000] [--rounds 5]
    python benches/lab/taskq_delays.py memory [--records 1000000]
    python benches/lab/taskq_delays.py latency [--rate 10000] [--seconds 5] [--consumers N]
        [--where client|owner] [--batch K[,K...]]

``ready``: one process per measurement, ``LogSyncPolicy`` ``never`` (the figure is the state's
path, not the disk). The store holds ``--ready`` ready records, and beside them either nothing or
``--delayed`` records due in an hour; ``dequeue(timeout=0)`` of every ready record is timed (the
acks follow untimed, with ``ack_many``). Without and with delayed records alternately,
``--rounds`` pairs; the medians and the median of the pairs' ratios.

``memory``: anonymous memory (``RssAnon``) per record of a queue holding ``--records`` ready
records, or as many delayed ones, in a fresh process each: (a) filled live by ``enqueue_many``
(each payload its own allocation) and (b) restored by a fresh open of the same base (payloads
borrowed from the mapped segments, so ``RssAnon`` is the state alone), each minus the same
process's figure before the fill (or the open).

``latency``: the store's owner is this process (``LogSyncPolicy`` ``interval``: the figure is
the wake-up, not the enqueue's fsync). ``--consumers`` client processes (``--where owner``:
threads of the owner's process) wait in ``dequeue``; then the owner queues, with ``at=``, records
that come due at ``--rate`` per second over ``--seconds`` (each record's due time, in ms, is in its
payload), all of them before the first is due. Each consumer notes, for each record, the
wall-clock time it was handed the record minus its due time, and acks in batches (``ack_many``).
p50/p99/max of the lateness, and how many came early (must be 0). ``--batch 1,16`` runs the
measurement once per K, one after the other: each consumer takes up to K records a call
(``dequeue_many``, one round trip for a client), the lateness of each counted when the call
returned.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

HOUR = 3600.0
DUE = struct.Struct("<q")


def rss_anon() -> int:
    """Anonymous resident bytes of this process (``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


# --- ready records beside delayed ones --------------------------------------------------------


def _ready_child(base: str, ready: int, delayed: int, out) -> None:
    import tflux

    body = b"r" * 16
    with tflux.open(base, share=False, log_sync_policy="never") as store:
        store.create_queue("q")
        batch = 10_000
        for start in range(0, delayed, batch):
            n = min(batch, delayed - start)
            store.enqueue_many("q", ((i % 16, body) for i in range(n)), delay=HOUR)
        for start in range(0, ready, batch):
            n = min(batch, ready - start)
            store.enqueue_many("q", ((i % 16, body) for i in range(n)))
        taken = []
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(ready):
            taken.append(store.dequeue("q", timeout=0))
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert all(r is not None for r in taken)
        for start in range(0, ready, batch):
            store.ack_many(taken[start : start + batch])
        out.put(
            {"rate": ready / dt, "cpu_rate": ready / cpu, "delayed_left": store.stats("q").delayed}
        )


def _in_child(target, *args):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, out))
    p.start()
    res = out.get(timeout=600)
    p.join()
    return res


def run_ready(ready: int, delayed: int, rounds: int, root: Path) -> None:
    rows: dict[tuple[int, str], list[float]] = {}
    for i in range(rounds):
        order = (0, delayed) if i % 2 == 0 else (delayed, 0)
        for d in order:
            base = root / f"ready-{i}-{d}"
            res = _in_child(_ready_child, os.fspath(base), ready, d)
            for k in ("rate", "cpu_rate"):
                rows.setdefault((d, k), []).append(res[k])
            print(
                f"round {i + 1}, {d:,} delayed: {res['rate']:,.0f} ready dequeues/s, "
                f"{res['cpu_rate']:,.0f} per CPU s ({res['delayed_left']:,} still delayed)",
                flush=True,
            )
    print(
        f"\n| delayed records beside {ready:,} ready | dequeue/s (median of {rounds}) "
        "| dequeue per CPU s |\n|---|---|---|"
    )
    for d in (0, delayed):
        print(
            f"| {d:,} | {statistics.median(rows[d, 'rate']):,.0f} "
            f"| {statistics.median(rows[d, 'cpu_rate']):,.0f} |"
        )
    for k in ("rate", "cpu_rate"):
        ratios = [b / a for a, b in zip(rows[0, k], rows[delayed, k], strict=True)]
        print(
            f"{k}: with / without (median of the pairs' ratios) {statistics.median(ratios):.3f}x "
            f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)})"
        )


# --- memory per record --------------------------------------------------------------------------


def _memory_child(base: str, records: int, delayed: bool, payload: int, out) -> None:
    import tflux

    body = b"m" * payload
    res = {}
    with tflux.open(base, share=False, log_sync_policy="never") as store:
        store.create_queue("q")
        before = rss_anon()
        batch = 10_000
        for start in range(0, records, batch):
            n = min(batch, records - start)
            items = ((i % 16, body) for i in range(n))
            if delayed:
                store.enqueue_many("q", items, delay=10 * HOUR)
            else:
                store.enqueue_many("q", items)
        res["live"] = (rss_anon() - before) / records
        store.snapshot()
    out.put(res)


def _restore_child(base: str, records: int, out) -> None:
    """A fresh process: the anonymous memory a restore of ``base`` adds (payloads borrowed)."""
    import tflux

    before = rss_anon()
    with tflux.open(base, share=False, log_sync_policy="never") as store:
        s = store.stats("q")
        out.put({"restored": (rss_anon() - before) / records, "counts": (s.ready, s.delayed)})


def run_memory(records: int, payload: int, rounds: int, root: Path) -> None:
    got: dict[str, dict[str, list[float]]] = {"ready": {}, "delayed": {}}
    for i in range(rounds):
        for kind in ("ready", "delayed") if i % 2 == 0 else ("delayed", "ready"):
            base = root / f"mem-{i}-{kind}"
            res = _in_child(_memory_child, os.fspath(base), records, kind == "delayed", payload)
            res.update(_in_child(_restore_child, os.fspath(base), records))
            for k in ("live", "restored"):
                got[kind].setdefault(k, []).append(res[k])
            print(
                f"round {i + 1} {kind}: live {res['live']:.1f} B/record, restored "
                f"{res['restored']:.1f} B/record (ready, delayed = {res['counts']})",
                flush=True,
            )
    print(f"\n| RssAnon per record, {records:,} records, {payload} B payloads | ready | delayed "
          "| delayed / ready |")  # fmt: skip
    print("|---|---|---|---|")
    for k in ("live", "restored"):
        r, d = statistics.median(got["ready"][k]), statistics.median(got["delayed"][k])
        print(f"| {k} | {r:.1f} B | {d:.1f} B | {d / r:.3f}x |")


# --- lateness of a waiting consumer ---------------------------------------------------------------


def _consume(store, t_end: float, k: int = 1) -> dict:
    """Take records (up to ``k`` a call) until none came for a while after ``t_end``; the
    lateness of each (ms)."""
    late, batch = [], []
    while True:
        if k == 1:
            rec = store.dequeue("due", timeout=0.2)
            recs = [] if rec is None else [rec]
        else:
            recs = store.dequeue_many("due", k, timeout=0.2)
        if not recs:
            if time.time() > t_end:
                break
            continue
        got = time.time() * 1000
        for rec in recs:
            late.append(got - DUE.unpack_from(rec.payload)[0])
        batch += recs
        if len(batch) >= 256:
            store.ack_many(batch)
            batch = []
    if batch:
        store.ack_many(batch)
    return {"late_ms": late}


def _consumer(base: str, ready, t_end, out, k: int) -> None:
    import tflux

    with tflux.open(base) as store:
        store.count("due")  # connected to the owner
        ready.put(os.getpid())
        while t_end.value == 0.0:
            time.sleep(0.001)
        out.put(_consume(store, t_end.value, k))


def run_latency(
    rate: int, seconds: float, consumers: int, where: str, root: Path, k: int = 1
) -> None:
    """The owner (this process) queues every record before the first is due, with ``at=``
    (``LogSyncPolicy`` ``interval``: the figure is the wake-up, not the enqueue's fsync); the
    consumers are already waiting in ``dequeue``."""
    import threading

    import tflux

    base = root / f"latency-{k}"
    with tflux.open(base, log_sync_policy="interval") as owner:
        owner.create_queue("due")
        ctx = mp.get_context("spawn")
        out, ready = ctx.Queue(), ctx.Queue()
        t_end = ctx.Value("d", 0.0)
        res: list[dict] = []
        procs, threads = [], []
        for _ in range(consumers):
            if where == "client":
                p = ctx.Process(target=_consumer, args=(os.fspath(base), ready, t_end, out, k))
                p.start()
                procs.append(p)
        for _ in procs:
            ready.get(timeout=120)
        lead = 2.0
        t0 = time.time() + lead
        t_end.value = t0 + seconds + 1.0
        if where == "owner":
            for _ in range(consumers):
                th = threading.Thread(target=lambda: res.append(_consume(owner, t_end.value, k)))
                th.start()
                threads.append(th)
        per_ms, total, made, ms = rate / 1000, int(rate * seconds), 0, 0
        while made < total:
            n = int((ms + 1) * per_ms) - made  # records due in millisecond ms after t0
            if n > 0:
                due = int(t0 * 1000) + ms
                owner.enqueue_many("due", [(0, DUE.pack(due) + b"p" * 24)] * n, at=due / 1000)
                made += n
            ms += 1
        ahead = t0 - time.time()
        for _ in procs:
            res.append(out.get(timeout=seconds + 120))
        for p in procs:
            p.join()
        for th in threads:
            th.join()
    late = sorted(v for r in res for v in r["late_ms"])
    n = len(late)

    def q(p: float) -> float:
        return late[min(n - 1, int(p * n))]

    print(
        f"{consumers} consumer(s) in the {where}, up to {k} a call: {n:,} of {made:,} records "
        "received; all were "
        f"queued {ahead:.2f} s before the first was due"
    )
    print(
        f"lateness (received - due, ms): p50 {q(0.5):.2f}, p90 {q(0.9):.2f}, p99 {q(0.99):.2f}, "
        f"max {late[-1]:.2f}; early (< -1 ms, the due time is whole ms): "
        f"{sum(1 for v in late if v < -1)}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("ready")
    p.add_argument("--ready", type=int, default=200_000)
    p.add_argument("--delayed", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p = sub.add_parser("memory")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--payload", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p = sub.add_parser("latency")
    p.add_argument("--rate", type=int, default=10_000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--consumers", type=int, default=1)
    p.add_argument("--where", choices=["client", "owner"], default="client")
    p.add_argument(
        "--batch",
        default="1",
        help="comma-separated K: one run per K, consumers taking up to K records a call",
    )
    p.add_argument("--dir", type=Path)
    args = ap.parse_args(argv)
    print(f"# load average {os.getloadavg()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="tflux-delays-", dir=getattr(args, "dir", None)) as d:
        root = Path(d)
        if args.cmd == "ready":
            run_ready(args.ready, args.delayed, args.rounds, root)
        elif args.cmd == "memory":
            run_memory(args.records, args.payload, args.rounds, root)
        else:
            for k in (int(v) for v in args.batch.split(",")):
                run_latency(args.rate, args.seconds, args.consumers, args.where, root, k)
    print(f"# load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
