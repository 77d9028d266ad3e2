"""Both experiments end to end under mpiexec (-n 2 and -n 4), and what their traces hold."""

from __future__ import annotations

import numpy as np
import pytest

from gicbench import harness
from gicbench.config import RunConfig
from gicbench.errors import ConfigError
from gicbench.trace import open_run

pytestmark = pytest.mark.mpi(min_size=2)


def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run_and_open(cfg: RunConfig):
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
def test_single_op(shared_dir, transport, payload, scope) -> None:
    out = shared_dir / f"single-{transport}-{payload}"
    cfg = RunConfig(
        experiments=["single-op"],
        min_size=8,
        max_size=64,
        size_factor=8,
        iters=50,
        warmup=5,
        transport=transport,
        payload=payload,
        scope=scope,
        qps=2,
        progress="inline",
        out=out,
        quiet=True,
    )
    run = run_and_open(cfg)
    world = comm().size
    check_common(run, world)
    for r in run.ranks:
        points = list(r.points())
        assert len(points) == 2 * 3  # sizes x (issue, put+completion, round trip)
        for pt in points:
            assert pt.params["transport"] == transport
            assert pt.results["validated"] is True
            if r.rank % 2 == 0:  # senders hold one sample per iteration
                (metric,) = pt.metrics
                samples = r.samples(pt.index, metric)
                assert samples.dtype == np.int64 and samples.size == 50
                assert (samples > 0).all()
            else:
                assert pt.metrics == []
            # the NIC really executed the work: counters moved on senders
            if r.rank % 2 == 0:
                assert pt.counters_after["wqes"] - pt.counters_before["wqes"] >= 55


def test_msg_rate(shared_dir) -> None:
    out = shared_dir / "msg-rate"
    cfg = RunConfig(
        experiments=["msg-rate"],
        min_size=8,
        max_size=32,
        size_factor=4,
        messages=5000,
        warmup=100,
        qps=4,
        threads=2,
        batch=8,
        progress="inline",
        out=out,
        quiet=True,
    )
    run = run_and_open(cfg)
    check_common(run, comm().size)
    for r in run.ranks:
        for pt in r.points():
            assert pt.results["validated"] is True
            if r.rank % 2 == 0:
                assert pt.results["messages"] == 2 * 5000
                assert pt.results["msg_rate_mps"] > 0
                windows = r.samples(pt.index, "window_ns")
                assert windows.size >= 2 * 20  # 20 windows per thread
                delta = pt.counters_after["wqes"] - pt.counters_before["wqes"]
                assert delta == 2 * (5000 + 100)
                # batching: one doorbell per 8 WQEs
                assert pt.results["doorbells"] == 2 * -(-(5000 + 100) // 8)


def test_bad_input_fails_on_every_rank_before_resources(shared_dir) -> None:
    with pytest.raises(ConfigError, match="min_size"):
        harness.run(
            RunConfig(experiments=["single-op"], min_size=4, max_size=4, out=shared_dir / "never")
        )
    assert not (shared_dir / "never").exists()
