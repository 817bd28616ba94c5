"""What the ``test_channel_*.py`` modules share: the cursor file of spec section 10 written with
``struct`` and ``zlib`` only, a channel with small segments, a Python child process, a
receiver drained to its end, and a receiver process that checks and acknowledges every message.
"""

from __future__ import annotations

import signal
import struct
import subprocess
import sys
import zlib

import tflux

CURSOR_MARKER = bytes.fromhex("c3525f01")


def cursor_bytes(next_lsn: int) -> bytes:
    body = struct.pack(">iq", 1, next_lsn)
    return CURSOR_MARKER + body + struct.pack(">I", zlib.crc32(body))


def small(path, **kw) -> tflux.Channel:
    kw.setdefault("soft_limit", 512)
    kw.setdefault("hard_limit", 1024)
    kw.setdefault("preallocate", False)
    return tflux.Channel.open(path, **kw)


def run_py(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def drain(rx: tflux.Receiver) -> list[tflux.Message]:
    out = []
    while True:
        batch = rx.recv_many(1000, timeout=0)
        if not len(batch):
            return out
        out.extend(batch[i] for i in range(len(batch)))


RECEIVER_PROCESS = """
import sys, tflux
path, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ch = tflux.Channel.open(path, readonly=True)
rx = ch.receiver(name)
print('ready', flush=True)
seen = 0
while seen < n:
    b = rx.recv_many(500, timeout=30)
    if not len(b):
        print('timeout', seen, flush=True); sys.exit(1)
    for i in range(len(b)):
        m = b[i]
        if m.lsn != seen or m.data != b'%06d' % seen:
            print('bad', m.lsn, seen, flush=True); sys.exit(1)
        seen += 1
    rx.ack(len(b))
print('done', seen, flush=True)
"""
