"""analyze and report group rows by what the user varied: one crossover per goodput curve, one
clock fit per timing, tables in size order within each configuration; and window statistics of
rate experiments are named windows everywhere (live table, analyze, JSON/CSV)."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
import pytest
from experiment_runs import clock_sweep, msg_rate, payload, proxy_rate, write_run
from launching import gicbench, launch

from gicbench.aggregate import aggregate_rows, header, rank_summaries
from gicbench.analysis.cli import add_analyze_args, run_analyze
from gicbench.analysis.load import aggregate_ranks, load_run
from gicbench.analysis.tables import experiment_table
from gicbench.experiments import registry
from gicbench.output import Printer


def _analyze_json(run: Path, capsys) -> dict:
    parser = argparse.ArgumentParser()
    add_analyze_args(parser)
    assert run_analyze(parser.parse_args([str(run), "--json"])) == 0
    return json.loads(capsys.readouterr().out)


def _crossovers(doc: dict, experiment: str = "payload") -> list[dict]:
    return [f for f in doc["fits"].get(experiment, []) if f["fit"] == "crossover"]


def test_a_per_size_message_count_does_not_split_the_payload_curve(tmp_path: Path,
                                                                   capsys) -> None:
    run = write_run(tmp_path / "r", payload(np.random.default_rng(0), derived_messages=True))
    doc = _analyze_json(run, capsys)
    (fit,) = _crossovers(doc)
    assert fit["n"] == 14 and fit["group"] == {}
    assert fit["parameters"]["size"]["value"] == 8 << 9
    sizes = [r["size"] for r in doc["experiments"]["payload"]]
    assert sizes == sorted(sizes)


def test_a_result_named_like_a_parameter_keeps_the_parameter(tmp_path: Path, capsys) -> None:
    # proxy-rate records the messages it moved; payload's points carry a --messages cap with
    # the same name. Whichever comes first, the cap stays a parameter and payload one curve.
    rng = np.random.default_rng(0)
    run = write_run(tmp_path / "r", [*proxy_rate(rng)[:1], *payload(rng, derived_messages=False)])
    df = load_run(run)
    assert "messages" in df.attrs["results"] and "param_messages" in df.attrs["params"]
    rows = experiment_table(aggregate_ranks(df), "payload")
    assert set(rows["param_messages"]) == {20_000}
    assert rows["messages"].nunique() > 1  # what each point moved
    doc = _analyze_json(run, capsys)
    assert len(_crossovers(doc)) == 1
    sizes = [r["size"] for r in doc["experiments"]["payload"]]
    assert sizes == sorted(sizes)


def test_one_clock_fit_per_timing_not_per_clock(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "r", clock_sweep(np.random.default_rng(0)))
    doc = _analyze_json(run, capsys)
    fits = doc["fits"]["clock-sweep"]
    assert sorted(f["group"]["metric"] for f in fits) == ["completion_ns", "issue_ns"]
    assert all(f["n"] == 3 and "error" not in f for f in fits)


def test_curve_keys_keep_what_was_varied() -> None:
    import pandas as pd

    from gicbench.analysis.tables import curve_keys

    t = pd.DataFrame({"size": [8, 64, 8, 64], "batch": [1, 1, 16, 16],
                      "messages": [100, 50, 100, 50], "qps": [1, 1, 1, 1]})
    assert curve_keys(t, "size", ["batch", "messages", "qps"]) == ["batch"]
    assert curve_keys(t, "size", ["messages", "qps"]) == []


def test_real_payload_run_gives_one_crossover(tmp_path: Path) -> None:
    """proxy-rate then payload through mini-proxy on the emulated NIC: the combination whose
    traces once split payload into a one-point crossover per size."""
    out = tmp_path / "run"
    r = launch(2, "run", "proxy-rate", "payload", "--submitter", "proxy", "--producer", "host",
               "--handoff", "baseline", "-b", "8", "-e", "512", "-f", "4", "-w", "10",
               "--messages", "2000", "--point-bytes", "64K", "--sweep-workers", "1",
               "--sweep-rings", "1", "--sweep-batch", "1,4", "-o", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    a = gicbench("analyze", str(out), "--json")
    assert a.returncode == 0, a.stderr
    doc = json.loads(a.stdout)
    (fit,) = _crossovers(doc)
    assert fit["n"] == 4 and "error" not in fit
    sizes = [row["size"] for row in doc["experiments"]["payload"]]
    assert sizes == [8, 32, 128, 512]
    text = gicbench("analyze", str(out)).stdout
    assert text.count("crossover fit") == 1


# ---- window statistics ------------------------------------------------------------------------


def test_window_statistics_are_named_windows() -> None:
    summaries = rank_summaries(0, "sender", {"msg_rate_mps": 5.0},
                               {"window_ns": np.full(10, 2000, dtype=np.int64)})
    row = aggregate_rows({"size": 8}, summaries)
    assert row["window_p50_us"] == 2.0 and row["slowest_window_p50_us"] == 2.0
    assert "p50_us" not in row and "slowest_p50_us" not in row
    assert header("window_p50_us") == "window p50(µs)"
    assert header("slowest_window_p50_us") == "slowest-rank window p50(µs)"
    latency = aggregate_rows({}, rank_summaries(0, "sender", {}, {"rtt_ns": np.full(4, 1000)}))
    assert latency["p50_us"] == 1.0 and "window_p50_us" not in latency


@pytest.mark.parametrize("experiment", ["msg-rate", "payload", "proxy-rate"])
def test_live_window_columns_say_window(experiment: str) -> None:
    from gicbench.config import RunConfig
    from gicbench.plan import make_plan

    knobs = {"submitter": "proxy"} if experiment == "proxy-rate" else {}
    cfg = RunConfig.build(experiments=[experiment], **knobs)
    (exp,) = make_plan(cfg).experiments
    cols = exp.columns()
    assert {c.key for c in cols} & {"window_p50_us"}
    out = io.StringIO()
    Printer("table", out).begin_experiment(experiment, cols)
    printed = out.getvalue()
    assert "window p50(µs)" in printed
    assert " p50(µs)" not in printed.replace("window p50(µs)", "")
    assert registry.get(experiment).name == experiment


def test_analyze_names_window_columns(tmp_path: Path, capsys) -> None:
    run = write_run(tmp_path / "r", msg_rate(np.random.default_rng(0)))
    doc = _analyze_json(run, capsys)
    row = doc["experiments"]["msg-rate"][0]
    assert "window_p50_us" in row and "p50_us" not in row
    parser = argparse.ArgumentParser()
    add_analyze_args(parser)
    assert run_analyze(parser.parse_args([str(run)])) == 0
    text = capsys.readouterr().out
    assert "window p50(µs)" in text and "│ p50(µs)" not in text and "┃ p50(µs)" not in text
    parser = argparse.ArgumentParser()
    add_analyze_args(parser)
    assert run_analyze(parser.parse_args([str(run), "--csv"])) == 0
    assert "window_p50_us" in capsys.readouterr().out.splitlines()[0].split(",")
