"""loaded-rtt on mini-gda on a GPU (marked gpu; skipped without one): two emulated NICs in one
process, each rank's background CTAs loading its QPs while rank 0 round trips and rank 1 answers
(on a QP shared with background CTA 0, or a private one); the probe's bytes land, the background
carried writes, every QP ends drained; a peer that never answers times out and stops both
kernels."""

from __future__ import annotations

import pytest
from gpu_helpers import GPU_LANES, cupy_or_skip
from resources import Traffic

from gicbench.errors import CompletionTimeout
from gicbench.fabric.base import host_view
from gicbench.submit.base import Buffer, LoadedWork
from gicbench.submit.gpu import loaded as gl
from gicbench.submit.gpu.params import GpuParams

pytestmark = pytest.mark.gpu
SLICE = 512
CTAS = 4


def _gpu() -> None:
    cupy_or_skip()


# CTAS + 1 RC QP pairs, each rank's source and landing mapped into the GPU, lanes both ways
# (lane i its own slice); both sources drawn from one generator seeded 11, rank 0's first.
PAIR = {**GPU_LANES, "slice_bytes": SLICE, "both_ways": True, "landing_domain": "host-mapped",
        "seed": 11, "prefix": "gl"}  # fmt: skip


@pytest.fixture
def pair():
    """Two ranks, CTAS + 1 RC QP pairs (PAIR); yields (fabrics, lanes per rank, landing per
    rank, source per rank)."""
    _gpu()
    with Traffic(CTAS + 1, **PAIR) as w:
        ranks = range(2)
        yield (w.fabrics, [w.lanes(side=r) for r in ranks], [w.landing_mr(r) for r in ranks],
               [w.src_mr(r) for r in ranks])  # fmt: skip


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
