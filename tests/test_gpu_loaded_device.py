"""loaded-rtt on mini-gda on a GPU (marked gpu; skipped without one): two emulated NICs in one
process, each rank's background CTAs loading its QPs while rank 0 round trips and rank 1 answers
(on a QP shared with background CTA 0, or a private one); the probe's bytes land, the background
carried writes, every QP ends drained; a peer that never answers times out and stops both
kernels."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from gpu_helpers import cupy_or_skip

from gicbench.errors import CompletionTimeout
from gicbench.fabric.base import Access, host_view
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.base import Buffer, Lane, LoadedWork
from gicbench.submit.gpu import loaded as gl
from gicbench.submit.gpu.params import GpuParams

pytestmark = pytest.mark.gpu
SLICE = 512
CTAS = 4


def _gpu() -> None:
    cupy_or_skip()


@pytest.fixture
def pair():
    """Two ranks, CTAS + 1 RC QP pairs, each rank's source and landing mapped into the GPU;
    yields (fabrics, lanes per rank, landing per rank, source per rank)."""
    _gpu()
    job = "gl-" + uuid.uuid4().hex[:8]
    fs = [EmuFabric(r, 2, job, progress="thread", segment_bytes=64 << 20) for r in range(2)]
    infos = [f.local_info() for f in fs]
    for f in fs:
        f.add_peers(infos)
    n = CTAS + 1
    qps = [[], []]
    for _ in range(n):
        a = fs[0].create_qp(fs[0].create_cq(256), 256)
        b = fs[1].create_qp(fs[1].create_cq(256), 256)
        fs[0].connect(a, fs[1].endpoint(b))
        fs[1].connect(b, fs[0].endpoint(a))
        qps[0].append(a)
        qps[1].append(b)
    src = [f.register(SLICE * n, Access.LOCAL_WRITE, domain="host-mapped") for f in fs]
    land = [
        f.register(SLICE * n, Access.LOCAL_WRITE | Access.REMOTE_WRITE, domain="host-mapped")
        for f in fs
    ]
    rng = np.random.default_rng(11)
    for s in src:
        host_view(s.addr, s.length)[:] = rng.integers(0, 256, s.length, dtype=np.uint8)
    lanes = [
        tuple(
            Lane(qps[r][i], 1 - r, Buffer.local(src[r], i * SLICE, SLICE),
                 Buffer(land[1 - r].addr + i * SLICE, land[1 - r].rkey, SLICE))
            for i in range(n)
        )
        for r in range(2)
    ]  # fmt: skip
    yield fs, lanes, land, src
    for f in fs:
        f.close()


def _subs(fs, timeout_s: float = 5.0) -> list:
    from gicbench.submit.gpu import GpuSubmitter

    subs = [
        GpuSubmitter(
            rank=r,
            fabric=fs[r],
            progress=fs[r].progress_policy(),
            timeout_s=timeout_s,
            params=GpuParams(ordering="gpu-fence"),
        )
        for r in range(2)
    ]
    return subs


def _work(lanes, land, requester: bool, shared: bool, iters: int = 200) -> LoadedWork:
    return LoadedWork(
        lanes=lanes,
        requester=requester,
        shared=shared,
        background=CTAS,
        batch=8,
        pace_mps=0.0,
        size=8,
        reply=Buffer.local(land, 0, SLICE),
        iters=iters,
        warmup=20,
    )


@pytest.mark.parametrize("shared", [True, False])
def test_probe_round_trips_under_load_and_every_qp_drains(pair, shared: bool) -> None:
    fs, lanes, land, _src = pair
    subs = _subs(fs)
    # both ranks prepare before either launches (a device allocation waits for running kernels)
    calls = [
        gl.Call(subs[0], _work(lanes[0], land[0], True, shared)),
        gl.Call(subs[1], _work(lanes[1], land[1], False, shared)),
    ]
    for c in reversed(calls):
        c.start()
    res, resp = (c.finish() for c in calls)
    assert res.rtt_ns.shape == (200,) and (res.rtt_ns > 0).all()
    for r in (res, resp):
        d = r.details
        assert r.background > 0 and d["background_posted"] >= r.background and r.probe_ns > 0
        # (the probe reaps a shared QP's CQEs too)
        assert d["background_doorbells"] > 0 and d["background_cqes"] > 0
    # the probe's last request and reply landed in slot 0 of lane 0, stamped 220
    for r in range(2):
        assert bytes(host_view(land[r].addr, 8)) == (220).to_bytes(8, "little")
    # nothing reserved and unpublished, nothing published and not retired
    for sub in subs:
        st = sub.states.get()
        for qpn, row in sub.slots.items():
            resv, pub, retired = (int(v) for v in st[row, 1:4])
            assert resv == pub == retired, (qpn, resv, pub, retired)
    for sub in subs:
        sub.close()


def test_a_peer_that_never_answers_times_out_and_stops_the_background(pair) -> None:
    fs, lanes, land, _ = pair
    subs = _subs(fs, timeout_s=0.5)
    with pytest.raises(CompletionTimeout, match=r"lane 0, .*polled word holds 0, waiting for 1"):
        gl.run(subs[0], _work(lanes[0], land[0], True, True, iters=10))
    # run() returned: both streams ended (it waits for the background after the probe); the
    # device has nothing left running (a CTA left spinning would hold this call)
    subs[0].cp.cuda.runtime.deviceSynchronize()
    for sub in subs:
        sub.close()
