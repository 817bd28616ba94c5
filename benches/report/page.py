"""The head of the benchmark notes (``docs/internals/benchmark-notes.md``, the lab notebook) from
a pytest-benchmark JSON of the whole suite (``benches/suite``), and what every part of the
generator shares: rows, formatting, tables and splicing a section between its markers.

    python -m benches.report .benchmarks/all.json [-o docs/internals/benchmark-notes.md] \
        [--img-dir docs/img]

Every figure is computed from the JSON: medians, records/s and MB/s from the ``records`` and
``bytes`` each benchmark stored in ``extra_info``, ratios between rows of one group (same run,
same data), and the targets of the issues. MB means 10^6 bytes. Plots (matplotlib, PNG) go to
``--img-dir`` and are embedded in the page.

A ``## Spark`` section at the end of the existing page (owned by the Spark benchmarks) is kept
verbatim; spark groups found in the JSON are added to it as plain tables between markers, which
the next run replaces.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "docs" / "internals" / "benchmark-notes.md"
NOISY = 0.10
DAGGER = "†"
MAKE_BENCH = (
    "python -m pytest benches --benchmark-enable --benchmark-json=.benchmarks/all.json "
    "-p no:cacheprovider && python -m benches.report .benchmarks/all.json"
)


@dataclass
class Row:
    group: str
    test: str
    label: str
    role: str
    median: float
    q1: float
    q3: float
    rounds: int
    records: int
    bytes: int
    info: dict

    @property
    def rps(self) -> float:
        return self.records / self.median if self.median else 0.0

    @property
    def mbps(self) -> float:
        return self.bytes / self.median / 1e6 if self.median else 0.0

    @property
    def ns_per_record(self) -> float:
        return self.median / self.records * 1e9 if self.records else 0.0

    @property
    def noisy(self) -> bool:
        """IQR above 10% of the median: other work on the machine disturbed this row."""
        return (self.q3 - self.q1) > NOISY * self.median

    @property
    def subset(self) -> bool:
        return "subset" in self.info


def load(path: Path) -> tuple[dict, list[Row]]:
    data = json.loads(path.read_text())
    rows = []
    for b in data["benchmarks"]:
        info = b.get("extra_info", {})
        s = b["stats"]
        rows.append(
            Row(
                group=b["group"],
                test=b["name"],
                label=info.get("label", b["name"]),
                role=info.get("role", "tflux"),
                median=s["median"],
                q1=s["q1"],
                q3=s["q3"],
                rounds=s["rounds"],
                records=info.get("records", 0),
                bytes=info.get("bytes", 0),
                info=info,
            )
        )
    return data, rows


def find(rows: list[Row], group: str, test_prefix: str) -> Row | None:
    for r in rows:
        if r.group == group and r.test.startswith(test_prefix):
            return r
    return None


# --- formatting ----------------------------------------------------------------------------------


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


def fmt_ratio(x: float | None) -> str:
    if x is None:
        return ""
    if x < 0.1:
        return f"{x:.2g}x"
    return f"{x:.2f}x" if x < 10 else f"{x:.0f}x"


def fmt_size(n: int) -> str:
    if n >= 1 << 30 and n % (1 << 30) == 0:
        return f"{n >> 30} GiB"
    if 1 << 10 <= n < 1 << 20 and n % (1 << 10) == 0:
        return f"{n >> 10} KiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.0f} MiB"
    return f"{n} B"


def table(header: list[str], body: list[list[str]], align: str | None = None) -> list[str]:
    align = align or "l" + "r" * (len(header) - 1)
    sep = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return lines


# --- sections ----------------------------------------------------------------------------------


def machine_section(data: dict, report_command: str) -> list[str]:
    mi = data["machine_info"]
    tf = mi.get("tflux", {})
    mem = tf.get("memory_total_kib")
    facts = [
        ["Date (run started)", data.get("datetime", "?")],
        ["CPU", f"{tf.get('cpu_model', '?')} ({', '.join(tf.get('cpu_flags', []))})"],
        ["Cores", f"{tf.get('cpu_count', '?')} logical, shared with other work"],
        ["Memory", f"{mem / 2**20:.0f} GiB" if mem else "?"],
        ["OS", f"{mi.get('system', '')} {mi.get('release', '')}"],
        ["Python", f"{mi.get('python_implementation')} {mi.get('python_version')}"],
        [
            "tflux",
            f"{tf.get('version', '?')} (release wheel; `_tflux` sha256 {tf.get('sha256', '?')})",
        ],
        ["rustc (toolchain on the machine)", tf.get("rustc", "?")],
        ["Disk of the data directory", tf.get("disk", "?")],
        ["Mount options", tf.get("mount_options", "?")],
        ["pytest-benchmark", data.get("version", "?")],
        ["Load average (1/5/15 min) at start", tf.get("loadavg_start", "?")],
        ["Load average at end", tf.get("loadavg_end", "?")],
    ]
    lines = ["## Machine", "", *table(["", ""], facts, "ll"), ""]
    size = tf.get("bench_bytes")
    env = tf.get("env", {})
    command = tf.get("command", "python -m pytest benches --benchmark-enable")
    if env:
        command = " ".join(f"{k}={v}" for k, v in env.items()) + " " + command
    lines += [
        "## How it was run",
        "",
        "```sh",
        f"{command}",
        report_command,
        "```",
        "",
        f"(`make bench` runs `{MAKE_BENCH}`.)",
        "",
        f"- Data: {fmt_size(size) if size else '?'} of segments per payload size, written by "
        '`Log.open(dir, sync="never")` + `append_many` (commit after each batch, so segments '
        "roll at the 16 MiB soft limit), flushed with `os.sync()` and then read from the page "
        "cache. Payloads are random bytes.",
        "- Every figure is the **median** of the rounds after one warm-up round (IQR in the "
        "tables), all benchmarks side by side in one pytest session, run once. The machine's "
        "2 cores are shared with other work (see the load averages above), so absolute figures "
        "drift between runs; ratios within a table are the robust part. MB = 10^6 bytes.",
        "- Scan throughput counts the bytes every reader covers: each segment's header and "
        "records up to its end marker (the preallocated tail is not read). The raw CRC rows "
        "checksum exactly those bytes, concatenated into one `bytes` object.",
        "- `pyref` (the pure-Python reader in `benches/suite/pyref.py`) and `Log.entries` need "
        "seconds per GiB, so they scan only the **leading segment(s), up to 16 MiB**, and their "
        "rate is normalised per record; all segments have the same layout, so records/s carries "
        "over.",
        f"- Restore data: a log of {tf.get('bench_deltas', 0):,} deltas with 64 B messages, "
        "encoded with `struct` in `benches/suite/_queuedata.py` (spec section 6) and written with "
        '`Log.open(<base>/data/log, sync="never")` + `append_many`: a CreateQueue, then Add, '
        "Add, Remove, ... where every Remove takes the record at the front of the queue (what "
        "an ack after a dequeue writes; keys from 1,024 priorities), so the queue ends with a "
        "third of the deltas as records. Every restore is checked against the writer's own "
        "bookkeeping (counts, last id, the record a dequeue returns).",
        "- The pure-Python replay (`benches/suite/pyref_replay.py`: `Log.read_batch` + `struct` + "
        "one `heapq` per queue, with the spec's apply rules) runs on the leading deltas only; "
        "its rate is normalised per delta.",
        f"- Memory: {tf.get('bench_memory_records', 0):,} records of 64 B, queued by a restore "
        'of an Add-only log and by `enqueue_many` (10,000 per call, sync "never", automatic '
        "snapshots off) in a fresh child process per round.",
        f"- Durable writes go to {tf.get('disk', 'the temp directory')}.",
        "- Physical limits, random reads, the restores at 1M/10M deltas with 64 B and 1 KiB "
        "messages, the scaling curves and the queue comparison with persist-queue, queuelib and "
        "diskcache ran in the same session; their sections say what each measures. Peer "
        "libraries: " + ", ".join(f"{k} {v}" for k, v in tf.get("peers", {}).items()) + ".",
    ]
    return [*lines, ""]


def scan_section(group: str, rows: list[Row]) -> list[str]:
    members = [r for r in rows if r.group == group]
    if not members:
        return []
    crc = find(rows, group, "test_crc32fast")
    ref = find(rows, group, "test_pure_python")
    body = []
    for r in sorted(members, key=lambda r: r.median / r.bytes):
        body.append(
            [
                r.label + (f" {DAGGER}" if r.noisy else ""),
                fmt_time(r.median),
                f"±{fmt_time((r.q3 - r.q1) / 2)}",
                f"{r.records:,}" + (" (subset)" if r.subset else ""),
                fmt_rate(r.rps),
                f"{r.ns_per_record:.1f}",
                f"{r.mbps:,.0f}",
                fmt_ratio(r.mbps / crc.mbps) if crc else "",
                fmt_ratio(r.rps / ref.rps) if ref else "",
            ]
        )
    header = [
        "Benchmark",
        "Median",
        "IQR/2",
        "Records",
        "Records/s",
        "ns/record",
        "MB/s",
        "vs crc32fast (bytes/s)",
        "vs pure Python (records/s)",
    ]
    return [f"## {group}", "", *table(header, body), *noise_footnote(members), ""]


def noise_footnote(members: list[Row]) -> list[str]:
    if not any(r.noisy for r in members):
        return []
    return [
        "",
        f"{DAGGER} IQR above {NOISY:.0%} of the median: rounds disturbed by other work on the "
        "shared machine; treat the median with care.",
    ]


def append_section(group: str, rows: list[Row]) -> list[str]:
    members = [r for r in rows if r.group == group]
    if not members:
        return []
    base = find(rows, group, "test_append_many[never-batch10000")
    body = []
    for r in sorted(members, key=lambda r: -r.rps):
        calls = r.records // r.info.get("batch", 1)
        body.append(
            [
                r.label + (f" {DAGGER}" if r.noisy else ""),
                fmt_time(r.median),
                f"±{fmt_time((r.q3 - r.q1) / 2)}",
                f"{r.records:,}",
                fmt_rate(r.rps),
                f"{r.mbps:,.1f}",
                f"{r.median / calls * 1e6:,.2f}",
                fmt_ratio(r.rps / base.rps) if base else "",
            ]
        )
    header = [
        "Benchmark (each round: a fresh log)",
        "Median",
        "IQR/2",
        "Records/round",
        "Records/s",
        "MB/s on disk",
        "µs per call",
        'vs "never", 10k per call',
    ]
    return [f"## {group}", "", *table(header, body), *noise_footnote(members), ""]


@dataclass
class Target:
    name: str
    goal: str
    measured: str
    met: bool | None
    why: str = ""
    rows: tuple[Row | None, ...] = ()

    @property
    def disturbed(self) -> bool:
        return any(r is not None and r.noisy for r in self.rows)


def targets(rows: list[Row]) -> list[Target]:
    out: list[Target] = []
    for size in ("64B", "1KiB"):
        g = f"scan-{size}"
        ver, crc, ref = (find(rows, g, p) for p in ("test_verify", "test_crc32fast", "test_pure"))
        if ver and crc:
            ratio = ver.mbps / crc.mbps
            per_rec = ver.bytes / ver.records
            crc_ns = crc.median / crc.bytes * per_rec * 1e9
            why = (
                f"verify spends {ver.ns_per_record:.1f} ns per {per_rec:.0f}-byte record; "
                f"crc32fast streams the same bytes at {crc_ns:.1f} ns per record-sized piece. "
                "See *Why the misses* (CRC of short records)."
            )
            if 0.7 <= ratio < 0.8:
                why += (
                    " Borderline: this ratio moved by more than 0.1 between trial runs on this "
                    "shared 2-core machine."
                )
            out.append(
                Target(
                    f"verify / raw crc32fast, {size} records",
                    ">= 0.8",
                    f"{ratio:.2f} ({ver.mbps:,.0f} vs {crc.mbps:,.0f} MB/s)",
                    ratio >= 0.8,
                    why,
                    (ver, crc),
                )
            )
    g = "scan-64B"
    ver = find(rows, g, "test_verify")
    if ver:
        out.append(
            Target(
                "verify scan rate, 64 B records",
                ">= 20 M records/s",
                f"{fmt_rate(ver.rps)} records/s",
                ver.rps >= 20e6,
                rows=(ver,),
            )
        )
    for prefix, what in (
        ("test_read_batch_returns_every_entry[64B-default", "default `max_bytes` (4 MiB)"),
        ("test_read_batch_returns_every_entry[64B-1MiB", "`max_bytes=1 MiB`"),
    ):
        rb = find(rows, g, prefix)
        if rb:
            out.append(
                Target(
                    f"read_batch to Python, 64 B records, {what}",
                    ">= 20 M records/s",
                    f"{fmt_rate(rb.rps)} records/s",
                    rb.rps >= 20e6,
                    "See *Why the misses* (read_batch)." if rb.rps < 20e6 else "",
                    (rb,),
                )
            )
    for size in ("64B", "1KiB"):
        g = f"scan-{size}"
        ver, ref = find(rows, g, "test_verify"), find(rows, g, "test_pure_python")
        if ver and ref:
            ratio = ver.rps / ref.rps
            out.append(
                Target(
                    f"verify vs pure-Python reader, {size} records",
                    ">= 30x",
                    f"{ratio:.0f}x ({fmt_rate(ver.rps)} vs {fmt_rate(ref.rps)} records/s)",
                    ratio >= 30,
                    "See *Why the misses* (pure-Python baseline)." if ratio < 30 else "",
                    (ver, ref),
                )
            )
    app = find(rows, "append-64B", "test_append_many[never-batch10000")
    if app:
        out.append(
            Target(
                'append_many, sync="never", 64 B, 10k per call',
                ">= 2 M records/s",
                f"{fmt_rate(app.rps)} records/s",
                app.rps >= 2e6,
                rows=(app,),
            )
        )
    return out


# --- the queue store ---------------------------------------------------------------------------

RESTORE = "restore-64B-10M"  # the group the restore targets are judged on
MEMORY = "memory-64B"
ENQUEUE = "enqueue-64B"


def restore_groups(rows: list[Row]) -> list[str]:
    """restore-<payload>-<deltas> groups: 64 B before 1 KiB, small logs before large ones."""
    groups = {r.group for r in rows if r.group.startswith("restore-")}

    def order(g: str) -> tuple:
        _, payload, deltas = g.split("-", 2)
        return (payload != "64B", float(deltas.rstrip("M")) if deltas.endswith("M") else 0)

    return sorted(groups, key=order)


def memory_section(rows: list[Row]) -> list[str]:
    members = [r for r in rows if r.group == MEMORY and "bytes_per_record_hwm" in r.info]
    if not members:
        return []
    body = []
    for r in members:
        i = r.info
        body.append(
            [
                r.label + (f" {DAGGER}" if r.noisy else ""),
                f"{r.records:,}",
                fmt_time(r.median),
                fmt_time(i["child_fill_seconds"]),
                f"{i['bytes_per_record_hwm']:.1f}",
                f"{i['bytes_per_record_rss']:.1f}",
                f"**{i['bytes_per_record_anon']:.1f}**",
                f"{i['rss_file_growth_bytes'] / 2**20:,.0f} MiB",
            ]
        )
    header = [
        "Child process (median of its rounds)",
        "Records queued",
        "Child run",
        "Fill (in the child)",
        "B/record beyond payload: VmHWM",
        "VmRSS",
        "RssAnon",
        "RssFile growth",
    ]
    return [
        f"## {MEMORY}",
        "",
        "Growth of `/proc/self/status` fields from just before the fill (tflux imported, "
        "nothing opened) to just after it, minus 64 B of payload per record, divided by the "
        "records. `VmHWM` is the peak, `RssAnon` the heap (what the queues and the log's "
        "index allocate), `RssFile` the file pages mapped into the process. *Child run* is "
        "the timed figure: the whole child, interpreter start included.",
        "",
        *table(header, body),
        *noise_footnote(members),
        "",
    ]


def enqueue_section(rows: list[Row]) -> list[str]:
    members = [r for r in rows if r.group == ENQUEUE]
    if not members:
        return []
    raw = find(rows, ENQUEUE, "test_raw_write_fdatasync[prezeroed")
    body = []
    for r in sorted(members, key=lambda r: -r.rps):
        calls = r.info.get("calls", r.records)
        per_call = r.median / calls
        body.append(
            [
                r.label + (f" {DAGGER}" if r.noisy else ""),
                fmt_time(r.median),
                f"±{fmt_time((r.q3 - r.q1) / 2)}",
                f"{r.records:,}",
                fmt_rate(r.rps),
                f"{per_call * 1e6:,.0f}",
                fmt_ratio(calls / r.median / (raw.records / raw.median)) if raw else "",
            ]
        )
    header = [
        "Benchmark (each round: a fresh store or file)",
        "Median",
        "IQR/2",
        "Records/round",
        "Durable records/s",
        "µs per call (wall / calls)",
        "Calls/s vs raw write+fdatasync",
    ]
    return [
        f"## {ENQUEUE}",
        "",
        "Every call returns only after its records are on disk (`fdatasync`). Store rows use "
        "the default sync policy (fsync before each write call returns; concurrent callers "
        "share one fsync). With 8 threads, *µs per call* is wall time divided by all calls of "
        "all threads.",
        "",
        *table(header, body),
        *noise_footnote(members),
        "",
    ]


def queue_targets(rows: list[Row]) -> list[Target]:
    # Restore targets are judged in the issue-11 section (benches/report/restore.py).
    return [t for t in store_targets(rows) if "after a restore" not in t.name]


def store_targets(rows: list[Row]) -> list[Target]:
    out: list[Target] = []
    for prefix, what in (
        ("test_memory_per_record_after_restore", "after a restore"),
        ("test_memory_per_record_enqueue_many", "after enqueue_many"),
    ):
        r = find(rows, MEMORY, prefix)
        if not r or "bytes_per_record_hwm" not in r.info:
            continue
        hwm, anon = r.info["bytes_per_record_hwm"], r.info["bytes_per_record_anon"]
        out.append(
            Target(
                f"memory per queued record beyond its payload, {r.records:,} records, {what}",
                "<= 48 B",
                f"{hwm:.1f} B by VmHWM, {anon:.1f} B of it heap (RssAnon)",
                max(hwm, anon) <= 48,
                "See *Why the misses* (memory)." if max(hwm, anon) > 48 else "",
                (r,),
            )
        )
    single = find(rows, ENQUEUE, "test_durable_enqueue[enqueue-1thread")
    raw = find(rows, ENQUEUE, "test_raw_write_fdatasync[prezeroed")
    if single and raw:
        ratio = single.rps / raw.rps
        out.append(
            Target(
                "durable `store.enqueue`, one thread, vs raw `os.write` + `os.fdatasync`",
                ">= 0.9x",
                f"{ratio:.2f}x ({single.median / single.records * 1e6:,.0f} vs "
                f"{raw.median / raw.records * 1e6:,.0f} µs per call)",
                ratio >= 0.9,
                "See *Why the misses* (durable enqueue)." if ratio < 0.9 else "",
                (single, raw),
            )
        )
    for prefix, what in (
        ("test_durable_enqueue[enqueue_many100", "`enqueue_many`, 100 per call"),
        ("test_durable_enqueue[enqueue_many1000", "`enqueue_many`, 1,000 per call"),
        ("test_durable_enqueue[enqueue-8threads", "8 threads calling `enqueue`"),
    ):
        r = find(rows, ENQUEUE, prefix)
        if not r:
            continue
        out.append(
            Target(
                f"durable throughput, {what}",
                ">= 100 K records/s",
                f"{fmt_rate(r.rps)} records/s",
                r.rps >= 100e3,
                "See *Why the misses* (group commit)." if r.rps < 100e3 else "",
                (r,),
            )
        )
    return out


def targets_section(ts: list[Target]) -> list[str]:
    body = [
        [
            t.name,
            t.goal,
            t.measured + (f" {DAGGER}" if t.disturbed else ""),
            {True: "met", False: "**missed**", None: "?"}[t.met],
            t.why if t.met is False else "",
        ]
        for t in ts
    ]
    if any(t.disturbed for t in ts):
        body_note = [
            "",
            f"{DAGGER} A row behind this figure was disturbed (IQR above {NOISY:.0%} of the "
            "median); the verdict is less certain than the others.",
        ]
    else:
        body_note = []
    return [
        "## Targets",
        "",
        *table(["Target", "Goal", "Measured (medians)", "", "Note"], body, "lllll"),
        *body_note,
        "",
    ]


def misses_section(rows: list[Row], ts: list[Target]) -> list[str]:
    """Explanations of the misses: figures from this run, causes from profiling (perf record)."""
    lines = ["## Why the misses", ""]
    v64, c64 = find(rows, "scan-64B", "test_verify"), find(rows, "scan-64B", "test_crc32fast")
    v1k, c1k = find(rows, "scan-1KiB", "test_verify"), find(rows, "scan-1KiB", "test_crc32fast")
    crc_misses = [
        (size, v, c)
        for size, v, c in (("64 B", v64, c64), ("1 KiB", v1k, c1k))
        if v and c and v.mbps / c.mbps < 0.8
    ]
    if crc_misses:
        figures = "; ".join(
            f"{size}: {v.mbps / c.mbps:.2f}, {v.ns_per_record:.1f} ns per record where a streamed "
            f"CRC of the same bytes takes {c.median / c.bytes * v.bytes / v.records * 1e9:.1f}"
            for size, v, c in crc_misses
        )
        lines += [
            f"**verify vs raw CRC ({figures}).** The baseline is one `crc32fast::hash` over the "
            "whole concatenation. On this CPU (AVX-512 + VPCLMULQDQ) crc32fast 1.5.4 picks a "
            "kernel by length: 16 parallel fold streams from 2 KiB up, 8 streams (AVX2) from "
            "256 B, 4 streams (SSE) from 128 B, and below 128 B a single fold chain (one 16-byte "
            "block per carry-less multiply, each waiting for the previous one) plus the Barrett "
            "reduction. The streamed CRC runs at memory speed on the widest kernel; "
            "verify must checksum each record on its own, so a 64-byte record gets the slowest "
            "kernel and a 1 KiB record the 8-stream one, each paying the fixed setup and final "
            "reduction, and three nested dispatch calls (`calculate_avx512` -> `calculate_avx2` "
            "-> `calculate`). `perf record` of a verify loop over 256 MiB of 64 B records "
            "(taken for an earlier version of this page; the scan path is unchanged) put "
            "about 55% of the time in "
            "`pclmulqdq::calculate`, 4% in `crc32fast::hash` and about 21% in `record::parse` "
            "(marker, length and padding checks): the per-record CRC, not the framing, sets "
            "the pace. The format requires one checksum per record, so the streamed CRC is a "
            "ceiling that short records cannot reach one at a time; closing the gap would take "
            "CRCs of several records computed interleaved (independent fold chains in flight at "
            "once)."
            + (
                " The 64 B scan still clears its records/s target."
                if v64 and v64.rps >= 20e6
                else ""
            ),
            "",
        ]
    rbd = find(rows, "scan-64B", "test_read_batch_returns_every_entry[64B-default")
    rb1 = find(rows, "scan-64B", "test_read_batch_returns_every_entry[64B-1MiB")
    if rbd and rbd.rps < 20e6:
        extra = (
            f" With `max_bytes=1 MiB` the same loop reaches {fmt_rate(rb1.rps)} records/s "
            f"({rb1.rps / rbd.rps:.1f}x)."
            if rb1
            else ""
        )
        lines += [
            f"**read_batch with the default budget ({fmt_rate(rbd.rps)} records/s at 64 B).** "
            "Each call builds its data and the term/offset/LSN columns in fresh Rust `Vec`s and "
            "then copies every column again into new Python objects with the GIL held; the "
            "larger the budget, the more of that streams through RAM instead of cache (with the "
            "former 64 MiB default, `perf record` put about 57% of the time in page faults of "
            f"fresh buffers and 11% in `memmove`).{extra} Building each column once, directly "
            "into the Python object, would remove one of the two copies.",
            "",
        ]
    r1k = find(rows, "scan-1KiB", "test_pure_python")
    z1k = find(rows, "scan-1KiB", "test_zlib")
    r64 = find(rows, "scan-64B", "test_pure_python")
    for size, ver, ref, zl, crc, payload in (
        ("64 B", v64, r64, find(rows, "scan-64B", "test_zlib"), c64, 64),
        ("1 KiB", v1k, r1k, z1k, c1k, 1024),
    ):
        if not (ver and ref and zl and crc) or ver.rps / ref.rps >= 30:
            continue
        zlib_ns = zl.median / zl.bytes * payload * 1e9
        floor_ns = crc.median / crc.bytes * (ver.bytes / ver.records) * 1e9
        lines += [
            f"**verify vs pure Python at {size} ({ver.rps / ref.rps:.0f}x).** The pure-Python "
            f"reader spends {ref.ns_per_record:,.0f} ns per record, of which about "
            f"{zlib_ns:,.0f} ns is `zlib.crc32` over the data (C code, {zl.mbps:,.0f} MB/s "
            f"here) and the rest the interpreter's per-record work. 30x would need tflux to "
            f"spend {ref.ns_per_record / 30:,.0f} ns per record, while a streamed crc32fast over "
            f"the same bytes, the ceiling of any checksumming scan here, already needs "
            f"{floor_ns:,.0f} ns per record-sized piece."
            + (
                " The target is out of reach by construction at this size: even that ceiling is "
                f"only {ref.ns_per_record / floor_ns:.0f}x faster than the pure-Python reader."
                if ref.ns_per_record / 30 < floor_ns
                else ""
            ),
            "",
        ]
    lines += queue_misses(rows, ts)
    if len(lines) == 2:
        lines += ["Every target was met.", ""]
    return lines


def queue_misses(rows: list[Row], ts: list[Target]) -> list[str]:
    """Explanations of the queue misses: figures from this run, causes from profiling."""
    lines: list[str] = []
    lines += [
        "**Restore and memory per restored record**: see *Restore at the speed of the scan "
        "(issue 11)*.",
        "",
    ]
    threads = find(rows, ENQUEUE, "test_durable_enqueue[enqueue-8threads")
    raw = find(rows, ENQUEUE, "test_raw_write_fdatasync[prezeroed")
    if threads and threads.rps < 100e3:
        per_sync = threads.rps * (raw.median / raw.records) if raw else 0
        lines += [
            f"**8 threads calling `enqueue` ({fmt_rate(threads.rps)} records/s).** Group commit "
            "works (the rate is above one fsync's worth per call), but a group can hold at most "
            "one record per thread: with 8 callers each blocked until its own record is durable, "
            "at most 8 records share an fsync, so the ceiling is 8 / (fsync time) = "
            + (
                f"about {8 / (raw.median / raw.records) / 1e3:,.0f} K records/s at this disk's "
                f"{raw.median / raw.records * 1e6:,.0f} µs per write+fdatasync; measured "
                f"{per_sync:.1f} records per fsync-time on average"
                + (
                    " (more than 8: the disk's sync time moved between the two rows, which "
                    "ran seconds apart on a disk shared with other work; see their IQRs). "
                    if per_sync > 8
                    else ". "
                )
                if raw
                else ""
            )
            + PROFILE_THREADS
            + " 100 K records/s durable needs batches: `enqueue_many` clears it by far.",
            "",
        ]
    many = find(rows, ENQUEUE, "test_durable_enqueue[enqueue_many100")
    if many and raw and many.rps < 100e3:
        sync = raw.median / raw.records
        lines += [
            f"**`enqueue_many`, 100 per call ({fmt_rate(many.rps)} records/s).** One fsync per "
            f"call: at this run's {sync * 1e6:,.0f} µs per raw write+fdatasync the ceiling is "
            f"100 / {sync * 1e6:,.0f} µs = {fmt_rate(100 / sync)} records/s, and the call "
            f"reached {many.rps * sync / 100:.2f} of it. The disk was slower than in earlier "
            "runs (shared with other work; see the physical limits): with a 200 µs fsync the "
            "same calls clear 100 K records/s (earlier page: 682 K). Batches of 1,000 clear it "
            "here too.",
            "",
        ]
    many = find(rows, ENQUEUE, "test_durable_enqueue[enqueue_many100")
    if many and raw and many.rps < 100e3:
        sync = raw.median / raw.records
        lines += [
            f"**`enqueue_many`, 100 per call ({fmt_rate(many.rps)} records/s).** One fsync per "
            f"call: at this run's {sync * 1e6:,.0f} µs per raw write+fdatasync the ceiling is "
            f"100 / {sync * 1e6:,.0f} µs = {fmt_rate(100 / sync)} records/s, and the call "
            f"reached {many.rps * sync / 100:.2f} of it. The disk was slower than in earlier "
            "runs (shared with other work; see the physical limits): with a 200 µs fsync the "
            "same calls clear 100 K records/s (earlier page: 682 K). Batches of 1,000 clear it "
            "here too.",
            "",
        ]
    single = find(rows, ENQUEUE, "test_durable_enqueue[enqueue-1thread")
    if single and raw and single.rps / raw.rps < 0.9:
        lines += [
            f"**Single durable enqueue ({single.rps / raw.rps:.2f}x the raw rate).** "
            + PROFILE_SINGLE,
            "",
        ]
    return lines


# --- physical limits, random reads, scaling, the queue comparison ------------------------------

PHYSICAL = "physical"
READ_RANDOM = "read-random"
SCALING = "scaling-restore"
SCAN_SIZE = "scan-size"
QUEUE_GROUPS = ("queue-100B", "queue-1KiB")
DURABILITY = {
    "fsync": "fsync per operation",
    "batched": "batched (a sync per 100 operations, or per 100 ms where said)",
    "none": "none (the library never syncs; the OS writes back)",
}


def physical_section(rows: list[Row]) -> list[str]:
    members = [r for r in rows if r.group == PHYSICAL]
    if not members:
        return []
    copy = find(rows, PHYSICAL, "test_memcpy")
    body = []
    for r in members:
        sync_rate = "calls" in r.info
        body.append(
            [
                r.label + (f" {DAGGER}" if r.noisy else ""),
                fmt_time(r.median),
                f"±{fmt_time((r.q3 - r.q1) / 2)}",
                fmt_size(r.bytes),
                f"{r.mbps:,.0f}",
                f"{fmt_rate(r.rps)} syncs/s, {r.median / r.records * 1e6:,.0f} µs each"
                if sync_rate
                else "",
                fmt_ratio(r.mbps / copy.mbps) if copy and not sync_rate else "",
            ]
        )
    header = ["Limit", "Median", "IQR/2", "Bytes", "MB/s", "Sync rate", "vs memcpy (MB/s)"]
    return [
        "## Physical limits",
        "",
        "What no engine can beat on this machine, measured in the same session: the CRC "
        "ceiling of any verifying scan, memory bandwidth (one copy; a read from a fresh mmap of "
        "the cached file, page faults included) and the data directory's disk (streaming write "
        "rate; one small write + `fdatasync` per call, the ceiling of any durable "
        "one-record-per-call write).",
        "",
        *table(header, body),
        *noise_footnote(members),
        "",
    ]


def read_random_section(rows: list[Row]) -> list[str]:
    members = [r for r in rows if r.group == READ_RANDOM]
    if not members:
        return []
    body = []
    for r in sorted(members, key=lambda r: (r.info.get("payload", 0), -r.rps)):
        ref = next(
            (
                x
                for x in members
                if x.role == "baseline" and x.info.get("payload") == r.info.get("payload")
            ),
            None,
        )
        body.append(
            [
                r.label + (f" {DAGGER}" if r.noisy else ""),
                fmt_time(r.median),
                f"{r.records:,}",
                fmt_rate(r.rps),
                f"{r.median / r.records * 1e6:.2f}",
                fmt_ratio(r.rps / ref.rps) if ref else "",
            ]
        )
    header = ["Benchmark (random LSNs)", "Median", "Reads", "Reads/s", "µs/read", "vs pure Python"]
    return [
        f"## {READ_RANDOM}",
        "",
        "Single records at uniformly random LSNs of the cached 1 GiB scan logs, one call per "
        "record. The pure-Python baseline knows the record's offset without an index (every "
        "record of these logs has one size), so it is a floor for a real reader.",
        "",
        *table(header, body),
        *noise_footnote(members),
        "",
    ]


def scan_size_section(rows: list[Row], plots: dict[str, str]) -> list[str]:
    members = [r for r in rows if r.group == SCAN_SIZE]
    if not members:
        return []
    by_size: dict[int, dict[str, Row]] = {}
    for r in members:
        kind = r.test.split("_against")[0].removeprefix("test_")
        by_size.setdefault(r.info["payload"], {})[kind] = r
    body = []
    for payload in sorted(by_size):
        k = by_size[payload]
        ver, rb, crc = k.get("verify"), k.get("read_batch"), k.get("crc32fast")
        any_row = ver or rb or crc
        disturbed = any(x is not None and x.noisy for x in (ver, rb, crc))
        body.append(
            [
                fmt_size(payload) + (f" {DAGGER}" if disturbed else ""),
                f"{any_row.records:,}",
                fmt_rate(ver.rps) if ver else "",
                f"{ver.mbps:,.0f}" if ver else "",
                fmt_rate(rb.rps) if rb else "",
                f"{rb.mbps:,.0f}" if rb else "",
                f"{crc.mbps:,.0f}" if crc else "",
                fmt_ratio(ver.mbps / crc.mbps) if ver and crc else "",
            ]
        )
    header = [
        "Payload",
        "Records",
        "verify records/s",
        "verify MB/s",
        "read_batch records/s",
        "read_batch MB/s",
        "crc32fast MB/s (same bytes)",
        "verify / crc32fast",
    ]
    total = next(iter(members)).bytes
    lines = [
        "## Scaling: scan rate against record size",
        "",
        f"A log of about {fmt_size(total)} per payload size, cached; `tflux.verify`, a "
        "`Log.read_batch` loop (default budget) and one crc32fast over the same bytes.",
        "",
        *table(header, body),
        *noise_footnote(members),
        "",
    ]
    if "scan_size" in plots:
        lines += [f"![scan rate against record size]({plots['scan_size']})", ""]
    return lines


def _peer_rows(rows: list[Row], group: str) -> list[Row]:
    return [r for r in rows if r.group == group and "durability" in r.info]


def _tflux_reference(members: list[Row], durability: str, threads: int) -> Row | None:
    """The tflux row each peer is compared with: same durability class and threads."""
    want = {"fsync": "tflux", "batched": "tflux-many", "none": "tflux"}[durability]
    for r in members:
        if (r.info["lib"], r.info["durability"], r.info["threads"]) == (want, durability, threads):
            return r
    return None


def queue_section(rows: list[Row], group: str, plots: dict[str, str]) -> list[str]:
    members = _peer_rows(rows, group)
    if not members:
        return []
    payload = group.split("-", 1)[1]
    lines = [
        f"## Queue workloads, {payload} payloads: tflux beside the Python persistent queues",
        "",
    ]
    if group == QUEUE_GROUPS[0]:
        lines += [
            "Each round: a fresh directory, enqueue N records, then dequeue + ack all N (each "
            "library's closest equivalent of an ack, in its row's knobs), with 1 thread or 8 "
            "threads sharing one queue object (each thread enqueues N/8, then drains N/8). "
            "*Records/s* is N over the whole round; the enqueue and drain columns are the two "
            "phases' own rates. *tflux vs this* divides tflux's records/s by the row's, in the "
            "same durability class and thread count (the batched class compares with "
            "`enqueue_many`); above 1 tflux is faster. Median of the rounds; N is smaller where "
            "every operation waits for the disk.",
            "",
        ]
    for durability, title in DURABILITY.items():
        subset = [r for r in members if r.info["durability"] == durability]
        if not subset:
            continue
        body = []
        for r in sorted(subset, key=lambda r: (r.info["threads"], -r.rps)):
            i = r.info
            ref = _tflux_reference(members, durability, i["threads"])
            n = r.records
            body.append(
                [
                    ("**" + i["lib"] + "**" if i["role"] == "tflux" else i["lib"])
                    + (f" {DAGGER}" if r.noisy else ""),
                    str(i["threads"]),
                    f"{n:,}",
                    fmt_rate(r.rps),
                    fmt_rate(n / i["enqueue_s"]) if i.get("enqueue_s") else "",
                    fmt_rate(n / i["drain_s"]) if i.get("drain_s") else "",
                    "" if i["role"] == "tflux" or not ref else fmt_ratio(ref.rps / r.rps),
                    i["knobs"].replace("|", "\\|"),
                ]
            )
        header = [
            "Library",
            "Threads",
            "N",
            "Records/s",
            "Enqueue/s",
            "Dequeue+ack/s",
            "tflux vs this",
            "Knobs",
        ]
        lines += [f"**Durability: {title}**", "", *table(header, body, "lrrrrrrl"), ""]
        ratios = sorted(
            (ref.rps / r.rps, r.info["lib"], r.info["threads"])
            for r in subset
            if r.role != "tflux"
            and (ref := _tflux_reference(members, durability, r.info["threads"])) is not None
        )
        if ratios:
            lo, hi = ratios[0], ratios[-1]
            lines += [
                f"In this class tflux's rate is {fmt_ratio(lo[0])} ({lo[1]}, {lo[2]} "
                f"thread{'s' if lo[2] > 1 else ''}) to {fmt_ratio(hi[0])} ({hi[1]}, {hi[2]} "
                f"thread{'s' if hi[2] > 1 else ''}) the peers'.",
                "",
            ]
    lines += noise_footnote(members)
    if group == QUEUE_GROUPS[-1] or not any(_peer_rows(rows, g) for g in QUEUE_GROUPS[1:]):
        lines += _missing_modes()
        if "queues" in plots:
            lines += ["", f"![queue workloads]({plots['queues']})", ""]
    return [*lines, ""]


def _missing_modes() -> list[str]:
    try:
        sys.path.insert(0, str(ROOT))
        from benches.suite.bench_peers import WHY_NO_MODE
    except Exception:  # the notes are a courtesy; the tables stand without them
        return []
    finally:
        sys.path.pop(0)
    notes = [
        f"- {lib}, {durability}: {why}."
        for (lib, durability), why in WHY_NO_MODE.items()
        if not lib.startswith("tflux")
    ]
    return [
        "",
        "Rows that do not exist, and why (a library is only shown in the classes its own knobs "
        "provide):",
        "",
        *notes,
        "- queuelib (both queues): not thread-safe, so no 8-thread rows.",
        "- Dequeue + ack: persist-queue's `SQLiteQueue.get` deletes the row and queuelib's and "
        "diskcache's pops remove the record, so for them dequeue and ack are one step "
        "(at-most-once delivery); tflux and `SQLiteAckQueue` log the ack separately.",
    ]


# --- plots ----------------------------------------------------------------------------------------


def make_plots(rows: list[Row], img_dir: Path, page: Path) -> dict[str, str]:
    """PNG plots under ``img_dir``; returns {name: path relative to the page}."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        print("matplotlib is not installed: no plots (pip install '.[bench]')", file=sys.stderr)
        return {}
    img_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}

    def save(fig, name: str) -> None:
        path = img_dir / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        made[name] = os.path.relpath(path, page.parent)

    scaling = sorted(
        (r for r in rows if r.group == SCALING and "hwm_growth_bytes" in r.info),
        key=lambda r: r.records,
    )
    if len(scaling) >= 2:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
        x = [r.records / 1e6 for r in scaling]
        a.plot(x, [r.info["restore_seconds"] for r in scaling], "o-", label="tflux.open restore")
        per = scaling[0].info["restore_seconds"] / scaling[0].records
        a.plot(x, [per * r.records for r in scaling], "--", color="grey", label="linear from 1st")
        a.set(xlabel="log size (M deltas)", ylabel="restore time (s)", title="Restore time")
        a.legend()
        b.plot(x, [r.info["hwm_growth_bytes"] / 2**20 for r in scaling], "o-", label="VmHWM growth")
        b.plot(
            x,
            [(r.info["bytes_per_record_anon"] + 64) * r.info["live"] / 2**20 for r in scaling],
            "s-",
            label="heap (RssAnon) growth",
        )
        b.plot(x, [r.bytes / 2**20 for r in scaling], ":", color="grey", label="log size")
        b.set(xlabel="log size (M deltas)", ylabel="MiB", title="Memory of the restoring process")
        b.legend()
        save(fig, "scaling")
    sized = [r for r in rows if r.group == SCAN_SIZE]
    if sized:
        fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
        for kind, style in (("verify", "o-"), ("read_batch", "s-"), ("crc32fast", "^--")):
            pts = sorted(
                (r.info["payload"], r)
                for r in sized
                if r.test.removeprefix("test_").startswith(kind)
            )
            if not pts:
                continue
            xs = [p for p, _ in pts]
            a.plot(xs, [r.mbps for _, r in pts], style, label=kind)
            if kind != "crc32fast":
                b.plot(xs, [r.rps / 1e6 for _, r in pts], style, label=kind)
        for ax, ylabel in ((a, "MB/s"), (b, "M records/s")):
            ax.set_xscale("log", base=2)
            ax.set(xlabel="payload bytes per record", ylabel=ylabel)
            ax.legend()
        b.set_yscale("log")
        a.set_title("Bytes scanned per second")
        b.set_title("Records per second")
        save(fig, "scan_size")
    peers = [r for g in QUEUE_GROUPS for r in _peer_rows(rows, g) if r.info["threads"] == 1]
    if peers:
        classes = [d for d in DURABILITY if any(r.info["durability"] == d for r in peers)]
        fig, axes = plt.subplots(1, len(classes), figsize=(5 * len(classes), 4.2), squeeze=False)
        for ax, durability in zip(axes[0], classes, strict=True):
            libs = sorted(
                {r.info["lib"] for r in peers if r.info["durability"] == durability},
                key=lambda lib: (not lib.startswith("tflux"), lib),
            )
            ys = range(len(libs))
            colors = ("tab:blue", "tab:orange")
            for k, (group, color) in enumerate(zip(QUEUE_GROUPS, colors, strict=True)):
                vals = []
                for lib in libs:
                    r = next(
                        (
                            r
                            for r in peers
                            if r.group == group
                            and r.info["lib"] == lib
                            and r.info["durability"] == durability
                        ),
                        None,
                    )
                    vals.append(r.rps if r else 0)
                ax.barh(
                    [y + 0.4 * k for y in ys],
                    vals,
                    height=0.4,
                    color=color,
                    label=group.split("-")[1],
                )
            ax.set_yticks([y + 0.2 for y in ys], libs)
            ax.invert_yaxis()
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.set(xlabel="records/s (enqueue + dequeue/ack), 1 thread", title=durability)
            ax.legend()
        fig.suptitle("Queue workloads by durability class (higher is better)")
        save(fig, "queues")
    return made


