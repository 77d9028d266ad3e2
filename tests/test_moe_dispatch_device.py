"""MoE dispatch on mini-gda, on a GPU (marked gpu; skipped without one, naming what is missing):
two emulated NICs in one process (CPU engine threads), a rank's dispatch on a thread of its own
with a threading barrier between iterations, every backend validated as the experiment does it
(the counts each receiver read, the expert-major buffer byte for byte against the sources'
tokens) and timed by CUDA events and by globaltimer."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np
import pytest
from gpu_helpers import GPU_RANKS, cupy_or_skip
from resources import Traffic, factory

from gicbench.fabric.base import Access, MemoryRegion, host_view
from gicbench.moe import routing as rt
from gicbench.submit.gpu.params import GpuParams
from gicbench.submit.work import Buffer, DispatchPlan, DispatchResult, DispatchWork

pytestmark = pytest.mark.gpu

W = 2
EL = 4  # local experts per rank: one QP per (peer, local expert)
E = W * EL
H = 64
SB = 2 * H
T_MAX = 64
COFF = T_MAX * SB  # the count word after T_max slots
PITCH = (T_MAX + 1) * SB  # one landing slice, whole tokens apart (gpi-mc's fan-out window)
BACKENDS = ("gdaki", "free-flow", "gpi", "gpi-mc")


class DispatchPair(Traffic):
    """resources.Traffic whose landings take atomics too (the count signals), as bring-up
    registers a landing region."""

    def register(self, rank: int, access: Access, domain: str | None) -> MemoryRegion:
        return super().register(rank, access | Access.REMOTE_ATOMIC, domain)


@pytest.fixture
def world():
    """`world(depth)`: the pair with EL RC QPs a way and a source area per rank (tokens,
    staging, own experts' slices), all host-mapped, and a GPU submitter per rank."""
    cupy_or_skip()
    with factory(DispatchPair, **GPU_RANKS, prefix="md") as make:
        made: list[Any] = []

        def build(depth: int = 64) -> Any:
            from gicbench.submit.gpu import GpuSubmitter

            w = make(EL, depth, both_ways=True, slice_bytes=PITCH, src_domain="host-mapped",
                     landing_domain="host-mapped")  # fmt: skip
            rng = np.random.default_rng(11)
            w.areas = []
            for r in range(W):
                area = w.fabrics[r].register(2 * COFF + EL * PITCH, domain="host-mapped")
                host_view(area.addr, area.length)[:] = rng.integers(0, 256, area.length, np.uint8)
                w.areas.append(area)
            w.subs = [
                # sys-fence: on emu's CPU engine GPU-scope ordering lets the engine see a
                # doorbell before the WQE stores it names (docs/gpu-loaded.md)
                GpuSubmitter(rank=r, fabric=w.fabrics[r], progress=w.fabrics[r].progress_policy(),
                             timeout_s=10.0, params=GpuParams(ordering="sys-fence"))
                for r in range(W)
            ]  # fmt: skip
            made.append(w)
            return w

        yield build
        for w in made:
            for s in w.subs:
                s.close()


def _plan(backend: str, tokens: int, topk: int, sm_cap: int, wait_us: float | None,
          seed: int = 5) -> DispatchPlan:  # fmt: skip
    routing = rt.draw_routing(seed, W, tokens, topk, E)
    return DispatchPlan(
        backend=backend, tokens=tokens, hidden=H, topk=topk, experts=E, sm_cap=sm_cap,
        wait_us=wait_us, iters=6, warmup=2, routing=routing, slots=rt.slots_of(routing, E),
        counts=rt.counts_of(routing, E),
    )  # fmt: skip


def _work(w: Any, plan: DispatchPlan, r: int, barrier: threading.Barrier) -> DispatchWork:
    area, tb, peer = w.areas[r], plan.tokens * SB, 1 - r
    staging = Buffer.local(area, COFF, tb)
    land = w.landing_mr(r)
    return DispatchWork(
        plan=plan, rank=r, world=W, tokens_src=Buffer.local(area, 0, tb), staging=staging,
        lanes={peer: tuple(dataclasses.replace(ln, src=staging) for ln in w.lanes(side=r))},
        recv={peer: tuple(Buffer.local(land, e * PITCH, PITCH) for e in range(EL))},
        slot_bytes=SB, counter_offset=COFF,
        self_recv=tuple(Buffer.local(area, 2 * COFF + e * PITCH, PITCH) for e in range(EL)),
        barrier=barrier.wait,
    )  # fmt: skip


def _dispatch(w: Any, plan: DispatchPlan) -> list[DispatchResult]:
    """Both ranks' dispatch of `plan`, each on its own thread; validated like the experiment."""
    barrier = threading.Barrier(W, timeout=60)
    out: list[Any] = [None] * W
    errs: list[BaseException] = []

    def go(r: int) -> None:
        try:
            with w.subs[r].device:
                out[r] = w.subs[r].dispatch(_work(w, plan, r, barrier))
        except BaseException as e:
            errs.append(e)
            barrier.abort()

    threads = [threading.Thread(target=go, args=(r,)) for r in range(W)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errs:
        raise errs[0]
    tokens = {
        s: np.array(host_view(w.areas[s].addr, plan.tokens * SB)).reshape(plan.tokens, SB)
        for s in range(W)
    }
    for r, res in enumerate(out):
        assert res is not None, f"rank {r} did not finish"
        rt.check_counts(res.received, plan.counts, r, W)
        rt.check_expert_major(res.expert_major, plan.routing, r, W, E, tokens)
        for name in ("send_ns", "recv_ns", "send_gt_ns"):
            v = getattr(res, name)
            assert v.shape == (plan.iters,) and (v > 0).all(), (r, name, v)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_delivers_every_token(world, backend: str) -> None:
    w = world()
    for tokens, topk, sm_cap in ((16, 2, 4), (T_MAX, 4, 3), (1, 1, 8)):
        res = _dispatch(w, _plan(backend, tokens, topk, sm_cap, None))
        assert all((r.wait_ns == 0).all() for r in res)


@pytest.mark.parametrize("backend", BACKENDS)
def test_writes_past_the_sq_wait_for_room(world, backend: str) -> None:
    """SQs of 8: an expert's writes of one iteration wrap its QP's SQ several times."""
    _dispatch(world(8), _plan(backend, T_MAX, 4, 2, None))


def test_the_delay_kernel_runs_the_wait(world) -> None:
    res = _dispatch(world(), _plan("gdaki", 16, 2, 4, 200.0))  # well above a launch's cost
    for r in res:
        # the kernel spins its calibrated share of the wait by globaltimer, and the events
        # around it hold that spin (an upper bound would be a timing assertion: launch gaps
        # under MPS are not the delay kernel's)
        assert r.details["delay_spin_ns"] > 0
        assert r.details["delay_spun_mean_ns"] >= r.details["delay_spin_ns"]
        assert (r.wait_ns >= r.details["delay_spin_ns"]).all(), r.wait_ns


def test_backends_alternate_on_the_same_qps(world) -> None:
    """Points of every backend in turn on one pair of submitters, as a shuffled round runs them
    (free-flow's host thread starts at each QP's producer index then)."""
    w = world()
    for backend in ("gdaki", "free-flow", "gdaki", "gpi", "free-flow", "gpi-mc", "gdaki"):
        _dispatch(w, _plan(backend, 16, 2, 4, None))
