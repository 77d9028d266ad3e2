"""Load a run directory into a tidy table and aggregate ranks the way the seeds report them.

load_run streams: one rank file open at a time and one sample dataset in memory at a time, so
128 ranks x 10^6 samples need about one dataset's worth of memory. Sample statistics are in
nanoseconds, like the samples (df.attrs["unit"] == "ns").

Columns of load_run: experiment, point, rank, metric, count, mean, min, p50, p99, p99.9, max,
closed, then one column per parameter, per result and per NIC counter delta (counter_<name>).
A point with no sample datasets still gets one row (metric "", statistics NaN) so its results
are kept. Names of the parameter/result/counter columns are in df.attrs["params"/"results"/
"counters"]; a parameter or result whose name collides with a fixed column is prefixed with
"param_" / "result_". Non-scalar values (lists, dicts) are stored as JSON strings.
"""

from __future__ import annotations

import json
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gicbench.errors import ConfigError, TraceError
from gicbench.trace import Point, RankTrace, open_run

PERCENTILES = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9}
STATS = ("count", "mean", "min", "p50", "p99", "p99.9", "max")
LATENCY_STATS = ("p50", "p99", "p99.9", "mean", "min", "max")
ID_COLUMNS = ("experiment", "point", "rank", "metric")
FIXED_COLUMNS = frozenset((*ID_COLUMNS, *STATS, "closed", "ranks", "slowest_rank"))


def summarize(ns: np.ndarray) -> dict[str, float]:
    """count, mean, min, p50, p99, p99.9 and max of one sample array (NaN when empty)."""
    if ns.size == 0:
        return {"count": 0, **{k: float("nan") for k in STATS if k != "count"}}
    qs = np.percentile(ns, list(PERCENTILES.values()))
    return {
        "count": int(ns.size),
        "mean": float(ns.mean(dtype=np.float64)),
        "min": float(ns.min()),
        **{name: float(q) for name, q in zip(PERCENTILES, qs, strict=True)},
        "max": float(ns.max()),
    }


