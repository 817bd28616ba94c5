"""What tells processes apart (issue 43): receipts, sessions and the role of a store survive
``fork()`` and PID namespaces.

- Receipts were drawn from a per-process counter that ``fork()`` copies: two workers forked
  from one parent handed out the same receipts, so a record from a dead owner acked the next
  owner's delivery of that record (item 6).
- Session ids were built from the pid: two clients in different PID namespaces (both pid 1)
  shared one, and a killed client's record stayed in flight until the other exited (item 7).
- A fork while another thread looked for the owner (holding the role's mutex for up to 60 s)
  left the child's first call waiting forever (item 5).

Children report through their exit status (``test_fork.in_child``).
"""

from __future__ import annotations

import fcntl
import os
import pickle
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import tflux
from test_fork import in_child

# A client in a PID namespace of its own (pid 1 there): dequeues one record, says so, waits.
IN_NAMESPACE = r"""
import os, sys, time, tflux
store = tflux.open(sys.argv[1])
assert os.getpid() == 1 and not store.is_owner
rec = store.dequeue("jobs", timeout=5)
print("got", rec.payload.decode() if rec else None, flush=True)
time.sleep(600)
"""


def test_a_record_from_a_dead_owner_does_not_ack_the_next_owners_delivery(tmp_path):
    """Two owners forked one after the other from a parent that used tflux: the first
    delivers the record and dies, the second delivers it again. The first's record must not
    settle the second's delivery (before: same receipt, the ack passed and the second owner's
    own ack raised NotInFlightError)."""
    base = tmp_path / "base"
    with tflux.open(base) as store:  # the parent draws receipts too (queue lives)
        store.create_queue("jobs")
        store.enqueue("jobs", 0, b"once")
    stale = tmp_path / "stale.pickle"

    def first_owner() -> int:
        with tflux.open(base) as store:
            rec = store.dequeue("jobs", timeout=0)
            stale.write_bytes(pickle.dumps(rec))
        return 0  # closed without an ack: the delivery is void

    def second_owner() -> int:
        with tflux.open(base) as store:
            rec = store.dequeue("jobs", timeout=0)
            old = pickle.loads(stale.read_bytes())
            if rec is None or old != rec:
                return 2
            try:
                store.ack(old)
            except tflux.NotInFlightError:
                pass
            else:
                return 3  # the dead owner's record settled this delivery
            store.ack(rec)
            return 0 if store.count("jobs") == 0 else 4

    assert in_child(first_owner) == 0
    assert in_child(second_owner) == 0


def test_forked_workers_hand_out_receipts_of_their_own(tmp_path):
    """Each child opens a base of its own and delivers the same sequence of records: the
    receipts must differ across the children (and from the parent's)."""
    with tflux.open(tmp_path / "parent") as store:
        store.create_queue("q")
        store.enqueue("q", 0, b"x")
        parent = store.dequeue("q", timeout=0).__reduce__()[1][4]
    out = tmp_path / "receipts"
    out.mkdir()

    def worker(k: int):
        def body() -> int:
            with tflux.open(tmp_path / f"w{k}") as store:
                store.create_queue("q")
                store.enqueue_many("q", [(0, b"x")] * 3)
                receipts = [store.dequeue("q", timeout=0).__reduce__()[1][4] for _ in range(3)]
            (out / str(k)).write_text(" ".join(map(str, receipts)))
            return 0

        return body

    assert [in_child(worker(k)) for k in range(2)] == [0, 0]
    seen = [int(r) for k in range(2) for r in (out / str(k)).read_text().split()]
    assert len({*seen, parent}) == 7, seen


def _in_new_pid_namespace(base) -> subprocess.Popen:
    # --kill-child: the client dies with unshare (PR_SET_PDEATHSIG), also on SIGKILL.
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", IN_NAMESPACE, base],
        stdout=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="PID namespaces need root and unshare(1)",
)
def test_clients_with_the_same_pid_in_two_pid_namespaces_have_sessions_of_their_own(tmp_path):
    """Both clients are pid 1. Killing one gives its record back at once while the other
    stays connected (before: they shared a session, and the record stayed in flight until
    the other exited)."""
    base = str(tmp_path / "base")
    store = tflux.open(base)
    clients = []
    try:
        store.create_queue("jobs")
        store.enqueue_many("jobs", [(0, b"a"), (1, b"b")])
        for _ in range(2):
            child = _in_new_pid_namespace(base)
            clients.append(child)
            assert child.stdout.readline().split()[0] == "got"
        assert store.count("jobs") == 0
        clients[0].kill()
        clients[0].wait(10)
        deadline = time.monotonic() + 10
        while store.count("jobs") != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.count("jobs") == 1, "the killed client's record is still in flight"
        assert clients[1].poll() is None
    finally:
        for child in clients:
            child.kill()
            child.wait(10)
        store.close()


OWNER_THEN_WAIT = r"""
import sys, time, tflux
store = tflux.open(sys.argv[1])
store.create_queue("jobs", exist_ok=True)
print("owner", flush=True)
time.sleep(600)
"""


def test_a_fork_while_another_thread_looks_for_the_owner_leaves_the_child_usable(tmp_path):
    """A thread looks for the owner (the owner lock is held, nobody answers yet: it waits,
    holding the store's role) while the main thread forks. The child's first call must find
    the owner on its own (before: it waited forever on the parent's lock)."""
    base = tmp_path / "base"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_THEN_WAIT, str(base)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout.readline() == "owner\n"
        store = tflux.open(base)
        assert not store.is_owner
    finally:
        owner.kill()
        owner.wait(10)
    # Hold the owner lock as a live owner that does not answer yet would.
    held = os.open(base, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    looking = threading.Thread(target=store.count, args=("jobs",), daemon=True)
    looking.start()
    time.sleep(0.5)  # it lost its owner and now waits for the next one
    assert looking.is_alive()

    def child() -> int:
        os.close(held)  # the parent lets the lock go (the lock is the parent's descriptor)
        return 0 if store.count("jobs") == 0 else 1

    pid = os.fork()
    if pid == 0:  # the same as test_fork.in_child, forked with the lock held and the thread
        code = 70
        try:
            code = child()
        finally:
            os._exit(code)
    time.sleep(0.3)
    fcntl.flock(held, fcntl.LOCK_UN)
    os.close(held)
    looking.join(30)
    deadline = time.monotonic() + 30
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the child forked while the parent looked for the owner hung")
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.count("jobs") == 0
    store.close()
