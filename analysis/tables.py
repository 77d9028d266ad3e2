"""Summary tables in the users' conventions: size first (bytes), latency in µs, p50/p99/p99.9,
rate in M msg/s, bandwidth in GB/s; headers, units and the rank rule from gicbench.aggregate.
Tables carry machine column names (for JSON/CSV); header()
gives the human header (for the terminal and report.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from gicbench.aggregate import RESULTS, WINDOW_STATS
from gicbench.aggregate import header as _row_header

from .fits import apply as fit_apply

REPORT_HEAD = "# gicbench report: "  # a report's first line: `report -o` replaces only such a file
LAT_STATS = ("p50_us", "p99_us", "p999_us")
# The same statistics of a message stream's windows (msg-rate, payload, proxy-rate).
WINDOW_LAT_STATS = tuple(k for k in WINDOW_STATS if k.removeprefix("window_") in LAT_STATS)
# Results people look for first, in this order; any other result follows.
RESULT_ORDER = ("msg_rate_mps", "msg_rate_mps_per_rank", "gbps", "gbps_per_rank", "messages",
                "bytes_moved")
# Bookkeeping results left out of tables for people (still in JSON/CSV and the data frame).
HIDDEN_RESULTS = frozenset({"wall_s", "elapsed_ns"})
# Always a column, even when constant: users look for the size first.
ALWAYS_SHOWN = frozenset({"size"})
_HEADERS = {
    "interrupted": "interrupted",
    # active-connections over passes (analysis/connections.py)
    "nic_rate_mps": "NIC M msg/s",
    "nic_rate_mps_min": "NIC M msg/s min",
    "nic_rate_mps_max": "NIC M msg/s max",
    "normalized_rate": "normalised rate",
    "normalized_rate_min": "normalised min",
    "normalized_rate_max": "normalised max",
    "passes": "passes",
}


def _known(col: str) -> bool:
    base = col[: -len("_per_rank")] if col.endswith("_per_rank") else col
    return base in RESULTS and base not in ("validated",)


def header(col: str) -> str:
    """Human header of a machine column name (gicbench.aggregate.header, the one the live table
    uses), including per-run and ratio columns."""
    if col.startswith("ratio "):  # "ratio p50_us B/A" -> "p50 B/A"
        _, base, runs = col.split(" ", 2)
        return f"{header(base).split('(')[0].rstrip()} {runs}"
    if " [" in col:  # "p50_us [B]" -> "p50(µs) B"
        base, run = col.split(" [", 1)
        return f"{header(base)} {run.rstrip(']')}"
    return _HEADERS.get(col) or _row_header(col)


def fmt(value: Any, col: str = "") -> str:
    """Cell text: µs with 3 decimals below 1 µs and 2 above, ratios with 3, others 4 digits."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        base = col.split(" [")[0]
        if col.startswith("ratio"):
            return f"{value:.3f}"
        if base.endswith("_us") or _known(base):
            return f"{value:,.3f}" if abs(value) < 1 else f"{value:,.2f}"
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.4g}"
    return str(value)


def _params_of(agg: pd.DataFrame) -> list[str]:
    params = [c for c in agg.attrs.get("params", []) if c in agg.columns]
    params = [c for c in params if agg[c].notna().any()]
    if "size" in params:  # size first, as every benchmark table users know
        params.remove("size")
        params.insert(0, "size")
    return params


def _results_of(agg: pd.DataFrame) -> list[str]:
    """Result columns of aggregated rows (with <name>_per_rank), known ones first."""
    names: list[str] = []
    for c in agg.attrs.get("results", []):
        names += [c, c + "_per_rank"]
    names = [c for c in names if c in agg.columns and agg[c].notna().any()]
    known = [r for r in RESULT_ORDER if r in names]
    return known + [r for r in names if r not in known]


def _integral(series: pd.Series) -> pd.Series:
    if pd.api.types.is_float_dtype(series) and series.dropna().map(float.is_integer).all():
        return series.astype("Int64")
    return series


