"""`gicbench jobs render`: every value that reaches a script is validated and quoted (no
flag can add a command or an #SBATCH line), -o is honoured, templates of experiments that do not
exist are refused. The rendered
scripts are run with stub launchers to show that nothing a user typed runs as a command."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from launching import gicbench

from gicbench.cli.jobs import RenderOptions, render, templates
from gicbench.errors import ConfigError


@pytest.mark.parametrize(
    ("flag", "value", "field"),
    [
        ("--mpi", "pmix; touch X", "mpi"),
        ("--partition", "gpu\ntouch X", "partition"),
        ("--time", "1:00\ntouch X", "time"),
        ("--time", "1:00; touch X", "time"),
        ("--account", "acct --wrap=touch", "account"),
        ("--account", "a\n#SBATCH --uid=0", "account"),
        ("--job-name", "x$(touch X)", "job_name"),
        ("--nics", "mlx5_0;touch X", "nics"),
        ("--launcher", "srun; touch X", "launcher"),
    ],
)
def test_injected_values_are_refused(flag: str, value: str, field: str, tmp_path: Path) -> None:
    r = gicbench("jobs", "render", "single-node", flag, value, "--", "single-op", cwd=tmp_path)
    assert r.returncode == 2, r.stdout
    assert f"invalid {field}=" in r.stderr
    assert r.stdout == ""  # no script at all
    assert not (tmp_path / "X").exists()


@pytest.mark.parametrize("time", ["30", "15:00", "1:00:00", "2-0", "2-12:30", "1-00:00:00"])
def test_slurm_time_formats_accepted(time: str) -> None:
    assert f"#SBATCH --time={time}\n" in render("single-node", RenderOptions(time=time))


def _stub_env(tmp: Path) -> dict[str, str]:
    """A venv whose activate does nothing and launchers/gicbench that record their argv."""
    (tmp / "venv/bin").mkdir(parents=True)
    (tmp / "venv/bin/activate").write_text("")
    log = tmp / "argv.log"
    for exe in ("srun", "mpiexec", "gicbench"):
        p = tmp / "venv/bin" / exe
        p.write_text(f'#!/bin/bash\nprintf "%s\\0" {exe} "$@" >> {log}\nprintf "\\n" >> {log}\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, GICBENCH_VENV=str(tmp / "venv"), SLURM_JOB_ID="77")
    env["PATH"] = f"{tmp / 'venv/bin'}:{env['PATH']}"
    return env


def _run_script(text: str, tmp: Path) -> list[list[str]]:
    script = tmp / "job.sbatch"
    script.write_text(text)
    r = subprocess.run(
        ["bash", str(script)],
        cwd=tmp,
        env=_stub_env(tmp),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    calls = (tmp / "argv.log").read_text().split("\n")
    return [c.rstrip("\0").split("\0") for c in calls if c]


def test_hostile_run_arguments_stay_arguments(tmp_path: Path) -> None:
    out = f"o; touch {tmp_path}/X; $(touch {tmp_path}/Y)"
    text = render(
        "msg-rate",
        RenderOptions(launcher="mpiexec", run_args=["--suite", "default", "-o", out][2:]),
    )
    calls = _run_script(text, tmp_path)
    assert not (tmp_path / "X").exists() and not (tmp_path / "Y").exists()
    run = next(c for c in calls if c[0] == "mpiexec")
    assert run[-2:] == ["-o", out]  # the user's -o, byte for byte, once
    assert run.count("-o") == 1


def test_dash_o_is_honoured_not_overridden(tmp_path: Path) -> None:
    r = gicbench("jobs", "render", "single-node", "--", "single-op", "-o", "mine")
    assert r.returncode == 0, r.stderr
    assert "OUT=mine\n" in r.stdout
    assert r.stdout.count(" -o ") == 1
    calls = _run_script(r.stdout, tmp_path)
    launch = next(c for c in calls if c[0] == "srun")
    assert launch[-3:] == ["single-op", "-o", "mine"]
    assert ["gicbench", "analyze", "mine"] in calls
    # --out=mine and -omine are the same flag
    for form in (["--out=mine"], ["-omine"]):
        t = render("single-node", RenderOptions(run_args=["single-op", *form]))
        assert "OUT=mine\n" in t and t.count(" -o ") == 1


def test_default_out_is_per_job() -> None:
    t = render("latency-pair", RenderOptions())
    assert 'OUT="runs/latency-pair-${SLURM_JOB_ID:-local}"' in t
    assert 'gicbench run single-op -o "$OUT"' in t


def test_unknown_run_flags_refused_at_render() -> None:
    with pytest.raises(ConfigError, match="run arguments"):
        render("single-node", RenderOptions(run_args=["single-op", "--no-such-flag"]))


def test_template_experiment_fixed() -> None:
    t = render("msg-rate", RenderOptions(run_args=["-q", "4"]))
    assert "gicbench run msg-rate -q 4 -o" in t
    with pytest.raises(ConfigError, match="experiment"):
        render("msg-rate", RenderOptions(run_args=["single-op"]))
    with pytest.raises(ConfigError, match="suite"):
        render("msg-rate", RenderOptions(run_args=["--suite", "default"]))
    assert "gicbench run msg-rate -q 4 -o" in render(
        "msg-rate", RenderOptions(run_args=["msg-rate", "-q", "4"])
    )


def test_templates_of_missing_experiments_refused(tmp_path: Path, monkeypatch) -> None:
    """A template whose experiment this gicbench lacks renders nothing and says so."""
    from gicbench.cli import jobs

    tpl = tmp_path / "future.sbatch"
    tpl.write_text("#!/bin/bash\n# A template for later.\n# gicbench: kind=run "
                   "experiment=no-such-one requires=no-such-one\n")
    monkeypatch.setattr(jobs, "templates", lambda: {"future": tpl})
    with pytest.raises(ConfigError, match="no-such-one is not implemented yet"):
        render("future", RenderOptions())


def test_active_connections_template_renders_its_sweeps(tmp_path: Path) -> None:
    """The template runs its default sweep (the dense all-to-all over 2-128 ranks) or the
    cycling-peers one; a sweep needs as many tasks as its largest point."""
    r = gicbench("jobs", "render", "active-connections", "--nodes", "16",
                 "--ntasks-per-node", "8")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "gicbench jobs sweep" in r.stdout and "active-connections.toml" in r.stdout
    calls = _run_script(r.stdout, tmp_path)
    sweep = next(c for c in calls if c[:3] == ["gicbench", "jobs", "sweep"])
    assert sweep[3].endswith("sweeps/active-connections.toml")
    assert "-d" in sweep and "runs/sweep-active-connections" in sweep
    with pytest.raises(ConfigError, match="ntasks"):  # 128-rank points need 128 tasks
        render("active-connections", RenderOptions(nodes=1, ntasks_per_node=64))
    cycling = templates()["active-connections"].parent / "sweeps/active-connections-cycling.toml"
    t = render("active-connections", RenderOptions(nodes=16, ntasks_per_node=8,
                                                   sweep=str(cycling)))  # fmt: skip
    assert "active-connections-cycling.toml" in t
    listing = gicbench("jobs", "list").stdout
    line = next(ln for ln in listing.splitlines() if ln.startswith("active-connections "))
    assert "not implemented" not in line


def test_clock_sweep_template_renders_now_that_the_experiment_exists() -> None:
    r = gicbench("jobs", "render", "clock-sweep", "--", "--submitter", "gpu")
    assert r.returncode == 0, r.stderr
    assert "gicbench run clock-sweep --submitter gpu" in r.stdout


def test_proxy_rate_template_runs_the_proxy() -> None:
    """proxy-rate's template renders and runs --submitter proxy."""
    text = render("proxy-rate", RenderOptions(run_args=["--sweep-workers", "1,2"]))
    assert "gicbench run --submitter proxy proxy-rate --sweep-workers 1,2 -o" in text


