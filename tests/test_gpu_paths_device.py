"""mini-gda's host-forwarded doorbell, both CQ pollings and DC on a GPU (marked gpu; skipped
without one): two emulated NICs in one process (engine threads), kernels posting real writes
that land; the CQ record never lets the engine overrun a CQ; the host thread never outlives a
call."""

from __future__ import annotations

import struct

import pytest
from gpu_helpers import SLICE
from resources import Traffic, factory
from test_gpu_device import RC_LANES, _gpu, _lanes

from gicbench.errors import CompletionTimeout
from gicbench.fabric.base import host_view
from gicbench.submit.base import LatencyWork, RateWork
from gicbench.submit.gpu.lanes import lane_messages
from gicbench.submit.gpu.params import GpuParams

pytestmark = pytest.mark.gpu
DC_KEY = 0x5EED


@pytest.fixture
def world():
    """`world(n)`: the pair with `n` RC lanes, as test_gpu_device makes it."""
    _gpu()
    with factory(Traffic, **{**RC_LANES, "prefix": "gp"}) as make:
        yield make


def _sub(fs, doorbell="gpu", cq_poll="expected", publish="thread", ordering="gpu-fence",
         timeout_s=5.0):  # fmt: skip
    from gicbench.submit.gpu import GpuSubmitter

    return GpuSubmitter(
        rank=0, fabric=fs[0], progress=fs[0].progress_policy(), timeout_s=timeout_s,
        params=GpuParams(ordering=ordering, publish=publish, doorbell=doorbell, cq_poll=cq_poll),
    )  # fmt: skip


def _cq_record(qp) -> int:
    return struct.unpack(">I", host_view(qp.sq.cq.dbrec, 4).tobytes())[0] & 0xFFFFFF


# Rank 0's DCIs aimed at one DCT of rank 1, lane i its own slice; the source from seed 3.
DC_LANES = {**RC_LANES, "dc_key": DC_KEY, "seed": 3, "prefix": "gp"}


def _dc_lanes(world, n: int):
    """`n` DC lanes of a fresh pair (no RC QPs): (fabrics, lanes, source, landing)."""
    w = world(0, dcis=n, **DC_LANES)
    return w.fabrics, w.dc_lanes(), w.src_mr(0), w.landing_mr(1)


def _single_op_lands(fs, sub, lanes, src, dst) -> None:
    for mode in ("issue", "put_completion"):
        for size, inline in ((8, True), (500, True), (64, False)):
            for scope_all in (False, True):
                ns = sub.latency(LatencyWork(lanes, 0, mode, size, inline, scope_all, 40, 4))
                assert ns.shape == (40,) and (ns >= 0).all()
                fs[1].quiesce()
                got = bytes(host_view(dst.addr, size))
                want = bytes(host_view(src.addr, size))[: size - 8] + (44).to_bytes(8, "little")
                assert got == want, (mode, size, inline, scope_all)


