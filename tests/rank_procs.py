"""A gicbench job started in the background, its ranks' processes, and what it left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import h5py
import pytest
from launching import MPI_ENV, mpiexec_path

from gicbench.trace.schema import decode_attrs


def start(out: Path, args: list[str], ranks: int = 2) -> subprocess.Popen:
    """`mpiexec -n RANKS gicbench run ARGS -o OUT` in the background, output captured."""
    exe = mpiexec_path()
    if exe is None:
        pytest.skip("no mpiexec (run `make setup`)")
    cmd = [exe, "-n", str(ranks), sys.executable, "-m", "gicbench", "run", *args, "-o", str(out)]
    return subprocess.Popen(
        cmd,
        env={**os.environ, **MPI_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_running(out: Path, proc: subprocess.Popen, ranks: int = 2) -> None:
    """Until every rank is inside the first point (rank files open, the loop running)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"run ended early: {proc.communicate()}")
        if len(list(out.glob("rank-*.h5.partial"))) == ranks:
            time.sleep(2.0)  # bring-up done, the loops are running
            return
        time.sleep(0.1)
    pytest.fail("the run never started")


def rank_pid(out: Path, rank: int) -> int:
    """The process of `rank` in the run writing `out` (from /proc: its argv and launcher env)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            b"gicbench" in argv
            and str(out).encode() in argv
            and (f"OMPI_COMM_WORLD_RANK={rank}".encode() in env)
        ):
            return int(entry.name)
    pytest.fail(f"no process for rank {rank}")


def manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "run.json").read_text())


def rank_failures(out: Path, ranks: int) -> dict[int, str]:
    """Every rank's finished trace: status incomplete, and the reason it gives."""
    reasons = {}
    for r in range(ranks):
        path = out / f"rank-{r:05d}.h5"
        assert path.exists(), f"rank {r} left no finished trace: {sorted(os.listdir(out))}"
        with h5py.File(path) as h:
            attrs = decode_attrs(h.attrs)  # text attributes are fixed-length bytes on disk
            assert attrs["status"] == "incomplete", (r, attrs)
            reasons[r] = str(attrs.get("failure", ""))
    return reasons
