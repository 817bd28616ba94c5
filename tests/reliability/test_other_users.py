"""Another user on the machine (issue 43 item 9): what tflux creates is private to the user who
created it, so another user can neither read the payloads nor take the locks that lock the
owner out.

Before: a new base directory was ``0755`` and its files ``0644``: user ``nobody`` read every
segment and snapshot, and an ``flock`` on the base directory (the owner lock) or on
``data/log`` (the log lock) made the owner's ``tflux.open`` wait 60 s and raise
``OwnerLostError``, or raise ``LockedError`` at once. Now new directories are ``0700`` and new
files ``0600``; a directory shared with its group only (group r-x, nothing for others) hands
its group read access on to what tflux creates in it (docs/format.md, "Who may read a base
directory").

The second user is a child forked as ``nobody`` (``os.setuid``): the tests need root to switch
users and skip without it.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import tflux

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")

NOBODY = 65534


def _try(path: Path) -> str:
    """What the other user gets: "denied", "locked" (a directory) or "read" (a file)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except PermissionError:
        return "denied"
    try:
        if path.is_dir():
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return "locked"
        os.read(fd, 64)
        return "read"
    finally:
        os.close(fd)


def as_user(uid: int, gid: int, *paths: Path) -> list[str]:
    """Tries each path in a child forked as user ``uid``, group ``gid`` (the interpreter of
    the test may not be another user's to run: a fork needs no exec)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            os.write(write_end, " ".join(_try(p) for p in paths).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as got:
        out = got.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return out.split()


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may pass through (pytest's own are its user's only), so that
    only what tflux creates in it can refuse the other user."""
    path = Path(tempfile.mkdtemp(prefix="tflux-users-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_the_other_user_can_reach_what_is_not_private(open_dir):
    """The guard of the tests below: a directory and a file open to all are locked and read."""
    (open_dir / "d").mkdir(mode=0o755)
    (open_dir / "f").write_bytes(b"x")
    (open_dir / "f").chmod(0o644)
    assert as_user(NOBODY, NOBODY, open_dir / "d", open_dir / "f") == ["locked", "read"]


def files_of(base: Path) -> list[Path]:
    return [base, *sorted(base.rglob("*"))]


def a_base_with_a_snapshot(base: Path) -> None:
    with tflux.open(base) as store:
        store.create_queue("q")
        store.enqueue("q", 0, b"secret payload")
        store.snapshot()
        store.enqueue("q", 0, b"another secret")


def test_another_user_can_neither_read_nor_lock_a_new_base(open_dir):
    base = open_dir / "base"
    a_base_with_a_snapshot(base)
    segments = sorted((base / "data" / "log").glob("*.log"))
    snapshots = [p for p in base.rglob("*") if "snapshot" in p.name and p.is_file()]
    assert segments and snapshots
    for path in files_of(base):
        mode = stat.S_IMODE(path.lstat().st_mode)
        if path.is_socket():
            continue
        want = 0o700 if path.is_dir() else 0o600
        assert mode == want, f"{path}: {oct(mode)}"
    tried = [base, base / "data" / "log", segments[0], snapshots[0]]
    assert as_user(NOBODY, NOBODY, *tried) == ["denied"] * len(tried)
    # And the owner's open is not held up (before: the other user's flock held it 60 s).
    with tflux.open(base, lock_timeout=0) as store:
        assert store.count("q") == 2


def test_a_channel_and_a_log_are_private_too(open_dir):
    with tflux.Channel.open(open_dir / "chan") as ch:
        ch.sender().send(b"secret")
        ch.receiver("r").recv(timeout=0)
    with tflux.Log.open(open_dir / "log") as log:
        log.append(1, b"secret")
    for path in files_of(open_dir / "chan") + files_of(open_dir / "log"):
        if path.is_socket():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode & 0o077 == 0, f"{path}: {oct(mode)}"


def test_a_base_shared_with_its_group_gives_the_group_read_access(open_dir):
    """The documented way to let a group read: make BASE yourself, owned by the group, set-group-ID
    (what is made in it belongs to the group), group r-x and nothing for others
    (``mkdir -m 2750 BASE; chgrp GROUP BASE``): what tflux creates in it is readable (never
    writable) by that group, and still nothing for others."""
    base = open_dir / "base"
    base.mkdir()
    os.chown(base, 0, NOBODY)
    base.chmod(0o2750)
    a_base_with_a_snapshot(base)
    for path in files_of(base)[1:]:
        if path.is_socket():
            continue
        st = path.lstat()
        want = 0o750 if path.is_dir() else 0o640
        assert (stat.S_IMODE(st.st_mode) & 0o777, st.st_gid) == (want, NOBODY), path
    segment = sorted((base / "data" / "log").glob("*.log"))[0]
    assert as_user(NOBODY, NOBODY, segment) == ["read"]  # a member of the group
    assert as_user(NOBODY, NOBODY - 1, segment) == ["denied"]  # anyone else


def test_an_old_0755_base_is_its_owners_only_after_the_owners_open(open_dir):
    """Issue 43 leftover: a base made before issue 43 (0755) kept its modes, so user nobody
    still locked the owner out and read every payload; the owner's next open makes it private."""
    base = open_dir / "base"
    a_base_with_a_snapshot(base)
    for d in (base, base / "data", base / "data" / "log", base / "data" / "temp"):
        d.chmod(0o755)
    segment = sorted((base / "data" / "log").glob("*.log"))[0]
    segment.chmod(0o644)
    assert as_user(NOBODY, NOBODY, base, segment) == ["locked", "read"]  # the old base
    with tflux.open(base):
        pass
    assert as_user(NOBODY, NOBODY, base, base / "data" / "log", segment) == ["denied"] * 3
