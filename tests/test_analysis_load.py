"""load_run (tidy table, streaming, refusal of incomplete runs) and aggregate_ranks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from trace_helpers import SIZES, make_run

from gicbench.aggregate import summarize_samples
from gicbench.analysis.load import STATS, aggregate_ranks, load_run
from gicbench.errors import TraceError
from gicbench.trace import RankTrace, TraceWriter, open_run, write_manifest


def test_tidy_table_matches_the_raw_samples(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=3, n=500)
    df = load_run(tmp_path)
    assert df.attrs["status"] == "complete" and df.attrs["problems"] == []
    # 9 single-op points (one metric each) + 6 msg-rate points, on 3 ranks.
    assert len(df) == 3 * 15
    assert list(df.columns[:12]) == ["experiment", "point", "rank", "role", "metric", *STATS]
    assert {"size", "payload", "mode", "qps", "batch"} <= set(df.attrs["params"])
    assert {"msg_rate_mps", "gbps", "validated"} <= set(df.attrs["results"])
    assert sorted(df.attrs["counters"]) == ["counter_doorbells", "counter_wqes"]
    with open_run(tmp_path) as run:
        raw = run.ranks[2].samples(4, "completion_ns")
    row = df[(df["rank"] == 2) & (df["point"] == 4)].iloc[0]
    assert row["metric"] == "completion_ns" and row["count"] == 500
    assert row["p50_us"] == pytest.approx(np.percentile(raw, 50) / 1e3)
    assert row["p999_us"] == pytest.approx(np.percentile(raw, 99.9) / 1e3)
    assert row["mean_us"] == pytest.approx(raw.mean() / 1e3) and row["max_us"] == raw.max() / 1e3
    assert row["counter_wqes"] == 500 and row["size"] == 64
    single = df[df["experiment"] == "single-op"]
    assert sorted(single["size"].unique()) == list(SIZES)


def test_parallel_workers_give_the_same_table(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=3, n=100)
    pd.testing.assert_frame_equal(load_run(tmp_path), load_run(tmp_path, workers=2))
    with pytest.raises(ValueError, match="workers"):
        load_run(tmp_path, workers=0)


def test_summarize_empty_and_values() -> None:
    empty = summarize_samples(np.empty(0, dtype=np.int64))
    assert empty["count"] == 0 and np.isnan(empty["p50_us"])
    s = summarize_samples(np.arange(1000, 1_001_000, 1000, dtype=np.int64))
    assert s["min_us"] == 1 and s["max_us"] == 1000 and s["p50_us"] == pytest.approx(500.5)


def test_streaming_keeps_one_rank_file_open(tmp_path: Path, monkeypatch) -> None:
    make_run(tmp_path, world_size=4, n=50)
    open_now: set[int] = set()
    peak = 0
    real_h5 = RankTrace._h5

    def tracking(self: RankTrace):
        nonlocal peak
        open_now.add(self.rank)
        peak = max(peak, len(open_now))
        return real_h5(self)

    real_close = RankTrace.close

    def closing(self: RankTrace) -> None:
        open_now.discard(self.rank)
        real_close(self)

    monkeypatch.setattr(RankTrace, "_h5", tracking)
    monkeypatch.setattr(RankTrace, "close", closing)
    load_run(tmp_path)
    assert peak == 1 and not open_now


def test_incomplete_run_is_refused_unless_allowed(tmp_path: Path) -> None:
    make_run(tmp_path, world_size=3, n=20)
    (tmp_path / "rank-00002.h5").rename(tmp_path / "rank-00002.h5.partial")
    (tmp_path / "rank-00001.h5").unlink()
    with pytest.raises(TraceError, match=r"(?s)incomplete.*rank 1.*missing.*--allow-incomplete"):
        load_run(tmp_path)
    df = load_run(tmp_path, allow_incomplete=True)
    assert df.attrs["status"] == "incomplete" and len(df.attrs["problems"]) == 2
    assert sorted(df["rank"].unique()) == [0, 2]


def test_interrupted_point_is_kept_and_marked(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"world_size": 1, "status": "running"})
    w = TraceWriter(tmp_path, 0, 1, {})
    with w.begin_point("single-op", {"size": 8}) as p:
        p.add_samples("rtt_ns", np.arange(100))
    w.begin_point("single-op", {"size": 16}).add_samples("rtt_ns", np.arange(7))
    w.abort("killed by the test")
    df = load_run(tmp_path, allow_incomplete=True)
    assert df["closed"].tolist() == [True, False]
    assert df["count"].tolist() == [100, 7]
    agg = aggregate_ranks(df)
    assert agg["closed"].tolist() == [True, False]


def test_colliding_names_are_prefixed_and_pointless_points_kept(tmp_path: Path) -> None:
    write_manifest(tmp_path, {"world_size": 1, "status": "complete"})
    with TraceWriter(tmp_path, 0, 1, {}) as w:
        with w.begin_point("odd", {"count": 3, "rank": "x", "list": [1, 2]}) as p:
            p.set_results({"p50_us": 1.5, "mean": 2})
        with w.begin_point("odd", {"count": 4, "rank": "y", "list": [3]}) as p:
            p.add_samples("a_ns", np.array([5, 6]))
    df = load_run(tmp_path)
    assert df["param_count"].tolist() == [3, 4] and df["param_rank"].tolist() == ["x", "y"]
    assert df["list"].tolist() == ["[1, 2]", "[3]"]
    assert df["result_p50_us"].iloc[0] == 1.5 and df["mean"].iloc[0] == 2
    assert df["metric"].tolist() == ["", "a_ns"] and np.isnan(df["p50_us"].iloc[0])
    agg = aggregate_ranks(df)
    assert len(agg) == 2 and agg["slowest_rank"].isna().tolist() == [True, False]


def _three_rank_frame() -> pd.DataFrame:
    rows = []
    for rank, shift in enumerate((100.0, 300.0, 200.0)):
        rows.append(
            {
                "experiment": "e",
                "point": 0,
                "rank": rank,
                "role": "sender",
                "metric": "lat_ns",
                "count": 10,
                "mean_us": shift,
                "min_us": shift - 5,
                "p50_us": shift,
                "p99_us": shift + 10,
                "p999_us": shift + 20,
                "max_us": shift + 30,
                "closed": True,
                "size": 8,
                "msg_rate_mps": float(rank + 1),
                "rate": float(rank + 1),
                "validated": rank != 9,
                "counter_wqes": 10,
            }
        )
    # A receiver: validates, measures nothing, must not count as a rank of the statistics.
    rows.append({"experiment": "e", "point": 0, "rank": 3, "role": "receiver", "metric": "",
                 "count": 0, "closed": True, "size": 8, "validated": True, "counter_wqes": 0})
    df = pd.DataFrame(rows)
    df.attrs.update({"params": ["size"], "results": ["msg_rate_mps", "rate", "validated"],
                     "counters": ["counter_wqes"]})
    return df


def test_aggregate_median_and_slowest_rank() -> None:
    agg = aggregate_ranks(_three_rank_frame())
    assert len(agg) == 1
    row = agg.iloc[0]
    assert row["ranks"] == 3 and row["count"] == 30 and row["size"] == 8
    assert row["role"] == "sender"
    assert row["p50_us"] == 200.0 and row["p99_us"] == 210.0  # median rank
    assert row["slowest_rank"] == 1 and row["slowest_p50_us"] == 300.0  # largest mean
    assert row["slowest_max_us"] == 330.0
    # Declared rates are summed over the measuring ranks, per rank as the median.
    assert row["msg_rate_mps"] == 6.0 and row["msg_rate_mps_per_rank"] == 2.0
    assert row["rate"] == 2.0  # an undeclared result: median over ranks
    assert bool(row["validated"])  # booleans: all ranks, receivers included
    assert row["counter_wqes"] == 30
