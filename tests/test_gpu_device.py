"""The GPU submitter on a GPU (marked gpu; skipped without one): two emulated NICs in one
process (engine threads), the sender's queues and regions mapped into the GPU, kernels of every
ordering posting real writes that land, never a hang (a QP that cannot send times out)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_helpers import CUDA_RANKS, GPU_LANES, SLICE, cupy_or_skip
from resources import Traffic, factory

from gicbench.errors import CompletionTimeout
from gicbench.fabric.base import host_view
from gicbench.submit.base import CycleWork, LatencyWork, RateWork
from gicbench.submit.gpu import ORDERINGS
from gicbench.submit.gpu.lanes import lane_messages
from gicbench.submit.gpu.params import RECORD_UNORDERED_ORDERINGS, UNSAFE_ORDERINGS, GpuParams
from gicbench.submit.work import cycle_lane_writes

pytestmark = pytest.mark.gpu


def _gpu() -> None:
    cupy_or_skip()


# Rank 0 sends to rank 1 over RC lanes; the source filled from seed 7.
RC_LANES = {**GPU_LANES, "seed": 7, "prefix": "g"}


@pytest.fixture
def world():
    """`world(n, connect=True)`: the pair with `n` RC lanes (resources.Traffic)."""
    _gpu()
    with factory(Traffic, **RC_LANES) as make:
        yield make


def _lanes(world, n: int, connect: bool = True):
    """`n` lanes of a fresh pair (`connect=False`: the QPs stay in RESET): (fabrics, lanes,
    rank 0's source, rank 1's landing)."""
    w = world(n, connect=connect)
    return (w.fabrics, *w.one_way())


def _submitter(fs, ordering: str, publish: str = "thread", timeout_s: float = 5.0):
    from gicbench.submit.gpu import GpuSubmitter

    return GpuSubmitter(
        rank=0,
        fabric=fs[0],
        progress=fs[0].progress_policy(),
        timeout_s=timeout_s,
        params=GpuParams(ordering=ordering, publish=publish),
    )


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_single_op_every_ordering_lands_and_counts(world, ordering: str) -> None:
    fs, lanes, src, dst = _lanes(world, 4)
    sub = _submitter(fs, ordering)
    try:
        assert 1e8 < sub.sm_clock_hz < 5e9
        before = fs[0].counters()
        for mode in ("issue", "put_completion"):
            for size, inline in ((8, True), (500, True), (64, False)):
                for scope_all in (False, True):
                    w = LatencyWork(lanes, 0, mode, size, inline, scope_all, 50, 5)
                    ns = sub.latency(w)
                    assert ns.shape == (50,) and (ns >= 0).all()
                    fs[1].quiesce()
                    got = bytes(host_view(dst.addr, size))
                    want = bytes(host_view(src.addr, size))[: size - 8] + (55).to_bytes(8, "little")
                    assert got == want, (mode, size, inline)
        after = fs[0].counters()
        if ordering not in UNSAFE_ORDERINGS:
            assert after["stale_wqes"] == before["stale_wqes"]
        if ordering not in RECORD_UNORDERED_ORDERINGS:
            assert after["dbrec_lag"] == before["dbrec_lag"]
        assert np.isfinite(sub.point_details()["sm_clock_hz"])
    finally:
        sub.close()


@pytest.mark.parametrize(
    ("publish", "threads", "batch", "nlanes"),
    [("thread", 1, 1, 1), ("warp", 32, 32, 1), ("thread", 64, 4, 4), ("lock", 16, 2, 2),
     ("warp", 96, 8, 3), ("thread", 4, 16, 8)],
)  # fmt: skip
def test_msg_rate_publication_modes_land_every_slot(world, publish, threads, batch, nlanes) -> None:
    fs, lanes, src, dst = _lanes(world, nlanes)
    ordering = "gpu-fence"
    sub = _submitter(fs, ordering, publish)
    try:
        size, per_thread, warm = 8, 300, 10
        res = sub.rate(RateWork(lanes, threads, batch, size, True, per_thread, warm, 30))
        assert res.messages == per_thread * threads
        assert res.elapsed_ns > 0 and res.doorbells > 0 and res.cqes > 0
        fs[1].quiesce()
        counts = lane_messages(nlanes, threads, publish, batch, per_thread + warm)
        for i, n in enumerate(counts):
            k = min(n, SLICE // size) * size
            assert bytes(host_view(dst.addr + i * SLICE, k)) == bytes(
                host_view(src.addr + i * SLICE, k)
            ), f"lane {i}"
        c = fs[0].counters()
        assert c["stale_wqes"] == 0, c
        # gpu-fence orders the WQEs before the record, not the record before the doorbell: the
        # engine may see a doorbell ahead of its record (counted; served once the record lands)
        if ordering not in RECORD_UNORDERED_ORDERINGS:
            assert c["dbrec_lag"] == 0, c
        # the queue state carries over: a second call on the same QPs
        res = sub.rate(RateWork(lanes, threads, batch, size, False, 50, 0, 10))
        assert res.messages == 50 * threads
    finally:
        sub.close()


@pytest.mark.parametrize(
    ("publish", "units", "w", "batch", "nlanes", "visits"),
    [("thread", 1, 1, 1, 3, 40), ("thread", 2, 5, 2, 5, 21), ("lock", 3, 16, 4, 7, 12),
     ("thread", 4, 32, 32, 8, 9)],
)  # fmt: skip
def test_cycle_visits_each_lane_w_writes_and_lands_every_slot(
    world, publish, units, w, batch, nlanes, visits
) -> None:
    """gda_msg_rate as active-connections' cycle: unit u on lanes u, u+U, ..., W writes a
    visit in chains of the batch; each lane carries what cycle_lane_writes says."""
    fs, lanes, src, dst = _lanes(world, nlanes)
    sub = _submitter(fs, "gpu-fence", publish)
    try:
        size, warm = 8, 2
        res = sub.cycle(CycleWork(lanes, units, w, batch, size, True, visits, warm, 8))
        assert res.messages == visits * w * units and res.elapsed_ns > 0
        fs[1].quiesce()
        counts = cycle_lane_writes(list(range(nlanes)), units, w, visits + warm)
        assert sum(counts) == (visits + warm) * w * units
        assert fs[0].counters()["wqes"] >= sum(counts)
        for i, n in enumerate(counts):
            k = min(n, SLICE // size) * size
            assert bytes(host_view(dst.addr + i * SLICE, k)) == bytes(
                host_view(src.addr + i * SLICE, k)
            ), f"lane {i}"
    finally:
        sub.close()


def test_a_qp_that_cannot_send_times_out_instead_of_hanging(world) -> None:
    fs, lanes, _, _ = _lanes(world, 1, connect=False)  # RESET: the doorbell is never executed
    sub = _submitter(fs, "gpu-fence", timeout_s=0.3)
    try:
        with pytest.raises(CompletionTimeout, match=r"no completion within 0\.3 s"):
            sub.latency(LatencyWork(lanes, 0, "put_completion", 8, True, False, 1, 0))
        fs[0].errors()  # the engine's not-RTS records
    finally:
        sub.close()


CUDA_LANES = {**RC_LANES, **CUDA_RANKS, "queues": "device", "prefix": "gc"}


@pytest.fixture
def cuda_world():
    """The same pair on the emulated NIC's CUDA engine, queues in GPU memory."""
    _gpu()
    with factory(Traffic, **CUDA_LANES) as make:
        yield make


def test_gpu_submitter_on_the_cuda_engine_never_waits_for_the_engine_kernel(cuda_world) -> None:
    """The engine is a kernel that runs until its fabric closes: the submitter's set-up (SM
    clock), loops and close() must wait on their own stream, never the device (a
    cudaDeviceSynchronize there hung `gicbench run --engine cuda` on the H200)."""
    fs, lanes, _src, dst = _lanes(cuda_world, 2)
    sub = _submitter(fs, "gpu-fence")
    try:
        assert 1e8 < sub.sm_clock_hz < 5e9
        for mode in ("issue", "put_completion"):
            ns = sub.latency(LatencyWork(lanes, 0, mode, 8, True, False, 50, 5))
            assert ns.shape == (50,) and (ns >= 0).all()
        fs[1].quiesce()
        got = bytes(host_view(dst.addr, 8))
        assert got == (55).to_bytes(8, "little")
        assert fs[0].counters()["stale_wqes"] == 0
    finally:
        sub.close()
