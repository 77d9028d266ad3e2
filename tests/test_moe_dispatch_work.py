"""moe-dispatch's run_point and expected_landing against a host model of the dispatch: W ranks
as threads of this process over numpy memory, a stand-in submitter that moves the tokens as the
signal rule says (token writes into the landing slices, one count-word add per (source,
expert), the receiver's copy into the expert-major buffer and its reset of the words). What the
experiment builds (lanes, landing slices, the self area, the count word's place) and what it
checks (counts, bytes, the combine sum, the landing) are exercised end to end; a submitter that
loses a token or miscounts fails the point."""

from __future__ import annotations

import re
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from gicbench.config import RunConfig
from gicbench.errors import ValidationError
from gicbench.experiments.context import RankContext, plan_layout
from gicbench.experiments.moe_dispatch import MoeDispatch
from gicbench.fabric.base import Access, MemoryRegion, host_view
from gicbench.harness import pattern_bytes
from gicbench.patterns import max_neighbours, traffic
from gicbench.submit.base import NoParams, Shape, Submitter
from gicbench.submit.work import COUNT_WORD_BYTES, DISPATCH_BACKENDS, DispatchResult, DispatchWork

WORLD = 4


class _World:
    """What the ranks share: a barrier and the allgather's slots."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.bar = threading.Barrier(n, timeout=30)
        self.slots: list[Any] = [None] * n


class _Comm:
    def __init__(self, world: _World, rank: int) -> None:
        self.w, self.rank = world, rank

    def Barrier(self) -> None:  # mpi4py's name
        self.w.bar.wait()

    def allgather(self, obj: Any) -> list[Any]:
        self.w.slots[self.rank] = obj
        self.w.bar.wait()
        out = list(self.w.slots)
        self.w.bar.wait()
        return out


def _word(buf: Any, off: int) -> np.ndarray:
    return host_view(buf.addr + off, COUNT_WORD_BYTES, np.uint64)


class _HostDispatcher(Submitter):
    """Moves the tokens on the host as the signal rule says; `fault` breaks one rule."""

    name = "test-host-dispatch"
    summary = "dispatch on the host, for tests"
    shapes = frozenset({Shape.DISPATCH})
    posting = ("mlx5-queues",)
    fault: str | None = None

    @classmethod
    def availability(cls, probes: Any) -> str | None:
        return None

    @classmethod
    def dispatch_backends(cls, params: Any, provider: str, provider_params: Any) -> dict:
        return dict.fromkeys(DISPATCH_BACKENDS)

    def dispatch(self, work: DispatchWork) -> DispatchResult:
        p, r, w = work.plan, work.rank, work.world
        el, sb = p.experts // w, work.slot_bytes
        tokens = host_view(work.tokens_src.addr, p.tokens * sb).reshape(p.tokens, sb)
        staging = host_view(work.staging.addr, p.tokens * sb).reshape(p.tokens, sb)
        rows = int(p.counts[:, r * el : (r + 1) * el].sum())
        em = np.zeros((rows + w * p.tokens, sb), np.uint8)  # room for a miscount
        received = np.zeros((el, w), np.int32)
        for _ in range(p.warmup + p.iters):
            assert work.barrier is not None
            work.barrier()
            staging[:] = tokens
            for t in range(p.tokens):
                for j in range(p.topk):
                    x = int(p.routing[r, t, j])
                    d, e, slot = x // el, x % el, int(p.slots[r, t, j])
                    dst = work.self_recv[e] if d == r else work.lanes[d][e].dst
                    if self.fault == "drop" and r == 1 and t == 0 and j == 0:
                        continue
                    host_view(dst.addr + slot * sb, sb)[:] = staging[t]
            for x in range(p.experts):
                d, e = x // el, x % el
                dst = work.self_recv[e] if d == r else work.lanes[d][e].dst
                count = int(p.counts[r, x]) + (self.fault == "count" and r == 2 and x == 0)
                _word(dst, work.counter_offset)[0] += np.uint64(count + 1)
            work.barrier()  # every signal is in (the model's stand-in for polling)
            row = 0
            for e in range(el):
                for s in range(w):
                    b = work.self_recv[e] if s == r else work.recv[s][e]
                    word = _word(b, work.counter_offset)
                    n = int(word[0]) - 1
                    assert n >= 0, "every (source, expert) signals once"
                    received[e, s] = n
                    em[row : row + n] = host_view(b.addr, n * sb).reshape(n, sb) if n else 0
                    row += n
                    word[0] = 0
        it = p.iters
        ns = np.full(it, 1000, np.int64)
        return DispatchResult(ns, ns * 2, np.zeros(it, np.int64), ns, received, em.ravel(),
                              {"descriptors": 7})  # fmt: skip


def _contexts(exp: MoeDispatch, cfg: RunConfig) -> tuple[list[RankContext], list[np.ndarray]]:
    lanes = exp.lanes_per_peer_at(WORLD)
    nb = max_neighbours(cfg.pattern, WORLD)
    layout = plan_layout(exp.max_message, lanes, nb, cfg.landing_bytes)
    world = _World(WORLD)
    src = [np.zeros(layout.region_bytes, np.uint8) for _ in range(WORLD)]
    land = [np.zeros(layout.region_bytes * nb, np.uint8) for _ in range(WORLD)]

    def mr(a: np.ndarray, key: int) -> MemoryRegion:
        return MemoryRegion(a.ctypes.data, a.size, key, key, Access.LOCAL_WRITE)

    ctxs = []
    for r in range(WORLD):
        res = SimpleNamespace(
            src=mr(src[r], 10 + r),
            landing=mr(land[r], 20 + r),
            rc={p: [f"qp{r}->{p}.{i}" for i in range(lanes)] for p in range(WORLD) if p != r},
            peer_landing={p: mr(land[p], 20 + p) for p in range(WORLD) if p != r},
            memory=(src, land),  # keeps the arrays the addresses point into alive
        )
        ctxs.append(RankContext(
            cfg=cfg, comm=_Comm(world, r), topo=SimpleNamespace(rank=r, size=WORLD),
            fabric=None, res=res, submitter=_HostDispatcher(
                rank=r, fabric=None, progress=None, timeout_s=1.0),  # type: ignore[arg-type]
            traffic=traffic(cfg.pattern, r, WORLD), layout=layout,
        ))  # fmt: skip
    return ctxs, land


def _run(point: dict[str, Any], exp: MoeDispatch, ctxs: list[RankContext]) -> list[Any]:
    """run_point on every rank at once; each rank's PointResult or exception."""
    for r, ctx in enumerate(ctxs):  # the harness fills each rank's source with its pattern
        view = host_view(ctx.res.src.addr, ctx.res.src.length)
        view[:] = pattern_bytes(ctx.cfg.seed, 0, r, view.size)
        host_view(ctx.res.landing.addr, ctx.res.landing.length)[:] = 0
    out: list[Any] = [None] * WORLD

    def one(r: int) -> None:
        try:
            out[r] = exp.run_point(ctxs[r], point)
        except BaseException as e:  # handed to the test
            out[r] = e
            ctxs[r].comm.w.bar.abort()

    threads = [threading.Thread(target=one, args=(r,)) for r in range(WORLD)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


@pytest.fixture
def setup() -> tuple[MoeDispatch, list[RankContext], list[np.ndarray]]:
    cfg = RunConfig.build(experiments=["moe-dispatch"], pattern="all-to-all", seed=5,
                          tokens=("3", "16"), topk=("4",), experts=16, hidden=64,
                          sm_cap=("8",), rounds=1, backend=("gdaki",), iters=2, warmup=1,
                          landing_bytes=1 << 20)  # fmt: skip
    exp = MoeDispatch.from_config(cfg, _HostDispatcher, NoParams())
    assert isinstance(exp, MoeDispatch)
    exp.check_rank(traffic("all-to-all", 0, WORLD))
    ctxs, land = _contexts(exp, cfg)
    return exp, ctxs, land


def test_a_faithful_dispatch_validates_everywhere(setup) -> None:
    exp, ctxs, land = setup
    for point in exp.points():
        results = _run(point, exp, ctxs)
        for r, res in enumerate(results):
            assert not isinstance(res, BaseException), res
            c = exp.cell(WORLD, point["tokens"], point["topk"])
            assert res.results["received_tokens"] == int(c.counts[:, r * 4 : r * 4 + 4].sum())
            assert res.results["routing_digest"] == c.digest
            assert res.results["dispatch_descriptors"] == 7
            assert res.results["combine_max_abs_err"] == 0.0
            assert set(res.samples) == {"send_ns", "recv_ns", "exposed_ns", "wait_ns"}
            assert (res.samples["exposed_ns"] == 3000).all() and res.role == "both"
        # the harness's landing check: every source's pieces match, count words back to zero
        for r, ctx in enumerate(ctxs):
            for s in ctx.traffic.neighbours:
                sent = pattern_bytes(ctx.cfg.seed, 0, s, ctx.layout.region_bytes)
                pieces = exp.expected_landing(ctx, point, s, sent, ctx.layout)
                assert pieces
                base = ctx.layout.region_offset(ctx.traffic, s)
                for off, want in pieces:
                    got = land[r][base + off : base + off + want.size]
                    assert np.array_equal(got, want), (point["tokens"], r, s, off)


def test_the_work_lays_out_lanes_slices_and_the_self_area(setup) -> None:
    exp, ctxs, _ = setup
    point = exp.points()[-1]
    ctx = ctxs[1]
    work = exp.work(ctx, exp.dispatch_plan(WORLD, point))
    el, sb, T = 4, 128, point["tokens"]
    assert work.slot_bytes == sb and work.counter_offset == 16 * sb  # T_max = 16 slots
    assert set(work.lanes) == set(work.recv) == {0, 2, 3}
    for d, lanes in work.lanes.items():
        assert len(lanes) == el
        for e, lane in enumerate(lanes):
            assert lane.qp == f"qp1->{d}.{e}" and lane.src == work.staging
            # the peer's landing slice for (rank 1, local expert e)
            theirs = ctxs[d]
            assert lane.dst == theirs.landing_from(1, e)
            assert lane.dst.length >= work.counter_offset + 8
    src = ctx.res.src
    assert work.tokens_src.addr == src.addr and work.tokens_src.length == T * sb
    assert work.staging.addr == src.addr + T * sb
    ends = [b.addr + b.length for b in work.self_recv]
    assert work.self_recv[0].addr >= src.addr + 2 * 16 * sb and max(ends) <= src.addr + src.length
    assert work.barrier is not None and work.expert_major is None


@pytest.mark.parametrize(("fault", "match"), [("drop", "expert-major tokens wrong|count"),
                                              ("count", "count words wrong")])  # fmt: skip
def test_a_faulty_dispatch_fails_the_point(setup, fault: str, match: str) -> None:
    exp, ctxs, _ = setup
    _HostDispatcher.fault = fault
    try:
        results = _run(exp.points()[-1], exp, ctxs)
    finally:
        _HostDispatcher.fault = None
    errors = [r for r in results if isinstance(r, ValidationError)]
    assert errors, results
    assert any(re.search(match, str(e)) for e in errors), errors
