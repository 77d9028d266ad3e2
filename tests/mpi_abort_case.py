"""Run by tests/test_mpi_abort.py under mpiexec (not collected: no test_ prefix): one rank fails
before a collective the other waits in (GICBENCH_ABORT_CASE=fail), or every rank passes."""

from __future__ import annotations

import os

import pytest


@pytest.mark.mpi(min_size=2)
def test_one_rank_fails_before_a_collective():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    if os.environ.get("GICBENCH_ABORT_CASE") == "fail":
        assert comm.rank != 1, "rank 1 fails before the barrier"
    comm.Barrier()
