"""Bring-up under mpiexec -n 2 and -n 4: every rank reaches every peer over RC and DC."""

from __future__ import annotations

import secrets

import pytest

from gicbench.bootstrap.bringup import bring_up
from gicbench.bootstrap.collective import JobFailure, Phase
from gicbench.bootstrap.topology import Topology
from gicbench.config import RunConfig
from gicbench.fabric.base import QpState
from gicbench.patterns import traffic
from gicbench.plan import make_plan

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _open(comm, pattern: str, **kw):
    plan = make_plan(RunConfig.build(pattern=pattern, progress="inline", **kw))
    topo = Topology.from_comm(comm)
    t = traffic(pattern, topo.rank, topo.size)
    fplan = plan.fabric_plan(topo, len(t.neighbours), plan.layout(topo.size))
    settings = plan.provider.preflight(fplan, topo, plan.probes)
    job = comm.bcast("bu" + secrets.token_hex(3) if comm.rank == 0 else None)
    fabric = plan.provider.open(fplan, topo, job, settings)
    return fabric, fplan, topo, t


@pytest.mark.parametrize("pattern", ["all-to-all", "pairs"])
def test_rc_and_dc_bring_up(comm, pattern) -> None:
    fabric, fplan, topo, t = _open(
        comm, pattern, experiments=["msg-rate"], transport="dc", qps=2, qps_per_peer=3, dcts=2
    )
    try:
        res, stats = bring_up(fabric, fplan, *fplan.mr_sizes, topo, comm, t)
        # RC QPs only towards the pattern's neighbours, not a full mesh
        assert sorted(res.rc) == list(t.neighbours)
        for p in t.neighbours:
            assert len(res.rc[p]) == 3
            assert all(fabric.qp_state(qp) == QpState.RTS for qp in res.rc[p])
            assert res.peer_landing[p].rkey != 0
            assert len(res.peer_dcts[p]) == 2
        assert len(res.dcis) == 2 * len(t.neighbours)  # a DCI slice per destination
        assert all(fabric.qp_state(d) == QpState.RTS for d in res.dcis)
        # QPNs are unique across the node (rank in the high bits)
        qpns = comm.allgather([qp.qpn for qps in res.rc.values() for qp in qps])
        flat = [q for lst in qpns for q in lst]
        assert len(flat) == len(set(flat))
        assert stats.rc_qps == 3 * len(t.neighbours)
        assert stats.seconds > 0 and stats.qps_per_second > 0
    finally:
        comm.Barrier()
        fabric.close()


def test_no_dc_objects_without_dc(comm) -> None:
    fabric, fplan, topo, t = _open(comm, "pairs", experiments=["single-op"])
    try:
        res, stats = bring_up(fabric, fplan, *fplan.mr_sizes, topo, comm, t)
        assert res.dcis == [] and res.dcts == [] and stats.dcis == stats.dcts == 0
    finally:
        comm.Barrier()
        fabric.close()


def test_failure_on_one_rank_reaches_every_rank(comm) -> None:
    with pytest.raises(JobFailure) as e, Phase(comm, "test phase"):
        if comm.rank == comm.size - 1:
            raise RuntimeError("injected")
    assert e.value.failures == [(comm.size - 1, "RuntimeError: injected")]
    assert f"rank {comm.size - 1}: RuntimeError: injected" in str(e.value)
