"""Shared fixtures: a run directory that every rank of an MPI test sees."""

from __future__ import annotations

import os
import sys
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """An MPI test that fails on one rank aborts every rank. The others are in (or will reach)
    a collective the failed rank never enters, and a rank blocked inside MPI never sees
    pytest-timeout's signal: without the abort the run hangs until the CI's limit, its failure
    unreported."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker("mpi") is not None:
        _abort_world(item.nodeid, report)


def _abort_world(nodeid: str, report: pytest.TestReport) -> None:
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return
    comm = mpi.COMM_WORLD
    if comm.Get_size() < 2:
        return
    # fd 2 itself: pytest's capture is suspended between phases, but sys.stderr may be replaced
    text = (
        f"\n[rank {comm.Get_rank()} of {comm.Get_size()}] {nodeid} failed ({report.when}); "
        f"aborting every rank so that none waits in a collective:\n{report.longreprtext}\n"
    )
    os.write(2, text.encode(errors="replace"))
    comm.Abort(1)