def experiment_table(agg: pd.DataFrame, experiment: str, rank_stat: str = "median",
                     with_slowest: bool = False, compact: bool = False) -> pd.DataFrame:
    """One experiment's rows of aggregate_ranks() as a display table (machine column names).

    rank_stat "median" shows the median rank's statistics, "slowest" the slowest rank's (under
    the same column names). compact drops the bookkeeping results (HIDDEN_RESULTS) for tables
    meant for people.
    """
    if rank_stat not in ("median", "slowest"):
        raise ValueError(f"invalid rank_stat={rank_stat!r}: allowed ['median', 'slowest']")
    rows = agg[agg["experiment"] == experiment]
    params = [p for p in _params_of(agg) if rows[p].notna().any()]
    results = [r for r in _results_of(agg) if rows[r].notna().any()]
    if compact:
        results = [r for r in results if r not in HIDDEN_RESULTS]
    src = "" if rank_stat == "median" else "slowest_"
    out = pd.DataFrame({p: _integral(rows[p]) for p in params})
    if rows["metric"].ne("").any():
        out["metric"] = rows["metric"]
        for stats in (LAT_STATS, WINDOW_LAT_STATS):
            if stats is WINDOW_LAT_STATS and not _present(rows, stats[0]):
                continue
            if stats is LAT_STATS and _present(rows, WINDOW_LAT_STATS[0]) and not _present(
                    rows, stats[0]):
                continue  # windows only: no per-operation columns full of "-"
            for s in stats:
                out[s] = rows[src + s] if src + s in rows.columns else np.nan
            if with_slowest and "slowest_" + stats[0] in rows.columns:
                out["slowest_" + stats[0]] = rows["slowest_" + stats[0]]
        if with_slowest and "slowest_rank" in rows.columns:
            out["slowest_rank"] = _integral(rows["slowest_rank"].astype(float))
        out["count"] = _integral(rows["count"].astype(float))
    for r in results:
        counts = r in RESULTS and RESULTS[r].integer
        out[r] = _integral(rows[r]) if counts else rows[r]
    if "role" in rows.columns and rows["role"].nunique() > 1:
        out["role"] = rows["role"]
    if "ranks" in rows.columns:
        out["ranks"] = rows["ranks"]
    if "closed" in rows.columns and not rows["closed"].all():
        out["interrupted"] = ~rows["closed"].astype(bool)
    # Metric in the experiment's own order, then one block per configuration (what the user
    # varied, not values derived per point) with the size ascending inside it, as perftest/OSU
    # tables read.
    if "size" in params:
        sort_cols = [*curve_keys(out, "size", params, also=("metric",)), "size"]
    else:
        sort_cols = list(params)
    if "metric" in out.columns:
        out["_m"] = out["metric"].map({m: i for i, m in enumerate(dict.fromkeys(out["metric"]))})
        sort_cols = ["_m", *sort_cols]
    out = out.sort_values(sort_cols, kind="stable", na_position="last") if sort_cols else out
    return out.drop(columns=["_m"], errors="ignore").reset_index(drop=True)


def _present(rows: pd.DataFrame, col: str) -> bool:
    return col in rows.columns and bool(rows[col].notna().any())


def curve_keys(table: pd.DataFrame, x: str, params: Sequence[str],
               also: Sequence[str] = ()) -> list[str]:
    """The parameters that tell one curve of `x` from another: those the user varied.

    A parameter that varies only along x (one value per x: a count derived from the size, the
    clock that was asked for beside the one measured) does not start a curve of its own. Of the
    varying parameters, in the order given, each is dropped when the rows are told apart as well
    without it (with x and `also`, e.g. the metric), so every curve keeps every x it has."""
    if x not in table.columns:
        return [p for p in params if p in table.columns and table[p].nunique(dropna=False) > 1]
    kept = [p for p in params if p != x and p in table.columns
            and table[p].nunique(dropna=False) > 1]
    fixed = [a for a in also if a in table.columns and a not in kept and a != x]

    def clashes(keys: list[str]) -> int:
        cols = [*keys, *fixed, x]
        return int(table.duplicated(subset=cols, keep=False).sum())

    for p in reversed(list(kept)):
        without = [k for k in kept if k != p]
        if clashes(without) == clashes(kept):
            kept = without
    return kept


