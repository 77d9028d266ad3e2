"""Signals mid-run (issue 9 row 5): SIGTERM to the launcher or to one sending rank ends a
long msg-rate within seconds (it used to run until its messages ran out, ~2 minutes), and every
trace and run.json say the run is incomplete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import pytest
from launching import MPI_ENV, mpiexec_path

LONG = ["msg-rate", "--messages", "1000000000000", "-w", "0", "--quiet"]


def start(out: Path) -> subprocess.Popen:
    exe = mpiexec_path()
    if exe is None:
        pytest.skip("no mpiexec (run `make setup`)")
    cmd = [exe, "-n", "2", sys.executable, "-m", "gicbench", "run", *LONG, "-o", str(out)]
    return subprocess.Popen(
        cmd,
        env={**os.environ, **MPI_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_running(out: Path, proc: subprocess.Popen) -> None:
    """Until both ranks are inside the first point (rank files open, msg-rate posting)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"run ended early: {proc.communicate()}")
        if len(list(out.glob("rank-*.h5.partial"))) == 2:
            time.sleep(2.0)  # bring-up done, the sender is deep in its loop
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


def ended_incomplete(out: Path, proc: subprocess.Popen, within: float) -> str:
    try:
        _, err = proc.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the job did not end within {within} s of the signal")
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["status"] == "incomplete", manifest
    for f in out.glob("rank-*.h5"):
        with h5py.File(f) as h:
            assert h.attrs["status"] == b"incomplete"  # text is fixed-length: bytes
    return err


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_the_launcher_ends_a_long_msg_rate(tmp_path: Path, sig) -> None:
    out = tmp_path / "run"
    proc = start(out)
    wait_running(out, proc)
    proc.send_signal(sig)
    err = ended_incomplete(out, proc, within=30)
    assert "Traceback" not in err


def test_sigterm_to_the_sending_rank_ends_the_job(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = start(out)
    wait_running(out, proc)
    os.kill(rank_pid(out, 0), signal.SIGTERM)  # rank 0 sends in pairs
    err = ended_incomplete(out, proc, within=30)
    assert "terminated by SIGTERM" in err
