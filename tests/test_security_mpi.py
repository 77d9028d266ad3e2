"""Where gicbench launches MPI ranks on one node (the Makefile's MPIEXEC, sweep points, the
single-node job scripts), Open MPI's ranks talk over shared memory only and open no TCP
listener; a setting the user made is kept, and a job spanning nodes is left alone."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from launching import MPI_ENV, mpiexec_path

import gicbench.sweep.runner as runner
from gicbench.cli.jobs import RenderOptions, render
from gicbench.sweep import parse_spec_text

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"
SPEC = """
experiment = "msg-rate"
ranks = 2
[run]
messages = 2000
qps = 2
quiet = true
"""


class _Proc:
    pid = 4_194_305  # no such process: end_session finds nothing of it

    def wait(self, timeout: float | None = None) -> int:
        return 2


def _point_env(monkeypatch, tmp_path: Path, **environ: str) -> dict[str, str]:
    """The environment a sweep point's launcher gets (Popen recorded, nothing launched)."""
    seen: dict[str, str] = {}

    def popen(cmd, **kw):
        seen.update(kw.get("env") or os.environ)
        return _Proc()

    for k in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "OMPI_MCA_btl", "OMPI_MCA_pml"):
        monkeypatch.delenv(k, raising=False)
    for k, v in environ.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    runner.run_sweep(parse_spec_text(SPEC), tmp_path / "sweep", say=lambda _s: None)
    return seen


def test_sweep_points_on_one_node_use_shared_memory_only(monkeypatch, tmp_path: Path) -> None:
    env = _point_env(monkeypatch, tmp_path)
    assert env.get("OMPI_MCA_btl") == "self,vader" and env.get("OMPI_MCA_pml") == "ob1"


def test_sweep_keeps_the_users_mpi_settings_and_leaves_multi_node_alone(
    monkeypatch, tmp_path: Path
) -> None:
    env = _point_env(monkeypatch, tmp_path / "a", OMPI_MCA_btl="self,vader,tcp")
    assert env["OMPI_MCA_btl"] == "self,vader,tcp"
    env = _point_env(monkeypatch, tmp_path / "b", SLURM_JOB_NUM_NODES="2")
    assert "OMPI_MCA_btl" not in env and "OMPI_MCA_pml" not in env


def test_single_node_job_scripts_restrict_mpi_and_multi_node_ones_do_not() -> None:
    one = render("single-node", RenderOptions(nodes=1, launcher="mpiexec"))
    assert 'export OMPI_MCA_btl="${OMPI_MCA_btl:-self,vader}"' in one
    assert 'export OMPI_MCA_pml="${OMPI_MCA_pml:-ob1}"' in one
    many = render("multi-node", RenderOptions(nodes=2, launcher="mpiexec"))
    assert "OMPI_MCA_btl" not in many


def test_makefile_mpiexec_restricts_mpi_to_shared_memory() -> None:
    text = MAKEFILE.read_text()
    m = re.search(r"^MPIEXEC\s*=\s*(.*)$", text, re.MULTILINE)
    assert m is not None
    assert 'OMPI_MCA_btl="$${OMPI_MCA_btl:-self,vader}"' in m.group(1)
    assert 'OMPI_MCA_pml="$${OMPI_MCA_pml:-ob1}"' in m.group(1)


RANKS = r"""
import os, sys, time
from mpi4py import MPI
c = MPI.COMM_WORLD
pids = c.allgather(os.getpid())
assert c.allreduce(1) == c.size
if c.rank == 0:
    print(" ".join(map(str, pids)), flush=True)
go = sys.argv[1]
deadline = time.monotonic() + 60
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
c.barrier()
"""


def test_two_ranks_run_over_shared_memory_with_no_tcp_listener(tmp_path: Path) -> None:
    mpiexec, ss = mpiexec_path(), shutil.which("ss")
    if mpiexec is None or ss is None:
        pytest.skip("needs mpiexec (make setup) and ss (iproute2)")
    local_mpi = importlib.import_module("gicbench.sweep.local_mpi")
    env = local_mpi.local_mpi_env({**os.environ, **MPI_ENV})
    go, err = tmp_path / "go", tmp_path / "stderr"
    with err.open("w") as err_f, subprocess.Popen(
        [mpiexec, "-n", "2", sys.executable, "-c", RANKS, str(go)], env=env,
        stdout=subprocess.PIPE, stderr=err_f, text=True,
    ) as p:  # fmt: skip
        try:
            pids = p.stdout.readline().split()
            assert len(pids) == 2, err.read_text()
            listening = subprocess.run([ss, "-Hltnp"], capture_output=True, text=True).stdout
            mine = [ln for ln in listening.splitlines() if any(f"pid={q}," in ln for q in pids)]
            assert mine == [], mine
        finally:
            go.touch()
            deadline = time.monotonic() + 60
            while p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            if p.poll() is None:
                p.kill()
    assert p.returncode == 0, err.read_text()
