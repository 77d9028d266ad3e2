"""Where a NIC model produced a number, every output says so: rank aggregation of the model's
results, the live table's mark, analysis tables, report.md and its figures, `gicbench doctor`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from experiment_runs import write_run
from launching import gicbench

from gicbench.aggregate import aggregate_point, rank_summaries
from gicbench.output import model_mark

PRESET = "cx7-200g-ib-hopper"


def _summaries(saturated: list[bool], late: list[float]) -> list[dict]:
    out = []
    for rank, (s, f) in enumerate(zip(saturated, late, strict=True)):
        res = {"msg_rate_mps": 5.0, "nic_model": PRESET, "nic_model_saturated": s,
               "nic_model_late_fraction": f}  # fmt: skip
        out += rank_summaries(rank, "sender" if rank == 0 else "receiver", res, {})
    return out


def test_any_saturated_rank_flags_the_row() -> None:
    row = aggregate_point({"size": 8}, _summaries([False, True], [0.0, 0.4]))[0]
    assert row["nic_model"] == PRESET
    assert row["nic_model_saturated"] is True  # a receiver's engine counts too
    assert row["nic_model_late_fraction"] == pytest.approx(0.4)
    row = aggregate_point({"size": 8}, _summaries([False, False], [0.0, 0.001]))[0]
    assert row["nic_model_saturated"] is False


def test_the_live_table_marks_modelled_and_saturated_rows() -> None:
    assert model_mark({"p50_us": 1.0}) == ""
    assert model_mark({"nic_model": "none"}) == ""
    assert model_mark({"nic_model": PRESET, "nic_model_saturated": False}) == \
        f"  [modelled: {PRESET}]"
    assert "saturated" in model_mark({"nic_model": PRESET, "nic_model_saturated": True})


def _run(tmp_path: Path, saturated: bool) -> Path:
    rng = np.random.default_rng(1)
    points = [("single-op", {"size": s, "payload": "inline", "transport": "rc",
                             "mode": "put_completion"},
               {"completion_ns": (3500 * rng.lognormal(0, 0.05, 200)).astype(np.int64)},
               {"nic_model": PRESET, "nic_model_saturated": saturated and s == 64,
                "nic_model_late_fraction": 0.2 if saturated and s == 64 else 0.0})
              for s in (8, 64)]  # fmt: skip
    return write_run(tmp_path / "run", points)


def test_analysis_tables_and_the_report_say_which_model(tmp_path: Path) -> None:
    run = _run(tmp_path, saturated=True)
    r = gicbench("report", str(run))
    assert r.returncode == 0, r.stderr
    report = (run / "report.md").read_text()
    assert f"NIC model: {PRESET}" in report and "not a measurement of hardware" in report
    assert "engine below model" in report  # the column, and the note on its yes rows
    assert "the CPU engine was slower than the modelled NIC" in report
    r = gicbench("analyze", str(run), "--json")
    assert r.returncode == 0, r.stderr
    assert PRESET in r.stdout and "nic_model_saturated" in r.stdout


def test_a_measured_run_has_no_model_note(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    run = write_run(tmp_path / "m", [("single-op", {"size": 8, "payload": "inline",
                                                     "transport": "rc", "mode": "issue"},
                                      {"issue_ns": (300 * rng.lognormal(0, 0.05, 200))
                                       .astype(np.int64)}, {})])  # fmt: skip
    assert gicbench("report", str(run)).returncode == 0
    text = (run / "report.md").read_text()
    assert "Modelled" not in text and "| nic model | - |" in text


def test_figures_of_modelled_rows_say_so(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from gicbench.analysis import plots
    from gicbench.analysis import report as report_mod

    notes: list[tuple[object, str]] = []
    real = plots.save_figure

    def spy(fig, out, modelled=False, caveat=""):
        notes.append((modelled, caveat))
        return real(fig, out, modelled, caveat)

    monkeypatch.setattr(report_mod.plots, "save_figure", spy)
    report_mod.write_report(_run(tmp_path / "ok", saturated=False))
    assert notes and all(n == (PRESET, "") for n in notes)
    notes.clear()  # rows the engine set, not the model: every figure says how many
    report_mod.write_report(_run(tmp_path / "sat", saturated=True))
    said = "engine below the model at 1 of 2 rows: those figures are the engine's"
    assert notes and all(n == (PRESET, said) for n in notes), notes


def test_doctor_lists_the_models() -> None:
    r = gicbench("doctor", "--json")
    assert r.returncode == 0, r.stderr
    models = {m["name"]: m for m in json.loads(r.stdout)["nic_models"]}
    assert "none" in models and PRESET in models
    assert models[PRESET]["source"].endswith("nic_models.toml") and models[PRESET]["sha256"]
