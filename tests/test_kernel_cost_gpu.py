"""kernel-cost on mini-gda, on a GPU (marked gpu; skipped without one, naming what is missing):
two emulated NICs in one process (engine threads), the caller kernels of cuda/kcost/ launched
by the experiment's launcher on a small grid. The dormant variant's call is in the SASS and is
never taken (no WQE posted, nothing lands, the output exact); the sending variants land every
message and post what they should; the output check catches work a kernel skipped. (That the
call is in the SASS is checked without a GPU: tests/test_kernel_cost_kernels.py.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gpu_helpers import GPU_LANES, SLICE, cupy_or_skip, nvcc_or_skip
from resources import Traffic, factory

from gicbench.errors import ValidationError
from gicbench.experiments.kernel_cost import KernelCost
from gicbench.submit.gpu.params import GpuParams
from gicbench.submit.work import KernelCostResult, KernelCostWork

pytestmark = pytest.mark.gpu

QPS = 8
GRID = 16  # two blocks a QP
THREADS = 64


# On emu's CPU engine a GPU-scope fence does not order the WQE stores before the doorbell for a
# CPU reader (docs/moe-dispatch.md): these tests post at system scope.
@pytest.fixture
def world():
    cupy_or_skip()
    nvcc_or_skip("cuda/kcost")
    with factory(Traffic, **GPU_LANES, seed=3, prefix="kc") as make:
        w = make(QPS)
        from gicbench.submit.gpu import GpuSubmitter

        sub = GpuSubmitter(rank=0, fabric=w.fabrics[0], progress=w.fabrics[0].progress_policy(),
                           timeout_s=10.0, params=GpuParams(ordering="sys-fence"))  # fmt: skip
        try:
            yield w, sub
        finally:
            sub.close()


def _work(w: Any, variant: str, build: str, caller: str = "compute", per_block: int = 4,
          size: int = 8, live: int = 8) -> KernelCostWork:  # fmt: skip
    return KernelCostWork(caller=caller, live=live, variant=variant, build=build,
                          messages=per_block, size=size, inline=size <= 220, blocks=GRID,
                          blocks_per_sm=None, threads=THREADS, steps=64, launches=3, pairs=2,
                          lanes=w.lanes())  # fmt: skip


def _point(work: KernelCostWork) -> dict[str, Any]:
    return {"caller": work.caller, "live": work.live, "variant": work.variant,
            "build": work.build, "per_block": work.messages, "size": work.size,
            "steps": work.steps, "threads": work.threads, "qps": QPS}  # fmt: skip


def _landing(w: Any) -> np.ndarray:
    w.fabrics[1].quiesce()
    return w.landing(1)[: QPS * SLICE].copy()


@pytest.mark.parametrize("build", ("inline", "separate"))
def test_code_only_never_takes_its_branch(world, build: str) -> None:
    w, sub = world
    w.landing(1)[:] = 0
    work = _work(w, "code-only", build, per_block=16)
    res = sub.kernel_cost(work)
    assert isinstance(res, KernelCostResult)
    assert not res.posted.any()  # no WQE on any QP
    assert not _landing(w).any()  # nothing landed
    KernelCost._validate(_point(work), res)  # the output is exact
    assert res.variant.registers > res.reference.registers
    assert res.variant_ns.shape == res.reference_ns.shape == (2, 3)
    assert (res.variant_ns > 0).all() and (res.reference_ns > 0).all()


@pytest.mark.parametrize("build", ("inline", "separate"))
@pytest.mark.parametrize(("variant", "size"), [("send", 8), ("send-wait", 8), ("send", 1024),
                                               ("send-wait", 1024)])  # fmt: skip
@pytest.mark.parametrize("caller", ("compute", "stream"))
def test_sending_variants_land_every_message(world, build: str, variant: str, size: int,
                                             caller: str) -> None:  # fmt: skip
    w, sub = world
    w.landing(1)[:] = 0
    work = _work(w, variant, build, caller=caller, per_block=4, size=size)
    res = sub.kernel_cost(work)
    KernelCost._validate(_point(work), res)  # output and WQEs per QP
    assert list(res.posted) == [GRID // QPS * 4 * res.variant_launches] * QPS
    got, src = _landing(w), w.src(0)
    for lane in range(QPS):
        off = lane * SLICE
        assert np.array_equal(got[off : off + 4 * size], src[off : off + 4 * size]), lane
        assert not got[off + 4 * size : off + SLICE].any()


def test_a_skipped_step_fails_validation(world) -> None:
    w, sub = world
    work = _work(w, "code-only", "inline")
    res = sub.kernel_cost(work)
    with pytest.raises(ValidationError, match="skipped work"):
        KernelCost._validate({**_point(work), "steps": work.steps + 1}, res)


def test_resources_at_run_time_match_the_cubin(world) -> None:
    w, sub = world
    res = sub.kernel_cost(_work(w, "code-only", "inline"))
    assert res.details["num_regs_runtime"] == res.variant.registers
    assert res.variant.blocks_per_sm is None or res.variant.blocks_per_sm >= 1
    assert res.details["sm_clock_hz"] > 1e8
