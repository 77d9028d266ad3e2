"""-J/--output-file FILE: the results as JSON or CSV (by suffix) in a file beside the table, as
nccl-tests' -J; --json/--csv stay on stdout."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from launching import launch

from gicbench.cli.main import main
from gicbench.config import RunConfig
from gicbench.errors import ConfigError
from gicbench.experiments.registry import Column
from gicbench.output import Printer

COLS = [Column("size(B)", "size", "{:d}"), Column("p50(µs)", "p50_us")]
ROWS = [{"size": 8, "p50_us": 1.5}, {"size": 64, "p50_us": 2.5}]


def _print(printer: Printer) -> None:
    printer.preamble(["a run"], {"gicbench": "test"})
    printer.begin_experiment("single-op", COLS)
    for row in ROWS:
        printer.row("single-op", row)
    printer.finish({"trace": "runs/x"})


def test_table_on_stdout_json_in_the_file(tmp_path: Path) -> None:
    out, path = io.StringIO(), tmp_path / "r.json"
    _print(Printer("table", out, file=path))
    assert "size(B)" in out.getvalue() and "# trace: runs/x" in out.getvalue()
    doc = json.loads(path.read_text())
    assert doc["gicbench"] == "test" and doc["trace"] == "runs/x"
    assert [r["p50_us"] for r in doc["results"]] == [1.5, 2.5]
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temporary left


def test_json_on_stdout_csv_in_the_file(tmp_path: Path) -> None:
    out, path = io.StringIO(), tmp_path / "r.CSV"
    _print(Printer("json", out, file=path))
    assert json.loads(out.getvalue())["results"][0]["size"] == 8  # stdout stays one document
    rows = list(csv.DictReader(io.StringIO(path.read_text())))
    assert [r["size"] for r in rows] == ["8", "64"] and rows[0]["experiment"] == "single-op"


@pytest.mark.parametrize(("name", "allowed"), [
    ("r.txt", "ending .json or .csv"),
    ("nodir/r.json", "existing directory"),
    ("old.json", "does not exist yet"),
])
def test_bad_output_file_is_refused(tmp_path: Path, name: str, allowed: str) -> None:
    (tmp_path / "old.json").write_text("{}")
    with pytest.raises(ConfigError) as e:
        RunConfig.build(experiments=["single-op"], output_file=tmp_path / name)
    assert "output_file (-J)" in str(e.value) and allowed in str(e.value)


def test_bad_output_file_refused_by_the_command_line(tmp_path: Path, capsys) -> None:
    assert main(["run", "single-op", "-J", str(tmp_path / "r.txt")]) == 2
    assert "output_file (-J)" in capsys.readouterr().err


def test_run_writes_the_file_beside_the_table(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    r = launch(2, "run", "single-op", "-n", "50", "-w", "5", "--modes", "issue",
               "-J", str(path), "-o", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    assert "p50(µs)" in r.stdout and f"# results: {path}" in r.stdout
    doc = json.loads(path.read_text())
    assert doc["results"] and doc["results"][0]["experiment"] == "single-op"
    assert doc["config"]["output_file"] == str(path)


def test_a_failed_run_still_writes_what_it_measured(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    r = launch(2, "run", "single-op", "-n", "50", "-w", "5", "--modes", "issue", "-e", "64",
               "-f", "8", "-J", str(path), "-o", str(tmp_path / "run"),
               env={"GICBENCH_FAULT": "raise:1:1"})
    assert r.returncode != 0
    doc = json.loads(path.read_text())
    assert doc["status"] == "incomplete" and "injected fault" in doc["reason"]
    assert [row["size"] for row in doc["results"]] == [8]  # point 0 finished, point 1 failed


def test_the_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    """A name planted as a link (dangling or not) is refused up front, and the file is created
    exclusively in its checked directory: nothing is written where the link points."""
    from gicbench.config import check_output_file
    from gicbench.errors import ConfigError

    target = tmp_path / "elsewhere.json"
    link = tmp_path / "out.json"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="does not exist yet"):
        check_output_file(link)
    assert not target.exists()
