"""Sweeps without Slurm: the sweep file is checked and expanded, points run one `gicbench run`
each under mpiexec, a second run resumes (finished points skipped, a half-written one moved aside
and redone), a signal marks the running point interrupted, and point_runs lists what is done."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gicbench.analysis.load import load_run
from gicbench.errors import ConfigError
from gicbench.sweep import load_manifest, parse_spec_text, point_runs
from gicbench.sweep.bind import bind_env
from gicbench.sweep.runner import EXIT_RESUBMIT, parse_slurm_duration

SMALL = """
experiment = "msg-rate"
ranks = 2
[run]
warmup = 2
messages = 2000
qps = 2
quiet = true
[axes]
threads = [1, 2]
"""


def test_points_are_the_product_in_order() -> None:
    spec = parse_spec_text(
        'experiment = "msg-rate"\n[run]\nmin-size = "8"\n'
        "[axes]\nranks = [2, 4]\nthreads = [1, 2]\nqps = [2, 4]\n"
    )
    assert len(spec.points) == 8
    p = spec.points[5]  # ranks 4, threads 1, qps 4 (last axis fastest)
    assert (p.ranks, p.params) == (4, {"ranks": 4, "threads": 1, "qps": 4})
    assert p.name == "005-msg-rate-ranks4-threads1-qps4"
    assert p.run_args == ("msg-rate", "--min-size", "8", "--threads", "1", "--qps", "4")
    assert spec.max_ranks == 4


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('experiment = "nosuch"', "experiment"),
        ('experiment = "msg-rate"\n[run]\nout = "x"', "run.out"),
        ('experiment = "msg-rate"\n[run]\nthreadz = 1', "run.threadz"),
        ('experiment = "msg-rate"\n[run]\nthreads = "two"', "run.threads"),
        ('experiment = "msg-rate"\n[run]\nquiet = 1', "run.quiet"),
        ('experiment = "msg-rate"\n[axes]\nthreads = []', "axes.threads"),
        ('experiment = "msg-rate"\n[axes]\nranks = [2, 0]', "axes.ranks"),
        ('experiment = "msg-rate"\nrank = 2', "sweep key"),
        ("[axes]\nthreads = [1]", "experiment"),
    ],
)
def test_bad_sweep_files_refused(text: str, field: str) -> None:
    with pytest.raises(ConfigError, match=f"invalid {field}="):
        parse_spec_text(text)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        # a knob that does nothing for the experiment: refused at the point, not at run time
        ('experiment = "single-op"\n[axes]\nmessages = [100, 200]',
         r"messages \(--messages\) at point 0 \(messages=100\)"),
        # the submitter's own refusal at the second point of the axis
        ('experiment = "msg-rate"\n[run]\nsubmitter = "proxy"\n[axes]\nbatch = [8, 20]',
         r"batch \(--batch\) at point 1 \(batch=20\)"),
        # an experiment axis where one value cannot take a fixed knob
        ('[run]\nmessages = 1000\n[axes]\nexperiment = ["msg-rate", "single-op"]',
         r"at point 1 \(experiment=single-op\)"),
    ],
)  # fmt: skip
def test_every_point_is_planned_before_any_runs(text: str, match: str) -> None:
    """Each point's run is planned as `gicbench run` would plan it (make_plan, not the machine's
    abilities): a point that would be refused is refused when the file is read."""
    with pytest.raises(ConfigError, match=match):
        parse_spec_text(text)


def test_slurm_durations() -> None:
    assert parse_slurm_duration("1-02:03:04") == 93784
    assert parse_slurm_duration("02:03:04") == 7384
    assert parse_slurm_duration("03:04") == 184
    assert parse_slurm_duration("UNLIMITED") is None
    assert parse_slurm_duration("NOT_SET") is None


def test_bind_blocks_gpus_nics_and_mps() -> None:
    base = {
        "OMPI_COMM_WORLD_LOCAL_SIZE": "4",
        "GICBENCH_GPUS_PER_NODE": "2",
        "GICBENCH_NICS": "mlx5_0,mlx5_1",
        "SLURM_JOB_ID": "9",
    }
    envs = [bind_env(dict(base, OMPI_COMM_WORLD_LOCAL_RANK=str(r))) for r in range(4)]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0", "1", "1"]
    assert [e["GICBENCH_NIC"] for e in envs] == ["mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1"]
    assert envs[0]["UCX_NET_DEVICES"] == "mlx5_0:1"
    assert all(e["GICBENCH_MPS"] == "1" for e in envs)
    assert all(e["GICBENCH_RANKS_PER_GPU"] == "2" for e in envs)  # each sees one GPU of two
    assert envs[0]["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/gicbench-mps-9/pipe"
    five = dict(base, OMPI_COMM_WORLD_LOCAL_SIZE="5")
    uneven = [bind_env(dict(five, OMPI_COMM_WORLD_LOCAL_RANK=str(r))) for r in range(5)]
    assert [(e["CUDA_VISIBLE_DEVICES"], e["GICBENCH_RANKS_PER_GPU"]) for e in uneven] == [
        ("0", "3"), ("0", "3"), ("0", "3"), ("1", "2"), ("1", "2")]  # fmt: skip
    # srun: SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE; Slurm's own CUDA_VISIBLE_DEVICES kept
    e = bind_env(
        {
            "SLURM_LOCALID": "1",
            "SLURM_STEP_TASKS_PER_NODE": "2(x3)",
            "SLURM_NODEID": "2",
            "CUDA_VISIBLE_DEVICES": "4,5",
        }
    )
    assert e["CUDA_VISIBLE_DEVICES"] == "5" and "GICBENCH_MPS" not in e
    assert e["GICBENCH_RANKS_PER_GPU"] == "1"
    # no GPUs (the emulated NIC): no GPU binding
    assert "CUDA_VISIBLE_DEVICES" not in bind_env(
        {"SLURM_LOCALID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "2"}
    )
    with pytest.raises(ConfigError, match="local rank"):
        bind_env({})


def _live_with(text: str) -> list[int]:
    """Live processes whose command line mentions `text`."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if (
                d.name.isdigit()
                and text in (d / "cmdline").read_text()
                and (d / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
            ):
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


