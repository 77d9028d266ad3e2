"""mini-proxy jobs that fail (under mpiexec -n 2): a rank that fails, a rank that dies under a
probe, a signal to the launcher during a long proxy-rate: the job ends with a message naming who
failed, its traces say incomplete, and no proxy worker keeps the job alive."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest
from launching import launch
from test_run_signals import ended_incomplete, rank_pid, wait_running

from gicbench.submit.proxy.params import ProxyParams  # noqa: F401 - the submitter is installed

BASE = ["--submitter", "proxy", "--precondition-s", "0", "--quiet"]


def test_a_rank_that_fails_ends_the_job_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = launch(
        2,
        "run",
        "proxy-rate",
        *BASE,
        "--messages",
        "2000",
        "--sweep-workers",
        "1",
        "--sweep-rings",
        "2",
        "--sweep-batch",
        "4",
        "-o",
        str(out),
        env={"GICBENCH_FAULT": "raise:1:0"},
    )
    assert r.returncode != 0
    assert "rank 1" in r.stderr and "injected fault" in r.stderr
    assert json.loads((out / "run.json").read_text())["status"] != "complete"


def test_a_rank_dying_under_the_probe_ends_the_job(tmp_path: Path) -> None:
    """The responder dies: the requester's probe (and its workers) must not wait forever."""
    out = tmp_path / "run"
    r = launch(
        2,
        "run",
        "loaded-rtt",
        *BASE,
        "--handoff",
        "baseline",
        "--rings",
        "2",
        "--background",
        "1",
        "-n",
        "100000",
        "--timeout",
        "5",
        "-o",
        str(out),
        env={"GICBENCH_FAULT": "kill:1:0"},
        timeout=120,
    )
    assert r.returncode != 0
    assert json.loads((out / "run.json").read_text())["status"] != "complete"


def test_sigterm_to_a_rank_inside_proxy_rate_ends_the_job(tmp_path: Path) -> None:
    import os
    import sys

    from launching import MPI_ENV, mpiexec_path

    exe = mpiexec_path()
    if exe is None:
        pytest.skip("no mpiexec (run `make setup`)")
    cmd = [
        exe,
        "-n",
        "2",
        sys.executable,
        "-m",
        "gicbench",
        "run",
        "proxy-rate",
        *BASE,
        "--messages",
        "1000000000",
        "-w",
        "0",
        "--sweep-workers",
        "1",
        "--sweep-rings",
        "1",
        "--sweep-batch",
        "1",
        "-o",
        str(tmp_path / "run"),
    ]
    proc = subprocess.Popen(
        cmd,
        env={**os.environ, **MPI_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_running(tmp_path / "run", proc)
    os.kill(rank_pid(tmp_path / "run", 0), signal.SIGTERM)
    err = ended_incomplete(tmp_path / "run", proc, within=30)
    assert "terminated by SIGTERM" in err