# --- sections kept from the previous page ---------------------------------------------------------

SPARK_HEADING = "## Spark"
SPARK_RUN_BEGIN = "<!-- spark groups of this run: generated by benches/report/page.py -->"
SPARK_RUN_END = "<!-- end of the spark groups of this run -->"
# Everything on the page after this line is kept as it is: hand-written sections and the sections
# the other parts of the generator write between their own markers (restore.py, reads.py).
GENERATED_END = "<!-- end of the part generated by benches/report/page.py; kept below -->"


def splice(page: str, block: str, begin: str, end: str) -> str:
    """``page`` with ``block`` in place of the lines from ``begin`` to ``end`` (a section another
    part of the generator owns), or appended at the end the first time."""
    if begin in page and end in page:
        head, rest = page.split(begin, 1)
        _, tail = rest.split(end + "\n", 1)
        return head + block + tail
    return page.rstrip("\n") + "\n\n" + block


def kept_part(old_page: str) -> str:
    """What the page keeps from its previous version: everything after ``GENERATED_END`` (on a
    page from before that marker, the ``## Spark`` section to the end of the page)."""
    if GENERATED_END in old_page:
        text = old_page.split(GENERATED_END, 1)[1]
    else:
        at = old_page.find("\n" + SPARK_HEADING)
        text = old_page[at + 1 :] if at >= 0 else ""
    return text.strip("\n") + "\n" if text.strip() else ""