def _sweep(sweep: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gicbench", "jobs", "sweep", str(sweep), "-d", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _finish(p: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


def test_sweep_runs_resumes_and_redoes_half_written(tmp_path: Path) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text(SMALL)
    out = tmp_path / "sw"
    rc, log = _finish(_sweep(sweep, out))
    assert rc == 0, log
    doc = load_manifest(out)
    assert [p["status"] for p in doc["points"]] == ["complete", "complete"]
    runs = point_runs(out)
    assert [r.name for r in runs] == ["000-msg-rate-threads1", "001-msg-rate-threads2"]
    for r in runs:
        assert json.loads((r / "run.json").read_text())["status"] == "complete"
        assert len(list(r.glob("rank-*.h5"))) == 2
    first_run_json = (runs[0] / "run.json").read_text()

    # A job killed in point 1: the manifest says running, the run directory is half there.
    doc["points"][1]["status"] = "running"
    (out / "sweep.json").write_text(json.dumps(doc))
    run_json = runs[1] / "run.json"
    run_json.write_text(run_json.read_text().replace('"complete"', '"running"'))
    assert point_runs(out) == runs[:1]  # never a half-written point
    rc, log = _finish(_sweep(sweep, out))
    assert rc == 0, log
    doc = load_manifest(out)
    assert len(doc["points"][0]["attempts"]) == 1  # skipped
    assert (runs[0] / "run.json").read_text() == first_run_json
    redo = doc["points"][1]["attempts"]
    assert len(redo) == 2 and redo[1]["moved_aside"] == "aside/001-msg-rate-threads2.1"
    assert (out / "aside/001-msg-rate-threads2.1/run.json").exists()  # kept, not deleted
    assert point_runs(out) == runs
    assert len(doc["submissions"]) == 2

    # Both submissions' points analysed as one run: `gicbench analyze SWEEP_DIR`.
    df = load_run(out)
    assert df.attrs["status"] == "complete"
    assert sorted(set(df["threads"])) == [1, 2]
    assert df["point"].nunique() == sum(load_run(r)["point"].nunique() for r in runs)
    r = subprocess.run(
        [sys.executable, "-m", "gicbench", "analyze", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["experiments"]["msg-rate"]
    assert sorted({row["threads"] for row in rows}) == [1, 2]

    # A changed sweep file is refused for this directory.
    sweep.write_text(SMALL.replace("qps = 2", "qps = 4").replace("[1, 2]", "[1, 2, 4]"))
    rc, log = _finish(_sweep(sweep, out))
    assert rc == 2 and "invalid sweep file=" in log


def test_signal_marks_point_interrupted(tmp_path: Path) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text(SMALL.replace("messages = 2000", "messages = 400000000"))
    out = tmp_path / "sw"
    p = _sweep(sweep, out)
    run_json = out / "points" / "000-msg-rate-threads1" / "run.json"
    deadline = time.monotonic() + 120
    while not run_json.exists() and time.monotonic() < deadline:  # point 0 is measuring
        time.sleep(0.2)
    time.sleep(1)
    os.kill(p.pid, signal.SIGTERM)
    rc, log = _finish(p)
    assert rc == EXIT_RESUBMIT, log
    doc = load_manifest(out)
    assert doc["points"][0]["status"] == "interrupted", log
    assert doc["points"][1]["status"] == "pending"
    assert doc["points"][0]["attempts"][0]["signal"] == "SIGTERM"
    # the run itself says it did not finish (incomplete, or running if it was killed hard)
    assert json.loads(run_json.read_text())["status"] in ("incomplete", "running")
    assert doc["submissions"][0]["stopped"] == "signal"
    # no rank of the point outlives the sweep (it would write into the next attempt's directory)
    assert _live_with(str(out)) == [], log
    assert point_runs(out) == []  # (resuming is the test above; these points are long)


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM])
def test_sweep_template_passes_signals(signum: int, tmp_path: Path) -> None:
    """The rendered sweep script (run by bash, as sbatch would): Slurm's --signal=B:USR1 lets
    the running point finish, then stops; SIGTERM to the shell interrupts the point, and the
    shell stays until the sweep has recorded it (a job must not end while its sweep writes)."""
    from gicbench.cli.jobs import RenderOptions, render

    sweep = tmp_path / "s.toml"
    # USR1 lets the running point finish (a few seconds of messages); SIGTERM must interrupt
    # it, so that point could never finish on its own.
    long = "20000000" if signum == signal.SIGUSR1 else "100000000000"
    sweep.write_text(SMALL.replace("messages = 2000", f"messages = {long}"))
    script = tmp_path / "sweep.sbatch"
    script.write_text(
        render("sweep", RenderOptions(sweep=str(sweep), sweep_dir="sw", launcher="mpiexec"))
    )
    env = dict(os.environ, GICBENCH_VENV=str(Path(sys.executable).parent.parent))
    env.pop("SLURM_JOB_ID", None)
    p = subprocess.Popen(
        ["bash", str(script)],
        cwd=tmp_path,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    run_json = tmp_path / "sw/points/000-msg-rate-threads1/run.json"
    deadline = time.monotonic() + 120
    while not run_json.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(p.pid, signum)  # to the batch shell only
    rc, log = _finish(p)
    assert rc == EXIT_RESUBMIT, log
    doc = load_manifest(tmp_path / "sw")
    first = "complete" if signum == signal.SIGUSR1 else "interrupted"
    assert [q["status"] for q in doc["points"]] == [first, "pending"], log
    assert f"1 {first}, 1 pending" in log  # the shell's last line, after the sweep ended
    assert _live_with(str(tmp_path / "sw")) == [], log
