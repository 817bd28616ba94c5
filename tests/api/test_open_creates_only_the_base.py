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
