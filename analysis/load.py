"""Load a run directory into a tidy table and aggregate ranks with gicbench.aggregate.

load_run streams: one rank file open at a time and one sample dataset in memory at a time, so
128 ranks x 10^6 samples need about one dataset's worth of memory. Per-rank sample statistics
are those of gicbench.aggregate.summarize_samples, in µs (df.attrs["unit"] == "us").

Columns of load_run: experiment, point, rank, role, metric, count, p50_us, p99_us, p999_us,
mean_us, min_us, max_us, closed, then one column per parameter, per result and per NIC counter
delta (counter_<name>). A point with no sample datasets still gets one row (metric "",
statistics NaN) so its results are kept. Names of the parameter/result/counter columns are in
df.attrs["params"/"results"/"counters"]; a parameter or result whose name collides with a fixed
column is prefixed with "param_" / "result_". Non-scalar values (lists, dicts) are stored as
JSON strings.

aggregate_ranks turns it into one row per (experiment, point, metric) with exactly the rule rank
0's live table uses (gicbench.aggregate.aggregate_point), so the two agree number for number.
"""

from __future__ import annotations

import json
import math
import multiprocessing as mp
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gicbench.aggregate import (
    DEFAULT_ROLE,
    NOT_RESULTS,
    SAMPLE_STATS,
    aggregate_point,
    summarize_samples,
)
from gicbench.errors import ConfigError, TraceError
from gicbench.sweep.manifest import is_sweep, point_runs
from gicbench.trace import Point, RankTrace, TraceWarning, open_run
from gicbench.trace.reader import READ_ERRORS

STATS = ("count", *SAMPLE_STATS)
ID_COLUMNS = ("experiment", "point", "rank", "role", "metric")
FIXED_COLUMNS = frozenset((*ID_COLUMNS, *STATS, "closed", "ranks", "slowest_rank"))


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
            if kind == "results" and key in NOT_RESULTS:
                continue  # the role is its own column
            col = names[kind].get(key)
            if col is None:
                # A name that is a parameter somewhere and a result elsewhere (payload's
                # --messages cap, proxy-rate's messages moved) keeps one kind per column,
                # whichever experiment came first.
                other = names["results" if kind == "params" else "params"].get(key)
                clash = key in FIXED_COLUMNS or key in out or other == key
                col = prefix + key if clash else key
                names[kind][key] = col
            out[col] = _cell(value)
    for key, delta in point.counter_deltas.items():
        col = "counter_" + key
        names["counters"][key] = col
        out[col] = delta
    return out


# A refusal shows at most this many problems, one line each; a last line counts the rest.
MAX_PROBLEM_LINES = 20
MAX_LINE_CHARS = 1000


def one_line(text: str, limit: int = MAX_LINE_CHARS) -> str:
    """`text` as one printable line of at most `limit` characters: HDF5's messages span lines,
    and a damaged or hostile file can put anything (escape sequences too) in a name."""
    flat = " ".join(str(text).split())
    flat = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in flat)
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


