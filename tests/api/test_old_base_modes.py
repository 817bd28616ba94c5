"""Issue 43 leftover: bases made before issue 43 (or by ``mkdir`` under the common umask) are
``0755``, so another user reads every payload and can lock the owner out. Issue 43 made new
bases ``0700`` but left old ones as they were. The owner's writable open now makes an old
base's directories private (``0700``), saying so in one WARNING line; a base shared with its
group alone (``0750``) keeps its group's read access, a base of another user is never
touched, and a read-only open changes nothing (docs/format.md, "Who may read a base
directory")."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
import tflux

FAST = {"log_preallocate_segments": False, "log_sync_policy": "never"}


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def dirs_of(base: Path) -> list[Path]:
    return [base, base / "data", base / "data" / "log", base / "data" / "temp"]


def make_old_base(base: Path, dir_mode: int = 0o755) -> None:
    with tflux.open(base, **FAST) as store:
        store.enqueue("", 1, b"secret")
    for d in dirs_of(base):
        os.chmod(d, dir_mode)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("tflux") and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("share", [True, False])
def test_the_owners_open_makes_an_old_0755_base_private_and_says_so(tmp_path, caplog, share):
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    make_old_base(base)
    with tflux.open(base, share=share, **FAST) as store:
        assert store.count("") == 1
    assert [mode(d) for d in dirs_of(base)] == [0o700] * 4
    (line,) = [m for m in warnings_of(caplog) if "private" in m]
    assert str(base) in line
    assert f"{base} 0755 -> 0700" in line
    caplog.clear()
    with tflux.open(base, share=share, **FAST):
        pass
    assert not [m for m in warnings_of(caplog) if "private" in m]  # once only


def test_a_base_shared_with_its_group_alone_keeps_its_groups_read_access(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    make_old_base(base)
    os.chmod(base, 0o2750)  # how docs/format.md says to grant a group read access
    os.chmod(base / "data", 0o750)
    with tflux.open(base, **FAST):
        pass
    # The base and data/ are as configured; data/log and temp/ lose only others' access.
    assert [mode(d) for d in dirs_of(base)] == [0o2750, 0o750, 0o750, 0o750]
    (line,) = [m for m in warnings_of(caplog) if "private" in m]
    assert f"{base / 'data' / 'log'} 0755 -> 0750" in line


def test_a_private_base_and_a_read_only_open_are_left_alone(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    base = tmp_path / "base"
    make_old_base(base, 0o700)
    os.chmod(base / "data", 0o770)  # others have nothing: as its user configured it
    with tflux.open(base, **FAST):
        pass
    assert [mode(d) for d in dirs_of(base)] == [0o700, 0o770, 0o700, 0o700]
    for d in dirs_of(base):
        os.chmod(d, 0o755)
    with tflux.open(base, readonly=True):
        pass
    assert [mode(d) for d in dirs_of(base)] == [0o755] * 4
    assert not [m for m in warnings_of(caplog) if "private" in m]


def test_an_old_channel_is_made_private_by_its_senders_open(tmp_path):
    chan = tmp_path / "chan"
    with tflux.Channel.open(chan) as ch:
        ch.sender().send(b"m")
    dirs = [chan, chan / "data", chan / "data" / "log", chan / "data" / "cursors"]
    for d in dirs:
        os.chmod(d, 0o755)
    with tflux.Channel.open(chan, readonly=True):
        pass
    assert [mode(d) for d in dirs] == [0o755] * 4
    with tflux.Channel.open(chan):
        pass
    assert [mode(d) for d in dirs] == [0o700] * 4


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the base to another user")
def test_a_base_owned_by_another_user_is_never_touched(tmp_path):
    base = tmp_path / "base"
    make_old_base(base)
    nobody = 65534
    for d in dirs_of(base):
        os.chown(d, nobody, nobody)
    with tflux.open(base, **FAST) as store:  # root may open it; it is not root's
        assert store.count("") == 1
    assert [mode(d) for d in dirs_of(base)] == [0o755] * 4


# Review finding: the check and the chmod followed symlinks, so a directory of the layout that
# is a symlink (data/ moved to another disk, or a link planted by whoever may write the base)
# had its target, outside the base, made private. The base itself is the path its user named.
def test_a_symlink_below_the_base_is_not_followed_and_a_symlinked_base_is(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tflux")
    real = tmp_path / "real"
    make_old_base(real)
    shared = tmp_path / "shared"  # a directory of the same user, readable by all on purpose
    (real / "data").rename(shared)
    (real / "data").symlink_to(shared)
    os.chmod(shared, 0o755)
    link = tmp_path / "link"
    link.symlink_to(real)
    with tflux.open(link, **FAST) as store:
        assert store.count("") == 1
    assert mode(shared) == 0o755, "outside the base: left alone"
    assert mode(real) == 0o700, "the base a user named, through its symlink"
    # What tflux made inside data/ is the base's own.
    assert [mode(shared / "log"), mode(shared / "temp")] == [0o700, 0o700]
