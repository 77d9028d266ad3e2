"""msg-rate's doorbell lock (--publish lock): threads of one warp sharing a QP each take the lock
once per WQE, so a lock that lets one lane win every contention starves its siblings into a wait
timeout (an unfair CAS lock did, at 32 threads on one QP). The lock is a ticket lock: served in
the order taken. On the CPU: the accounting a timeout is read against; on a GPU (marked gpu):
the run completes with the producer index, the tickets taken and served, and the doorbells all
equal to the messages posted."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import SLICE
from resources import Traffic, factory
from test_gpu_device import RC_LANES, _gpu, _lanes

from gicbench.errors import CompletionTimeout
from gicbench.fabric.base import host_view
from gicbench.submit.base import RateWork
from gicbench.submit.gpu import lanes, status
from gicbench.submit.gpu.params import GpuParams

# QpState words (cuda/gda/queue.cuh)
BASE, RESV, PUB, RETIRED, CQ_CI, LOCK, CQ_LOCK, BBS, CQ_PUB, CQ_SLACK, LOCK_TURN = range(11)


def test_a_shared_lane_carries_every_threads_messages() -> None:
    """32 threads on one QP: the lane's WQE count (the kernel signals its last WQE by it, and
    the drain waits for it) is every thread's messages, warm-up included."""
    per_thread = 100_000 + 100
    assert lanes.lane_messages(1, 32, "lock", 1, per_thread) == [32 * per_thread]
    assert lanes.unit_lanes(31, 32, 1) == [0]


def test_a_timeout_names_the_calls_total() -> None:
    """The producer index of a failed msg-rate call is read against all the threads' messages
    (1,450,336 of 3,203,200 is a run cut short, not 14x too many WQEs)."""
    st = np.zeros(status.WORDS, dtype=np.uint64)
    st[status.CODE] = status.STATUS_TIMEOUT
    st[status.PI] = 1_450_336
    with pytest.raises(CompletionTimeout, match=r"producer index 1450336.*3203200 operations"):
        status.raise_for(st, 0, "msg-rate", 5.0, 32 * 100_100)


# ---- on a GPU ----------------------------------------------------------------------------------


@pytest.fixture
def world():
    _gpu()
    with factory(Traffic, **{**RC_LANES, "prefix": "gl"}) as make:
        yield make


@pytest.mark.gpu
@pytest.mark.parametrize(("threads", "qps"), [(32, 1), (64, 1), (96, 2)])
def test_lock_publication_posts_exactly_the_messages(world, threads: int, qps: int) -> None:
    from gicbench.submit.gpu import GpuSubmitter

    fs, lns, src, dst = _lanes(world, qps)
    sub = GpuSubmitter(rank=0, fabric=fs[0], progress=fs[0].progress_policy(), timeout_s=5.0,
                       params=GpuParams(publish="lock"))  # fmt: skip
    per_thread, warm = 3000, 10
    try:
        res = sub.rate(RateWork(lns, threads, 1, 8, True, per_thread, warm, 100))
        fs[1].quiesce()
        want = lanes.lane_messages(qps, threads, "lock", 1, per_thread + warm)
        assert sum(want) == threads * (per_thread + warm)
        st = sub.states.get()
        for lane, n in zip(lns, want, strict=True):
            row = st[sub.slots[lane.qp.qpn]]
            bbs = int(row[BBS])
            assert int(row[PUB]) - int(row[BASE]) == n * bbs  # producer index == messages posted
            assert int(row[RESV]) == int(row[PUB]) == int(row[RETIRED])
            assert int(row[LOCK]) == int(row[LOCK_TURN]) == n  # one ticket a WQE, all served
        assert res.messages == per_thread * threads and res.doorbells == sum(want)
        for i, n in enumerate(want):
            k = min(n, SLICE // 8) * 8
            assert bytes(host_view(dst.addr + i * SLICE, k)) == bytes(
                host_view(src.addr + i * SLICE, k)
            ), f"lane {i}"
        c = fs[0].counters()
        assert c["stale_wqes"] == 0 and c["cq_overruns"] == 0
    finally:
        sub.close()
