"""moe-dispatch through `analyze` and `report` on synthetic traces with known truth: the job's
figure per round (the slowest rank's mean), the mean and median over rounds, the paired change
against gdaki per round, and for the wait sweep the floor, the knee and the exposed-time fit
recovering R and I; the Fig. 5- and Fig. 6-style heatmaps in report.md."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from experiment_runs import (
    MOE_CHANGE,
    MOE_DRIFT,
    MOE_OFFSETS,
    MOE_SLOW,
    MOE_TOKENS,
    MOE_TRUTH,
    MOE_WAITS,
    exposed_truth,
    gdaki_send,
    in_flight,
    write_moe_run,
)
from launching import gicbench

from gicbench.analysis import moe
from gicbench.analysis.fits import AnalysisError, fit_wait_row
from gicbench.analysis.load import aggregate_ranks, load_run


@pytest.fixture(scope="module")
def factor_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_moe_run(tmp_path_factory.mktemp("moe") / "factor", wait_sweep=False)


@pytest.fixture(scope="module")
def wait_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_moe_run(tmp_path_factory.mktemp("moe") / "wait", wait_sweep=True)


def _rounds(run: Path) -> pd.DataFrame:
    return moe.round_table(aggregate_ranks(load_run(run)))


# ---- the reductions ---------------------------------------------------------------------------


def test_the_job_figure_is_the_slowest_rank_mean_per_round(factor_run: Path) -> None:
    rounds = _rounds(factor_run)
    assert len(rounds) == 5 * 4 * len(MOE_TOKENS) * 2 * 2  # one row per point
    row = rounds[
        (rounds["backend"] == "gdaki")
        & (rounds["round"] == 1)
        & (rounds["tokens"] == 16)
        & (rounds["topk"] == 8)
        & (rounds["sm_cap"] == 32)
    ].iloc[0]
    slowest = 1 + MOE_SLOW * 3
    assert row["send_us"] == pytest.approx(gdaki_send(16, 32, 8) * 1.2 * slowest, abs=1e-3)
    assert row["slowest_rank"] == 3 and row["ranks"] == 4
    assert not moe.is_wait_sweep(rounds)


def test_factor_sweep_mean_over_rounds_and_paired_change(factor_run: Path) -> None:
    s = moe.summary(_rounds(factor_run))
    assert s.attrs["headline"] == "mean" and s.attrs["figure"] == "send_us"
    slowest = 1 + MOE_SLOW * 3
    for rec in s.to_dict(orient="records"):
        base = gdaki_send(rec["tokens"], rec["sm_cap"], rec["topk"]) * slowest
        base *= 1 + MOE_CHANGE[rec["backend"]] / 100
        assert rec["send_mean"] == pytest.approx(base * np.mean(MOE_DRIFT), abs=2e-3)
        assert rec["send_median"] == pytest.approx(base * np.median(MOE_DRIFT), abs=2e-3)
        assert rec["figure_us"] == rec["send_mean"]  # the paper's factor sweep: the mean
        assert rec["rounds"] == 5
        if rec["backend"] == "gdaki":
            assert np.isnan(rec["change_pct"])
        else:  # the drift of each round is divided out exactly
            assert rec["change_pct"] == pytest.approx(MOE_CHANGE[rec["backend"]], abs=0.01)
            assert rec["change_pct_min"] == pytest.approx(MOE_CHANGE[rec["backend"]], abs=0.01)
            assert rec["matched_rounds"] == 5
    assert list(dict.fromkeys(s["backend"])) == list(moe.BACKENDS)


def test_a_round_without_its_reference_is_not_paired() -> None:
    rounds = pd.DataFrame(
        {
            "backend": ["gdaki", "gpi", "gpi"],
            "round": [0, 0, 1],
            "tokens": 8,
            "send_us": [10.0, 5.0, 6.0],
            "wait_us": np.nan,
        }
    )
    change = moe.paired_change(rounds, "send_us")
    assert change.iloc[1] == pytest.approx(-50.0) and np.isnan(change.iloc[2])


def test_wait_sweep_median_floor_knee_and_fit(wait_run: Path) -> None:
    rounds = _rounds(wait_run)
    assert moe.is_wait_sweep(rounds)
    s = moe.summary(rounds)
    assert s.attrs["headline"] == "median"
    slowest = 1 + MOE_SLOW * 3
    for rec in s.to_dict(orient="records"):
        b = rec["backend"]
        slower = sum(MOE_TRUTH[b][:2]) * MOE_SLOW * 3  # the slowest rank's kernels
        truth = exposed_truth(b, rec["tokens"], rec["wait_us"]) + slower
        # the median over rounds drops the offsets; the mean keeps their mean
        assert rec["figure_us"] == pytest.approx(truth, abs=2e-3)
        assert rec["exposed_mean"] == pytest.approx(truth + np.mean(MOE_OFFSETS), abs=2e-3)
    assert sorted(s["wait_us"].unique()) == list(map(float, MOE_WAITS))  # no delay = wait 0
    fits = moe.wait_fits(rounds)
    assert len(fits) == 4 * len(MOE_TOKENS)
    for rec in fits.to_dict(orient="records"):
        b, t = rec["backend"], rec["tokens"]
        r, c, _, _ = MOE_TRUTH[b]
        i = in_flight(b, t)
        floor = (r + c) * slowest
        assert rec["floor_us"] == pytest.approx(floor, abs=2e-3)
        # the knee: the first wait whose exposed time is within 5% of the floor
        want = next(w for w in MOE_WAITS if floor + max(i - w, 0) <= 1.05 * floor)
        assert rec["knee_us"] == want
        assert rec["send_us"] == pytest.approx(r * slowest, abs=2e-3)
        assert rec["release_us"] == pytest.approx(r * slowest, abs=0.5)
        if i < max(MOE_WAITS):
            assert rec["in_flight_us"] == pytest.approx(i, abs=1e-3), (b, t)
            assert rec["fit_floor_us"] == pytest.approx(floor, abs=1e-3)
            assert rec["receive_us"] == pytest.approx(c * slowest, abs=0.5)
            assert rec["r2"] > 0.9999
            assert rec["flags"] == ""


def test_explicit_zero_wait_wins_over_the_no_delay_point() -> None:
    rounds = pd.DataFrame(
        {
            "backend": "gdaki",
            "round": 0,
            "tokens": 1,
            "wait_us": [np.nan, 0.0, 8.0],
            "exposed_us": [50.0, 40.0, 30.0],
            "send_us": 10.0,
            "wait_actual_us": np.nan,
        }
    )
    s = moe.summary(rounds)
    assert s["wait_us"].tolist() == [0.0, 8.0] and s["figure_us"].tolist() == [40.0, 30.0]


def test_fit_wait_row_recovers_r_and_i_with_noise() -> None:
    rng = np.random.default_rng(3)
    waits = np.array(MOE_WAITS, float)
    for r, c, i in ((10.0, 14.0, 24.0), (20.0, 4.0, 200.0), (8.0, 30.0, 90.0)):
        e = r + c + np.maximum(i - waits, 0) + rng.normal(0, 0.2, waits.size)
        fit = fit_wait_row(waits, e, r + rng.normal(0, 0.1, waits.size))
        assert fit.in_flight == pytest.approx(i, abs=1.0)
        assert fit.floor == pytest.approx(r + c, abs=0.5)
        assert fit.release == pytest.approx(r, abs=0.1)
        assert fit.in_flight_err is not None and fit.in_flight_err < 1.0
        assert fit.curve[1][-1] == pytest.approx(fit.floor)


def test_fit_wait_row_bounds_and_refusals() -> None:
    waits = np.array([0.0, 8.0, 64.0, 512.0])
    flat = fit_wait_row(waits, np.full(4, 30.0), np.full(4, 10.0))
    assert "at most the smallest wait" in flat.flags[0] and flat.floor == pytest.approx(30.0)
    never = fit_wait_row(waits, 2000.0 - waits, np.full(4, 10.0))
    assert "no floor reached" in never.flags[0]
    with pytest.raises(AnalysisError, match="three or more distinct waits"):
        fit_wait_row(waits[:2], [1.0, 2.0], [1.0, 1.0])
    with pytest.raises(AnalysisError, match="no finite send"):
        fit_wait_row(waits, np.full(4, 30.0), np.full(4, np.nan))


# ---- analyze and report ---------------------------------------------------------------------


def test_analyze_json_has_the_moe_tables(wait_run: Path) -> None:
    r = gicbench("analyze", str(wait_run), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    (run,) = doc["moe_dispatch"]["moe-dispatch"]
    fits = {(f["backend"], f["tokens"]): f for f in run["tables"]["exposed_fit"]["rows"]}
    assert fits[("gpi", 16)]["knee_us"] == 96
    assert fits[("gpi", 16)]["in_flight_us"] == pytest.approx(84.0, abs=1e-3)
    assert len(run["tables"]["over_rounds"]["rows"]) == 4 * len(MOE_TOKENS) * len(MOE_WAITS)


def test_analyze_prints_the_tables(factor_run: Path, wait_run: Path) -> None:
    r = gicbench("analyze", str(factor_run))
    assert r.returncode == 0, r.stderr
    assert "factor sweep" in r.stdout and "vs gdaki" in r.stdout and "-40.0" in r.stdout
    r = gicbench("analyze", str(wait_run))
    assert r.returncode == 0, r.stderr
    assert "in-flight window" in r.stdout and "I(µs)" in r.stdout and "R(µs)" in r.stdout


def test_report_draws_the_heatmaps(factor_run: Path, wait_run: Path, tmp_path: Path) -> None:
    for run, names in (
        (factor_run, ["moe-dispatch-send-topk4", "moe-dispatch-send-topk8"]),
        (wait_run, ["moe-dispatch-exposed"]),
    ):
        out = tmp_path / run.name / "report.md"
        r = gicbench("report", str(run), "-o", str(out))
        assert r.returncode == 0, r.stderr
        text = out.read_text()
        for name in names:
            png = out.parent / "plots" / f"{name}.png"
            assert png.exists() and png.stat().st_size > 10_000, name
            assert f"plots/{name}.png" in text
        assert "Plot missing" not in text
    text = (tmp_path / "wait" / "report.md").read_text()
    assert "in-flight window" in text and "the paper's Fig. 6" in text


def test_heatmap_cells_hold_the_paired_change() -> None:
    from gicbench.analysis import plots

    s = pd.DataFrame(
        {
            "backend": ["gdaki", "gdaki", "gpi", "gpi"],
            "tokens": [1, 2, 1, 2],
            "sm_cap": 128,
            "ranks": 8,
            "figure_us": [10.0, 20.0, 5.0, 30.0],
            "change_pct": [np.nan, np.nan, -50.0, 50.0],
        }
    )
    grids = plots.moe_grids(s, rows=["ranks", "sm_cap"], col="tokens")
    assert grids["gdaki"][0].tolist() == [[10.0, 20.0]]
    assert grids["gpi"][0].tolist() == [[-50.0, 50.0]]


def test_no_moe_tables_for_other_experiments(tmp_path: Path) -> None:
    agg = pd.DataFrame({"experiment": ["msg-rate"], "point": [0], "metric": [""]})
    assert moe.tables(agg) == {} and not moe.present(agg)


def test_several_ep_sizes_pair_within_their_own_runs(tmp_path: Path) -> None:
    """A sweep directory joins runs of different EP sizes: each cell (EP included) is paired
    within its own rounds, and the heatmap gets one row per EP x SM cap."""
    from gicbench.analysis import plots

    aggs, offset = [], 0
    for world in (2, 3):
        run = write_moe_run(tmp_path / f"ep{world}", wait_sweep=False, world=world, rounds=2,
                        caps=(64,), topks=(8,))  # fmt: skip
        a = aggregate_ranks(load_run(run))
        aggs.append(a.assign(point=a["point"] + offset))
        offset += int(a["point"].max()) + 1
    s = moe.summary(moe.round_table(pd.concat(aggs, ignore_index=True)))
    assert sorted(s["ranks"].unique()) == [2, 3]
    gpi = s[s["backend"] == "gpi"]
    assert gpi["change_pct"].to_numpy() == pytest.approx(-40.0, abs=0.01)
    assert (gpi["matched_rounds"] == 2).all()
    grid, rows, cols = plots.moe_grids(s, ["ranks", "sm_cap"], "tokens")["gdaki"]
    assert rows == [(2, 64), (3, 64)] and cols == list(MOE_TOKENS)
    assert np.isfinite(grid).all()
