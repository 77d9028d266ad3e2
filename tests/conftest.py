"""Shared fixtures: a run directory that every rank of an MPI test sees."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# The rank of this pytest process when an MPI launcher started it (Open MPI, MPICH/PMI, Slurm).
_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def pytest_configure(config: pytest.Config) -> None:
    """Under mpiexec every rank is its own pytest: give each its own base temporary directory.
    With the default one, ranks create and prune numbered directories in one place at once, and
    a rank's pruning met a directory another had just removed (an unclosed scandir iterator at
    exit, an error under filterwarnings=error: make test failed once on CI's 2 cores)."""
    rank = next((os.environ[v] for v in _RANK_VARS if v in os.environ), None)
    if rank is not None and config.option.basetemp is None:
        base = Path(tempfile.gettempdir()) / f"pytest-mpi-{os.getuid()}"
        base.mkdir(mode=0o700, exist_ok=True)  # pytest makes (and first empties) only the last part
        config.option.basetemp = str(base / f"rank{rank}")


@pytest.fixture
def shared_dir(tmp_path_factory):
    """A directory common to every rank of an MPI test (rank 0 makes it, all receive its path)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    path = str(tmp_path_factory.mktemp("run")) if comm.rank == 0 else None
    return Path(comm.bcast(path, root=0))
