"""gicbench analyze / report through their argparse entry points."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from trace_helpers import make_run

from gicbench.analysis.cli import (
    add_analyze_args,
    add_report_args,
    main,
    run_analyze,
    run_report,
)
from gicbench.trace import TraceWriter, write_manifest


def _analyze(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_analyze_args(parser)
    return parser.parse_args(argv)


def _report(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_report_args(parser)
    return parser.parse_args(argv)


@pytest.fixture
def run_a(tmp_path: Path) -> Path:
    return make_run(tmp_path / "a", world_size=2, n=300, seed=1)


def test_analyze_prints_size_first_tables(run_a: Path, capsys) -> None:
    assert run_analyze(_analyze([str(run_a)])) == 0
    out = capsys.readouterr().out
    assert "single-op (median rank)" in out and "msg-rate (median rank)" in out
    header = next(line for line in out.splitlines() if "size(B)" in line)
    assert header.index("size(B)") < header.index("p50(µs)") < header.index("p99.9(µs)")
    assert "M msg/s" in out and "GB/s" in out


def test_analyze_json_is_valid_and_in_microseconds(run_a: Path, capsys) -> None:
    assert run_analyze(_analyze([str(run_a), "--json"])) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["runs"][0]["status"] == "complete"
    rows = doc["experiments"]["single-op"]
    first = rows[0]
    assert first["size"] == 8 and first["metric"] == "issue_ns"
    assert 0.2 < first["p50_us"] < 0.5  # synthetic issue latency is ~0.3 µs
    rates = doc["experiments"]["msg-rate"]
    # msg_rate_mps is summed over the 2 ranks: 2 * (2 * qps * sqrt(batch)).
    assert {(r["qps"], r["batch"], round(r["msg_rate_mps"], 6)) for r in rates} >= {
        (1, 1, 4.0),
        (4, 16, 64.0),
    }


def test_analyze_csv(run_a: Path, capsys) -> None:
    assert run_analyze(_analyze([str(run_a), "--csv", "-x", "single-op"])) == 0
    table = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert list(table.columns[:2]) == ["experiment", "size"]
    assert set(table["experiment"]) == {"single-op"} and len(table) == 9


def test_compare_runs_side_by_side(run_a: Path, tmp_path: Path, capsys) -> None:
    run_b = make_run(tmp_path / "b", world_size=2, n=300, seed=1)
    assert run_analyze(_analyze([str(run_a), str(run_b), "--json"])) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["label"] for r in doc["runs"]] == ["A", "B"]
    for row in doc["experiments"]["single-op"]:
        assert row["ratio p50_us B/A"] == pytest.approx(1.0)  # same seed: identical samples
    assert run_analyze(_analyze([str(run_a), str(run_b)])) == 0
    out = capsys.readouterr().out
    assert "p50 B/A" in out and "A = " in out


def test_slowest_rank_view(run_a: Path, capsys) -> None:
    run_analyze(_analyze([str(run_a), "--json"]))
    median = json.loads(capsys.readouterr().out)["experiments"]["single-op"][0]["p50_us"]
    run_analyze(_analyze([str(run_a), "--json", "--rank-stat", "slowest"]))
    slowest = json.loads(capsys.readouterr().out)["experiments"]["single-op"][0]["p50_us"]
    assert slowest > median  # rank 1 is 5% slower in the synthetic run


def test_incomplete_run_refused_then_flagged(run_a: Path, capsys) -> None:
    (run_a / "rank-00001.h5").unlink()
    assert run_analyze(_analyze([str(run_a)])) == 2
    err = capsys.readouterr().err
    assert "rank 1: trace file rank-00001.h5 is missing" in err and "--allow-incomplete" in err
    assert run_analyze(_analyze([str(run_a), "--allow-incomplete"])) == 0
    assert "INCOMPLETE" in capsys.readouterr().out
    assert run_analyze(_analyze([str(run_a), "--allow-incomplete", "--json"])) == 0
    assert json.loads(capsys.readouterr().out)["runs"][0]["status"] == "incomplete"
    assert run_report(_report([str(run_a)])) == 2
    assert run_report(_report([str(run_a), "--allow-incomplete"])) == 0
    assert "**Incomplete run**" in (run_a / "report.md").read_text()


def test_unknown_directory_is_refused(tmp_path: Path, capsys) -> None:
    assert main(["analyze", str(tmp_path / "nope")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_report_writes_markdown_and_pngs(run_a: Path) -> None:
    assert run_report(_report([str(run_a)])) == 0
    text = (run_a / "report.md").read_text()
    assert "## single-op" in text and "## msg-rate" in text
    assert "| size(B) |" in text and "p99.9(µs)" in text
    images = [
        line.split("](")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")
    ]
    assert "plots/single-op-latency.png" in images and "plots/msg-rate-vs-batch.png" in images
    for image in images:
        assert (run_a / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reports_written_into_one_folder_keep_their_own_plots(run_a: Path, tmp_path: Path
                                                             ) -> None:  # fmt: skip
    """-o a.md and -o b.md in one folder: each report's figures in its own NAME-plots/, so the
    second report does not overwrite the first one's PNGs."""
    folder = tmp_path / "reports"
    for name in ("a", "b"):
        assert run_report(_report([str(run_a), "-o", str(folder / f"{name}.md")])) == 0
    for name in ("a", "b"):
        text = (folder / f"{name}.md").read_text()
        images = [ln.split("](")[1].rstrip(")") for ln in text.splitlines() if ln.startswith("![")]
        assert images and all(i.startswith(f"{name}-plots/") for i in images), images
        for image in images:
            assert (folder / image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (folder / "plots").exists()


def test_new_experiment_gets_a_generic_section(tmp_path: Path) -> None:
    run = tmp_path / "run"  # the report goes beside it: a path inside a run is refused
    write_manifest(run, {"world_size": 1, "status": "complete", "experiments": ["clock-sweep"]})
    rng = np.random.default_rng(0)
    with TraceWriter(run, 0, 1, {}) as w:
        for mhz in (502, 995, 1845):
            with w.begin_point("clock-sweep", {"sm_clock_mhz": mhz, "size": 8}) as p:
                p.add_samples("issue_ns", (2929e3 / mhz + 270 + rng.normal(0, 5, 50)).astype(int))
    out = tmp_path / "elsewhere" / "r.md"
    assert run_report(_report([str(run), "-o", str(out)])) == 0
    text = out.read_text()
    assert "## clock-sweep" in text and "| size(B) | sm_clock_mhz |" in text
    assert "| 8 | 502 | issue_ns |" in text and "Fixed: ranks=1." in text


def test_compare_on_chosen_keys(tmp_path: Path, capsys) -> None:
    def one_point(run_dir: Path, batch: int, rate: float) -> Path:
        write_manifest(run_dir, {"world_size": 1, "status": "complete"})
        with TraceWriter(run_dir, 0, 1, {}) as w, w.begin_point(
                "msg-rate", {"size": 8, "batch": batch, "qps": 4}) as p:
            p.add_samples("window_ns", np.full(10, 1_000_000))
            p.set_results({"msg_rate_mps": rate})
        return run_dir

    a, b = one_point(tmp_path / "b1", 1, 10.0), one_point(tmp_path / "b16", 16, 25.0)
    assert run_analyze(_analyze([str(a), str(b), "--json"])) == 0
    rows = json.loads(capsys.readouterr().out)["experiments"]["msg-rate"]
    assert len(rows) == 2 and rows[0]["ratio msg_rate_mps B/A"] is None  # batch differs
    assert run_analyze(_analyze([str(a), str(b), "--json", "--on", "size"])) == 0
    rows = json.loads(capsys.readouterr().out)["experiments"]["msg-rate"]
    assert len(rows) == 1 and rows[0]["ratio msg_rate_mps B/A"] == pytest.approx(2.5)
    assert run_analyze(_analyze([str(a), str(b), "--on", "nope"])) == 2
    assert "lacks ['nope']" in capsys.readouterr().err


def test_compare_on_keys_that_repeat_is_refused(run_a: Path, capsys) -> None:
    assert run_analyze(_analyze([str(run_a), str(run_a), "--on", "qps", "-x", "msg-rate"])) == 2
    assert "rows sharing them" in capsys.readouterr().err
