"""A base whose queues use no task-queue rules is byte-identical to what tflux wrote before the
task queue (issue 44: "its files byte-identical to what today's build writes for the same
calls"; spec section 12).

``tests/data/rules_off_identity/digests.json`` holds the size and sha256 of every file the fixed
call sequence of ``benches/lab/rules_off_identity.py`` (``run_calls``) left, written by the build
before the task queue merged (0c1bc228; that directory's README says how). The current build
replays the same calls and must leave the same files, byte for byte.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import tflux

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benches.lab import rules_off_identity as identity

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "rules_off_identity" / "digests.json"


def _expected() -> dict[str, dict]:
    return json.loads(FIXTURE.read_text())["files"]


def test_a_base_without_rules_writes_the_bytes_the_build_before_the_task_queue_wrote(tmp_path):
    base = tmp_path / "base"
    identity.run_calls(tflux, base)
    got = identity.digests(base)
    expected = _expected()
    assert sorted(got) == sorted(expected), "the base holds other files"
    different = [rel for rel in expected if got[rel] != expected[rel]]
    assert different == [], f"files differ from the pre-task-queue build's: {different}"


def test_the_same_calls_on_a_queue_with_a_rule_write_other_bytes(tmp_path, monkeypatch):
    # the guard: the comparison above would notice a change of the files (a rule is logged)
    real = identity._session_one

    def with_rule(store):
        real(store)
        store.set_queue_rules("jobs", retry_delay=1.5)

    monkeypatch.setattr(identity, "_session_one", with_rule)
    base = tmp_path / "base"
    identity.run_calls(tflux, base)
    assert identity.digests(base) != _expected()
