"""Every mini-proxy experiment with `--producer gpu` through the harness under mpiexec, the GPU
producer kernels built for the CPU (tests/proxy_gpu_cpu.py): the harness validates what the
kernels make land against each experiment's expected_landing, as on the device (where only
the GPU's memory ordering differs). The device run of single-op that failed validation (the
kernel did not stamp the sequence) is what this would have caught."""

from __future__ import annotations

import pytest
from proxy_gpu_cpu import compiler, install

from gicbench import _native, harness
from gicbench.config import RunConfig
from gicbench.patterns import traffic
from gicbench.trace import open_run

pytestmark = [
    pytest.mark.mpi(min_size=2),
    pytest.mark.skipif(compiler() is None, reason="needs a C++ compiler"),
]


def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


SMALL = {"min_size": 8, "max_size": 64, "size_factor": 8}
CASES = {
    "single-op": {"iters": 30, "warmup": 5, "qps": 2, **SMALL},
    "completion-scope": {"iters": 30, "warmup": 5, "qps": 3},
    "proxy-rate": {
        "messages": 400,
        "warmup": 10,
        "sweep_workers": "1,2",
        "sweep_rings": "4",
        "sweep_batch": "1,16",
        **SMALL,
    },
    "msg-rate": {
        "messages": 400,
        "warmup": 10,
        "qps": 2,
        "threads": 2,
        "workers": 2,
        "rings": 4,
        "batch": 4,
        **SMALL,
    },
    "payload": {
        "messages": 200,
        "warmup": 10,
        "qps": 2,
        "workers": 2,
        "rings": 2,
        "max_size": 4096,
        "size_factor": 64,
        "point_bytes": 1 << 16,
    },
    "active-connections": {
        "active": ("3", "8"),
        "writes_per_visit": 4,
        "batch": 2,
        "messages": 200,
        "passes": 1,
        "threads": 2,
        "workers": 2,
    },
    "loaded-rtt": {
        "iters": 30,
        "warmup": 5,
        "workers": 2,
        "rings": 4,
        "background": 3,
        "batch": 4,
        "queue": ("reserved",),
        **SMALL,
    },
}


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
@pytest.mark.parametrize("experiment", list(CASES))
def test_gpu_producers_validate_through_the_harness(
    shared_dir, tmp_path, monkeypatch, experiment, handoff
) -> None:
    install(monkeypatch, tmp_path)
    kw = dict(CASES[experiment])
    if experiment == "loaded-rtt" and handoff == "baseline":
        kw["queue"] = ("shared", "reserved")
    out = shared_dir / f"gpucpu-{experiment}-{handoff}"
    cfg = RunConfig.build(
        experiments=[experiment],
        submitter="proxy",
        producer="gpu",
        handoff=handoff,
        precondition_s=0.0,
        progress="inline",
        quiet=True,
        out=out,
        **kw,
    )
    assert harness.run(cfg) == 0
    comm().Barrier()
    assert _native.proxy.live_rings() == 0
    run = open_run(cfg.out)
    assert run.status == "complete", run.problems
    world = comm().size
    for r in run.ranks:
        assert r.attrs["submitter_params"]["producer"] == "gpu"
        points = list(r.points())
        assert points
        for pt in points:
            assert pt.results["validated"] is True
            if traffic("pairs", r.rank, world).receives_from:
                assert pt.results["validated_bytes"] > 0