def with_spark_groups(kept: str, generated: list[str]) -> str:
    """``kept`` with this run's Spark tables in place of the ones this script generated last
    time, or at the end of the ``## Spark`` section (added when the page has none); without
    Spark rows in this run, the old tables are dropped."""
    block = "\n".join([SPARK_RUN_BEGIN, "", *generated, SPARK_RUN_END]) if generated else ""
    if SPARK_RUN_BEGIN in kept:
        head, _, rest = kept.partition(SPARK_RUN_BEGIN)
        _, _, tail = rest.partition(SPARK_RUN_END)
        if block:
            return head + block + tail
        return head.rstrip("\n") + "\n\n" + tail.lstrip("\n")
    if not block:
        return kept
    at = kept.find(SPARK_HEADING + "\n")
    if at < 0:
        return (kept.rstrip("\n") + "\n\n" if kept else "") + SPARK_HEADING + "\n\n" + block + "\n"
    # The section ends where the next section, or another script's generated part, starts.
    ends = [kept.find(m, at + len(SPARK_HEADING)) for m in ("\n## ", "\n<!-- ")]
    end = min((e for e in ends if e >= 0), default=len(kept))
    return kept[:end].rstrip("\n") + "\n\n" + block + "\n\n" + kept[end:].lstrip("\n")


