"""mini-gda's host-forwarded doorbell (`--doorbell host`) without a GPU: the native thread
(native/src/gda_forward.cpp over ready_prefix.hpp) on plain host arrays standing in for the ready
slots the kernels mark, the doorbell record and the doorbell register."""

from __future__ import annotations

import os
import signal
import struct
import time

import numpy as np
import pytest

from gicbench._native import gda
from gicbench.errors import CompletionTimeout
from gicbench.submit.gpu.forward import Forwarder

QPN = 0x1234
NSLOTS = 16


class Qp:
    """A ready array, a doorbell record (two BE32 words) and an 8-byte doorbell."""

    def __init__(self) -> None:
        self.slots = np.zeros(NSLOTS, dtype=np.uint64)
        self.dbrec = np.zeros(2, dtype=np.uint32)
        self.db = np.zeros(1, dtype=np.uint64)

    def add(self, h, start: int = 0) -> int:
        return h.add(self.slots.ctypes.data, self.dbrec.ctypes.data, self.db.ctypes.data, QPN,
                     NSLOTS, start)  # fmt: skip

    def mark(self, pi: int, bbs: int = 1) -> None:
        """What a kernel's mark_wqe_ready stores: the WQE's slot gets the index after it."""
        self.slots[pi % NSLOTS] = (pi + bbs) & 0xFFFFFFFF

    def record(self) -> int:
        return struct.unpack(">I", self.dbrec[1].tobytes())[0]

    def doorbell(self) -> tuple[int, int]:
        """(producer index, qpn) of the next-index doorbell value."""
        raw = self.db.tobytes()
        return struct.unpack(">I", raw[:4])[0] >> 8, struct.unpack(">I", raw[4:])[0] >> 8


def test_the_prefix_stops_at_a_hole_and_rings_once_per_advance() -> None:
    q, h = Qp(), gda.HostDoorbell(0)
    q.add(h)
    assert h.poll_once() == 0  # nothing marked: zeros never read as ready
    q.mark(0)
    q.mark(1, 2)  # a two-WQEBB WQE at 1..2
    q.mark(4)  # beyond a hole at 3
    assert h.poll_once() == 1
    assert q.record() == 3 and q.doorbell() == (3, QPN)
    assert h.stats() == [(QPN, 3, 1)]
    assert h.poll_once() == 0  # the hole holds it
    q.mark(3)
    assert h.poll_once() == 1 and q.record() == 5
    assert h.stats() == [(QPN, 5, 2)]


def test_values_left_from_an_earlier_pass_are_not_ready() -> None:
    q, h = Qp(), gda.HostDoorbell(0)
    start = 3 * NSLOTS + 5
    for i in range(start - NSLOTS, start):  # the previous pass of the ring, all marked
        q.mark(i)
    q.add(h, start)
    assert h.poll_once() == 0
    q.mark(start)
    assert h.poll_once() == 1 and q.record() == start + 1


def test_a_full_ring_at_once_and_32_bit_wrap() -> None:
    q, h = Qp(), gda.HostDoorbell(0)
    start = (1 << 32) - 4  # the GPU's 32-bit running index wraps; the host's does not
    q.add(h, start)
    for i in range(start, start + NSLOTS):
        q.mark(i)
    assert h.poll_once() == 1
    assert h.stats()[0][1] == start + NSLOTS
    assert q.record() == (start + NSLOTS) & 0xFFFF


def test_the_thread_rings_while_running_and_stops_promptly() -> None:
    q, h = Qp(), gda.HostDoorbell(1)
    idx = q.add(h)
    h.arm([(idx, 4)])
    h.start(5.0)
    try:
        assert h.running
        for i in range(4):
            q.mark(i)
        deadline = time.monotonic() + 5
        while h.stats()[0][1] < 4 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert h.stats()[0][1] == 4 and q.record() == 4
    finally:
        t0 = time.monotonic()
        h.stop()
    assert time.monotonic() - t0 < 0.5
    assert not h.running and h.error() is None


