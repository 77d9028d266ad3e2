"""Rendered job scripts through a real Slurm: 2- and 4-task jobs on the emulated NIC with both
launchers (mpiexec inside the allocation, srun --mpi=pmix), and a sweep cut by its time limit
(SIGTERM, then SIGKILL) and resumed by a second submission."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from slurm_helpers import messages_for, output, sbatch, wait

from gicbench.cli.jobs import RenderOptions, render
from gicbench.sweep import load_manifest, point_runs

# Every wait of the group is bounded, with the jobs' states and output when it gives up, and each
# test's pytest timeout is the sum of its own waits plus MARGIN_S (the cluster's start and the
# calibration are bounded by their fixtures' subprocess timeouts, outside it: func_only).
JOB_WAIT_S = 240  # the small rendered jobs, sharing 2 cores with the first sweep job
CUT_WAIT_S = 240  # the first sweep job: its 1-minute limit, KillWait 10 s, the queue
RESUME_WAIT_S = 480  # the second: the points left, ~POINT_S each plus a launch
MARGIN_S = 60

# Points of a fixed wall time, not a fixed message count: the count comes from this machine's
# message rate measured before the sweep, so a loaded machine gets shorter points (400 M
# messages took 16 s on an idle machine and 100 s on a loaded one, and the resumed job ran past
# pytest's timeout). With launches of a few seconds, 16 points of POINT_S outlast the first
# job's 1-minute limit even at 3x the calibrated speed, and the first still completes inside
# it at 5x slower.
POINT_S = 8.0
POINTS = 16
SWEEP = """
experiment = "msg-rate"
ranks = 2
[run]
warmup = 2
messages = {messages}
quiet = true
[axes]
seed = {seeds}
"""


@pytest.fixture(scope="module")
def cut_sweep(slurm: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Submitted first so that it runs while the other jobs do: the same script, submitted
    with a 1-minute limit (sbatch --time overrides the script's)."""
    cwd = tmp_path_factory.mktemp("sweep")
    messages = messages_for(POINT_S, slurm, cwd / "calibration")
    (cwd / "s.toml").write_text(SWEEP.format(messages=messages, seeds=list(range(1, POINTS + 1))))
    script = cwd / "sweep.sbatch"
    opts = dict(
        ntasks_per_node=2,
        time="10",
        sweep=str(cwd / "s.toml"),
        sweep_dir=str(cwd / "sw"),
        stop_before=0,
        fit=False,
    )
    script.write_text(render("sweep", RenderOptions(launcher="mpiexec", **opts)))
    # The resubmission uses srun --mpi=pmix for its points: both launchers, one sweep.
    (cwd / "resume.sbatch").write_text(render("sweep", RenderOptions(launcher="srun", **opts)))
    job = sbatch(script, slurm, "--time=1")
    return {"cwd": cwd, "job": job, "messages": messages}


CASES = [  # template, tasks, launcher, gicbench run arguments
    ("latency-pair", 2, "mpiexec", ["-b", "8", "-e", "64", "-n", "200", "--quiet"]),
    ("msg-rate", 4, "mpiexec", ["--messages", "20000", "--quiet"]),
    ("latency-pair", 2, "srun", ["-b", "8", "-e", "64", "-n", "200", "--quiet"]),
    ("msg-rate", 4, "srun", ["--messages", "20000", "--quiet"]),
]


@pytest.mark.timeout(JOB_WAIT_S + MARGIN_S, func_only=True)
def test_rendered_jobs_run_under_sbatch(
    slurm: dict[str, str], cut_sweep: dict, tmp_path: Path
) -> None:
    jobs = {}
    for template, tasks, launcher, args in CASES:
        cwd = tmp_path / f"{template}-{tasks}-{launcher}"
        cwd.mkdir()
        script = cwd / "job.sbatch"
        script.write_text(
            render(template, RenderOptions(ntasks_per_node=tasks, launcher=launcher, run_args=args))
        )
        jobs[sbatch(script, slurm)] = (cwd, template, tasks, launcher)
    states = wait(list(jobs), slurm, timeout=JOB_WAIT_S)
    for job, (cwd, template, tasks, launcher) in jobs.items():
        log = output(cwd, job)
        assert states[job]["JobState"] == "COMPLETED", (
            f"{template} {launcher}: {states[job]}\n{log}"
        )
        run = cwd / "runs" / f"{template}-{job}"
        manifest = json.loads((run / "run.json").read_text())
        assert manifest["status"] == "complete", log
        assert manifest["world_size"] == tasks, log  # one MPI job, not singletons
        assert len(list(run.glob("rank-*.h5"))) == tasks
        assert "Failed to read MPI conf" not in log and "Sorry!" not in log, log
        # the job's own analysis step ran on the traces
        assert "(median rank)" in log, log