def generic_section(title: str, groups: list[str], rows: list[Row]) -> list[str]:
    """A plain table for groups this script has no dedicated section for (e.g. spark-*)."""
    lines: list[str] = []
    for group in groups:
        members = [r for r in rows if r.group == group]
        body = [
            [
                r.label + (f" {DAGGER}" if r.noisy else ""),
                r.role,
                fmt_time(r.median),
                f"±{fmt_time((r.q3 - r.q1) / 2)}",
                f"{r.records:,}" if r.records else "",
                fmt_rate(r.rps) if r.records else "",
                f"{r.mbps:,.0f}" if r.bytes else "",
            ]
            for r in sorted(members, key=lambda r: r.median)
        ]
        header = ["Benchmark", "Role", "Median", "IQR/2", "Records", "Records/s", "MB/s"]
        lines += [f"{title}{group}", "", *table(header, body), *noise_footnote(members), ""]
    return lines


# Findings of profiling outside the suite (filled in from the runs described in each text).
RESTORE_POINTER = [
    "## Restore and replay",
    "",
    "Restore (`tflux.open`, `QueueState.replay`) time, memory per restored record, scaling with "
    "the log's size and the profile behind every missed restore target are in one place: "
    "*Restore at the speed of the scan (issue 11)* below, generated by "
    "`benches/report/restore.py` from `benches/suite/bench_restore.py`. The restore row of "
    "*memory-64B* predates borrowed payloads; the issue-11 scaling rows measure the current code.",
    "",
]
PROFILE_THREADS = (
    "`strace -f -c` of 8 threads x 100 enqueues outside the suite counted 204 `fdatasync` for "
    "800 records, about 4 per fsync rather than 8: after an fsync the leader's `notify_all` "
    "wakes the other seven, each must take the GIL back to return to Python and call "
    "`enqueue` again, and the first one back starts the next fsync at once with whatever has "
    "arrived by then (the store does not wait to gather a group). Even a perfect group of 8 "
    "per fsync stays below 100 K records/s on this disk, so with one record per call per "
    "thread the target is out of reach by construction."
)
PROFILE_SINGLE = (
    "`strace -c` of 300 single enqueues: per call one `pwrite64` and one `fdatasync`, as the "
    "raw loop, plus an `fcntl` (the active segment's file handle is duplicated for every sync "
    "by `Log::sync_handle` -> `try_clone_file`, then closed) and two `futex` calls (mutex and "
    "condvar of the group commit, `notify_all` with nobody waiting). The rest of the gap is "
    "encoding, applying and releasing/retaking the GIL, about 10-15 µs on a call of about "
    "120 µs. Keeping one duplicated handle for the segment's lifetime would drop the `fcntl` "
    "and `close`. The miss is narrow: a trial run earlier the same session (1M-delta logs, same "
    "benchmark) measured 0.95x."
)


