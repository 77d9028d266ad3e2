"""The GPU submitter on a GPU (marked gpu; skipped without one): two emulated NICs in one
process (engine threads), the sender's queues and regions mapped into the GPU, kernels of every
ordering posting real writes that land, never a hang (a QP that cannot send times out)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from gpu_helpers import cupy_or_skip, two_fabrics

from gicbench.errors import CompletionTimeout
from gicbench.fabric.base import Access, host_view
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.base import Buffer, Lane, LatencyWork, RateWork
from gicbench.submit.gpu import ORDERINGS
from gicbench.submit.gpu.lanes import lane_messages
from gicbench.submit.gpu.params import RECORD_UNORDERED_ORDERINGS, UNSAFE_ORDERINGS, GpuParams

pytestmark = pytest.mark.gpu
SLICE = 4096


def _gpu() -> None:
    cupy_or_skip()


@pytest.fixture
def world():
    """Rank 0 sends to rank 1 over `n` RC QPs; returns (fabrics, lanes factory)."""
    _gpu()
    with two_fabrics("g") as fs:
        yield fs


def _lanes(fs, n: int, connect: bool = True):
    qps = []
    for _ in range(n):
        a = fs[0].create_qp(fs[0].create_cq(256), 256)
        b = fs[1].create_qp(fs[1].create_cq(256), 256)
        if connect:
            fs[0].connect(a, fs[1].endpoint(b))
            fs[1].connect(b, fs[0].endpoint(a))
        qps.append(a)
    src = fs[0].register(SLICE * n, Access.LOCAL_WRITE, domain="host-mapped")
    dst = fs[1].register(SLICE * n, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    rng = np.random.default_rng(7)
    host_view(src.addr, src.length)[:] = rng.integers(0, 256, src.length, dtype=np.uint8)
    lanes = tuple(
        Lane(qp, 1, Buffer.local(src, i * SLICE, SLICE), Buffer(dst.addr + i * SLICE, dst.rkey,
             SLICE))
        for i, qp in enumerate(qps)
    )  # fmt: skip
    return lanes, src, dst


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
    fs = world
    lanes, src, dst = _lanes(fs, 4)
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
    fs = world
    lanes, src, dst = _lanes(fs, nlanes)
    sub = _submitter(fs, "gpu-fence", publish)
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
        assert c["stale_wqes"] == 0 and c["dbrec_lag"] == 0
        # the queue state carries over: a second call on the same QPs
        res = sub.rate(RateWork(lanes, threads, batch, size, False, 50, 0, 10))
        assert res.messages == 50 * threads
    finally:
        sub.close()


def test_a_qp_that_cannot_send_times_out_instead_of_hanging(world) -> None:
    fs = world
    lanes, _, _ = _lanes(fs, 1, connect=False)  # RESET: the doorbell is never executed
    sub = _submitter(fs, "gpu-fence", timeout_s=0.3)
    try:
        with pytest.raises(CompletionTimeout, match=r"no completion within 0\.3 s"):
            sub.latency(LatencyWork(lanes, 0, "put_completion", 8, True, False, 1, 0))
        fs[0].errors()  # the engine's not-RTS records
    finally:
        sub.close()


@pytest.fixture
def cuda_world():
    """The same pair on the emulated NIC's CUDA engine, queues in GPU memory."""
    _gpu()
    job = "gc-" + uuid.uuid4().hex[:8]
    fs = [
        EmuFabric(r, 2, job, progress="inline", segment_bytes=64 << 20, engine="cuda",
                  engine_ctas=2, queues="device")
        for r in range(2)
    ]  # fmt: skip
    infos = [f.local_info() for f in fs]
    for f in fs:
        f.add_peers(infos)
    yield fs
    for f in fs:  # both engines stop before either fabric closes (one process, two ranks)
        f.stop_engine()
    for f in fs:
        f.close()


def test_gpu_submitter_on_the_cuda_engine_never_waits_for_the_engine_kernel(cuda_world) -> None:
    """The engine is a kernel that runs until its fabric closes: the submitter's set-up (SM
    clock), loops and close() must wait on their own stream, never the device (a
    cudaDeviceSynchronize there hung `gicbench run --engine cuda` on the H200)."""
    fs = cuda_world
    lanes, _src, dst = _lanes(fs, 2)
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
