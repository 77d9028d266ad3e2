"""Submit rendered scripts with sbatch and wait for them, with the job's output on failure."""

from __future__ import annotations

import re
import subprocess
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


def wait(jobs: list[str], env: dict[str, str], timeout: float = 300) -> dict[str, dict[str, str]]:
    """Wait until every job has ended; their scontrol records (JobState, ExitCode, ...)."""
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
                raise AssertionError(
                    f"jobs {left} still running after {timeout} s: "
                    + "; ".join(str(job_info(j, env)) for j in left)
                )
            time.sleep(1)
    return done


def output(cwd: Path, job: str) -> str:
    p = cwd / f"gicbench-{job}.out"
    return p.read_text(errors="replace") if p.exists() else "(no output file)"
