"""active-connections end to end under mpiexec (-n 2, -n 3, -n 4): every role on RC and DC with
the host submitter, and on RC through mini-proxy's workers, each point's landing validated from
every source, the traces readable, the control first in each
pass."""

from __future__ import annotations

import pytest

from gicbench import harness
from gicbench.config import RunConfig
from gicbench.experiments.active_connections import ROLE_PATTERN, shares
from gicbench.trace import open_run

pytestmark = pytest.mark.mpi(min_size=2)

GRID = ("3", "8")
PASSES = 2


def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


@pytest.mark.parametrize(
    ("submitter", "transport"),
    [("host", "rc"), ("host", "dc"), ("proxy", "rc")],
)
@pytest.mark.parametrize("role", list(ROLE_PATTERN))
def test_every_role_validates(shared_dir, role: str, submitter: str, transport: str) -> None:
    world = comm().size
    out = shared_dir / f"ac-{role}-{submitter}-{transport}"
    # mini-proxy: two workers, each owning its unit's QPs, host producers on rings 0 and 1
    extra = {"workers": 2, "precondition_s": 0.0} if submitter == "proxy" else {}
    cfg = RunConfig.build(
        experiments=["active-connections"], out=out, progress="inline", quiet=True,
        pattern=ROLE_PATTERN[role], role=role, transport=transport, active=GRID,
        writes_per_visit=4, batch=2, messages=200, passes=PASSES, threads=2,
        submitter=submitter, **extra,
    )  # fmt: skip
    rc = harness.run(cfg)
    comm().Barrier()
    assert rc == 0
    run = open_run(out)
    assert run.status == "complete", run.problems
    sh = shares(role, world, None)
    sent_any = False
    for r in run.ranks:
        points = list(r.points())
        assert len(points) == PASSES * (1 + len(GRID))
        for i, pt in enumerate(points):
            p = pt.params
            assert p["pass"] == 1 + i // (1 + len(GRID))
            assert p["control"] is (i % (1 + len(GRID)) == 0)
            assert p["connections"] == (2 if p["control"] else int(GRID[i % 3 - 1]))
            assert pt.results["validated"] is True  # bytes were compared somewhere, all equal
            mine = sh.rank_connections(r.rank, p["connections"])
            if mine:
                sent_any = True
                assert pt.results["rank_connections"] == mine
                assert pt.results["messages"] > 0 and pt.results["msg_rate_mps"] > 0
                assert r.samples(pt.index, "window_ns").size > 0
            if r.rank == 0 and role == "receive-only":  # the target checks every sender
                active = [s for s in sh.senders if sh.rank_connections(s, p["connections"])]
                assert sorted(pt.results["validated_sources"]) == active
    assert sent_any