class RunRefused(TraceError):
    """A run that cannot be analysed as it is: `lines` holds one line per problem."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.path, self.problems = path, problems
        head = f"run {path} is incomplete: "
        shown = problems if len(problems) <= MAX_PROBLEM_LINES else problems[
            : MAX_PROBLEM_LINES - 1]
        self.lines = [one_line(head + p) for p in shown]
        if len(shown) < len(problems):
            self.lines.append(one_line(f"{head}... and {len(problems) - len(shown)} more problems"))
        self.lines[-1] += " (--allow-incomplete analyses what is there)"
        super().__init__("\n".join(self.lines))


def refuse_message(path: Path, problems: list[str]) -> str:
    return str(RunRefused(path, problems))


Names = dict[str, dict[str, str]]


def _rank_rows(rank: RankTrace) -> tuple[list[dict[str, Any]], Names, list[str]]:
    """Rows of one rank file, read point by point with one sample dataset in memory at a time.
    A point that cannot be read, or whose samples fail their checksum, is left out and named."""
    rows: list[dict[str, Any]] = []
    names: Names = {"params": {}, "results": {}, "counters": {}}
    problems: list[str] = []
    with rank:
        try:
            points = list(rank.points())
        except READ_ERRORS as exc:
            problems.append(f"rank {rank.rank}: stopped reading {rank.path.name}: {exc}")
            points = []
        for point in points:
            role = point.results.get("role") or DEFAULT_ROLE
            base = {
                "experiment": point.experiment,
                "point": point.index,
                "rank": rank.rank,
                "role": str(role),
                "closed": point.closed,
            }
            try:  # a damaged dataset loses its point, not the rank's other points
                stats = [
                    (m, summarize_samples(rank.samples(point.index, m))) for m in point.metrics
                ] or [("", summarize_samples(np.empty(0, np.int64)))]
            except READ_ERRORS as exc:
                problems.append(
                    f"rank {rank.rank}: point {point.index} of {rank.path.name} unreadable: {exc}"
                )
                continue
            extra = _columns(point, names)
            for metric, st in stats:
                rows.append({**base, "metric": metric, **st, **extra})
    return rows, names, problems


def _rank_rows_job(
    job: tuple[Path, int, dict[str, Any], bool, frozenset[str]],
) -> tuple[list[dict[str, Any]], Names, list[str]]:
    path, rank, attrs, partial, unreadable = job
    return _rank_rows(RankTrace(path, rank, attrs, partial, unreadable))


def load_run(path: Path | str, allow_incomplete: bool = False, workers: int = 1) -> pd.DataFrame:
    """One row per (experiment, point, rank, metric); see the module docstring for columns.

    An incomplete or damaged run (missing/partial/aborted ranks, interrupted points, manifest
    not complete, data that fails its checksums) raises RunRefused (a TraceError) listing the
    problems unless allow_incomplete is set; then the problems are kept in df.attrs["problems"]
    and df.attrs["status"] is "incomplete". What could not be checked (schema 1 traces have no
    checksums) is in df.attrs["warnings"] and issued as a TraceWarning.
    workers > 1 reads that many rank files in parallel processes (each still streams).
    """
    if workers < 1:
        raise ConfigError("workers", workers, "an int >= 1")
    path = Path(path)
    if is_sweep(path):
        return _load_sweep(path, allow_incomplete, workers)
    run = open_run(path)
    for warning in run.warnings:
        warnings.warn(warning, TraceWarning, stacklevel=2)
    if run.problems and not allow_incomplete:
        raise RunRefused(path, run.problems)
    if workers == 1 or len(run.ranks) < 2:
        parts = [_rank_rows(rank) for rank in run.ranks]
    else:
        jobs = [(r.path, r.rank, r.attrs, r.partial, r.unreadable) for r in run.ranks]
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
    if problems and not allow_incomplete:  # samples that failed their checksums
        raise RunRefused(path, problems)
    order = [*ID_COLUMNS, *STATS, "closed"]
    df = pd.DataFrame(rows, columns=None if rows else order)
    extra_cols = [c for c in df.columns if c not in order]
    df = df[order + extra_cols]
    df.attrs.update(
        {
            "run": str(path),
            "status": "incomplete" if problems else "complete",
            "problems": problems,
            "warnings": list(run.warnings),
            "unit": "us",
            "manifest": run.manifest,
            "params": list(dict.fromkeys(names["params"].values())),
            "results": list(dict.fromkeys(names["results"].values())),
            "counters": list(dict.fromkeys(names["counters"].values())),
        }
    )
    return df


def _load_sweep(path: Path, allow_incomplete: bool, workers: int) -> pd.DataFrame:
    """A sweep directory (gicbench jobs sweep) as one run: its finished points, every
    submission's, concatenated in point order with their point indices made distinct."""
    runs = point_runs(path)
    if not runs:
        raise TraceError(f"{path}: a sweep with no finished point yet (gicbench jobs status)")
    frames, problems, offset = [], [], 0
    for run_dir in runs:
        df = load_run(run_dir, allow_incomplete=allow_incomplete, workers=workers)
        if not df.empty:
            df = df.assign(point=df["point"] + offset)
            offset = int(df["point"].max()) + 1
        frames.append(df)
        problems += [f"{run_dir.name}: {p}" for p in df.attrs["problems"]]
    out = pd.concat(frames, ignore_index=True)
    first = frames[0].attrs
    out.attrs.update(
        {
            **first,
            "run": str(path),
            "problems": problems,
            "warnings": list(dict.fromkeys(w for f in frames for w in f.attrs["warnings"])),
            "status": "incomplete" if problems else "complete",
            "params": list(dict.fromkeys(c for f in frames for c in f.attrs["params"])),
            "results": list(dict.fromkeys(c for f in frames for c in f.attrs["results"])),
            "counters": list(dict.fromkeys(c for f in frames for c in f.attrs["counters"])),
            "sweep_points": [str(r) for r in runs],
        }
    )
    return out


def _value(v: Any) -> Any:
    """A cell as the live harness had it: NaN/None -> None, numpy scalars -> Python."""
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if isinstance(v, np.generic) else v


def aggregate_ranks(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (experiment, point, metric) over ranks, by gicbench.aggregate.aggregate_point
    (the rule of rank 0's live table; see that module): per role, measuring roles only; sample
    statistics are the median over ranks of each rank's value, the slowest rank the one with the
    largest mean; each result combines as declared there (rates summed, with <name>_per_rank the
    median). Also: experiment, point, closed (all ranks closed the point) and NIC counter deltas
    summed over ranks.
    """
    params = [c for c in df.attrs.get("params", []) if c in df.columns]
    results = [c for c in df.attrs.get("results", []) if c in df.columns]
    counters = [c for c in df.attrs.get("counters", []) if c in df.columns]
    out: list[dict[str, Any]] = []
    for (experiment, point), g in df.groupby(["experiment", "point"], sort=True):
        first = g.iloc[0]
        point_params = {p: _value(first[p]) for p in params if _value(first[p]) is not None}
        summaries: list[dict[str, Any]] = []
        for rec in g.to_dict(orient="records"):
            s: dict[str, Any] = {
                "rank": int(rec["rank"]),
                "role": rec["role"],
                "metric": rec["metric"],
            }
            if rec["metric"]:
                s.update({k: _value(rec[k]) for k in STATS})
            for r in results:
                v = _value(rec[r])
                if v is not None:
                    s[r] = v
            summaries.append(s)
        closed = bool(g["closed"].all())
        sums = {c: float(g.drop_duplicates("rank")[c].sum(min_count=1)) for c in counters}
        for row in aggregate_point(point_params, summaries):
            out.append(
                {"experiment": experiment, "point": int(point), **row, **sums, "closed": closed}
            )
    agg = pd.DataFrame(out)
    if not agg.empty:  # the run's own order: experiments and metrics as they were measured
        agg = agg.sort_values(["point"], kind="stable").reset_index(drop=True)
    agg.attrs.update({k: v for k, v in df.attrs.items()})
    return agg
