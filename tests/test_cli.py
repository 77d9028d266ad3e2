"""The command line: every subcommand answers --help, doctor/list work here, bad input is refused
with one clear message naming the field, before any resource exists (exit status 2)."""

from __future__ import annotations

import json

import pytest
from launching import gicbench

from gicbench.cli.main import main

SUBCOMMANDS = ("run", "list", "analyze", "report", "jobs", "doctor")


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help(sub: str) -> None:
    r = gicbench(sub, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage: gicbench " + sub in r.stdout


def test_doctor_reports_providers_and_submitters() -> None:
    r = gicbench("doctor", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    providers = {p["name"]: p for p in doc["providers"]}
    assert set(providers) == {"emu", "verbs", "mlx5"}
    assert providers["emu"]["available"] is True  # the embedded default runs everywhere
    assert {s["name"] for s in doc["submitters"]} == {"host", "proxy", "gpu", "doca", "nvshmem"}
    for probe in ("python", "mpi", "gpus", "nvcc", "cupy", "pyverbs", "rdma", "shm"):
        assert probe in doc["probes"]
    # every unavailable provider says why
    assert all(p["reason"] for p in doc["providers"] if not p["available"])


def test_doctor_table() -> None:
    r = gicbench("doctor")
    assert r.returncode == 0, r.stderr
    assert "what can run here" in r.stdout


def test_list_names_experiments_and_knobs() -> None:
    r = gicbench("list", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    exps = {e["name"]: e for e in doc["experiments"]}
    assert {"single-op", "msg-rate"} <= set(exps)
    flags = {k["flag"] for k in exps["msg-rate"]["knobs"]}
    assert {"-b", "-e", "--messages", "-w", "-q", "-t", "--batch"} <= flags
    assert "-n" in {k["flag"] for k in exps["single-op"]["knobs"]}
    assert doc["suites"]["default"] == ["single-op", "msg-rate"]


@pytest.mark.parametrize(
    ("args", "field", "allowed"),
    [
        (["nosuch"], "experiment", "single-op"),
        (["single-op", "--ordering", "foo"], "ordering (--ordering)", "--submitter gpu"),
        (["single-op", "-q", "0"], "qps (-q)", "1 <= qps"),
        (["single-op", "-b", "1K", "-e", "8"], "max_size (-e)", ">= min_size"),
        (["single-op", "--transport", "ud"], "transport (--transport)", "rc, dc"),
        (["single-op", "--payload", "gather"], "payload (--payload)", "inline, pointer"),
        (["single-op", "-b", "seven"], "min_size (-b)", "byte count"),
        (["single-op", "-n", "0"], "iters (-n)", "1 <= iters"),
        (["msg-rate", "--batch", "1000"], "batch (--batch)", "<= 256"),
        (["msg-rate", "-t", "4", "-q", "2"], "threads (-t)", "each thread owns"),
        (["single-op", "--provider", "ib"], "provider (--provider)", "emu, verbs, mlx5"),
        (["single-op", "--dcts", "9"], "dcts (--dcts)", "<= 8"),
        (["single-op", "--dcts", "2"], "dcts (--dcts)", "only with --transport dc"),
        (["single-op", "--seed", "-1"], "seed (--seed)", "0 <= seed"),
        (["single-op", "--timeout", "1e10"], "timeout_s (--timeout)", "<= 3,600"),
        (["single-op", "-n", "1e11"], "iters (-n)", "an integer"),
        (["single-op", "-n", "2000000000"], "iters (-n)", "<= 100,000,000"),
        (["single-op", "--messages", "5"], "messages (--messages)", "only with msg-rate"),
        (["--suite", "huge"], "suite", "default"),
        (["msg-rate", "--engine-threads", "0"], "engine_threads (--engine-threads)", "1 <="),
        (["msg-rate", "--engine-threads", "65"], "engine_threads (--engine-threads)", "<= 64"),
        (
            ["msg-rate", "--engine", "cuda", "--engine-threads", "2"],
            "engine_threads (--engine-threads)",
            "--engine-ctas",
        ),
        (
            ["msg-rate", "--nic-model", "cx7-200g-ib-hopper", "--engine-threads", "2"],
            "engine_threads (--engine-threads)",
            "1 with --nic-model",
        ),
    ],
)
def test_bad_configuration_is_refused(capsys, args, field, allowed) -> None:
    rc = main(["run", *args])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"invalid {field}=" in err
    assert allowed in err


def test_jobs_render_both_launchers() -> None:
    r = gicbench("jobs", "list")
    assert r.returncode == 0 and "single-node" in r.stdout and "multi-node" in r.stdout
    r = gicbench(
        "jobs",
        "render",
        "multi-node",
        "-N",
        "4",
        "--ntasks-per-node",
        "8",
        "--launcher",
        "srun",
        "--mpi",
        "pmix",
        "--",
        "msg-rate",
        "-q",
        "16",
    )
    assert r.returncode == 0, r.stderr
    assert "#SBATCH --nodes=4" in r.stdout
    assert "srun --mpi=pmix -n 32 gicbench run msg-rate -q 16" in r.stdout
    r = gicbench("jobs", "render", "single-node", "--launcher", "mpiexec", "--", "single-op")
    assert "mpiexec -n 2 --map-by ppr:2:node gicbench run single-op" in r.stdout
    r = gicbench("jobs", "render", "nosuch")
    assert r.returncode == 2 and "invalid template='nosuch'" in r.stderr