def fit_input(experiment: str, table: pd.DataFrame,
              params: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """The table (and its parameters) an experiment's fits and figures read: its full display
    table, or for active-connections the median over passes of each point normalised to its
    pass's control (analysis/connections.py)."""
    if experiment == "active-connections":
        from .connections import fit_table

        return fit_table(table, params)
    return table, list(params)


def fit_outcomes(name: str, table: pd.DataFrame,
                 params: Sequence[str]) -> list[fit_apply.FitOutcome]:
    """Fit `name` to an experiment's table: one fit per curve (curve_keys), as analyze and
    report show them."""
    xs = [c for c in fit_apply.X_CANDIDATES.get(name, ()) if c in table.columns]
    if xs and table[xs[0]].nunique() < 2:  # nothing to fit along: say so once
        return [fit_apply.FitOutcome(fit=name, x=xs[0], y="", n=len(table), error=(
            f"needs two or more values of {xs[0]}; the run has "
            f"{table[xs[0]].nunique()}"))]
    keys = curve_keys(table, xs[0], params, also=("metric",)) if xs else list(params)
    outcomes = fit_apply.fit_table(name, table, keys)
    for o in outcomes:  # a curve of one point fits anything: not a result
        if xs and o.error is None and o.data is not None and len(set(o.data[0])) < 2:
            o.error = f"this curve has one {xs[0]} only"
    return outcomes


def split_constant(table: pd.DataFrame, candidates: Sequence[str]) -> tuple[pd.DataFrame,
                                                                             dict[str, Any]]:
    """Drop columns (of `candidates`) holding one value in every row; return them as a dict.

    Tables then show only what varies, with the fixed parameters listed once above them.
    """
    fixed: dict[str, Any] = {}
    for c in candidates:
        if c in ALWAYS_SHOWN:
            continue
        if c in table.columns and len(table) and table[c].nunique(dropna=False) == 1:
            fixed[c] = table[c].iloc[0]
    return table.drop(columns=list(fixed)), fixed


def param_columns(agg: pd.DataFrame) -> list[str]:
    return _params_of(agg)


def caption_candidates(agg: pd.DataFrame) -> list[str]:
    """Columns that move to the caption when constant: parameters, rank count and results
    without a known unit (validated, role ...); rates and bandwidths always stay columns."""
    extra = [r for r in _results_of(agg) if not _known(r)]
    return [*_params_of(agg), "ranks", *extra]


COMPARED = ("p50_us", "p99_us", "msg_rate_mps", "gbps")


def value_columns(table: pd.DataFrame) -> list[str]:
    """Columns a comparison puts side by side: p50, p99 and the rate/bandwidth results."""
    return [c for c in COMPARED if c in table.columns]


def compare_tables(tables: Sequence[tuple[str, pd.DataFrame]],
                   keys: Sequence[str]) -> pd.DataFrame:
    """Join per-run tables on `keys`; each value column appears per run ("p50_us [B]"), then
    the ratio of every later run to the first ("ratio p50_us B/A"). Rows missing in a run are
    NaN. Labels should be short (the CLI uses A, B, C ...)."""
    base_label, base = tables[0]
    values = value_columns(base)
    merged: pd.DataFrame | None = None
    for i, (label, table) in enumerate(tables):
        part = table[[*keys, *[v for v in values if v in table.columns]]].rename(
            columns={v: f"{v} [{label}]" for v in values})
        # Keep the runs' own row order: the baseline's first, then rows only later runs have.
        part = part.assign(**{f"_order{i}": range(len(part))})
        merged = part if merged is None else merged.merge(part, on=list(keys), how="outer")
    assert merged is not None
    order_cols = [f"_order{i}" for i in range(len(tables))]
    merged = merged.sort_values(order_cols, kind="stable", na_position="last")
    merged = merged.drop(columns=order_cols).reset_index(drop=True)
    for label, _ in tables[1:]:
        for v in values:
            a, b = f"{v} [{base_label}]", f"{v} [{label}]"
            if a in merged.columns and b in merged.columns:
                merged[f"ratio {v} {label}/{base_label}"] = merged[b] / merged[a]
    return merged


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-safe records: NaN -> None, numpy scalars -> Python scalars."""
    out = []
    for row in table.astype(object).where(table.notna(), None).to_dict(orient="records"):
        clean = {}
        for k, v in row.items():
            if hasattr(v, "item"):
                v = v.item()
            if isinstance(v, float) and not math.isfinite(v):
                v = None
            clean[str(k)] = v
        out.append(clean)
    return out
