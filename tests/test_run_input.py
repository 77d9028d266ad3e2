"""Input that was silently accepted or ended in a traceback: non-ASCII digits, an empty -o,
repeated flags, experiments, modes or list items, an empty list item, an unknown --on key, a
fault for a rank the job lacks, malformed launcher variables in `jobs bind`. Each is refused
naming the field and what is allowed (exit status 2), before anything is created."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from launching import gicbench, launch
from trace_helpers import make_run

from gicbench.cli.main import UsageError, build_parser
from gicbench.cli.run import config_from_args
from gicbench.config import RunConfig
from gicbench.errors import ConfigError
from gicbench.plan import make_plan
from gicbench.sweep.bind import bind_env


def run_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["run", *argv])


def refused(*argv: str) -> ConfigError:
    """The ConfigError `gicbench run ARGV` raises before anything starts (plan included)."""
    with pytest.raises(ConfigError) as e:
        make_plan(config_from_args(run_args(*argv)))
    return e.value


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["-b", "８"], "min_size (-b)"),  # FULLWIDTH DIGIT EIGHT: int() reads 8
        (["-n", "١٠٠"], "iters (-n)"),  # ARABIC-INDIC digits: int() reads 100
        (["--timeout", "１.５"], "timeout_s (--timeout)"),
        (["-n", "1_000"], "iters (-n)"),
        (["--seed", "٣"], "seed (--seed)"),
    ],
)
def test_numbers_take_ascii_digits_only(argv: list[str], field: str) -> None:
    e = refused("single-op", *argv)
    assert e.field == field and e.value == argv[1]


def test_an_empty_out_is_refused() -> None:
    """-o '' became Path('') == '.', the working directory."""
    e = refused("single-op", "-o", "")
    assert e.field == "out (-o)" and "a directory path" in e.allowed


@pytest.mark.parametrize("argv", [["-n", "5", "-n", "6"], ["-n", "5", "--iters", "6"]])
def test_a_repeated_flag_is_refused(argv: list[str]) -> None:
    """The last one silently won."""
    with pytest.raises(UsageError, match=r"argument -n/--iters: given more than once"):
        run_args("single-op", *argv)


def test_repeated_experiments_and_modes_are_refused() -> None:
    """Each ran (and printed its rows) twice."""
    e = refused("single-op", "single-op")
    assert e.field == "experiment" and "single-op repeated" in e.allowed
    e = refused("single-op", "--modes", "issue,issue")
    assert e.field == "modes (--modes)" and "issue repeated" in e.allowed
    with pytest.raises(ConfigError, match=r"invalid modes \(--modes\).*round_trip repeated"):
        make_plan(RunConfig.build(modes=("round_trip", "round_trip")))


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["single-op", "--modes", "issue,,round_trip"], "modes (--modes)"),
        (["single-op", "--modes", "issue,"], "modes (--modes)"),
        (["proxy-rate", "--submitter", "proxy", "--sweep-workers", "1,,2"], "sweep_workers"),
        (["proxy-rate", "--submitter", "proxy", "--sweep-batch", ",16"], "sweep_batch"),
    ],
)
def test_an_empty_list_item_is_refused(argv: list[str], field: str) -> None:
    """'1,,2' read as '1,2'."""
    e = refused(*argv)
    assert e.field.startswith(field) and "no empty items" in e.allowed, e


def test_the_list_parser() -> None:
    from gicbench.knobs import parse_int_list, parse_list

    assert parse_list(" a, b ,c", "x", "letters") == ("a", "b", "c")
    assert parse_int_list("1,2,8", "x", 1, 8) == (1, 2, 8)
    for bad in ("", "1,,2", "1,", "1,1", "1,９", "0,1", "1,x"):
        with pytest.raises(ConfigError, match="invalid x="):
            parse_int_list(bad, "x", 1, 8)


def test_unknown_analyze_key_is_refused(tmp_path: Path) -> None:
    """`analyze RUN --on nosuchkey` printed the table as if --on were not there."""
    run = make_run(tmp_path / "a", world_size=2, n=50, seed=1)
    r = gicbench("analyze", str(run), "--on", "nosuchkey")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "invalid --on='nosuchkey': allowed" in r.stderr and "size" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = gicbench("analyze", str(run), str(run), "--on", "size,,mode")
    assert r.returncode == 2 and "no empty items" in r.stderr, r.stderr


def test_refusals_exit_2_under_the_launcher(tmp_path: Path) -> None:
    out = tmp_path / "never"
    for argv, text in (
        (["-b", "８"], "invalid min_size (-b)='８'"),
        (["-n", "5", "-n", "6"], "argument -n/--iters: given more than once"),
        (["--modes", "issue,,round_trip"], "no empty items"),
    ):
        r = launch(2, "run", "single-op", *argv, "-o", str(out), timeout=90)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count(text) == 1, r.stderr
        assert "Traceback" not in r.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("env", "field"),
    [
        (
            {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NODEID": "abc"},
            "SLURM_NODEID",
        ),
        (
            {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_NODEID": "3"},
            "SLURM_NODEID",
        ),
        (
            {"SLURM_LOCALID": "0", "SLURM_STEP_TASKS_PER_NODE": "2(x", "SLURM_NODEID": "0"},
            "SLURM_STEP_TASKS_PER_NODE",
        ),
        (
            {
                "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
                "GICBENCH_GPUS_PER_NODE": "four",
            },
            "GICBENCH_GPUS_PER_NODE",
        ),
        (
            {"OMPI_COMM_WORLD_LOCAL_RANK": "x", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
            "OMPI_COMM_WORLD_LOCAL_RANK",
        ),
    ],
)
def test_bind_refuses_malformed_launcher_variables(env: dict[str, str], field: str) -> None:
    """SLURM_NODEID=abc: a ValueError traceback; GICBENCH_GPUS_PER_NODE=four: no GPU bound."""
    with pytest.raises(ConfigError) as e:
        bind_env(env)
    assert e.value.field == field


def test_bind_refusal_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_LOCALID", "0")
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "2")
    monkeypatch.setenv("SLURM_NODEID", "abc")
    r = gicbench("jobs", "bind", "--", "true")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        "gicbench: error: invalid SLURM_NODEID='abc': allowed a non-negative integer "
        "(as srun and mpiexec set it)"
    )
