"""A queue with no rules writes the same bytes as before the task queue (issue 44, target 1).

Not a test (pytest collects ``bench_*.py`` only): run it by hand. ``run_calls`` below is a fixed
sequence of store calls that uses none of the task-queue layer (no rules, no delays): queues of
both implementations, ``enqueue``/``enqueue_many``, ``dequeue``, ``ack``/``ack_many``, ``nack``,
``snapshot``, ``delete_queue`` and reopens. Run it with two builds and every file of the two base
directories is compared byte for byte::

    python benches/lab/rules_off_identity.py compare --old OLD/python --new NEW/python

(``OLD/python``: an interpreter whose ``tflux`` is main before the task queue merged, 0c1bc228,
the first parent of 114cd6bb "merge taskq"; docs/internals/benchmark-notes.md, "Task queue",
says how that venv was built.) ``write DIR`` runs the calls with this interpreter's tflux and
prints each file's size and sha256 as JSON; ``fixture DIR --by BUILD`` writes that JSON to
``DIR/digests.json`` (how ``tests/data/rules_off_identity/`` was made, with the old build);
``tests/core/test_rules_off_identity.py`` replays ``run_calls`` with the current build and checks
the digests, so CI keeps the target.

``ab --old OLD/python --new NEW/python [--pairs 5]`` is the throughput half of the target:
enqueue, dequeue + ack, and ``enqueue_many`` of a queue with no rules, in one process per build
(``python benches/lab/rules_off_identity.py throughput``), old and new alternately, medians and
new/old ratios of the pairs. ``--base BASE/python`` runs a third build in each round (the
order turns by one each round) and adds its ratios to old and new (``base / old``, ``new /
base``): the baseline of a change measured in the same run as the change.

``calls N none|single|many`` runs the same calls once for an instruction count, which a loaded
machine does not blur (``calls``' docstring says how)::

    valgrind --tool=callgrind PYTHON benches/lab/rules_off_identity.py calls 20000 many
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: Settings of every open of the identity run: small segments so that the calls roll over, and
#: no automatic snapshot whose timing could change what is written (the calls snapshot and
#: compact themselves). ``share=False``: no owner socket, one process.
SETTINGS = {
    "log_file_soft_limit": 4096,
    "log_file_hard_limit": 8192,
    "snapshot_creation_segments_threshold": 1_000_000,
}

#: Files whose bytes are not the calls' (the writer lock's file holds nothing the calls wrote;
#: compared by name only).
NAME_ONLY = {"data/log/lock", "data/lock", "lock"}


def payload(i: int, size: int = 24) -> bytes:
    return (b"%06d:" % i + bytes((i * 7 + j) % 251 for j in range(size)))[:size]


def _session_one(store) -> None:
    store.create_queue("jobs")
    store.create_queue("prio", "heap", max_size=1000, max_message_size=256)
    store.create_queue("fifo", "array", key_range=(0, 3))
    ids = [store.enqueue("jobs", i % 5, payload(i)) for i in range(40)]
    assert len(set(ids)) == 40
    store.enqueue_many("prio", [(k - 3, payload(100 + k, 40)) for k in range(30)])
    store.enqueue_many("fifo", [(k % 4, payload(200 + k, 8 + k)) for k in range(25)])
    store.enqueue("", 7, b"")  # the default queue, an empty payload
    taken = [store.dequeue("jobs", timeout=0) for _ in range(10)]
    for rec in taken[:4]:
        store.ack(rec)
    for rec in taken[4:7]:
        store.nack(rec)
    store.ack_many(taken[7:])
    for _ in range(3):  # nacked records come back first (same id, same key)
        store.ack(store.dequeue("jobs", timeout=0))
    fifo = [store.dequeue("fifo", timeout=0) for _ in range(6)]
    store.ack_many(fifo[:5])
    store.nack(fifo[5])
    store.snapshot()
    store.enqueue_many("jobs", [(i % 3, payload(300 + i, 100)) for i in range(50)])
    for _ in range(20):
        store.ack(store.dequeue("prio", timeout=0))
    store.create_queue("scratch")
    store.enqueue("scratch", 1, payload(400))
    store.delete_queue("scratch")


def _session_two(store) -> None:
    # reopened: the records still in flight when the first session closed are ready again
    store.create_queue("jobs", exist_ok=True)  # the same settings: writes nothing
    for _ in range(15):
        store.ack(store.dequeue("jobs", timeout=0))
    store.enqueue_many("fifo", [(3, payload(500 + k, 30)) for k in range(10)])
    rec = store.dequeue("fifo", timeout=0)
    store.nack(rec)
    store.ack(store.dequeue("fifo", timeout=0))
    store.snapshot()
    store.enqueue("prio", -9, payload(600, 200))


def run_calls(tflux, base: Path) -> None:
    """The fixed sequence, with the given ``tflux`` module, in the new base ``base``."""
    with tflux.open(base, share=False, **SETTINGS) as store:
        _session_one(store)
    with tflux.open(base, share=False, **SETTINGS) as store:
        _session_two(store)
    with tflux.open(base, share=False, **SETTINGS) as store:
        # after the last snapshot: the log keeps several segments of these
        store.ack(store.dequeue("prio", timeout=0))
        store.enqueue_many("jobs", [(i % 4, payload(700 + i, 60)) for i in range(120)])
        for _ in range(30):
            store.ack(store.dequeue("jobs", timeout=0))
        store.nack(store.dequeue("fifo", timeout=0))


def digests(base: Path) -> dict[str, dict]:
    """Every regular file under ``base``: relative path -> size and sha256 (bytes for the
    ``NAME_ONLY`` files are not compared); directories and other entries (a socket) by name."""
    out: dict[str, dict] = {}
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base).as_posix()
        if path.is_dir():
            out[rel + "/"] = {"kind": "directory"}
            continue
        if not path.is_file() or rel in NAME_ONLY:
            out[rel] = {"kind": "name only"}
            continue
        data = path.read_bytes()
        out[rel] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    return out


def write(base: Path) -> dict[str, dict]:
    import tflux

    if base.exists():
        shutil.rmtree(base)
    run_calls(tflux, base)
    return digests(base)


# --- throughput: one process per build ------------------------------------------------------

N_SINGLE = 100_000
N_MANY = 500_000
BATCH = 100


class _Timed:
    """Wall and CPU time (``time.process_time``: every thread of the process) of a block; on a
    shared machine the CPU figure moves much less than the wall one."""

    def __enter__(self) -> _Timed:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def throughput(root: Path) -> dict[str, float]:
    """Records per second of a queue with no rules, in one process (the owner): per wall
    second and per CPU second of the process. ``LogSyncPolicy`` ``never`` so that the figure
    is the path's CPU, not the disk's fsync; then a few hundred durable calls (``always``)."""
    import tflux

    root.mkdir(parents=True, exist_ok=True)
    out: dict[str, float] = {}

    def note(name: str, n: int, t: _Timed, cpu: bool = True) -> None:
        out[name] = n / t.wall
        if cpu:
            out[name + " per CPU s"] = n / max(t.cpu, 1e-9)

    body = b"x" * 64
    with tflux.open(root / "base", share=False, log_sync_policy="never") as store:
        store.create_queue("q")
        with _Timed() as t:
            for _ in range(N_SINGLE):
                store.enqueue("q", 0, body)
        note("enqueue", N_SINGLE, t)
        with _Timed() as t:
            for _ in range(N_SINGLE):
                store.ack(store.dequeue("q", timeout=0))
        note("dequeue+ack", N_SINGLE, t)
        items = [(i % 8, body) for i in range(BATCH)]
        with _Timed() as t:
            for _ in range(N_MANY // BATCH):
                store.enqueue_many("q", items)
        note(f"enqueue_many({BATCH})", N_MANY, t)
        with _Timed() as t:
            for _ in range(N_MANY // BATCH):
                store.ack_many([store.dequeue("q", timeout=0) for _ in range(BATCH)])
        note(f"dequeue+ack_many({BATCH})", N_MANY, t)
    with tflux.open(root / "durable", share=False, log_sync_policy="always") as store:
        store.create_queue("q")
        n = 500
        with _Timed() as t:
            for _ in range(n):
                store.enqueue("q", 0, body)
        note("durable enqueue", n, t, cpu=False)
        with _Timed() as t:
            for _ in range(n):
                store.ack(store.dequeue("q", timeout=0))
        note("durable dequeue+ack", n, t, cpu=False)
    return out


def calls(root: Path, n: int, shape: str) -> None:
    """The throughput calls for an instruction count (``valgrind --tool=callgrind``, which
    counts the same on a loaded machine as on a quiet one): ``n`` records enqueued in calls of
    100, then drained as ``shape`` says: ``none`` (not drained: the baseline to subtract),
    ``single`` (``dequeue`` + ``ack``) or ``many`` (100 ``dequeue`` calls, then ``ack_many``);
    or, for the enqueue side, ``n`` more records enqueued one at a time (``enqueue``) or in
    calls of 100 (``enqueue_many``). (Ir of ``shape``) - (Ir of ``none``), divided by ``n``, is
    the cost per record of what the shape adds."""
    import tflux

    body = b"x" * 64
    with tflux.open(root / "base", share=False, log_sync_policy="never") as store:
        store.create_queue("q")
        items = [(i % 8, body) for i in range(BATCH)]
        for _ in range(n // BATCH):
            store.enqueue_many("q", items)
        if shape == "single":
            for _ in range(n // BATCH * BATCH):
                store.ack(store.dequeue("q", timeout=0))
        elif shape == "many":
            for _ in range(n // BATCH):
                store.ack_many([store.dequeue("q", timeout=0) for _ in range(BATCH)])
        elif shape == "enqueue":
            for i in range(n // BATCH * BATCH):
                store.enqueue("q", i % 8, body)
        elif shape == "enqueue_many":
            for _ in range(n // BATCH):
                store.enqueue_many("q", items)


def _child(python: str, *args: str) -> dict:
    res = subprocess.run(
        [python, os.path.abspath(__file__), *args], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        raise SystemExit(f"{python} {' '.join(args)} failed:\n{res.stderr}")
    return json.loads(res.stdout)


def compare(old: str, new: str) -> int:
    with tempfile.TemporaryDirectory(prefix="tflux-identity-") as tmp:
        a = _child(old, "write", os.path.join(tmp, "old"))
        b = _child(new, "write", os.path.join(tmp, "new"))
    same = a == b
    for rel in sorted(a.keys() | b.keys()):
        mark = "same" if a.get(rel) == b.get(rel) else "DIFFERENT"
        print(f"{mark:9} {rel}  old={a.get(rel)}  new={b.get(rel)}")
    print(f"{len(a)} files (old), {len(b)} (new): " + ("byte-identical" if same else "DIFFER"))
    return 0 if same else 1


def ab(old: str, new: str, pairs: int, base: str | None = None) -> int:
    builds = [("old", old), ("new", new)] + ([("base", base)] if base else [])
    rows: dict[str, dict[str, list[float]]] = {name: {} for name, _ in builds}
    print(f"# load average {os.getloadavg()}")
    for i in range(pairs):
        # Each round turns the order by one, so no build always runs first.
        order = builds[i % len(builds) :] + builds[: i % len(builds)]
        for name, python in order:
            with tempfile.TemporaryDirectory(prefix="tflux-ab-") as tmp:
                res = _child(python, "throughput", tmp)
            for k, v in res.items():
                rows[name].setdefault(k, []).append(v)
            print(f"pair {i + 1} {name}: " + ", ".join(f"{k} {v:,.0f}" for k, v in res.items()))
    print(f"# load average {os.getloadavg()}")

    def ratio(a: list[float], b: list[float]) -> str:
        return f"{statistics.median(y / x for x, y in zip(a, b, strict=True)):.3f}x"

    heads = ["records/s"] + [f"{name} (median)" for name, _ in builds]
    heads.append("new / old (median of pair ratios)")
    if base:
        heads += ["base / old", "new / base"]
    print("\n| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for k in rows["old"]:
        o, n = rows["old"][k], rows["new"][k]
        cells = [k] + [f"{statistics.median(rows[name][k]):,.0f}" for name, _ in builds]
        cells.append(ratio(o, n))
        if base:
            b = rows["base"][k]
            cells += [ratio(o, b), ratio(b, n)]
        print("| " + " | ".join(cells) + " |")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("write").add_argument("dir", type=Path)
    p = sub.add_parser("fixture")
    p.add_argument("dir", type=Path)
    p.add_argument("--by", required=True, help="the build that writes it (e.g. its commit)")
    sub.add_parser("throughput").add_argument("dir", type=Path)
    p = sub.add_parser("calls")
    p.add_argument("n", type=int)
    p.add_argument("shape", choices=["none", "single", "many", "enqueue", "enqueue_many"])
    for name in ("compare", "ab"):
        p = sub.add_parser(name)
        p.add_argument("--old", required=True, help="python of the build before the task queue")
        p.add_argument("--new", default=sys.executable, help="python of the build to check")
        if name == "ab":
            p.add_argument("--pairs", type=int, default=5)
            p.add_argument(
                "--base",
                help="python of a third build run in each round beside the two (e.g. main "
                "before a change; its ratios to old and new are printed too)",
            )
    args = ap.parse_args(argv)
    if args.cmd == "write":
        print(json.dumps(write(args.dir), indent=1))
    elif args.cmd == "fixture":
        args.dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="tflux-identity-") as tmp:
            found = write(Path(tmp) / "base")
        doc = {"written_by": args.by, "files": found}
        (args.dir / "digests.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    elif args.cmd == "throughput":
        print(json.dumps(throughput(args.dir)))
    elif args.cmd == "calls":
        with tempfile.TemporaryDirectory(prefix="tflux-calls-") as tmp:
            calls(Path(tmp), args.n, args.shape)
    elif args.cmd == "compare":
        return compare(args.old, args.new)
    else:
        return ab(args.old, args.new, args.pairs, args.base)
    return 0


if __name__ == "__main__":
    sys.exit(main())
