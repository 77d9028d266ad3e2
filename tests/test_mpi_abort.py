"""An MPI test failing on one rank ends the whole run with the failure shown (conftest's abort
hook) instead of leaving the other ranks blocked in a collective."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from launching import MPI_ENV, mpiexec_path

CASE = Path(__file__).with_name("mpi_abort_case.py")


def _run_case(case: str) -> subprocess.CompletedProcess:
    mpiexec = mpiexec_path()
    if mpiexec is None:
        pytest.skip("no mpiexec (run `make setup`)")
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "pytest", "--with-mpi", "-q",
           "-p", "no:cacheprovider", "--rootdir", str(CASE.parent.parent), str(CASE)]  # fmt: skip
    env = {**os.environ, **MPI_ENV, "GICBENCH_ABORT_CASE": case}
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=150, env=env,
                              cwd=CASE.parent.parent, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the MPI run hung (no abort after one rank failed): {e.stdout}\n{e.stderr}")


def test_a_failing_rank_aborts_every_rank():
    r = _run_case("fail")
    assert r.returncode != 0
    assert "[rank 1 of 2]" in r.stderr and "aborting every rank" in r.stderr
    assert "rank 1 fails before the barrier" in r.stderr


def test_a_passing_run_is_not_aborted():
    r = _run_case("pass")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "aborting" not in r.stderr
