"""MPI start-up: the rank as the launcher announces it (before MPI exists) and MPI itself."""

from __future__ import annotations

import os

_RANK_VARS = (
    "OMPI_COMM_WORLD_RANK",
    "PMIX_RANK",
    "PMI_RANK",
    "SLURM_PROCID",
    "MV2_COMM_WORLD_RANK",
)


def launcher_rank() -> int:
    """This process's rank from the launcher's environment, 0 when not launched by one. Used to
    print configuration errors once, before MPI is initialised."""
    for var in _RANK_VARS:
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                continue
    return 0


def init_mpi():  # -> MPI.Intracomm
    """Initialise MPI (thread level FUNNELED: native threads never call MPI) and return WORLD."""
    import mpi4py

    mpi4py.rc.thread_level = "funneled"
    from mpi4py import MPI

    return MPI.COMM_WORLD