def _cell(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    return value


def _columns(point: Point, names: dict[str, dict[str, str]]) -> dict[str, Any]:
    """Parameter, result and counter-delta columns of one point (collisions prefixed)."""
    out: dict[str, Any] = {}
    for kind, values in (("params", point.params), ("results", point.results)):
        prefix = "param_" if kind == "params" else "result_"
        for key, value in values.items():
            col = names[kind].get(key)
            if col is None:
                col = prefix + key if key in FIXED_COLUMNS or key in out else key
                names[kind][key] = col
            out[col] = _cell(value)
    for key, delta in point.counter_deltas.items():
        col = "counter_" + key
        names["counters"][key] = col
        out[col] = delta
    return out


def refuse_message(path: Path, problems: list[str]) -> str:
    shown = "\n  ".join(problems[:20])
    more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
    return (f"run {path} is incomplete:\n  {shown}{more}\n"
            "use --allow-incomplete (allow_incomplete=True) to analyse what is there anyway")


Names = dict[str, dict[str, str]]


def _rank_rows(rank: RankTrace, allow_incomplete: bool) -> tuple[list[dict[str, Any]], Names,
                                                                 list[str]]:
    """Rows of one rank file, read point by point with one sample dataset in memory at a time."""
    rows: list[dict[str, Any]] = []
    names: Names = {"params": {}, "results": {}, "counters": {}}
    problems: list[str] = []
    with rank:
        try:
            for point in rank.points():
                extra = _columns(point, names)
                base = {"experiment": point.experiment, "point": point.index,
                        "rank": rank.rank, "closed": point.closed}
                for metric in point.metrics or [""]:
                    stats = (summarize(rank.samples(point.index, metric)) if metric
                             else summarize(np.empty(0, dtype=np.int64)))
                    rows.append({**base, "metric": metric, **stats, **extra})
        except (OSError, KeyError, ValueError, RuntimeError) as exc:  # a .partial cut mid-point
            if not allow_incomplete:
                raise TraceError(f"{rank.path}: unreadable: {exc}") from exc
            problems.append(f"rank {rank.rank}: stopped reading {rank.path.name}: {exc}")
    return rows, names, problems


def _rank_rows_job(job: tuple[Path, int, dict[str, Any], bool, bool]) -> tuple[
        list[dict[str, Any]], Names, list[str]]:
    path, rank, attrs, partial, allow_incomplete = job
    return _rank_rows(RankTrace(path, rank, attrs, partial), allow_incomplete)


def load_run(path: Path | str, allow_incomplete: bool = False, workers: int = 1) -> pd.DataFrame:
    """One row per (experiment, point, rank, metric); see the module docstring for columns.

    An incomplete run (missing/partial/aborted ranks, interrupted points, manifest not
    complete) raises TraceError listing the problems unless allow_incomplete is set; then the
    problems are kept in df.attrs["problems"] and df.attrs["status"] is "incomplete".
    workers > 1 reads that many rank files in parallel processes (each still streams).
    """
    if workers < 1:
        raise ConfigError("workers", workers, "an int >= 1")
    path = Path(path)
    run = open_run(path)
    if run.problems and not allow_incomplete:
        raise TraceError(refuse_message(path, run.problems))
    if workers == 1 or len(run.ranks) < 2:
        parts = [_rank_rows(rank, allow_incomplete) for rank in run.ranks]
    else:
        jobs = [(r.path, r.rank, r.attrs, r.partial, allow_incomplete) for r in run.ranks]
        ctx = mp.get_context("spawn")  # no fork: h5py and threads do not survive it well
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            parts = list(pool.map(_rank_rows_job, jobs))
    rows: list[dict[str, Any]] = []
    names: Names = {"params": {}, "results": {}, "counters": {}}
    problems = list(run.problems)
    for part_rows, part_names, part_problems in parts:
        rows += part_rows
        for kind, mapping in part_names.items():
            for key, col in mapping.items():
                names[kind].setdefault(key, col)
        problems += part_problems
    order = [*ID_COLUMNS, *STATS, "closed"]
    df = pd.DataFrame(rows, columns=None if rows else order)
    extra_cols = [c for c in df.columns if c not in order]
    df = df[order + extra_cols]
    df.attrs.update({
        "run": str(path), "status": "incomplete" if problems else "complete",
        "problems": problems, "unit": "ns", "manifest": run.manifest,
        "params": list(dict.fromkeys(names["params"].values())),
        "results": list(dict.fromkeys(names["results"].values())),
        "counters": list(dict.fromkeys(names["counters"].values())),
    })
    return df


def _combine(series: pd.Series) -> Any:
    """Median of numbers, all() of booleans, the common value (or "mixed") of anything else."""
    vals = series.dropna()
    if vals.empty:
        return np.nan
    if pd.api.types.is_bool_dtype(vals) or all(isinstance(v, (bool, np.bool_)) for v in vals):
        return bool(vals.astype(bool).all())
    if pd.api.types.is_numeric_dtype(vals):
        return float(vals.median())
    uniq = vals.unique()
    return uniq[0] if len(uniq) == 1 else "mixed"


def aggregate_ranks(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (experiment, point, metric) over ranks, as the seeds report:

    - median rank: each statistic is the median over ranks (p50, p99, ... stay ordered);
    - slowest rank: the rank with the largest mean; its statistics as slowest_<stat>;
    - count: samples over all ranks; ranks: how many ranks contributed;
    - results: median over ranks (booleans: all ranks), numeric results also as <name>_sum
      (the aggregate over ranks, e.g. a message rate summed over senders);
    - counter deltas: summed over ranks.
    """
    params = [c for c in df.attrs.get("params", []) if c in df.columns]
    results = [c for c in df.attrs.get("results", []) if c in df.columns]
    counters = [c for c in df.attrs.get("counters", []) if c in df.columns]
    out: list[dict[str, Any]] = []
    for (experiment, point, metric), g in df.groupby(["experiment", "point", "metric"],
                                                     sort=True, dropna=False):
        row: dict[str, Any] = {"experiment": experiment, "point": point, "metric": metric}
        for p in params:
            row[p] = _combine(g[p])
        row["ranks"] = int(g["rank"].nunique())
        row["count"] = int(g["count"].sum())
        for s in LATENCY_STATS:
            row[s] = float(g[s].median()) if g[s].notna().any() else np.nan
        means = g["mean"]
        slow = g.loc[means.idxmax()] if means.notna().any() else None
        row["slowest_rank"] = int(slow["rank"]) if slow is not None else -1
        for s in LATENCY_STATS:
            row["slowest_" + s] = float(slow[s]) if slow is not None else np.nan
        for r in results:
            row[r] = _combine(g[r])
            if pd.api.types.is_numeric_dtype(g[r]) and not pd.api.types.is_bool_dtype(g[r]):
                row[r + "_sum"] = float(g[r].sum(min_count=1))
        for c in counters:
            row[c] = float(g[c].sum(min_count=1))
        row["closed"] = bool(g["closed"].all())
        out.append(row)
    agg = pd.DataFrame(out)
    if not agg.empty:  # the run's own order: experiments and metrics as they were measured
        agg = agg.sort_values(["point"], kind="stable").reset_index(drop=True)
    agg.attrs.update({k: v for k, v in df.attrs.items()})
    return agg
