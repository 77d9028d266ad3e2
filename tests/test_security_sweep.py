"""Sweep directories: a sweep never moves into a run or a directory holding other files (it
would hide the run from analyze), nor into another user's directory, and its manifest and lock
are never written through a link. No point is launched: _run_point is replaced by a sentinel,
so reaching it means the directory was accepted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import security_helpers
from security_helpers import OtherUser, root_only_file
from trace_helpers import make_run

import gicbench.sweep.runner as runner
from gicbench.errors import ConfigError
from gicbench.sweep import parse_spec_text
from gicbench.sweep.manifest import write_manifest

SPEC = """
experiment = "msg-rate"
ranks = 2
[run]
messages = 2000
qps = 2
quiet = true
[axes]
threads = [1, 2]
"""
SECRET = "root's secret\n"

# fixtures of the second local user (tests/security_helpers.py)
other_user = security_helpers.other_user
shared_dir = security_helpers.shared_dir


class Launched(Exception):
    """The sweep got as far as starting a point."""


@pytest.fixture
def no_launch(monkeypatch):
    def run_point(*_a, **_k):
        raise Launched

    monkeypatch.setattr(runner, "_run_point", run_point)


def _sweep(d: Path) -> None:
    runner.run_sweep(parse_spec_text(SPEC), d, say=lambda _s: None)


def test_sweep_into_an_existing_run_is_refused(tmp_path: Path, no_launch) -> None:
    run = make_run(tmp_path / "run", world_size=1, n=20)
    before = sorted(p.name for p in run.iterdir())
    with pytest.raises(ConfigError, match="holds a run"):
        _sweep(run)
    assert sorted(p.name for p in run.iterdir()) == before


def test_sweep_into_a_directory_holding_other_files_is_refused(tmp_path: Path, no_launch) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "notes.txt").write_text("mine\n")
    with pytest.raises(ConfigError, match=r"notes\.txt"):
        _sweep(d)
    assert sorted(p.name for p in d.iterdir()) == ["notes.txt"]


def test_new_empty_and_own_sweep_directories_are_accepted(tmp_path: Path, no_launch) -> None:
    for d in (tmp_path / "new", tmp_path / "empty"):
        if d.name == "empty":
            d.mkdir()
        with pytest.raises(Launched):
            _sweep(d)
        assert (d / "sweep.json").is_file()
    with pytest.raises(Launched):  # resumed: its own sweep directory
        _sweep(tmp_path / "new")


def test_sweep_into_another_users_directory_is_refused(
    other_user: OtherUser, shared_dir: Path, no_launch
) -> None:
    d = shared_dir / "offered"
    other_user.run("mkdir", "-m", "777", str(d))
    with pytest.raises(ConfigError, match=f"owned by {other_user.name}"):
        _sweep(d)
    assert list(d.iterdir()) == []


def test_sweep_directory_that_is_a_link_is_refused(tmp_path: Path, no_launch) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ConfigError, match="symbolic link"):
        _sweep(tmp_path / "link")
    assert list(real.iterdir()) == []


def test_sweep_manifest_is_not_written_through_a_planted_temporary(tmp_path: Path) -> None:
    d = tmp_path / "sweep"
    d.mkdir()
    victim = root_only_file(tmp_path)
    (d / f".sweep.json.{os.getpid()}.tmp").symlink_to(victim)
    write_manifest(d, {"schema": "x", "points": []})
    assert victim.read_text() == SECRET
    assert (d / "sweep.json").is_file() and not (d / "sweep.json").is_symlink()


def test_sweep_lock_that_is_a_link_is_refused(tmp_path: Path, no_launch) -> None:
    d = tmp_path / "sweep"
    d.mkdir()
    victim = root_only_file(tmp_path)
    (d / ".lock").symlink_to(victim)
    with pytest.raises(ConfigError, match="lock"):
        _sweep(d)
    assert victim.read_text() == SECRET


def test_mps_pipe_directory_made_first_by_another_user_is_refused(
    other_user: OtherUser, shared_dir: Path
) -> None:
    """The MPS pipe directory's name is known in advance (/tmp/gicbench-mps-<job>): a control
    pipe another user made there is never trusted, whichever local rank finds it."""
    from gicbench.sweep.bind import ensure_mps

    pipe = shared_dir / "gicbench-mps-77" / "pipe"
    other_user.run("mkdir", "-p", str(pipe))
    other_user.run("mkfifo", str(pipe / "control"))
    for rank in ("0", "1"):
        env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe), "GICBENCH_LOCAL_RANK": rank,
               "CUDA_MPS_LOG_DIRECTORY": str(pipe.parent / "log")}  # fmt: skip
        with pytest.raises(ConfigError, match=f"owned by {other_user.name}"):
            ensure_mps(env)


def test_sweep_lock_that_is_a_fifo_is_refused(tmp_path: Path, no_launch) -> None:
    d = tmp_path / "sweep"
    d.mkdir()
    os.mkfifo(d / ".lock")
    with pytest.raises(ConfigError, match="FIFO"):
        _sweep(d)


def test_submitted_script_path_that_is_a_link_is_replaced_not_followed(
    tmp_path: Path, monkeypatch
) -> None:
    from gicbench.cli.main import main

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text("#!/bin/sh\necho 123\n")
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    victim = root_only_file(tmp_path)
    script = tmp_path / "job.sbatch"
    script.symlink_to(victim)
    assert main(["jobs", "submit", "single-node", "--script", str(script)]) == 0
    assert victim.read_text() == SECRET
    assert "#SBATCH" in script.read_text() and not script.is_symlink()