def test_pmi2_refused_with_open_mpi_5() -> None:
    from gicbench.cli.jobs import mpi_library

    if not mpi_library().startswith("Open MPI v5"):
        pytest.skip(f"MPI here is {mpi_library() or 'unknown'}, not Open MPI 5")
    with pytest.raises(ConfigError, match="no PMI-2"):
        render("single-node", RenderOptions(mpi="pmi2"))
    assert "mpiexec -n 2" in render("single-node", RenderOptions(mpi="pmi2", launcher="mpiexec"))


def test_srun_pmix_sets_native_psec() -> None:
    t = render("single-node", RenderOptions(run_args=["single-op"]))
    assert 'export PMIX_MCA_psec="${PMIX_MCA_psec:-native}"' in t
    assert "srun --mpi=pmix -n 2 gicbench run single-op" in t
    assert "PMIX_MCA_psec" not in render("single-node", RenderOptions(launcher="mpiexec"))


def test_gpu_binding_and_mps_lines() -> None:
    t = render(
        "multi-node",
        RenderOptions(
            nodes=2,
            ntasks_per_node=8,
            gpus_per_node=4,
            nics="mlx5_0,mlx5_1",
            gpu_clock=1410,
            run_args=["msg-rate"],
        ),
    )
    assert "#SBATCH --gpus-per-node=4" in t
    assert "srun --mpi=pmix -n 16 gicbench jobs bind -- gicbench run msg-rate" in t
    assert "export GICBENCH_NICS=mlx5_0,mlx5_1" in t
    assert "srun --overlap -N 2 --ntasks-per-node=1 nvidia-smi -lgc 1410,1410" in t
    # 8 tasks on 4 GPUs: MPS, one pipe directory for the script and the bind wrapper, one trap
    assert 'export CUDA_MPS_PIPE_DIRECTORY="/tmp/gicbench-mps-${SLURM_JOB_ID}/pipe"' in t
    assert t.count("trap ") == 1 and "echo quit | nvidia-cuda-mps-control" in t
    assert "nvidia-smi -rgc || true" in t
    assert "MPS" not in render("multi-node", RenderOptions(ntasks_per_node=4, gpus_per_node=4))