def _rate_lands(fs, sub, lanes, src, dst, publish, threads, batch, per_thread=400, warm=10):
    res = sub.rate(RateWork(lanes, threads, batch, 8, True, per_thread, warm, 50))
    assert res.messages == per_thread * threads and res.doorbells > 0 and res.cqes > 0
    fs[1].quiesce()
    for i, n in enumerate(lane_messages(len(lanes), threads, publish, batch, per_thread + warm)):
        k = min(n, SLICE // 8) * 8
        assert bytes(host_view(dst.addr + i * SLICE, k)) == bytes(
            host_view(src.addr + i * SLICE, k)
        ), f"lane {i}"
    return res


@pytest.mark.parametrize("cq_poll", ["scan", "expected"])
def test_both_cq_polls_land_and_keep_the_cq_record_safe(world, cq_poll: str) -> None:
    fs, lanes, src, dst = _lanes(world, 4)
    sub = _sub(fs, cq_poll=cq_poll)
    try:
        # single-op: 528 CQEs through lane 0's 256-entry CQ, every WQE signaled, the record
        # lagging by up to 255 (expected): it must keep the engine from overrunning the CQ
        _single_op_lands(fs, sub, lanes, src, dst)
        _rate_lands(fs, sub, lanes, src, dst, "thread", 4, 8, per_thread=5000)
        c = fs[0].counters()
        assert c["cq_overruns"] == 0 and c["stale_wqes"] == 0, c
        fs[0].check()
        for lane in lanes:  # after a call the record holds everything consumed (gda_finish)
            states = sub.states.get()
            row = sub.slots[lane.qp.qpn]
            assert _cq_record(lane.qp) == int(states[row, 4]) & 0xFFFFFF
    finally:
        sub.close()


@pytest.mark.parametrize("ordering", ["none", "gpu-fence", "gpu-release-store", "sys-fence"])
def test_host_doorbell_single_op_lands_and_the_thread_rings(world, ordering: str) -> None:
    fs, lanes, src, dst = _lanes(world, 2)
    sub = _sub(fs, doorbell="host", ordering=ordering)
    try:
        _single_op_lands(fs, sub, lanes, src, dst)
        d = sub.point_details()
        assert d["host_doorbells"] > 0
        assert not sub.fwd.native.running  # only while a kernel runs
        if ordering != "none":
            assert fs[0].counters()["stale_wqes"] == 0
    finally:
        sub.close()


@pytest.mark.parametrize(
    ("publish", "threads", "batch", "nlanes"),
    [("thread", 64, 4, 4), ("warp", 32, 32, 1), ("lock", 16, 2, 2), ("thread", 1, 1, 1)],
)
def test_host_doorbell_msg_rate_lands_every_slot(world, publish, threads, batch, nlanes) -> None:
    fs, lanes, src, dst = _lanes(world, nlanes)
    sub = _sub(fs, doorbell="host", publish=publish)
    try:
        res = _rate_lands(fs, sub, lanes, src, dst, publish, threads, batch)
        assert res.doorbells == sub.host_rings > 0
        c = fs[0].counters()
        assert c["stale_wqes"] == 0 and c["dbrec_lag"] == 0 and c["cq_overruns"] == 0
        assert not sub.fwd.native.running
    finally:
        sub.close()


def test_host_doorbell_a_qp_that_cannot_send_times_out(world) -> None:
    fs, lanes, _, _ = _lanes(world, 1, connect=False)
    sub = _sub(fs, doorbell="host", timeout_s=0.3)
    try:
        with pytest.raises(CompletionTimeout, match=r"no completion within 0\.3 s"):
            sub.latency(LatencyWork(lanes, 0, "put_completion", 8, True, False, 1, 0))
        assert not sub.fwd.native.running
        fs[0].errors()
    finally:
        sub.close()


@pytest.mark.parametrize("doorbell", ["gpu", "host"])
def test_dc_writes_built_by_kernels_land(world, doorbell: str) -> None:
    fs, lanes, src, dst = _dc_lanes(world, 2)
    sub = _sub(fs, doorbell=doorbell)
    try:
        _single_op_lands(fs, sub, lanes, src, dst)
        _rate_lands(fs, sub, lanes, src, dst, "thread", 2, 4)
        c = fs[0].counters()
        assert c["stale_wqes"] == 0 and c["cq_overruns"] == 0
        fs[0].check()
    finally:
        sub.close()


@pytest.mark.parametrize(
    ("publish", "threads", "batch", "per_thread"),
    [("thread", 16384, 1, 2), ("warp", 16384, 256, 16)],
)
def test_the_largest_shapes_land(world, publish, threads, batch, per_thread) -> None:
    """528 QPs, 16,384 threads, 256 WQEs per doorbell (the paper's largest mini-gda ranges)."""
    fs, lanes, src, dst = _lanes(world, 528)
    sub = _sub(fs, publish=publish)
    try:
        _rate_lands(fs, sub, lanes, src, dst, publish, threads, batch, per_thread, 0)
        c = fs[0].counters()
        assert c["stale_wqes"] == 0 and c["cq_overruns"] == 0
    finally:
        sub.close()