@pytest.mark.timeout(60 + 2 * JOB_WAIT_S + MARGIN_S, func_only=True)
def test_jobs_submit_chain(slurm: dict[str, str], cut_sweep: dict, tmp_path: Path) -> None:
    """`gicbench jobs submit`: renders, writes the script, sbatch; --chain runs copies in turn."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "gicbench",
            "jobs",
            "submit",
            "latency-pair",
            "--launcher",
            "mpiexec",
            "--chain",
            "2",
            "--",
            "-b",
            "8",
            "-n",
            "50",
            "--quiet",
        ],
        cwd=tmp_path,
        env=slurm,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    jobs = re.findall(r"as job (\d+)", r.stdout)
    assert len(jobs) == 2 and f"(after {jobs[0]})" in r.stdout, r.stdout
    assert len(list((tmp_path / "runs/jobs").glob("latency-pair-*.sbatch"))) == 1
    states = wait(jobs, slurm, timeout=2 * JOB_WAIT_S)  # one after the other
    for job in jobs:
        assert states[job]["JobState"] == "COMPLETED", output(tmp_path, job)
        run = json.loads((tmp_path / "runs" / f"latency-pair-{job}" / "run.json").read_text())
        assert run["status"] == "complete" and run["world_size"] == 2
    # the second started only after the first ended
    assert states[jobs[1]]["StartTime"] >= states[jobs[0]]["EndTime"]


@pytest.mark.timeout(CUT_WAIT_S + 60 + RESUME_WAIT_S + MARGIN_S, func_only=True)
def test_sweep_cut_by_time_limit_then_resumed(slurm: dict[str, str], cut_sweep: dict) -> None:
    cwd, job = cut_sweep["cwd"], cut_sweep["job"]
    sweep_dir = cwd / "sw"
    state = wait([job], slurm, timeout=CUT_WAIT_S, logs={job: cwd})[job]
    log = output(cwd, job)
    assert state["JobState"] == "TIMEOUT", f"{state}\n{log}"
    doc = load_manifest(sweep_dir)
    status = [p["status"] for p in doc["points"]]
    done = [p for p in doc["points"] if p["status"] == "complete"]
    cut = [p for p in doc["points"] if p["status"] in ("interrupted", "running")]
    n = cut_sweep["messages"]
    assert done, f"no point of {n} messages finished inside the limit: {status}\n{log}"
    assert len(cut) == 1, f"{status}\n{log}"  # the one the limit hit, marked
    assert status == ["complete"] * len(done) + [cut[0]["status"]] + ["pending"] * (
        len(status) - len(done) - 1
    )
    finished = {
        p["name"]: (sweep_dir / "points" / p["name"] / "run.json").read_text() for p in done
    }
    for text in finished.values():
        assert json.loads(text)["status"] == "complete"
    assert point_runs(sweep_dir) == [sweep_dir / "points" / n for n in finished]

    job2 = sbatch(cwd / "resume.sbatch", slurm)
    state = wait([job2], slurm, timeout=RESUME_WAIT_S, logs={job2: cwd})[job2]
    log2 = output(cwd, job2)
    assert state["JobState"] == "COMPLETED", f"{state}\n{log2}"
    doc = load_manifest(sweep_dir)
    assert [p["status"] for p in doc["points"]] == ["complete"] * POINTS, log2
    for p in doc["points"]:
        if p["name"] in finished:  # skipped: one attempt, its trace untouched
            assert len(p["attempts"]) == 1
            assert (sweep_dir / "points" / p["name"] / "run.json").read_text() == finished[
                p["name"]
            ]
    redone = next(p for p in doc["points"] if p["name"] == cut[0]["name"])
    aside = redone["attempts"][-1]["moved_aside"]
    if cut[0]["attempts"] and (sweep_dir / aside if aside else None):
        assert (sweep_dir / aside).is_dir()  # the interrupted attempt kept, not deleted
    assert [s["job_id"] for s in doc["submissions"]] == [job, job2]
    runs = point_runs(sweep_dir)
    assert len(runs) == POINTS
    for r in runs:
        assert len(list(r.glob("rank-*.h5"))) == 2


ACTIVE_SWEEP = """
experiment = "active-connections"
[run]
pattern = "all-to-all"
active = "4,16"
messages = 2000
passes = 2
quiet = true
[axes]
ranks = [2, 3]
"""


@pytest.mark.timeout(JOB_WAIT_S + MARGIN_S, func_only=True)
def test_active_connections_template_runs_its_sweep(
    slurm: dict[str, str], cut_sweep: dict, tmp_path: Path
) -> None:
    """The active-connections template's sweep through sbatch: both points (2 and 3 ranks of
    all-to-all) complete, each one MPI job of its world size."""
    (tmp_path / "s.toml").write_text(ACTIVE_SWEEP)
    script = tmp_path / "ac.sbatch"
    script.write_text(render("active-connections", RenderOptions(
        ntasks_per_node=3, launcher="mpiexec", time="10", sweep=str(tmp_path / "s.toml"),
        sweep_dir=str(tmp_path / "sw"), stop_before=0)))  # fmt: skip
    job = sbatch(script, slurm)
    state = wait([job], slurm, timeout=JOB_WAIT_S, logs={job: tmp_path})[job]
    log = output(tmp_path, job)
    assert state["JobState"] == "COMPLETED", f"{state}\n{log}"
    doc = load_manifest(tmp_path / "sw")
    assert [p["status"] for p in doc["points"]] == ["complete", "complete"], log
    for run, world in zip(point_runs(tmp_path / "sw"), (2, 3), strict=True):
        manifest = json.loads((run / "run.json").read_text())
        assert manifest["status"] == "complete" and manifest["world_size"] == world, log
        assert manifest["experiments"] == ["active-connections"]
