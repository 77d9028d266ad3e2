"""Bring-up under mpiexec -n 2 and -n 4: every rank reaches every peer over RC and DC."""

from __future__ import annotations

import pytest

from gicbench.bootstrap.bringup import bring_up
from gicbench.bootstrap.collective import JobFailure, Phase
from gicbench.bootstrap.topology import Topology
from gicbench.config import RunConfig
from gicbench.fabric.base import QpState

pytestmark = pytest.mark.mpi(min_size=2)


@pytest.fixture
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def test_rc_and_dc_bring_up(comm) -> None:
    cfg = RunConfig(qps_per_peer=3, dcis=2, dcts=2, progress="inline")
    topo = Topology.from_comm(comm)
    job = comm.bcast("bu" + str(id(cfg) % 10000) if comm.rank == 0 else None)
    fabric, res, stats = bring_up(cfg, topo, comm, job)
    try:
        peers = [p for p in range(comm.size) if p != comm.rank]
        assert sorted(res.rc) == peers
        for p in peers:
            assert len(res.rc[p]) == 3
            assert all(fabric.qp_state(qp) == QpState.RTS for qp in res.rc[p])
            assert res.peer_landing[p].rkey != 0
            assert len(res.peer_dcts[p]) == 2
        assert all(fabric.qp_state(d) == QpState.RTS for d in res.dcis)
        # QPNs are unique across the node (rank in the high bits)
        qpns = comm.allgather([qp.qpn for qps in res.rc.values() for qp in qps])
        flat = [q for lst in qpns for q in lst]
        assert len(flat) == len(set(flat)) == comm.size * (comm.size - 1) * 3
        assert stats.rc_qps == 3 * (comm.size - 1)
        assert stats.seconds > 0 and stats.qps_per_second > 0
    finally:
        comm.Barrier()
        fabric.close()


def test_failure_on_one_rank_reaches_every_rank(comm) -> None:
    with pytest.raises(JobFailure) as e, Phase(comm, "test phase"):
        if comm.rank == comm.size - 1:
            raise RuntimeError("injected")
    assert e.value.failures == [(comm.size - 1, "RuntimeError: injected")]
    assert f"rank {comm.size - 1}: RuntimeError: injected" in str(e.value)
