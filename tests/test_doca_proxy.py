"""The host thread of DOCA's CPU_PROXY / CPU_PROXY_FREE_FLOW handlers, against the real emu
engine: WQEs written into the SQ the way DOCA's device code writes them (no record, no doorbell),
the GPU's proxy word / ready slots written from Python, the proxy publishes, the engine executes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from doca_helpers import DocaQueues

from gicbench import mlx5
from gicbench.fabric.base import host_view
from gicbench.submit.doca.layout import CqType, NicHandler, proxy_bytes, queue_kwargs
from gicbench.submit.doca.proxy import HostRinger

DEPTH = 16


@contextmanager
def pair(handler: NicHandler) -> Iterator[tuple]:
    """One RC pair, both QPs as DOCA's layout asks for `handler` (rank 0's CQ prepared by
    init_cq), rank 1's landing, and the GPU's host-mapped words as a numpy array."""
    args = queue_kwargs(handler, CqType.CQ_64B, DEPTH)
    with DocaQueues(args, 1, depth=DEPTH, option_ranks=(0, 1), init_cqs=True, both_ways=False,
                    segment_bytes=8 << 20, prefix="dp") as w:  # fmt: skip
        word = np.zeros(proxy_bytes(handler, DEPTH) // 8, np.uint64)  # the GPU's host-mapped words
        yield w.fabrics, w.rc[0][0], w.landing_mr(1), word


def write_wqe(qp, i: int, landing, value: int) -> None:
    """An 8-byte inline write at WQE index i, signaled, as doca_gpu_dev_verbs_p builds it."""
    ring = mlx5.SqRing(host_view(qp.sq.buf, qp.sq.wqebb_cnt * 64), qp.sq.wqebb_cnt)
    ring.post_write(i, qp.qpn, landing.addr + 8 * i, landing.rkey,
                    payload=value.to_bytes(8, "little"), signaled=True)  # fmt: skip


def drain(fs) -> None:
    for _ in range(64):
        if not sum(f.progress() for f in fs):
            break


def sq_dbrec(qp) -> int:
    return int.from_bytes(host_view(qp.sq.dbrec, 8)[4:].tobytes(), "big")


def test_cpu_proxy_publishes_the_gpu_producer_index() -> None:
    with pair(NicHandler.CPU_PROXY) as (fs, qp, landing, word):
        ringer = HostRinger()
        ringer.add(qp, NicHandler.CPU_PROXY, word.ctypes.data)
        assert ringer.poll_once() == 0  # nothing announced yet
        for i in range(3):
            write_wqe(qp, i, landing, 0x1000 + i)
        drain(fs)
        assert fs[0].qp_counters(qp)["wqes"] == 0  # written but not announced: the NIC waits
        word[0] = 3  # doca_gpu_dev_verbs_ring_proxy
        assert ringer.poll_once() == 1 and ringer.poll_once() == 0
        assert sq_dbrec(qp) == 3
        drain(fs)
        got = host_view(landing.addr, 24).view(np.uint64)
        assert list(got) == [0x1000, 0x1001, 0x1002]
        assert ringer.stats() == [(qp.qpn, 3, 1)]
        # init_cq: DOCA's first-lap CQEs read as empty (owner 1) until the engine writes them
        op_own = host_view(qp.sq.cq.buf, DEPTH * 64).reshape(DEPTH, 64)[:, 63]
        assert list(op_own[:4]) == [0x00, 0x00, 0x00, 0xF1]  # REQ, owner 0 x3; untouched
        c = fs[0].counters()
        assert c["stale_wqes"] == 0 and c["dbrec_lag"] == 0 and c["bad_doorbells"] == 0
        fs[0].check()


def test_free_flow_rings_only_the_ready_prefix() -> None:
    with pair(NicHandler.CPU_PROXY_FREE_FLOW) as (fs, qp, landing, slots):
        ringer = HostRinger()
        ringer.add(qp, NicHandler.CPU_PROXY_FREE_FLOW, slots.ctypes.data)
        for i in range(4):
            write_wqe(qp, i, landing, 0x2000 + i)
        slots[1] = 2  # WQE 1 is ready before WQE 0: nothing may go out
        slots[3] = 4
        assert ringer.poll_once() == 0
        slots[0] = 1  # prefix 0..1
        assert ringer.poll_once() == 1 and sq_dbrec(qp) == 2
        slots[2] = 3  # prefix now 0..3
        assert ringer.poll_once() == 1 and sq_dbrec(qp) == 4
        drain(fs)
        assert list(host_view(landing.addr, 32).view(np.uint64)) == [0x2000 + i for i in range(4)]
        for i in range(4, DEPTH):  # to the end of the first lap
            write_wqe(qp, i, landing, 0x2000 + i)
            slots[i] = i + 1
        assert ringer.poll_once() == 1 and ringer.stats()[0][1] == DEPTH
        drain(fs)
        # slot 0 still holds lap 0's mark (1): index DEPTH is not ready until it holds DEPTH + 1
        assert slots[0] == 1 and ringer.poll_once() == 0
        c = fs[0].counters()
        assert c["stale_wqes"] == 0 and c["dbrec_lag"] == 0 and c["bad_doorbells"] == 0
        fs[0].check()


def test_thread_mode_starts_and_stops() -> None:
    with pair(NicHandler.CPU_PROXY) as (fs, qp, landing, word):
        write_wqe(qp, 0, landing, 7)
        with HostRinger() as ringer:
            pass
        ringer = HostRinger()
        ringer.add(qp, NicHandler.CPU_PROXY, word.ctypes.data)
        with ringer:
            assert ringer.running
            word[0] = 1
            for _ in range(100000):
                if ringer.stats()[0][1] == 1:
                    break
        assert not ringer.running and ringer.stats()[0][1:] == (1, 1)
        drain(fs)
        assert host_view(landing.addr, 8).view(np.uint64)[0] == 7


def test_refuses_handlers_without_host_thread() -> None:
    from gicbench.errors import ConfigError

    with pair(NicHandler.GPU_SM_DB) as (_, qp, _, _), pytest.raises(ConfigError, match="cpu-pro"):
        HostRinger().add(qp, NicHandler.GPU_SM_DB, 4096)
