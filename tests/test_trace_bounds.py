"""Counts and files a run directory names are bounded before they are used: a manifest's
world_size or points_per_rank, a point index, run.json's size; only regular files are opened
(a FIFO would block, a link to /dev/urandom would be read forever). Each is refused with one
line and exit 2, in bounded time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from test_trace_damage import _write

from gicbench.errors import ConfigError, TraceError
from gicbench.sweep.manifest import point_runs
from gicbench.trace import open_run, read_manifest

ANALYZE_TIMEOUT_S = 60  # a refusal takes a second or two; a blocked open never returns


def analyze(*args: str) -> subprocess.CompletedProcess:
    """`gicbench analyze` in its own process, under a memory limit, so a hang or an endless
    read fails this test instead of the test session."""
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)); "
    code = limit + "from gicbench.cli.main import main; raise SystemExit(main())"
    try:
        return subprocess.run([sys.executable, "-c", code, "analyze", *args],
                              capture_output=True, text=True, timeout=ANALYZE_TIMEOUT_S,
                              check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"gicbench analyze {' '.join(args)} did not return in {ANALYZE_TIMEOUT_S} s")


def refused_in_one_line(r: subprocess.CompletedProcess, *texts: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr
    for text in texts:
        assert text in r.stderr, r.stderr


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "run.json").read_text())


def _set_manifest(run_dir: Path, **fields: object) -> None:
    (run_dir / "run.json").write_text(json.dumps({**_manifest(run_dir), **fields}))


@pytest.mark.parametrize("world_size", [10**30, 1 << 21, True, -1, 2.0])
def test_world_size_out_of_bounds_is_refused_at_once(tmp_path: Path, world_size) -> None:
    _write(tmp_path, run_id="run-a")
    _set_manifest(tmp_path, world_size=world_size)
    with pytest.raises(TraceError, match=r"world_size=.*an int in 1\.\.1048576"):
        open_run(tmp_path)


def test_a_large_world_size_within_bounds_is_one_problem(tmp_path: Path) -> None:
    """1<<20 ranks of which 2 have files: the missing ones are one problem, found quickly."""
    _write(tmp_path, run_id="run-a")
    _set_manifest(tmp_path, world_size=1 << 20)
    with open_run(tmp_path) as run:
        missing = [p for p in run.problems if "missing" in p]
    assert missing == ["ranks 2..1048575 (1048574 ranks): trace files rank-NNNNN.h5 are missing"]


@pytest.mark.parametrize("points", [10**30, -1, True])
def test_points_per_rank_out_of_bounds_is_a_problem(tmp_path: Path, points) -> None:
    _write(tmp_path, run_id="run-a")
    _set_manifest(tmp_path, points_per_rank=points)
    with open_run(tmp_path) as run:
        assert any("invalid points_per_rank" in p for p in run.problems), run.problems


def test_a_huge_point_index_is_refused_without_counting_to_it(tmp_path: Path) -> None:
    _write(tmp_path, run_id="run-a", points_per_rank=2)
    with h5py.File(tmp_path / "rank-00001.h5", "a") as f:
        f.move("points/00001", "points/99999999999999")
    with open_run(tmp_path) as run:
        assert any("99999999999999" in p for p in run.problems), run.problems


def test_run_json_as_a_fifo_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, run_id="run-a")
    (tmp_path / "run.json").unlink()
    os.mkfifo(tmp_path / "run.json")
    refused_in_one_line(analyze(str(tmp_path)), "run.json", "not a regular file")


def test_a_rank_file_as_a_fifo_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, run_id="run-a")
    (tmp_path / "rank-00001.h5").unlink()
    os.mkfifo(tmp_path / "rank-00001.h5")
    refused_in_one_line(analyze(str(tmp_path)), "rank 1", "not a regular file")


@pytest.mark.parametrize("target", ["/dev/urandom", "/dev/zero"])
def test_run_json_linked_to_a_device_is_refused(tmp_path: Path, target: str) -> None:
    _write(tmp_path, run_id="run-a")
    (tmp_path / "run.json").unlink()
    (tmp_path / "run.json").symlink_to(target)
    refused_in_one_line(analyze(str(tmp_path)), "run.json", "not a regular file")


def test_a_rank_file_linked_to_a_device_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, run_id="run-a")
    (tmp_path / "rank-00000.h5").unlink()
    (tmp_path / "rank-00000.h5").symlink_to("/dev/zero")
    refused_in_one_line(analyze(str(tmp_path)), "rank 0", "not a regular file")


def test_an_oversized_run_json_is_refused_without_reading_it(tmp_path: Path) -> None:
    _write(tmp_path, run_id="run-a")
    with open(tmp_path / "run.json", "r+b") as f:
        f.truncate(8 << 30)  # sparse: 8 GiB of size, no blocks
    with pytest.raises(TraceError, match=r"run\.json is 8589934592 bytes.*at most"):
        read_manifest(tmp_path)


def test_a_linked_run_directory_and_run_json_still_work(tmp_path: Path) -> None:
    """Links are followed to regular files: a run reached through a link is analysed."""
    real = _write(tmp_path / "real", run_id="run-a")
    (tmp_path / "link").symlink_to(real)
    (real / "run.json").rename(real / "manifest.json")
    (real / "run.json").symlink_to("manifest.json")
    with open_run(tmp_path / "link") as run:
        assert run.problems == []


# ---- sweep.json and the runs it names ------------------------------------------------------------


def _sweep(tmp_path: Path, doc: dict | None = None) -> Path:
    from gicbench.sweep.spec import SCHEMA

    sweep = tmp_path / "sweep"
    (sweep / "points").mkdir(parents=True)
    _write(sweep / "points" / "p0", run_id="run-a")
    point = {"name": "p0", "status": "complete", "attempts": []}
    doc = doc or {"schema": SCHEMA, "points": [point]}
    (sweep / "sweep.json").write_text(json.dumps(doc))
    return sweep


def test_a_sweep_reads_its_point_runs(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    assert point_runs(sweep) == [sweep / "points" / "p0"]


def in_child(code: str) -> str:
    """Run `code` in a child Python under a memory limit and a timeout; its stdout."""
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))\n"
    try:
        done = subprocess.run([sys.executable, "-c", limit + code], capture_output=True,
                              text=True, timeout=ANALYZE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not return in {ANALYZE_TIMEOUT_S} s: {code}")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("kind", ["fifo", "urandom", "huge"])
def test_sweep_json_that_is_no_small_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    sweep = _sweep(tmp_path)
    path = sweep / "sweep.json"
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "urandom":
        path.symlink_to("/dev/urandom")
    else:
        path.write_text("{}")
        os.truncate(path, 8 << 30)
    got = in_child(
        "from gicbench.errors import ConfigError\n"
        "from gicbench.sweep.manifest import load_manifest\n"
        f"try:\n    load_manifest({str(sweep)!r})\n"
        "except ConfigError as e:\n    print('refused', e)\n")
    assert got.startswith("refused invalid sweep manifest="), got


def test_a_point_run_json_that_is_a_fifo_has_no_status(tmp_path: Path) -> None:
    sweep = _sweep(tmp_path)
    run_json = sweep / "points" / "p0" / "run.json"
    run_json.unlink()
    os.mkfifo(run_json)
    got = in_child("from pathlib import Path\nfrom gicbench.sweep.manifest import run_status\n"
                   f"print(run_status(Path({str(run_json.parent)!r})))\n")
    assert got == "None"


@pytest.mark.parametrize("name", ["../../etc", "/etc", 7, None, "a/b"])
def test_sweep_points_with_bad_names_are_refused(tmp_path: Path, name: object) -> None:
    from gicbench.sweep.spec import SCHEMA

    point = {"name": name, "status": "complete", "attempts": []}
    sweep = _sweep(tmp_path, {"schema": SCHEMA, "points": [point]})
    with pytest.raises(ConfigError, match="sweep manifest"):
        point_runs(sweep)


@pytest.mark.parametrize(
    ("field", "value"),
    [("config", [1]), ("experiments", "single-op"), ("status", 3), ("status", None)],
)
def test_run_json_fields_of_the_wrong_kind_are_refused(tmp_path: Path, field, value) -> None:
    """A field of the wrong kind is damage, refused in one line."""
    _write(tmp_path, run_id="run-a")
    _set_manifest(tmp_path, **{field: value})
    with pytest.raises(TraceError, match=rf"{field} is .*expected"):
        open_run(tmp_path)
    r = analyze(str(tmp_path))
    assert r.returncode == 2
    refused_in_one_line(r, field)


def test_run_json_without_the_config_its_rank_files_have_is_a_problem(tmp_path: Path) -> None:
    """`config: null` skipped the check that every rank file was written with the run's config,
    and the run was analysed as complete."""
    _write(tmp_path, run_id="run-a")
    _set_manifest(tmp_path, config=None)
    with open_run(tmp_path) as run:
        assert any("run.json has none to check it against" in p for p in run.problems)
    r = analyze(str(tmp_path))
    assert r.returncode == 2 and "has a config, run.json has none" in r.stderr
