"""Experiments end to end under mpiexec (-n 2, -n 3, -n 4) on every traffic pattern, and what
their traces hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from gicbench import harness
from gicbench.config import RunConfig
from gicbench.errors import ConfigError
from gicbench.experiments import registry
from gicbench.experiments.registry import Column, Experiment, PointResult
from gicbench.patterns import traffic
from gicbench.submit.base import Shape
from gicbench.trace import open_run

pytestmark = pytest.mark.mpi(min_size=2)


def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run_and_open(**kw):
    cfg = RunConfig.build(progress="inline", quiet=True, **kw)
    rc = harness.run(cfg)
    comm().Barrier()
    assert rc == 0
    return open_run(cfg.out)


def check_common(run, world: int) -> None:
    assert run.status == "complete", run.problems
    assert not run.problems
    assert sorted(r.rank for r in run.ranks) == list(range(world))
    for r in run.ranks:
        assert r.attrs["status"] == "complete"
        assert r.attrs["provider"] == "emu" and r.attrs["submitter"] == "host"


@pytest.mark.parametrize(
    ("transport", "payload", "scope"),
    [("rc", "inline", "selected"), ("rc", "pointer", "all"), ("dc", "inline", "all")],
)
def test_single_op_pairs(shared_dir, transport, payload, scope) -> None:
    world = comm().size
    run = run_and_open(
        experiments=["single-op"],
        out=shared_dir / f"single-{transport}-{payload}",
        min_size=8,
        max_size=64,
        size_factor=8,
        iters=50,
        warmup=5,
        transport=transport,
        payload=payload,
        scope=scope,
        qps=2,
    )
    check_common(run, world)
    for r in run.ranks:
        t = traffic("pairs", r.rank, world)
        points = list(r.points())
        assert len(points) == 2 * 3  # sizes x (issue, put+completion, round trip)
        for pt in points:
            assert pt.params["transport"] == transport
            assert pt.results["validated"] is True
            assert pt.results["role"] == t.role
            if t.sends:  # senders hold one sample per iteration
                (metric,) = pt.metrics
                samples = r.samples(pt.index, metric)
                assert samples.dtype == np.int64 and samples.size == 50
                assert (samples > 0).all()
                # the NIC really executed the work: counters moved on senders
                assert pt.counters_after["wqes"] - pt.counters_before["wqes"] >= 55
            else:
                assert pt.metrics == []
            if t.receives_from:  # requests land here and were compared byte for byte
                assert pt.results["validated_sources"] == list(t.receives_from)
                assert pt.results["validated_bytes"] >= pt.params["size"]
            if t.role == "idle":  # an odd world's last rank
                assert pt.results["validated_bytes"] == 0


@pytest.mark.parametrize("pattern", ["all-to-all", "fan-in", "fan-out"])
def test_msg_rate_every_pattern_validates_every_source(shared_dir, pattern) -> None:
    world = comm().size
    run = run_and_open(
        experiments=["msg-rate"],
        pattern=pattern,
        out=shared_dir / f"rate-{pattern}",
        min_size=8,
        max_size=32,
        size_factor=4,
        messages=3000,
        warmup=50,
        qps=2,
        threads=2,
        batch=4,
    )
    check_common(run, world)
    for r in run.ranks:
        t = traffic(pattern, r.rank, world)
        assert r.attrs["role"] == t.role
        for pt in r.points():
            assert pt.results["validated"] is True
            # every source's region at this rank was compared with what that source sent
            assert pt.results["validated_sources"] == sorted(t.receives_from)
            if t.sends:
                assert pt.results["messages"] == 2 * 3000
                assert pt.results["destinations"] == len(t.sends_to)
                delta = pt.counters_after["wqes"] - pt.counters_before["wqes"]
                assert delta == 2 * (3000 + 50)
                assert pt.results["doorbells"] == 2 * -(-(3000 + 50) // 4)


@pytest.mark.parametrize("pattern", ["fan-in", "fan-out", "all-to-all"])
def test_single_op_one_way_patterns(shared_dir, pattern) -> None:
    world = comm().size
    run = run_and_open(
        experiments=["single-op"],
        pattern=pattern,
        modes=("issue", "put_completion"),
        out=shared_dir / f"single-{pattern}",
        iters=40,
        warmup=4,
    )
    check_common(run, world)
    for r in run.ranks:
        t = traffic(pattern, r.rank, world)
        for pt in r.points():
            assert pt.results["validated"] is True
            assert pt.results["validated_sources"] == sorted(t.receives_from)
            if t.sends:  # one after another: iters samples per destination
                (metric,) = pt.metrics
                assert r.samples(pt.index, metric).size == 40 * len(t.sends_to)


def test_msg_rate_pairs(shared_dir) -> None:
    world = comm().size
    run = run_and_open(
        experiments=["msg-rate"],
        out=shared_dir / "msg-rate",
        min_size=8,
        max_size=32,
        size_factor=4,
        messages=5000,
        warmup=100,
        qps=4,
        threads=2,
        batch=8,
    )
    check_common(run, world)
    for r in run.ranks:
        for pt in r.points():
            assert pt.results["validated"] is True
            if traffic("pairs", r.rank, world).sends:
                assert pt.results["messages"] == 2 * 5000
                assert pt.results["msg_rate_mps"] > 0
                windows = r.samples(pt.index, "window_ns")
                assert windows.size >= 2 * 20  # 20 windows per thread
                delta = pt.counters_after["wqes"] - pt.counters_before["wqes"]
                assert delta == 2 * (5000 + 100)
                # batching: one doorbell per 8 WQEs
                assert pt.results["doorbells"] == 2 * -(-(5000 + 100) // 8)


@dataclass(frozen=True)
class _NoParams:
    pass


class _NothingLands(Experiment):
    """A point after which nothing is expected anywhere: it must not read as validated."""

    name = "test-nothing-lands"
    summary = "test only"
    method = "test"
    Params = _NoParams
    shapes = frozenset({Shape.LATENCY})

    @property
    def max_message(self) -> int:
        return 8

    def points(self) -> list[dict[str, Any]]:
        return [{"size": 8}]

    def run_point(self, ctx, point) -> PointResult:
        return PointResult(role=ctx.traffic.role)

    def columns(self) -> list[Column]:
        return [Column("size(B)", "size", "{:d}")]


def test_validated_is_false_when_nothing_was_compared(shared_dir) -> None:
    """`validated` was set true even where no expected landing existed."""
    if _NothingLands.name not in registry.names():
        registry.register(_NothingLands)
    run = run_and_open(experiments=[_NothingLands.name], out=shared_dir / "nothing")
    for r in run.ranks:
        (pt,) = r.points()
        assert pt.results["validated"] is False and pt.results["validated_bytes"] == 0


def test_bad_input_fails_on_every_rank_before_resources(shared_dir) -> None:
    with pytest.raises(ConfigError, match="min_size"):
        harness.run(
            RunConfig.build(experiments=["single-op"], min_size=4, out=shared_dir / "never")
        )
    assert not (shared_dir / "never").exists()
