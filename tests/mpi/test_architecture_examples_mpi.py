"""docs/architecture.md's worked examples run end to end under mpiexec: the new experiment on
the host submitter, the new submitter through single-op; every point validated."""

from __future__ import annotations

import pytest
from architecture_examples import registered

from gicbench import harness
from gicbench.config import RunConfig
from gicbench.trace import open_run

pytestmark = pytest.mark.mpi(min_size=2)


def _run(**kw):
    from mpi4py import MPI

    cfg = RunConfig.build(progress="inline", quiet=True, **kw)
    rc = harness.run(cfg)
    MPI.COMM_WORLD.Barrier()
    assert rc == 0
    run = open_run(cfg.out)
    assert run.status == "complete", run.problems
    return run


def test_both_examples_run(shared_dir) -> None:
    with registered():
        run = _run(experiments=["batch-sweep"], out=shared_dir / "example-exp", batches=("1", "4"),
                   messages=500, warmup=5)  # fmt: skip
        for r in run.ranks:
            assert [p.params["batch"] for p in r.points()] == [1, 4]
            assert all(p.results["validated"] for p in r.points())
        run = _run(experiments=["single-op"], submitter="serial", out=shared_dir / "example-sub",
                   modes=("issue", "put_completion"), iters=50, warmup=5)  # fmt: skip
        for r in run.ranks:
            assert r.attrs["submitter"] == "serial"
            assert all(p.results["validated"] for p in r.points())
