"""Issue 43, defect 18: ``tflux.open("/nonexistent/x/y")`` silently created the whole path, so a
typo became a new queue. A writable open creates the base directory itself, as ``mkdir`` does;
``create=True`` also creates its missing parents, as ``mkdir -p``."""

from __future__ import annotations

import asyncio
import errno

import pytest
import tflux


def test_a_writable_open_creates_the_base_but_not_its_missing_parents(tmp_path):
    base = tmp_path / "nonexistent" / "x" / "y"
    for share in (True, False):
        with pytest.raises(tflux.TfluxIOError, match="create=True") as e:
            tflux.open(base, share=share)
        assert e.value.errno == errno.ENOENT
        assert e.value.path == str(tmp_path / "nonexistent" / "x")
        assert not (tmp_path / "nonexistent").exists()
    # The last component alone is created, as before.
    with tflux.open(tmp_path / "new") as store:
        store.enqueue("", 1, b"a")
    with tflux.open(base, create=True) as store:
        store.enqueue("", 1, b"a")
    with tflux.open(base) as store:  # exists now: no parent to create
        assert store.count("") == 1


def test_queue_and_aio_follow_the_same_rule(tmp_path):
    base = tmp_path / "a" / "b"
    with pytest.raises(tflux.TfluxIOError):
        tflux.Queue(base, "jobs", create=False)
    assert not (tmp_path / "a").exists()
    # A Queue that creates what is missing creates the parents too.
    with tflux.Queue(base, "jobs") as q:
        q.put(b"x")

    async def main() -> None:
        async with tflux.aio.open(tmp_path / "c" / "d"):
            pass

    with pytest.raises(tflux.TfluxIOError):
        asyncio.run(main())
    assert not (tmp_path / "c").exists()


# Issue 43 leftover: Channel.open, Log.open and `tflux demo --dir` still made the whole path
# (mkdir -p); every writable open of a directory a user names follows the one rule of the core
# (`fsutil::create_named_dir`).
@pytest.mark.parametrize("share", [True, False])
def test_a_channel_is_created_only_where_its_parent_exists(tmp_path, share):
    missing = tmp_path / "typo" / "chan"
    with pytest.raises(tflux.TfluxIOError, match="create=True") as e:
        tflux.Channel.open(missing, share=share)
    assert e.value.errno == errno.ENOENT
    assert e.value.path == str(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()
    with tflux.Channel.open(tmp_path / "chan", share=share) as ch:  # the last component: made
        ch.sender().send(b"m")
    with tflux.Channel.open(missing, share=share, create=True) as ch:
        ch.sender().send(b"m")
    assert (missing / "data" / "log").is_dir()


def test_a_log_is_created_only_where_its_parent_exists(tmp_path):
    missing = tmp_path / "typo" / "log"
    with pytest.raises(tflux.TfluxIOError, match="create=True") as e:
        tflux.Log.open(missing)
    assert e.value.errno == errno.ENOENT
    assert e.value.path == str(tmp_path / "typo")
    assert not (tmp_path / "typo").exists()
    with tflux.Log.open(tmp_path / "log") as log:
        log.append(1, b"a")
    with tflux.Log.open(missing, create=True) as log:
        log.append(1, b"a")
    # A base's log (`BASE/data/log`) names its base: made as tflux.open makes one.
    with pytest.raises(tflux.TfluxIOError) as e:
        tflux.Log.open(tmp_path / "typo2" / "base" / "data" / "log")
    assert e.value.path == str(tmp_path / "typo2")
    assert not (tmp_path / "typo2").exists()
    with tflux.Log.open(tmp_path / "base" / "data" / "log") as log:
        log.append(1, b"a")
    # A read-only open creates nothing, whatever create says.
    with pytest.raises(tflux.TfluxIOError):
        tflux.Log.open(tmp_path / "none" / "log", readonly=True, create=True)
    assert not (tmp_path / "none").exists()


def test_demo_makes_its_directory_only_where_the_parent_exists(tmp_path):
    from _cli_support import run_cli

    result = run_cli("demo", "--records", "100", "--dir", tmp_path / "typo" / "sample")
    assert result.returncode == 2, result.stdout + result.stderr
    assert str(tmp_path / "typo") in result.stderr + result.stdout
    assert not (tmp_path / "typo").exists()
    result = run_cli("demo", "--records", "100", "--dir", tmp_path / "sample", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "sample" / "taskflux.settings.json").is_file()


# Review finding: a path component that is a file was reported as a missing parent, with
# advice (create=True) that then failed too; it is ENOTDIR, as mkdir says.
@pytest.mark.parametrize("share", [True, False])
def test_a_base_below_a_file_is_not_a_directory_not_a_missing_parent(tmp_path, share):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(tflux.TfluxIOError) as e:
        tflux.open(tmp_path / "file" / "base", share=share)
    assert e.value.errno == errno.ENOTDIR
    assert "create=True" not in str(e.value)
    assert (tmp_path / "file").read_bytes() == b"x"
