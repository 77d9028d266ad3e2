"""Shared fixtures: a run directory that every rank of an MPI test sees."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def shared_dir(tmp_path_factory):
    """A directory common to every rank of an MPI test (rank 0 makes it, all receive its path)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    path = str(tmp_path_factory.mktemp("run")) if comm.rank == 0 else None
    return Path(comm.bcast(path, root=0))
