"""moe-dispatch in the analysis (arXiv 2611.12362, §III-A and §IV-A/B, Figs. 5 and 6): the job's
figure per round, its reduction over rounds, the paired change against the reference backend,
and for the wait sweep the floor, the knee and the exposed-time fit.

Per point (one backend, one round, one cell) the trace has per rank the samples send_ns,
recv_ns, exposed_ns (= send + receive per iteration) and wait_ns. Ranks combine by
gicbench.aggregate (the slowest rank is the one with the largest mean), so the job's figure of a
round is `slowest_mean_us` of the metric: send_ns for the factor sweep (the paper's Fig. 5 times
the dispatch-send kernel), exposed_ns for the wait sweep (Fig. 6 times T_send + T_receive).

Over rounds: the mean and the median, both kept; the headline is what the paper used, the mean
for the factor sweep and the median for the wait sweep. The paired change of a backend is
computed per round against the reference backend (gdaki) of the same round and cell,
100 * (b / ref - 1), then reduced over rounds the same way. A run is a wait sweep when any point
has a requested wait (--wait-us); the no-delay point (wait_us None) is the wait-0 column, as in
the paper, unless the run also asked for an explicit 0.

Wait sweep, per backend and cell without the wait: floor = the lowest headline over the waits,
knee = the shortest requested wait within 5% of it (fits.shortest_wait_near_floor), and the fit
of eqs. 1-3 (fits.fit_wait_row): R, I, the floor F and the receive work C = F - R.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from .fits.common import AnalysisError
from .fits.exposed import fit_wait_row, shortest_wait_near_floor

EXPERIMENT = "moe-dispatch"
REFERENCE = "gdaki"
BACKENDS = ("gdaki", "free-flow", "gpi", "gpi-mc")  # the paper's panel order
# What tells one cell from another, besides the backend, the round and the wait. "ranks" is the
# EP size (every rank sends): a sweep directory can hold several.
CELL = ("ranks", "hidden", "experts", "topk", "sm_cap", "tokens")
WAIT = "wait_us"
TOLERANCE = 0.05  # the paper's near-floor rule
METRICS = {
    "send_ns": "send_us",
    "recv_ns": "recv_us",
    "exposed_ns": "exposed_us",
    "wait_ns": "wait_ns_us",
}


def _rows(agg: pd.DataFrame) -> pd.DataFrame:
    return agg[agg["experiment"] == EXPERIMENT] if "experiment" in agg.columns else agg


def present(agg: pd.DataFrame) -> bool:
    return not agg.empty and EXPERIMENT in set(agg.get("experiment", ()))


def fits_itself(experiment: str, fit: str) -> bool:
    """moe-dispatch's declared exposed fit is made here, per backend and cell of the wait
    sweep (wait_fits), not by the generic table fit, whose columns a dispatch run lacks."""
    return experiment == EXPERIMENT and fit == "exposed"


def cell_keys(table: pd.DataFrame) -> list[str]:
    return [c for c in CELL if c in table.columns]


def round_table(agg: pd.DataFrame) -> pd.DataFrame:
    """One row per point (backend, round, cell, wait): the job's figure of each metric (the
    slowest rank's mean, µs), the slowest rank of the send, the delay as it ran (the median
    rank's mean of wait_ns, or the ranks' wait_actual_us) and whether the point validated."""
    rows = _rows(agg)
    if rows.empty:
        return pd.DataFrame()
    keys = ["point", "backend", "round", *cell_keys(rows)]
    out: dict[Any, dict[str, Any]] = {}
    for rec in rows.to_dict(orient="records"):
        point = int(rec["point"])
        row = out.setdefault(point, {k: rec.get(k) for k in keys})
        row.setdefault(WAIT, rec.get(WAIT))
        metric = rec.get("metric") or ""
        col = METRICS.get(metric)
        if col is None:
            continue
        if metric == "wait_ns":
            row["wait_actual_us"] = rec.get("mean_us")
        else:
            row[col] = rec.get("slowest_mean_us")
        if metric == "send_ns":
            row["slowest_rank"] = rec.get("slowest_rank")
        for extra in ("validated", "wait_actual_us"):
            v = rec.get(extra)
            if v is not None and not (isinstance(v, float) and np.isnan(v)):
                if extra == "wait_actual_us" and "wait_actual_us" in row:
                    continue  # the delay's own samples first
                row[extra] = v
    table = pd.DataFrame(list(out.values()))
    for col in (WAIT, *METRICS.values(), "wait_actual_us"):
        if col not in table.columns:
            table[col] = np.nan
    table[WAIT] = pd.to_numeric(table[WAIT], errors="coerce")
    return (
        table.drop(columns=["wait_ns_us"])
        .sort_values("point", kind="stable")
        .reset_index(drop=True)
    )


def is_wait_sweep(rounds: pd.DataFrame) -> bool:
    return WAIT in rounds.columns and bool(rounds[WAIT].notna().any())


def _wait_axis(rounds: pd.DataFrame) -> pd.DataFrame:
    """The wait sweep's x: the requested wait, the no-delay point as 0 (dropped where the same
    cell also ran an explicit 0, which then stands for 0)."""
    t = rounds.copy()
    none = t[WAIT].isna()
    if not none.any():
        return t
    keys = ["backend", "round", *cell_keys(t)]
    explicit = t[~none & (t[WAIT] == 0)][keys].drop_duplicates()
    if not explicit.empty:
        clash = t[none].merge(explicit, on=keys, how="left", indicator=True)["_merge"] == "both"
        t = t.drop(index=t[none].index[clash.to_numpy()])
    t.loc[t[WAIT].isna(), WAIT] = 0.0
    return t


def figure_column(rounds: pd.DataFrame) -> str:
    """The job's figure the paper reads: exposed time for the wait sweep, else the send."""
    return "exposed_us" if is_wait_sweep(rounds) else "send_us"