FINDINGS = [
    "Random reads of single records and bulk reads to Python: since issue 11 see *Reads to "
    "Python (issue 11)* (`benches/suite/bench_reads.py`). `Log.read_batch` builds each column once "
    "and hands it over as a `tflux.ColumnBuffer` (no second copy); a random read touches the "
    "expected header positions of its index stride before walking them, so their cache misses "
    "overlap (`perf record` had put 40% of a random `Log.read` in `Segment::record_offset`).",
    "Segments are now preallocated with real zeros (72ffee7), so a durable append into fresh "
    "blocks is a data-only `fdatasync` (the raw baseline of the enqueue group writes into a "
    "zero-filled file for the same reason). The zeros are written when a segment is created, "
    "which on the store's write path happens inside the call that rolls the segment: one "
    "enqueue in every ~16 MiB pays for writing and syncing 16 MiB.",
]


def render(
    data: dict,
    rows: list[Row],
    report_command: str,
    note: str = "",
    plots: dict[str, str] | None = None,
    old_page: str = "",
) -> str:
    plots = plots or {}
    ts = targets(rows) + queue_targets(rows)
    known = {PHYSICAL, READ_RANDOM, SCALING, SCAN_SIZE, MEMORY, ENQUEUE, *QUEUE_GROUPS}
    known |= {"scan-64B", "scan-1KiB", "append-64B", *restore_groups(rows)}
    spark = sorted({r.group for r in rows if r.group.startswith("spark")})
    others = sorted({r.group for r in rows} - known - set(spark))
    lines = [
        "# Benchmark notes: the segmented log and the queue store",
        "",
        "<!-- Generated by benches/report/page.py from a pytest-benchmark JSON; do not edit. -->",
        "",
        "tflux's Rust scan and write paths beside the baselines a user would otherwise reach for "
        "(raw CRC over the same bytes, a pure-Python reader, zlib, a pure-Python replay, raw "
        "`os.write` + `os.fdatasync`). Rows of one table ran in the "
        "same session on the same data; compare ratios rather than absolute figures across runs.",
        "",
        *machine_section(data, report_command),
        *(["## Notes on this run", "", note.strip(), ""] if note.strip() else []),
        *targets_section(ts),
        *physical_section(rows),
        *scan_section("scan-64B", rows),
        *scan_section("scan-1KiB", rows),
        *append_section("append-64B", rows),
        *read_random_section(rows),
        *RESTORE_POINTER,
        *memory_section(rows),
        *enqueue_section(rows),
        *[line for g in QUEUE_GROUPS for line in queue_section(rows, g, plots)],
        *scan_size_section(rows, plots),
        *generic_section("## ", others, rows),
        *misses_section(rows, ts),
        "## Other observations about the library",
        "",
        *[f"- {f}" for f in FINDINGS],
        "",
    ]
    kept = with_spark_groups(kept_part(old_page), generic_section("### ", spark, rows))
    return "\n".join([*lines, GENERATED_END, "", kept]).rstrip("\n") + "\n"
