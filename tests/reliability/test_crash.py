"""kill -9 campaign: a writer child enqueues, acks and snapshots through ``tflux.open`` with the
default sync policy ("always") and tiny segment limits, so roll-over, automatic snapshots and
compaction happen every few calls; the parent SIGKILLs it at a random moment (during the open and
its recovery, mid-``enqueue``, mid-``enqueue_many``, mid-``ack``, mid-``snapshot``), reopens and
checks against what the child reported as acknowledged:

- the store always opens;
- every acknowledged enqueue is present exactly once with its exact payload and key, unless its
  ack was acknowledged (then it is gone);
- nothing unacknowledged is half-present: a record is either byte-for-byte a record the writer
  sent in the call the kill interrupted, or absent;
- ids never go backwards (``last_id`` covers every acknowledged id).

The state carries over from trial to trial (a fresh directory every ``RESET`` trials), so each
kill also lands on a log that earlier kills left behind. CI runs ``CI_TRIALS``; the slow variant
1,000. Figures are printed and, with ``TFLUX_RELIABILITY_OUT=<dir>``, written as JSON.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import tflux
from _reliability import TINY, Expected, check_store, child_env, split_line, writer_cmd

CI_TRIALS = 30
SLOW_TRIALS = 1000
RESET = 50


def record_figures(name: str, figures: dict) -> None:
    print(f"\n{name}: " + json.dumps(figures, sort_keys=True))
    out = os.environ.get("TFLUX_RELIABILITY_OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{name}.json").write_text(json.dumps(figures, indent=2, sort_keys=True))


def run_trial(base: Path, seed: int, delay: float) -> tuple[list[list[str]], int]:
    child = subprocess.Popen(
        writer_cmd(base, seed, -1), stdout=subprocess.PIPE, text=True, env=child_env()
    )
    lines: list[list[str]] = []

    def pump() -> None:
        for line in child.stdout:
            lines.append(split_line(line))

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    time.sleep(delay)
    child.send_signal(signal.SIGKILL)
    rc = child.wait(timeout=30)
    reader.join(timeout=30)
    child.stdout.close()
    return lines, rc


def campaign(tmp_path: Path, trials: int, seed: int) -> dict:
    rng = random.Random(seed)
    figures = collections.Counter()
    interrupted = collections.Counter()
    failures: list[str] = []
    expected = Expected()
    base = tmp_path / "store-0"
    for trial in range(trials):
        if trial % RESET == 0:
            base = tmp_path / f"store-{trial}"
            expected = Expected()
        # Python start-up and import take ~0.1-0.2 s: short delays kill during the open (and
        # the recovery of the previous crash), longer ones in the middle of the work.
        delay = rng.choice([rng.uniform(0.0, 0.25), rng.uniform(0.2, 0.6), rng.uniform(0.5, 1.2)])
        lines, rc = run_trial(base, seed * 100_000 + trial, delay)
        figures["trials"] += 1
        if ["DONE"] in lines or rc != -signal.SIGKILL:
            failures.append(f"trial {trial}: the writer was not killed (rc {rc})")
            continue
        last_b = None
        completed = False
        for parts in lines:
            if parts[0] == "B":
                last_b, completed = parts, False
            else:
                completed = True
                expected.apply_line(parts)
            if parts[0] == "E":
                figures["acknowledged_enqueues"] += 1
            elif parts[0] == "A":
                figures["acknowledged_acks"] += 1
        in_flight = last_b if last_b is not None and not completed else None
        interrupted[in_flight[1] if in_flight else "between calls"] += 1
        try:
            with tflux.open(base, **TINY) as store:
                res = check_store(store, expected, last_b)
                figures["records_checked"] += sum(len(v) for v in expected.records.values())
        except tflux.TfluxError as e:
            figures["failed_opens"] += 1
            failures.append(f"trial {trial}: the store did not open: {type(e).__name__}: {e}")
            break
        figures["lost"] += len(res.lost)
        figures["wrong"] += len(res.wrong)
        figures["unacknowledged_present"] += len(res.extra)
        figures["partial_batches"] += int(res.partial_batch and not completed)
        if res.lost or res.wrong:
            failures.append(f"trial {trial} (killed {in_flight}): lost {res.lost}, {res.wrong}")
            break
    out = dict(figures)
    out["interrupted"] = dict(interrupted)
    out.setdefault("lost", 0)
    out.setdefault("failed_opens", 0)
    out["failures"] = failures
    return out


def test_kill_9_at_random_moments_loses_nothing_acknowledged(tmp_path):
    figures = campaign(tmp_path, CI_TRIALS, seed=7)
    record_figures("crash_ci", figures)
    assert figures["failures"] == []
    assert figures["trials"] == CI_TRIALS


@pytest.mark.slow
def test_kill_9_campaign_of_a_thousand_trials(tmp_path):
    figures = campaign(tmp_path, SLOW_TRIALS, seed=int(os.environ.get("TFLUX_CRASH_SEED", "1")))
    record_figures("crash_slow", figures)
    assert figures["failures"] == []
    assert figures["trials"] == SLOW_TRIALS