def headline(rounds: pd.DataFrame) -> str:
    """The paper's reduction over rounds: the median for the wait sweep, else the mean."""
    return "median" if is_wait_sweep(rounds) else "mean"


def paired_change(rounds: pd.DataFrame, value: str, reference: str = REFERENCE) -> pd.Series:
    """Per point: 100 * (value / the reference backend's value in the same round and cell,
    wait included) - 100. NaN where that round has no reference."""
    keys = ["round", *cell_keys(rounds), WAIT]
    ref = (
        rounds[rounds["backend"] == reference]
        .groupby(keys, dropna=False)[value]
        .first()
        .rename("_ref")
    )
    joined = rounds.join(ref, on=keys)
    return 100.0 * (joined[value] / joined["_ref"] - 1.0)


def _stats(values: pd.Series, name: str) -> dict[str, Any]:
    v = pd.to_numeric(values, errors="coerce").dropna()
    if v.empty:
        return {f"{name}_{s}": np.nan for s in ("mean", "median", "min", "max")}
    return {
        f"{name}_mean": float(v.mean()),
        f"{name}_median": float(v.median()),
        f"{name}_min": float(v.min()),
        f"{name}_max": float(v.max()),
    }


def _order(table: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Backends in the paper's order (others after), then the cell ascending."""
    rank = {b: i for i, b in enumerate(BACKENDS)}
    t = table.assign(_b=table["backend"].map(lambda b: rank.get(b, len(rank))))
    return (
        t.sort_values(["_b", "backend", *keys], kind="stable")
        .drop(columns="_b")
        .reset_index(drop=True)
    )


def summary(rounds: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """One row per backend and cell (and wait): the job's figure over rounds (mean, median,
    min, max, as <figure>_<stat>), the paired change against the reference (change_pct_<stat>),
    how many rounds and matched rounds, and `figure_us` / `change_pct`, the headline the paper
    used (see headline())."""
    if rounds.empty:
        return pd.DataFrame()
    wait = is_wait_sweep(rounds)
    t = _wait_axis(rounds) if wait else rounds.copy()
    value = figure_column(t)
    how = headline(t)
    t["_change"] = paired_change(t, value, reference)
    keys = [*cell_keys(t), *([WAIT] if wait else [])]
    out = []
    for key, g in t.groupby(["backend", *keys], dropna=False, sort=False):
        row = dict(zip(["backend", *keys], key, strict=True))
        row.update(_stats(g[value], value.removesuffix("_us")))
        row.update(_stats(g["_change"], "change_pct"))
        if value != "send_us":
            row["send_us_median"] = float(g["send_us"].median())
        if wait:
            row["wait_actual_us"] = float(
                pd.to_numeric(g["wait_actual_us"], errors="coerce").median()
            )
        row["rounds"] = int(g["round"].nunique())
        row["matched_rounds"] = int(g["_change"].notna().sum())
        if "validated" in g.columns:
            row["validated"] = bool(g["validated"].fillna(False).astype(bool).all())
        out.append(row)
    s = pd.DataFrame(out)
    stem = value.removesuffix("_us")
    s["figure_us"] = s[f"{stem}_{how}"]
    s["change_pct"] = s[f"change_pct_{how}"]
    s.loc[
        s["backend"] == reference,
        ["change_pct", *[f"change_pct_{x}" for x in ("mean", "median", "min", "max")]],
    ] = np.nan
    s.attrs.update({"figure": value, "headline": how, "reference": reference, "wait": wait})
    return _order(s, keys)


def wait_fits(rounds: pd.DataFrame, tolerance: float = TOLERANCE) -> pd.DataFrame:
    """The wait sweep per backend and cell without the wait (the paper: per backend and token
    count): send (median over rounds and waits), the in-flight window (the knee: the shortest
    requested wait whose headline is within `tolerance` of the floor), the floor, and R, I, C
    and R² of the exposed-time fit of eqs. 1-3 on the headlines, against the delays as they ran
    (the requested wait where none was recorded)."""
    s = summary(rounds)
    if s.empty or not s.attrs.get("wait"):
        return pd.DataFrame()
    keys = cell_keys(s)
    out = []
    for key, g in s.groupby(["backend", *keys], dropna=False, sort=False):
        g = g.sort_values(WAIT)
        row: dict[str, Any] = dict(zip(["backend", *keys], key, strict=True))
        waits = g[WAIT].to_numpy(float)
        times = g["figure_us"].to_numpy(float)
        sends = g["send_us_median"].to_numpy(float)
        row["send_us"] = float(np.nanmedian(sends)) if np.isfinite(sends).any() else np.nan
        row["waits"] = len(g)
        try:
            nf = shortest_wait_near_floor(waits, times, tolerance)
            row["knee_us"], row["floor_us"] = float(nf.wait), float(nf.floor)
        except AnalysisError as exc:
            row["knee_us"] = row["floor_us"] = np.nan
            row["flags"] = str(exc)
            out.append(row)
            continue
        actual = g["wait_actual_us"].to_numpy(float)
        x = np.where(np.isfinite(actual), actual, waits)
        try:
            fit = fit_wait_row(x, times, sends)
        except AnalysisError as exc:
            row["flags"] = f"not fitted: {exc}"
            out.append(row)
            continue
        row.update(
            {
                "release_us": fit.release,
                "release_err_us": fit.release_err,
                "in_flight_us": fit.in_flight,
                "in_flight_err_us": fit.in_flight_err,
                "fit_floor_us": fit.floor,
                "receive_us": fit.receive,
                "r2": fit.r2,
                "flags": "; ".join(fit.flags),
            }
        )
        out.append(row)
    fits = pd.DataFrame(out)
    if "flags" not in fits.columns:
        fits["flags"] = ""
    fits["flags"] = fits["flags"].fillna("")
    return _order(fits, keys)


# ---- tables for people ----------------------------------------------------------------------

_HEADERS = {
    "backend": "backend",
    "tokens": "tokens",
    "topk": "top-k",
    "sm_cap": "SM cap",
    "hidden": "hidden",
    "experts": "experts",
    "ranks": "EP",
    WAIT: "wait(µs)",
    "figure_us": "{figure}(µs, {how})",
    "change_pct": "vs {ref}(%, {how})",
    "send_mean": "send mean(µs)",
    "send_median": "send median(µs)",
    "exposed_mean": "exposed mean(µs)",
    "exposed_median": "exposed median(µs)",
    "change_pct_mean": "change mean(%)",
    "change_pct_median": "change median(%)",
    "rounds": "rounds",
    "matched_rounds": "paired rounds",
    "send_us": "send(µs)",
    "knee_us": "in-flight window(µs)",
    "floor_us": "floor(µs)",
    "release_us": "R(µs)",
    "release_err_us": "±R",
    "in_flight_us": "I(µs)",
    "in_flight_err_us": "±I",
    "receive_us": "C(µs)",
    "r2": "R²",
    "flags": "flags",
    "wait_actual_us": "wait ran(µs)",
    "validated": "validated",
}


def header(col: str, attrs: dict[str, Any] | None = None) -> str:
    a = attrs or {}
    text = _HEADERS.get(col, col)
    return text.format(
        figure="exposed" if a.get("wait") else "send",
        how=a.get("headline", ""),
        ref=a.get("reference", REFERENCE),
    )


def fmt_cell(value: Any, col: str) -> str:
    """Cell text: changes in % with a sign and one decimal, R² with four, else tables.fmt."""
    from .tables import fmt

    if (
        col.startswith("change_pct")
        and isinstance(value, (float, np.floating))
        and np.isfinite(value)
    ):
        return f"{float(value):+.1f}"
    if col == "r2" and isinstance(value, (float, np.floating)) and np.isfinite(value):
        return f"{float(value):.4f}"
    if (
        col in (WAIT, "knee_us")
        and isinstance(value, (float, np.floating))
        and float(value).is_integer()
    ):
        return str(int(value))  # a requested wait, as the sweep asked for it
    if col.startswith(("send_", "exposed_")) and not col.endswith("_us"):
        return fmt(value, col + "_us")  # send_mean, exposed_median: µs
    return fmt(value, col)


def display_summary(s: pd.DataFrame) -> pd.DataFrame:
    """The over-rounds table as people read it: the headline and both reductions."""
    if s.empty:
        return s
    stem = "exposed" if s.attrs.get("wait") else "send"
    cols = [
        "backend",
        *cell_keys(s),
        *([WAIT] if s.attrs.get("wait") else []),
        "figure_us",
        "change_pct",
        f"{stem}_mean",
        f"{stem}_median",
        "change_pct_mean",
        "change_pct_median",
        "rounds",
        "matched_rounds",
    ]
    if s.attrs.get("wait"):
        cols.insert(cols.index("figure_us"), "wait_actual_us")
    if "validated" in s.columns and not s["validated"].all():
        cols.append("validated")
    out = s[[c for c in cols if c in s.columns]].copy()
    out.attrs.update(s.attrs)
    return out


def display_fits(f: pd.DataFrame) -> pd.DataFrame:
    cols = [
        "backend",
        *cell_keys(f),
        "send_us",
        "knee_us",
        "floor_us",
        "release_us",
        "release_err_us",
        "in_flight_us",
        "in_flight_err_us",
        "receive_us",
        "r2",
        "flags",
    ]
    return f[[c for c in cols if c in f.columns]]


def constant_columns(table: pd.DataFrame, keys: Sequence[str]) -> dict[str, Any]:
    """Cell parameters holding one value in every row (shown once, in the caption)."""
    return {
        k: table[k].iloc[0]
        for k in keys
        if k in table.columns and len(table) and table[k].nunique(dropna=False) == 1
    }


def tables(agg: pd.DataFrame) -> dict[str, tuple[str, pd.DataFrame]]:
    """What analyze and report show for moe-dispatch: name -> (title, machine-named table)."""
    rounds = round_table(agg)
    if rounds.empty:
        return {}
    s = summary(rounds)
    how = s.attrs["headline"]
    out: dict[str, tuple[str, pd.DataFrame]] = {}
    if s.attrs["wait"]:
        out["over_rounds"] = (
            f"moe-dispatch wait sweep: exposed time T_send + T_receive, the slowest rank's mean "
            f"per round, {how} over rounds (the paper's Fig. 6); change: paired against "
            f"{REFERENCE} per round",
            display_summary(s),
        )
        out["exposed_fit"] = (
            "moe-dispatch wait sweep per backend and token count: send, in-flight window (the "
            f"shortest wait within {TOLERANCE:.0%} of the floor), floor, and the fitted R and I "
            "of the exposed-time model (arXiv 2611.12362 eqs. 1-3; C = F - R)",
            display_fits(wait_fits(rounds)),
        )
    else:
        out["over_rounds"] = (
            f"moe-dispatch factor sweep: dispatch-send time, the slowest rank's mean per round, "
            f"{how} over rounds (the paper's Fig. 5); change: paired against {REFERENCE} per "
            "round, then its mean",
            display_summary(s),
        )
    return out
