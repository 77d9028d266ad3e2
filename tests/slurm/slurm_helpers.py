"""Submit rendered scripts with sbatch and wait for them, with the job's output on failure."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path


def sbatch(script: Path, env: dict[str, str], *opts: str) -> str:
    r = subprocess.run(
        ["sbatch", "--parsable", *opts, str(script)],
        cwd=script.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, f"sbatch {script}: {r.stderr}"
    return r.stdout.strip().split(";")[0]


def job_info(job: str, env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run(
        ["scontrol", "-o", "show", "job", job],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait(
    jobs: list[str],
    env: dict[str, str],
    timeout: float = 300,
    logs: dict[str, Path] | None = None,
) -> dict[str, dict[str, str]]:
    """Wait until every job has ended; their scontrol records (JobState, ExitCode, ...). When
    `timeout` passes first: an AssertionError with the jobs' records, squeue and the output
    (the end of gicbench-JOB.out in the directory `logs` gives for a job)."""
    deadline = time.monotonic() + timeout
    done: dict[str, dict[str, str]] = {}
    while len(done) < len(jobs):
        for j in jobs:
            if j not in done:
                info = job_info(j, env)
                if info.get("JobState") not in (
                    None,
                    "PENDING",
                    "RUNNING",
                    "CONFIGURING",
                    "COMPLETING",
                    "SUSPENDED",
                ):
                    done[j] = info
        if len(done) < len(jobs):
            if time.monotonic() > deadline:
                left = [j for j in jobs if j not in done]
                queue = subprocess.run(
                    ["squeue"], env=env, capture_output=True, text=True, timeout=30, check=False
                ).stdout
                tails = "".join(
                    f"\n--- job {j} output (end) ---\n{output(logs[j], j)[-3000:]}"
                    for j in left
                    if logs and j in logs
                )
                raise AssertionError(
                    f"jobs {left} still running after {timeout} s: "
                    + "; ".join(str(job_info(j, env)) for j in left)
                    + f"\n{queue}{tails}"
                )
            time.sleep(1)
    return done


def output(cwd: Path, job: str) -> str:
    p = cwd / f"gicbench-{job}.out"
    return p.read_text(errors="replace") if p.exists() else "(no output file)"


CALIBRATION_MESSAGES = 10_000_000


def messages_for(seconds: float, env: dict[str, str], out: Path) -> int:
    """Messages a 2-rank msg-rate point needs to last about `seconds` here, now: from one
    measured point (elapsed_ns of CALIBRATION_MESSAGES), run with mpiexec outside Slurm."""
    mpiexec = Path(sys.executable).parent / "mpiexec"
    cmd = [str(mpiexec), "-n", "2", sys.executable, "-m", "gicbench", "run", "msg-rate",
           "--messages", str(CALIBRATION_MESSAGES), "-w", "2", "--json", "--quiet",
           "-o", str(out)]  # fmt: skip
    r = subprocess.run(
        cmd, env={**os.environ, **env}, capture_output=True, text=True, timeout=300, check=False
    )
    assert r.returncode == 0, f"calibration run failed: {r.stderr[-3000:]}"
    (row,) = json.loads(r.stdout)["results"]
    per_message_s = row["elapsed_ns"] / 1e9 / CALIBRATION_MESSAGES
    return max(CALIBRATION_MESSAGES, int(seconds / per_message_s))
