"""kernel-cost's mini-proxy and DOCA GPUNetIO paths on a GPU (marked gpu; skipped without one,
naming what is missing): two emulated NICs in one process (engine threads), the caller kernels
of cuda/kcost/ with each path's call launched by its submitter's launcher on a small grid. The
dormant call never posts or lands anything and the output is exact; the sending variants land
every message and post what they should on every QP; the run-time registers match the cubin's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from doca_helpers import DocaQueues
from gpu_helpers import GPU_LANES, SLICE, cupy_or_skip, nvcc_or_skip
from host_world import proxy
from resources import Traffic, factory

from gicbench.experiments.kernel_cost import KernelCost
from gicbench.submit.doca.params import DocaParams
from gicbench.submit.work import KernelCostResult, KernelCostWork

pytestmark = pytest.mark.gpu

QPS = 8
THREADS = 64
DEPTH = 256


class DocaLanes(DocaQueues):
    """Rank 0's queues made with the DOCA submitter's queue options."""

    def __init__(self, params: DocaParams, qps: int, **kw: Any) -> None:
        from gicbench.submit.doca.submitter import DocaSubmitter

        super().__init__(DocaSubmitter.queue_options(params, DEPTH), qps, **kw)


@pytest.fixture
def proxy_world():
    cupy_or_skip()
    nvcc_or_skip("cuda/kcost")
    with factory(Traffic, **GPU_LANES, seed=3, prefix="kcp") as make:
        w = make(QPS)
        sub = proxy(w, 0, 10.0, producer="gpu", handoff="baseline", workers=2, rings=4)
        try:
            yield w, sub
        finally:
            sub.close()


@pytest.fixture
def doca_world():
    """`doca_world(params)`: a world and a DocaSubmitter driving its QPS RC lanes."""
    cupy_or_skip()
    nvcc_or_skip("cuda/kcost")
    from gicbench.submit.doca.headers import find, unavailable_reason

    if find() is None:
        pytest.skip(unavailable_reason())
    subs = []
    with factory(DocaLanes, **{**GPU_LANES, "depth": DEPTH}, seed=3, prefix="kcd") as make:

        def build(params: DocaParams) -> tuple[Any, Any]:
            from gicbench.submit.doca.submitter import DocaSubmitter

            w = make(params, QPS)
            f = w.fabrics[0]
            sub = DocaSubmitter(rank=0, fabric=f, progress=f.progress_policy(), timeout_s=10.0,
                                params=params)  # fmt: skip
            sub.attach_queues([pair[0] for pair in w.rc])
            subs.append(sub)
            return w, sub

        try:
            yield build
        finally:
            for s in subs:
                s.close()


def _work(w: Any, variant: str, build: str, grid: int, per_block: int = 4, size: int = 8,
          caller: str = "compute") -> KernelCostWork:  # fmt: skip
    return KernelCostWork(caller=caller, live=8, variant=variant, build=build,
                          messages=per_block, size=size, inline=size <= 220, blocks=grid,
                          blocks_per_sm=None, threads=THREADS, steps=64, launches=3, pairs=2,
                          lanes=w.lanes())  # fmt: skip


def _point(work: KernelCostWork) -> dict[str, Any]:
    return {"caller": work.caller, "live": work.live, "variant": work.variant,
            "build": work.build, "per_block": work.messages, "size": work.size,
            "steps": work.steps, "threads": work.threads, "qps": QPS}  # fmt: skip


def _landing(w: Any) -> np.ndarray:
    w.fabrics[1].quiesce()
    return w.landing(1)[: QPS * SLICE].copy()


def _check_landed(w: Any, res: KernelCostResult, work: KernelCostWork) -> None:
    KernelCost._validate(_point(work), res)  # output and WQEs per QP
    n = work.messages * work.size
    assert list(res.posted) == [work.blocks // QPS * work.messages * res.variant_launches] * QPS
    got, src = _landing(w), w.src(0)
    for lane in range(QPS):
        off = lane * SLICE
        assert np.array_equal(got[off : off + n], src[off : off + n]), lane
        assert not got[off + n : off + SLICE].any()


# ---- mini-proxy ----------------------------------------------------------------------------------
@pytest.mark.parametrize("build", ("inline", "separate"))
def test_proxy_code_only_never_takes_its_branch(proxy_world, build: str) -> None:
    w, sub = proxy_world
    w.landing(1)[:] = 0
    work = _work(w, "code-only", build, 16, per_block=16)
    res = sub.kernel_cost(work)
    assert not res.posted.any() and not _landing(w).any()
    KernelCost._validate(_point(work), res)
    assert res.variant.registers > res.reference.registers
    assert (res.variant_ns > 0).all() and (res.reference_ns > 0).all()
    assert res.details["workers"] == 2 and res.details["rings"] == 4


@pytest.mark.parametrize("build", ("inline", "separate"))
@pytest.mark.parametrize(("variant", "size"), [("send", 8), ("send-wait", 8), ("send", 1024),
                                               ("send-wait", 1024)])  # fmt: skip
def test_proxy_sending_variants_land_every_message(proxy_world, build: str, variant: str,
                                                   size: int) -> None:  # fmt: skip
    w, sub = proxy_world
    w.landing(1)[:] = 0
    work = _work(w, variant, build, 16, size=size)
    res = sub.kernel_cost(work)
    _check_landed(w, res, work)
    assert res.details["num_regs_runtime"] == res.variant.registers


def test_proxy_stream_caller_sends(proxy_world) -> None:
    w, sub = proxy_world
    w.landing(1)[:] = 0
    work = _work(w, "send-wait", "inline", 16, caller="stream")
    _check_landed(w, sub.kernel_cost(work), work)


# ---- DOCA GPUNetIO -------------------------------------------------------------------------------
@pytest.mark.parametrize("handler", ("gpu-sm-db", "cpu-proxy"))
@pytest.mark.parametrize("build", ("inline", "separate"))
def test_doca_code_only_never_takes_its_branch(doca_world, handler: str, build: str) -> None:
    w, sub = doca_world(DocaParams(doca_handler=handler))
    w.landing(1)[:] = 0
    work = _work(w, "code-only", build, QPS, per_block=16)
    res = sub.kernel_cost(work)
    assert not res.posted.any() and not _landing(w).any()
    KernelCost._validate(_point(work), res)
    assert res.variant.registers > res.reference.registers


@pytest.mark.parametrize("handler", ("gpu-sm-db", "gpu-sm-no-dbr", "cpu-proxy"))
@pytest.mark.parametrize(("variant", "size"), [("send", 8), ("send-wait", 1024)])
@pytest.mark.parametrize("build", ("inline", "separate"))
def test_doca_sending_variants_land_every_message(doca_world, handler: str, variant: str,
                                                  size: int, build: str) -> None:  # fmt: skip
    w, sub = doca_world(DocaParams(doca_handler=handler))
    w.landing(1)[:] = 0
    work = _work(w, variant, build, QPS, size=size)  # one QP per block: exclusive
    res = sub.kernel_cost(work)
    _check_landed(w, res, work)
    assert res.details["num_regs_runtime"] == res.variant.registers


@pytest.mark.parametrize("build", ("inline", "separate"))
def test_doca_puts_past_the_send_queue_wrap_land(doca_world, build: str) -> None:
    """16 puts per block and launch over 22 launches (352 per QP on a 256-slot SQ): each put past
    the wrap waits in DOCA's slot check for an old completion, inside the caller."""
    w, sub = doca_world(DocaParams())
    w.landing(1)[:] = 0
    work = replace(_work(w, "send", build, QPS, per_block=16), launches=10, pairs=2)
    res = sub.kernel_cost(work)
    _check_landed(w, res, work)
    assert int(res.posted[0]) > DEPTH


def test_doca_blocks_sharing_a_qp_with_gpu_sharing(doca_world) -> None:
    w, sub = doca_world(DocaParams(doca_sharing="gpu"))
    w.landing(1)[:] = 0
    work = _work(w, "send-wait", "inline", 2 * QPS)
    _check_landed(w, sub.kernel_cost(work), work)
