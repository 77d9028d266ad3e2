"""Shared memory of the emulated NIC is cleaned up however a rank ends: killed after bring-up
(seal has unlinked the name), killed before it (the janitor), SIGTERM, plain exit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from gicbench.fabric.emu import EmuFabric, janitor

SHM = Path("/dev/shm")

# A rank 1 in a child process: prints its local_info, then obeys "add_peers <json>", "seal",
# "exit" lines on stdin (acknowledging each with "ok"), else sleeps.
CHILD = r"""
import json, sys, time
from gicbench.fabric.emu import EmuFabric
f = EmuFabric(1, 2, sys.argv[1], progress="inline", segment_bytes=2 << 20)
mr = f.register(4096)
print(json.dumps({"info": f.local_info(), "mr": [mr.addr, mr.rkey]}), flush=True)
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "add_peers":
        f.add_peers(json.loads(arg))
    elif cmd == "seal":
        f.seal()
    elif cmd == "exit":
        print("ok", flush=True)
        sys.exit(0)  # no close(): atexit must unlink
    print("ok", flush=True)
"""


def _shm_name(info: dict) -> Path:
    return SHM / info["shm"].lstrip("/")


@pytest.fixture
def child_and_job():
    job = "clean-" + uuid.uuid4().hex[:8]
    p = subprocess.Popen(
        [sys.executable, "-c", CHILD, job], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    hello = json.loads(p.stdout.readline())
    yield p, job, hello
    if p.poll() is None:
        p.kill()
    p.wait()
    p.stdin.close()
    p.stdout.close()


def _tell(p: subprocess.Popen, line: str) -> None:
    p.stdin.write(line + "\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "ok"


def test_sigkill_after_seal_leaves_nothing(child_and_job) -> None:
    p, job, hello = child_and_job
    f0 = EmuFabric(0, 2, job, progress="inline", segment_bytes=2 << 20)
    try:
        infos = [f0.local_info(), hello["info"]]
        f0.add_peers(infos)
        _tell(p, "add_peers " + json.dumps(infos))
        f0.seal()
        _tell(p, "seal")
        assert not _shm_name(infos[0]).exists() and not _shm_name(infos[1]).exists()
        p.send_signal(signal.SIGKILL)
        assert p.wait() == -signal.SIGKILL
        assert [n for n in os.listdir(SHM) if job in n] == []
    finally:
        f0.close()
    assert [n for n in os.listdir(SHM) if job in n] == []


def test_sigkill_before_seal_is_cleaned_by_janitor(child_and_job) -> None:
    p, _, hello = child_and_job
    path = _shm_name(hello["info"])
    assert path.exists()
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert path.exists()  # nobody unlinked it: the process died without a word
    removed = janitor()
    assert path.name in removed
    assert not path.exists()


def test_janitor_leaves_live_segments_alone(child_and_job) -> None:
    _, _, hello = child_and_job
    path = _shm_name(hello["info"])
    assert path.name not in janitor()
    assert path.exists()


def test_sigterm_unlinks(child_and_job) -> None:
    p, _, hello = child_and_job
    path = _shm_name(hello["info"])
    p.send_signal(signal.SIGTERM)
    assert p.wait() == -signal.SIGTERM
    assert not path.exists()


def test_exit_without_close_unlinks(child_and_job) -> None:
    p, _, hello = child_and_job
    path = _shm_name(hello["info"])
    _tell(p, "exit")
    assert p.wait() == 0
    assert not path.exists()


def test_survivor_engine_outlives_dead_peer(child_and_job) -> None:
    """After seal, a peer's death leaves its memory mapped here: the survivor's engine keeps
    working (a write towards a QP the peer never made ends in a transport error CQE)."""
    from gicbench import mlx5
    from gicbench.fabric.emu import host_view

    p, job, hello = child_and_job
    f0 = EmuFabric(0, 2, job, progress="inline", segment_bytes=2 << 20)
    try:
        infos = [f0.local_info(), hello["info"]]
        f0.add_peers(infos)
        _tell(p, "add_peers " + json.dumps(infos))
        f0.seal()
        _tell(p, "seal")
        p.send_signal(signal.SIGKILL)
        p.wait()
        cq = f0.create_cq(4)
        qp = f0.create_qp(cq, 4)
        f0.connect(qp, {"provider": "emu", "rank": 1, "qpn": (1 << 16) | 1})
        ring = mlx5.SqRing(host_view(qp.sq.buf, 256), 4)
        addr, rkey = hello["mr"]
        n = ring.post_write(0, qp.qpn, addr, rkey, payload=b"12345678", signaled=True)
        host_view(qp.sq.dbrec, 8)[4:] = np.frombuffer(mlx5.dbrec_value(n), np.uint8)
        host_view(qp.sq.doorbell, 8).view(np.uint64)[0] = mlx5.doorbell_value(ring.read(0, 0, 16))
        f0.quiesce()
        cqe = mlx5.decode_cqe(host_view(cq.buf, 64))
        assert cqe.opcode == mlx5.CqeOpcode.REQ_ERR
        assert cqe.syndrome == mlx5.Syndrome.TRANSPORT_RETRY_EXC
    finally:
        f0.close()