def test_shipped_sweep_files_parse() -> None:
    from gicbench.cli.jobs import templates_dir
    from gicbench.sweep import load_spec

    files = sorted((templates_dir() / "sweeps").glob("*.toml"))
    assert files  # installed with the package
    for f in files:
        assert load_spec(f).points


def test_sweep_template_renders_a_checked_sweep(tmp_path: Path) -> None:
    sweep = tmp_path / "s.toml"
    sweep.write_text(
        'experiment = "msg-rate"\n[run]\nqps = 2\n[axes]\nranks = [2, 4]\nthreads = [1, 2]\n'
    )
    t = render(
        "sweep",
        RenderOptions(
            ntasks_per_node=4, sweep=str(sweep), sweep_dir="runs/a b", launcher="mpiexec"
        ),
    )
    assert "SWEEP_DIR='runs/a b'" in t
    assert f'gicbench jobs sweep {sweep} -d "$SWEEP_DIR" --launcher mpiexec' in t
    with pytest.raises(ConfigError, match="ntasks"):  # 4-rank points need 4 tasks
        render("sweep", RenderOptions(ntasks_per_node=2, sweep=str(sweep)))
    with pytest.raises(ConfigError, match="--sweep FILE"):
        render("sweep", RenderOptions())
    sweep.write_text('experiment = "msg-rate"\n[axes]\nthreadz = [1]\n')
    with pytest.raises(ConfigError, match=r"axes\.threadz"):
        render("sweep", RenderOptions(sweep=str(sweep)))
