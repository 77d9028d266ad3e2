"""A real one-node Slurm for the tests in this directory (tests/slurm/cluster.sh): started once
per session, stopped at the end whatever happened. They run with `make test-slurm` (which sets
GICBENCH_SLURM_TESTS=1); elsewhere they skip, since they install packages and start daemons."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CLUSTER = HERE / "cluster.sh"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slurm: needs the test Slurm cluster (make test-slurm)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.slurm)


@pytest.fixture(scope="session")
def slurm() -> Iterator[dict[str, str]]:
    """The environment jobs are submitted with (SLURM_CONF, the venv, MPI as root)."""
    if os.environ.get("GICBENCH_SLURM_TESTS") != "1":
        pytest.skip("Slurm tests run with `make test-slurm` (they install and start Slurm)")
    state = os.environ.get("GICBENCH_SLURM_STATE", "/tmp/gicbench-slurm")
    env = dict(
        os.environ,
        GICBENCH_SLURM_STATE=state,
        SLURM_CONF=f"{state}/slurm.conf",
        GICBENCH_VENV=str(REPO / ".venv"),
        OMPI_ALLOW_RUN_AS_ROOT="1",
        OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
        OMPI_MCA_rmaps_base_oversubscribe="1",
        PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
        PYTHONUNBUFFERED="1",
    )
    env["PATH"] = f"{REPO / '.venv/bin'}:{env['PATH']}"
    try:
        r = subprocess.run(
            [str(CLUSTER), "start"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if r.returncode != 0:
            pytest.fail(f"the test Slurm did not start:\n{r.stdout}\n{r.stderr}")
        yield env
    finally:
        subprocess.run([str(CLUSTER), "stop"], env=env, timeout=120, check=False)
