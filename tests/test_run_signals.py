"""Signals mid-run: SIGTERM to the launcher or to one sending rank ends a
long msg-rate within seconds (it used to run until its messages ran out, ~2 minutes), and every
trace and run.json say the run is incomplete."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import h5py
import pytest
from rank_procs import rank_pid, wait_running
from rank_procs import start as start_run

LONG = ["msg-rate", "--messages", "1000000000000", "-w", "0", "--quiet"]


def start(out: Path) -> subprocess.Popen:
    return start_run(out, LONG)


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


@pytest.mark.parametrize("submitter", ["host", "proxy"])
def test_sigterm_ends_a_long_connection_cycle(tmp_path: Path, submitter: str) -> None:
    """active-connections' cycle loops (the host's native loop, mini-proxy's producers and
    workers) end within seconds of a signal, the run marked incomplete."""
    out = tmp_path / "run"
    args = ["active-connections", "--active", "16", "--messages", "1000000000000", "--passes",
            "1", "--threads", "2", "--batch", "16", "--quiet", "--submitter", submitter,
            "--progress", "inline"]  # fmt: skip
    proc = start_run(out, args)
    wait_running(out, proc)
    proc.send_signal(signal.SIGTERM)
    err = ended_incomplete(out, proc, within=30)
    assert "Traceback" not in err
