"""Issue 42 part 2: every form of a path names the same files for dump, verify and inspect.

The CLI once decided on its own what a path was and showed the core a directory of symlinks:
a relative segment path from the directory above read "a dangling symlink", ``cd data/log &&
tflux dump 000...0.log`` "Too many levels of symbolic links", and ``dump COPY --from N`` on a
damaged copy printed nothing where the absolute path printed every readable record. The core
now answers (``tflux.locate``) and reads a chosen segment itself (``tflux.open_segments``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tflux
from _cli_support import flip, segment_files, store_with_segments


def run_in(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess:
    """``python -m tflux.cli ARGS`` run from ``cwd``; never a traceback."""
    environ = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    result = subprocess.run(
        [sys.executable, "-m", "tflux.cli", *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        timeout=300,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def lsns(result: subprocess.CompletedProcess) -> list[int]:
    return [json.loads(line)["lsn"] for line in result.stdout.splitlines()]


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    """A healthy base of several segments, a copy with one bit flipped in a middle segment,
    and a symlink to each."""
    root = tmp_path_factory.mktemp("paths")
    healthy = root / "healthy"
    store_with_segments(healthy, adds=150)
    damaged = root / "damaged"
    shutil.copytree(healthy, damaged)
    segs = segment_files(damaged / "data" / "log")
    assert len(segs) >= 4
    flip(segs[1], 8 + 16 + 200)  # a record's data: its checksum fails, in a sealed segment
    (root / "healthy-link").symlink_to(healthy)
    (root / "damaged-link").symlink_to(damaged)
    return {"healthy": healthy, "damaged": damaged}


def forms(base: Path) -> list[tuple[Path, str]]:
    """``(cwd, PATH)`` naming ``base``: absolute, relative, ``.``, ``..`` from data/log, a link."""
    log = base / "data" / "log"
    return [
        (Path("/"), str(base)),
        (base.parent, base.name),
        (base, "."),
        (log, "../.."),
        (base.parent, f"{base.name}-link"),
        (base.parent, f"{base.name}-link/data/log"),
        (log, "."),
    ]


def segment_forms(base: Path, name: str) -> list[tuple[Path, str]]:
    log = base / "data" / "log"
    return [
        (Path("/"), str(log / name)),
        (base.parent, f"{base.name}/data/log/{name}"),
        (log, name),
        (log, f"./{name}"),
        (base.parent, f"{base.name}-link/data/log/{name}"),
    ]


@pytest.mark.parametrize("which", ["healthy", "damaged"])
def test_dump_reads_the_same_records_whatever_the_form_of_the_path(bases, which):
    base = bases[which]
    want = run_in(Path("/"), "dump", base, "--raw", "--json")
    assert want.returncode == (0 if which == "healthy" else 1), want.stderr
    assert len(lsns(want)) > 100
    for cwd, path in forms(base)[1:]:
        got = run_in(cwd, "dump", path, "--raw", "--json")
        assert (got.returncode, lsns(got)) == (want.returncode, lsns(want)), (cwd, path, got.stderr)
    assert "symbolic link" not in want.stderr and "symlink" not in want.stderr


@pytest.mark.parametrize("which", ["healthy", "damaged"])
def test_dump_from_an_lsn_prints_the_same_records_whatever_the_form(bases, which):
    """The issue's third failure: --from on a damaged copy printed 0 records by a relative
    path and every readable one by its absolute path."""
    base = bases[which]
    middle = int(segment_files(base / "data" / "log")[1].name[:19])
    want = run_in(Path("/"), "dump", base, "--raw", "--json", "--from", str(middle))
    assert len(lsns(want)) > 10
    for cwd, path in forms(base)[1:]:
        got = run_in(cwd, "dump", path, "--raw", "--json", "--from", str(middle))
        assert (got.returncode, lsns(got)) == (want.returncode, lsns(want)), (cwd, path, got.stderr)


@pytest.mark.parametrize("which", ["healthy", "damaged"])
def test_dump_of_one_segment_reads_it_whatever_the_form_of_its_path(bases, which):
    """The issue's first two failures: "a dangling symlink" from the directory above, "Too
    many levels of symbolic links" from inside data/log."""
    base = bases[which]
    segs = segment_files(base / "data" / "log")
    for seg in (segs[0], segs[1]):
        first = int(seg.name[:19])
        following = int(segs[segs.index(seg) + 1].name[:19])
        want = run_in(Path("/"), "dump", seg, "--raw", "--json")
        healthy = which == "healthy" or seg == segs[0]
        assert want.returncode == (0 if healthy else 1), want.stderr
        if healthy:
            assert lsns(want) == list(range(first, following))
        else:
            assert 0 < len(lsns(want)) < following - first
        for cwd, path in segment_forms(base, seg.name)[1:]:
            got = run_in(cwd, "dump", path, "--raw", "--json")
            assert (got.returncode, lsns(got)) == (want.returncode, lsns(want)), (
                cwd,
                path,
                got.stderr,
            )


def test_dump_of_a_damaged_sealed_segment_says_what_verify_says(bases):
    """Issue 43 item 14: dump called a damaged sealed middle segment a torn tail that "the next
    open cuts", where verify says CORRUPT and an open refuses it: the core's classification."""
    seg = segment_files(bases["damaged"] / "data" / "log")[1]
    verify = tflux.verify(seg.parent)
    (problem,) = [p for p in verify.problems if p.fatal]
    assert problem.kind == "corruption"
    for args in ([seg], [bases["damaged"]]):
        result = run_in(Path("/"), "dump", *args, "--raw")
        assert result.returncode == 1
        assert "torn tail" not in result.stderr and "next open" not in result.stderr
        assert f"corruption in {seg} at offset {problem.offset}" in result.stderr
        assert problem.message in result.stderr


@pytest.mark.parametrize("verb", ["verify", "inspect"])
@pytest.mark.parametrize("which", ["healthy", "damaged"])
def test_verify_and_inspect_agree_whatever_the_form_of_the_path(bases, verb, which):
    base = bases[which]
    want = run_in(Path("/"), verb, base, "--json")
    assert want.returncode == (0 if which == "healthy" else 1), want.stderr
    report = json.loads(want.stdout)
    for cwd, path in forms(base)[1:]:
        got = run_in(cwd, verb, path, "--json")
        assert got.returncode == want.returncode, (cwd, path, got.stderr)
        found = json.loads(got.stdout)
        problems = [(p["kind"], Path(p["path"]).name, p["offset"]) for p in found["problems"]]
        expected = [(p["kind"], Path(p["path"]).name, p["offset"]) for p in report["problems"]]
        assert problems == expected, (cwd, path)
        assert [s["name"] for s in found["segments"]] == [s["name"] for s in report["segments"]]


def test_verify_of_a_log_directory_checks_the_log_alone_whatever_its_spelling(bases):
    """A log directory named itself is a raw Raft log (segment checks only), by any path."""
    log = bases["healthy"] / "data" / "log"
    for cwd, path in [(Path("/"), str(log)), (log.parent.parent.parent, "healthy/data/log")]:
        result = run_in(cwd, "verify", path, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["base"] is None, (cwd, path)
    result = run_in(log, "verify", ".", "--json")
    assert json.loads(result.stdout)["base"] is None