def test_a_stalled_qp_times_out_with_a_diagnostic() -> None:
    q, h = Qp(), gda.HostDoorbell(7)
    idx = q.add(h)
    q.mark(0)
    q.mark(2)  # slot 1 never marked
    h.arm([(idx, 3)])
    h.start(0.05)
    deadline = time.monotonic() + 5
    while not h.failed and time.monotonic() < deadline:
        time.sleep(0.005)
    assert h.failed
    h.stop()
    msg = h.error()
    assert msg is not None
    for part in ("rank 7", "QP 0x001234", "ready prefix 1", "marked up to 3 beyond a hole",
                 "the call reaches 3", "slot 1 holds 0"):  # fmt: skip
        assert part in msg, msg


def test_owed_but_nothing_marked_is_the_gpu_not_a_stall() -> None:
    """The GPU not producing (e.g. a kernel waiting on a completion) is its own deadline's
    business: the thread reports only a hole it cannot ring past."""
    q, h = Qp(), gda.HostDoorbell(0)
    idx = q.add(h)
    q.mark(0)
    h.arm([(idx, 4)])
    h.start(0.02)
    time.sleep(0.15)
    assert not h.failed and h.stats()[0][1] == 1
    h.stop()
    assert h.error() is None


def test_nothing_owed_is_not_a_stall() -> None:
    q, h = Qp(), gda.HostDoorbell(0)
    q.add(h)
    h.arm([])
    h.start(0.02)
    time.sleep(0.15)
    assert not h.failed
    h.stop()
    assert h.error() is None


def test_add_and_arm_refuse_bad_input() -> None:
    q, h = Qp(), gda.HostDoorbell(0)
    with pytest.raises(ValueError, match="wqebbs"):
        h.add(q.slots.ctypes.data, q.dbrec.ctypes.data, q.db.ctypes.data, QPN, 12, 0)
    with pytest.raises(ValueError, match="address is 0"):
        h.add(0, q.dbrec.ctypes.data, q.db.ctypes.data, QPN, NSLOTS, 0)
    q.add(h)
    with pytest.raises(IndexError):
        h.arm([(5, 1)])
    h.start(1.0)
    try:
        with pytest.raises(RuntimeError, match="stop the thread first"):
            q.add(h)
    finally:
        h.stop()


def _threads() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_dropping_a_running_forwarder_joins_its_thread() -> None:
    before = _threads()
    q, h = Qp(), gda.HostDoorbell(0)
    q.add(h)
    h.start(1.0)
    assert _threads() == before + 1
    del h
    assert _threads() == before


def _forwarder(q: Qp, timeout_s: float) -> Forwarder:
    fwd = Forwarder(None, 2, timeout_s)
    fwd.index[QPN] = q.add(fwd.native)
    return fwd


def test_a_signal_during_a_call_stops_the_thread() -> None:
    q = Qp()
    fwd = _forwarder(q, 5.0)

    def on_alarm(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, on_alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(KeyboardInterrupt), fwd.call([(QPN, 8)]):
            assert fwd.native.running
            time.sleep(5)  # a kernel the signal interrupts
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert not fwd.native.running


def test_a_call_raises_the_stall_diagnostic() -> None:
    q = Qp()
    fwd = _forwarder(q, 0.05)
    stall = r"rank 2, host-forwarded doorbell: QP 0x001234"
    with pytest.raises(CompletionTimeout, match=stall), fwd.call([(QPN, 2)]):
        q.mark(1)  # slot 0 never marked
        time.sleep(0.3)
    assert not fwd.native.running
    # a clean call afterwards: armed anew, the error cleared
    with fwd.call([(QPN, 2)]):
        q.mark(0)
        deadline = time.monotonic() + 5
        while fwd.rings() < 1 and time.monotonic() < deadline:
            time.sleep(0.001)
    assert fwd.native.stats()[0][1] == 2


def test_doca_free_flow_marks_fit_the_same_prefix() -> None:
    """DOCA GPUNetIO's CPU_PROXY_FREE_FLOW marks every WQEBB i with the 64-bit i + 1: the shared
    ready_prefix.hpp reads that format too (doca_proxy.cpp can use it)."""
    q, h = Qp(), gda.HostDoorbell(0)
    start = (5 << 32) + 3
    q.add(h, start)
    for i in range(start, start + 6):
        q.slots[i % NSLOTS] = i + 1  # 64-bit absolute, as DOCA stores it
    assert h.poll_once() == 1
    assert h.stats()[0][1] == start + 6 and q.record() == (start + 6) & 0xFFFF
