"""mini-proxy end to end under mpiexec (-n 2, -n 3) on the emulated NIC with host producers:
single-op, proxy-rate, loaded-rtt and payload through --submitter proxy, payloads validated on
every receiving rank; a failing rank ends the job with a message naming it."""

from __future__ import annotations

import numpy as np
import pytest

from gicbench import _native, harness
from gicbench.config import RunConfig
from gicbench.patterns import traffic
from gicbench.trace import open_run

pytestmark = pytest.mark.mpi(min_size=2)

PROXY = {"submitter": "proxy", "precondition_s": 0.0}


def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run_and_open(**kw):
    cfg = RunConfig.build(progress="inline", quiet=True, **PROXY, **kw)
    rc = harness.run(cfg)
    comm().Barrier()
    assert rc == 0
    assert _native.proxy.live_rings() == 0  # every engine unmapped its rings
    return open_run(cfg.out)


def check(run, world: int) -> None:
    assert run.status == "complete", run.problems
    assert sorted(r.rank for r in run.ranks) == list(range(world))
    for r in run.ranks:
        assert r.attrs["submitter"] == "proxy"
        for pt in r.points():
            assert pt.results["validated"] is True
            t = traffic("pairs", r.rank, world)
            if t.receives_from:
                assert pt.results["validated_bytes"] > 0


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_single_op(shared_dir, handoff) -> None:
    world = comm().size
    run = run_and_open(
        experiments=["single-op"],
        out=shared_dir / f"single-{handoff}",
        min_size=8,
        max_size=64,
        size_factor=8,
        iters=40,
        warmup=5,
        handoff=handoff,
    )
    check(run, world)
    for r in run.ranks:
        t = traffic("pairs", r.rank, world)
        for pt in r.points():
            if t.sends:
                (metric,) = pt.metrics
                s = r.samples(pt.index, metric)
                assert s.size == 40 and (s > 0).all()
                # the workers' cores and clock state, as proxy-rate records them (workers.py)
                assert pt.results["worker_cores"] and pt.results["precondition"] == "cold"


def test_proxy_rate(shared_dir) -> None:
    world = comm().size
    run = run_and_open(
        experiments=["proxy-rate"],
        out=shared_dir / "rate",
        messages=2000,
        warmup=20,
        sweep_workers="1,2",
        sweep_rings="4",
        sweep_batch="1,16",
    )
    check(run, world)
    for r in run.ranks:
        t = traffic("pairs", r.rank, world)
        pts = list(r.points())
        assert len(pts) == 4
        for pt in pts:
            if t.sends:
                assert pt.results["messages"] == 2000 * pt.params["producers"]
                delta = pt.counters_after["wqes"] - pt.counters_before["wqes"]
                assert delta == 2020 * pt.params["producers"]
                assert pt.results["wqes_per_doorbell"] <= pt.params["batch"]
                assert pt.results["worker_cores"]


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_loaded_rtt(shared_dir, handoff) -> None:
    world = comm().size
    queue = ("shared", "reserved") if handoff == "baseline" else ("reserved",)
    run = run_and_open(
        experiments=["loaded-rtt"],
        out=shared_dir / f"loaded-{handoff}",
        iters=50,
        warmup=5,
        handoff=handoff,
        workers=2,
        rings=4,
        background=2,
        queue=queue,
        batch=8,
    )
    check(run, world)
    for r in run.ranks:
        t = traffic("pairs", r.rank, world)
        pts = list(r.points())
        assert [p.params["queue"] for p in pts] == list(queue)
        for pt in pts:
            if t.sends:
                s = r.samples(pt.index, "rtt_ns")
                assert s.size == 50 and (s > 0).all()
            if t.role != "idle":
                assert pt.results["background_messages"] >= 0


def test_payload(shared_dir) -> None:
    world = comm().size
    run = run_and_open(
        experiments=["payload"],
        out=shared_dir / "payload",
        min_size=8,
        max_size=16384,
        size_factor=8,
        point_bytes=1 << 20,
        messages=400,
        warmup=10,
        workers=1,
        rings=2,
    )
    check(run, world)
    for r in run.ranks:
        if traffic("pairs", r.rank, world).sends:
            sizes = [p.params["size"] for p in r.points()]
            assert sizes == [8, 64, 512, 4096]
            assert all(np.isfinite(p.results["gbps"]) for p in r.points())


def test_defaults_derive_the_rings_a_pattern_needs(shared_dir) -> None:
    """mini-proxy's defaults run as given: loaded-rtt takes the probe's ring and one per
    background producer (and, with the tuned handoff, only the reserved probe), and a rate loop
    over all-to-all (-q x the other ranks' lanes) a ring per lane. Both were refused at point
    0, after the run directory and the NIC existed, with `invalid rings (--rings)=1`."""
    world = comm().size
    run = run_and_open(experiments=["loaded-rtt"], out=shared_dir / "loaded-defaults",
                       iters=30, warmup=3)  # fmt: skip
    check(run, world)
    for r in run.ranks:
        pts = list(r.points())
        assert [p.params["queue"] for p in pts] == ["reserved"]
        assert all(p.params["rings"] == 5 and p.params["workers"] == 1 for p in pts)
    run = run_and_open(
        experiments=["payload", "msg-rate"],
        pattern="all-to-all",
        out=shared_dir / "a2a-defaults",
        min_size=8,
        max_size=64,
        size_factor=8,
        point_bytes=1 << 16,
        messages=200,
        warmup=5,
    )
    assert run.status == "complete", run.problems
    for r in run.ranks:
        for pt in r.points():
            assert pt.results["validated"] is True and pt.results["validated_bytes"] > 0
