"""How a test launches gicbench under MPI: `mpiexec -n N python -m gicbench ...`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

MPI_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    "PYTHONUNBUFFERED": "1",
}


def mpiexec_path() -> str | None:
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def launch(
    ranks: int,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 180,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess:
    """`mpiexec -n RANKS python -m gicbench ARGS`, output captured."""
    mpiexec = mpiexec_path()
    if mpiexec is None:
        pytest.skip("no mpiexec (run `make setup`)")
    full_env = {**os.environ, **MPI_ENV, **(env or {})}
    cmd = [mpiexec, "-n", str(ranks), sys.executable, "-m", "gicbench", *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=full_env, cwd=cwd, check=False
    )


def gicbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`python -m gicbench ARGS` without a launcher (one process), output captured."""
    return subprocess.run(
        [sys.executable, "-m", "gicbench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )
