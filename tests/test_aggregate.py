"""gicbench.aggregate: one rule for the live table and analyze, and the agreement check."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from agreement import assert_live_matches_offline, differences, offline_rows

from gicbench.aggregate import (
    aggregate_point,
    aggregate_rows,
    header,
    rank_summaries,
    summarize_samples,
)
from gicbench.analysis import tables
from gicbench.experiments.registry import Column
from gicbench.output import Printer
from gicbench.trace import TraceWriter, write_manifest


def _sender(rank: int, rate: float, lat_ns: int | None = None, **extra: Any) -> list[dict]:
    samples = {} if lat_ns is None else {"window_ns": np.full(10, lat_ns, dtype=np.int64)}
    return rank_summaries(rank, "sender", {"msg_rate_mps": rate, "gbps": rate / 10,
                                           "validated": True, "wall_s": 0.1 * rank, **extra},
                          samples)


def test_rates_are_summed_over_senders_with_the_per_rank_median_beside() -> None:
    summaries = [
        *_sender(0, 10.0, 1000),
        *rank_summaries(1, "receiver", {"validated": True, "wall_s": 0.5}, {}),
        *_sender(2, 14.0, 3000),
        *rank_summaries(3, "receiver", {"validated": True, "wall_s": 0.2}, {}),
    ]
    row = aggregate_rows({"size": 8}, summaries)
    # 4 ranks, 2 pairs: the job's rate is the sum over the 2 senders; receivers do not count.
    assert row["msg_rate_mps"] == 24.0 and row["msg_rate_mps_per_rank"] == 12.0
    assert row["gbps"] == pytest.approx(2.4) and row["ranks"] == 2
    assert row["role"] == "sender" and row["metric"] == "window_ns"
    # windows of the stream, named as such (a window is not one message's latency)
    assert row["window_p50_us"] == 2.0 and row["slowest_rank"] == 2
    assert row["slowest_window_p50_us"] == 3.0
    assert row["count"] == 20
    # Bookkeeping over every rank: validated by all, wall time of the slowest.
    assert row["validated"] is True and row["wall_s"] == 0.5


def test_validation_failure_on_a_receiver_reaches_the_row() -> None:
    summaries = [*_sender(0, 1.0), *rank_summaries(1, "receiver", {"validated": False}, {})]
    assert aggregate_rows({}, summaries)["validated"] is False


def test_other_measuring_roles_get_prefixed_columns() -> None:
    # Fan-in: three senders to one target that measures what it received.
    summaries = [s for r in (1, 2, 3) for s in _sender(r, 5.0, 1000 * (r + 1))]
    summaries += rank_summaries(0, "target", {"msg_rate_mps": 14.0}, {})
    row = aggregate_rows({"size": 8}, summaries)
    assert row["role"] == "sender" and row["ranks"] == 3 and row["msg_rate_mps"] == 15.0
    assert row["target_ranks"] == 1 and row["target_msg_rate_mps"] == 14.0


def test_idle_and_passive_ranks_only_validate() -> None:
    summaries = [*_sender(0, 2.0, 500), *rank_summaries(2, "idle", {"validated": True}, {})]
    row = aggregate_rows({}, summaries)
    assert row["ranks"] == 1 and row["msg_rate_mps"] == 2.0


def test_a_point_nobody_measured_keeps_a_row() -> None:
    rows = aggregate_point({"size": 8}, rank_summaries(0, "receiver", {"validated": True}, {}))
    assert rows == [{"size": 8, "metric": "", "role": "", "ranks": 0, "validated": True}]


def test_several_metrics_give_one_row_each() -> None:
    samples = {"issue_ns": np.array([100, 200]), "completion_ns": np.array([1000, 3000])}
    rows = aggregate_point({}, rank_summaries(0, "sender", {}, samples))
    assert [r["metric"] for r in rows] == ["issue_ns", "completion_ns"]
    assert rows[1]["p50_us"] == 2.0
    with pytest.raises(ValueError, match="aggregate_point"):
        aggregate_rows({}, rank_summaries(0, "sender", {}, samples))


def test_summary_without_a_metric_name_still_counts() -> None:
    legacy = {"rank": 0, "role": "sender", **summarize_samples(np.array([1000, 2000]))}
    row = aggregate_rows({}, [legacy])
    assert row["ranks"] == 1 and row["p50_us"] == 1.5 and row["metric"] == "samples"


def test_live_and_analyze_headers_are_the_same() -> None:
    out = io.StringIO()
    printer = Printer("table", out)
    keys = ["size", "msg_rate_mps", "msg_rate_mps_per_rank", "gbps", "p50_us", "p999_us",
            "slowest_p50_us"]
    printer.begin_experiment("x", [Column("old header", k) for k in keys])
    printed = out.getvalue()
    for k in keys:
        assert tables.header(k) == header(k) and header(k) in printed
    assert header("msg_rate_mps") == "M msg/s (sum)"
    assert header("msg_rate_mps_per_rank") == "M msg/s per rank (median)"
    assert "old header" not in printed
    # A key aggregate does not know keeps the experiment's own header.
    printer.begin_experiment("y", [Column("my knob", "knob")])
    assert "my knob" in out.getvalue()


# ---- live rows against the traces -------------------------------------------------------------


def _harness_like_run(run_dir: Path, world: int = 4, seed: int = 3) -> list[dict[str, Any]]:
    """Write a run as the harness does (even ranks send, odd ranks receive) and return the rows
    the live Printer would print (through its JSON output, as `gicbench run --json`)."""
    write_manifest(run_dir, {"world_size": world, "status": "running"})
    writers = [TraceWriter(run_dir, r, world, {}) for r in range(world)]
    rng = np.random.default_rng(seed)
    out = io.StringIO()
    printer = Printer("json", out)
    sweep = [("single-op", {"size": s, "mode": "put_completion", "list": [1, s]}) for s in (8, 64)]
    sweep += [("msg-rate", {"size": 8, "qps": q, "batch": 4}) for q in (1, 2, 4)]
    for exp, params in sweep:
        summaries: list[dict[str, Any]] = []
        for rank, w in enumerate(writers):
            role = "sender" if rank % 2 == 0 else "receiver"
            samples: dict[str, np.ndarray] = {}
            results: dict[str, Any] = {"validated": True, "wall_s": float(rng.uniform(0, 1))}
            if role == "sender":
                metric = "completion_ns" if exp == "single-op" else "window_ns"
                samples[metric] = rng.lognormal(7, 0.3, 257).astype(np.int64)
                if exp == "msg-rate":
                    rate = float(rng.uniform(1, 20))
                    results.update(msg_rate_mps=rate, gbps=rate * 8e-3,
                                   messages=int(rng.integers(1000, 9000)),
                                   elapsed_ns=int(rng.integers(10**6, 10**7)))
            with w.begin_point(exp, params) as p:
                for m, ns in samples.items():
                    p.add_samples(m, ns)
                p.set_results({"role": role, **results})
            summaries += rank_summaries(rank, role, results, samples)
        printer.row(exp, aggregate_rows(params, summaries))
    for w in writers:
        w.finish()
    write_manifest(run_dir, {"world_size": world, "status": "complete"})
    printer.finish({})
    return json.loads(out.getvalue())["results"]


def test_live_rows_match_analyze(tmp_path: Path) -> None:
    live = _harness_like_run(tmp_path)
    assert len(live) == 5
    assert_live_matches_offline(tmp_path, live)
    rates = [r for r in offline_rows(tmp_path) if r["experiment"] == "msg-rate"]
    assert all(r["ranks"] == 2 for r in rates)


def test_agreement_check_catches_a_wrong_live_number(tmp_path: Path) -> None:
    live = _harness_like_run(tmp_path)
    live[3]["msg_rate_mps"] = live[3]["msg_rate_mps_per_rank"]  # the old live rule
    with pytest.raises(AssertionError, match=r"msg-rate row 1 .*msg_rate_mps live="):
        assert_live_matches_offline(tmp_path, live)
    del live[3]["msg_rate_mps"]
    assert any("msg_rate_mps live=None" in p for p in differences(live, offline_rows(tmp_path)))
    with pytest.raises(AssertionError, match="3 live rows, 2 from the traces"):
        assert_live_matches_offline(tmp_path, [*live[:2], live[0]])


def test_empty_statistics_are_null_in_live_json() -> None:
    out = io.StringIO()
    printer = Printer("json", out)
    printer.row("x", {"p50_us": math.nan, "size": 8})
    printer.finish({})
    assert json.loads(out.getvalue())["results"][0]["p50_us"] is None


def test_counts_sum_exactly_as_ints() -> None:
    big = 2**53 + 1
    summaries = [{"rank": r, "role": "sender", "metric": "", "messages": big} for r in (0, 1)]
    row = aggregate_rows({}, summaries)
    assert row["messages"] == 2 * big and isinstance(row["messages"], int)
