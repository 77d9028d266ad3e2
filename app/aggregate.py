"""One place that says what every measured number is, in what unit, and how ranks combine.

Both rank 0's live table (app/harness.py through app/output.py) and `gicbench analyze`/`report`
(analysis/load.py) build their rows with `aggregate_point`, so the two print the same numbers
under the same headers.

Per rank, the harness (live) and the trace reader (offline) produce one *summary* per sample
metric: {"rank", "role", "metric", **results, **summarize_samples(ns)}; a rank whose point has no
samples gives one summary with metric "". Ranks then combine per role:

- Only *measuring* roles produce numbers: a role measures when one of its ranks has samples or a
  measured result (a rate, a count). Receivers and idle ranks only validate.
- Samples (issue_ns, completion_ns, rtt_ns, window_ns, ...): each rank's percentiles, then the
  median over the role's ranks of each statistic; the slowest rank is the one with the largest
  mean, its statistics as slowest_<stat>; count is summed over ranks. Windows of a message
  stream (window_ns) name theirs window_<stat>, slowest_window_<stat>: a window is not a message.
- Results: each declares its rule (RESULTS below). Rates are summed over the measuring ranks
  ("M msg/s" is the job's total rate) and also given per rank as the median over ranks
  (<name>_per_rank, "M msg/s per rank (median)").
- Bookkeeping results (validated, wall_s) combine over every rank, measuring or not.

With several measuring roles at one point (a pattern where targets measure too), the role with
the most ranks ("sender" first on a tie) gets the plain column names and each other role's
columns are prefixed with "<role>_".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NS_PER_US = 1e3

# ---- samples ----------------------------------------------------------------------------------

# Statistic key -> human header (perftest/OSU style: unit in parentheses, no space). Values are
# µs (count: samples).
SAMPLE_STATS: dict[str, str] = {
    "p50_us": "p50(µs)",
    "p99_us": "p99(µs)",
    "p999_us": "p99.9(µs)",
    "mean_us": "mean(µs)",
    "min_us": "min(µs)",
    "max_us": "max(µs)",
}
_PERCENTILES = (("p50_us", 50.0), ("p99_us", 99.0), ("p999_us", 99.9))
# Samples that time a window of a message stream, not one operation (msg-rate, payload,
# proxy-rate): their statistics are named window_<stat> ("window p50(µs)") in every row, so a
# window's time never reads as one message's latency.
WINDOW_METRIC = "window_ns"
WINDOW_STATS: dict[str, str] = {"window_" + k: "window " + h for k, h in SAMPLE_STATS.items()}


@dataclass(frozen=True)
class SampleMetric:
    """A per-operation sample dataset: raw int64 nanoseconds in the trace."""

    name: str
    meaning: str
    unit: str = "ns"


SAMPLE_METRICS: dict[str, SampleMetric] = {
    m.name: m
    for m in (
        SampleMetric("issue_ns", "time to post one WQE and ring the doorbell"),
        SampleMetric("completion_ns", "post to completion of one put"),
        SampleMetric("rtt_ns", "round trip: put, the peer's reply lands"),
        SampleMetric("window_ns", "one window of a message-rate stream"),
    )
}


def summarize_samples(ns: np.ndarray) -> dict[str, Any]:
    """Per-rank statistics of one sample array (int64 ns) in µs, plus the count.

    An empty array gives count 0 and NaN statistics, so an empty point keeps its row.
    """
    arr = np.asarray(ns)
    if arr.size == 0:
        return {"count": 0, **{k: math.nan for k in SAMPLE_STATS}}
    us = arr.astype(np.float64) / NS_PER_US
    qs = np.percentile(us, [q for _, q in _PERCENTILES])
    out: dict[str, Any] = {k: float(v) for (k, _), v in zip(_PERCENTILES, qs, strict=True)}
    out.update(mean_us=float(us.mean()), min_us=float(us.min()), max_us=float(us.max()))
    out["count"] = int(arr.size)
    return out


# ---- results ----------------------------------------------------------------------------------

# How a result combines over ranks.
SUM, MEDIAN, MAX, ALL, ANY = "sum", "median", "max", "all", "any"


@dataclass(frozen=True)
class Result:
    """A number a rank computes at a point (trace: the point's results)."""

    name: str
    unit: str
    header: str
    combine: str  # SUM, MEDIAN, MAX, ALL or ANY
    measured: bool = True  # False: bookkeeping, combined over every rank, not only measuring
    per_rank: bool = False  # also <name>_per_rank = median over the measuring ranks
    integer: bool = False  # a count: combined values are ints


RESULTS: dict[str, Result] = {
    r.name: r
    for r in (
        Result("msg_rate_mps", "M msg/s", "M msg/s (sum)", SUM, per_rank=True),
        Result("gbps", "GB/s", "GB/s (sum)", SUM, per_rank=True),
        Result("messages", "messages", "messages", SUM, integer=True),
        Result("bytes_moved", "B", "bytes", SUM, integer=True),
        Result("doorbells", "doorbells", "doorbells", SUM, integer=True),
        Result("cqes", "CQEs", "CQEs", SUM, integer=True),
        Result("elapsed_ns", "ns", "elapsed (ns, slowest rank)", MAX, integer=True),
        Result("destinations", "ranks", "destinations", MEDIAN, integer=True),
        Result("validated", "", "validated", ALL, measured=False),
        Result("validated_bytes", "B", "validated bytes", SUM, measured=False, integer=True),
        Result("wall_s", "s", "wall (s, slowest rank)", MAX, measured=False),
        # emu's NIC model (app/fabric/emu/nic_model.py): which model produced the row, and
        # whether any rank's engine was slower than the model (then the engine, not the model,
        # set the row's numbers).
        Result("nic_model", "", "NIC model (modelled)", MEDIAN, measured=False),
        Result("nic_model_saturated", "", "engine below model", ANY, measured=False),
        Result("nic_model_late_fraction", "", "late events (share)", MAX, measured=False),
    )
}
# Results that are not numbers to aggregate at all.
NOT_RESULTS = frozenset({"role", "validated_sources"})
# Roles that never measure, whatever they carry.
PASSIVE_ROLES = frozenset({"receiver", "idle"})
DEFAULT_ROLE = "sender"

# Columns of an aggregated row that are neither parameters nor results.
ROW_HEADERS: dict[str, str] = {
    "size": "size(B)",
    "metric": "metric",
    "role": "role",
    "ranks": "ranks",
    "count": "samples",
    "slowest_rank": "slowest rank",
    **SAMPLE_STATS,
    **WINDOW_STATS,
    **{"slowest_" + k: "slowest-rank " + h for k, h in {**SAMPLE_STATS, **WINDOW_STATS}.items()},
}


def header(key: str) -> str:
    """The one human header of a row key (live table, analyze, report); the key if unknown."""
    if key in ROW_HEADERS:
        return ROW_HEADERS[key]
    if key in RESULTS:
        return RESULTS[key].header
    if key.endswith("_per_rank") and key[: -len("_per_rank")] in RESULTS:
        return RESULTS[key[: -len("_per_rank")]].unit + " per rank (median)"
    return key


def unit_of(key: str) -> str:
    """Unit of a row key ("" when it has none or is unknown)."""
    stat = key.removeprefix("slowest_")
    if stat in SAMPLE_STATS or stat in WINDOW_STATS:
        return "µs"
    base = key[: -len("_per_rank")] if key.endswith("_per_rank") else key
    return RESULTS[base].unit if base in RESULTS else ""


# ---- combining ranks --------------------------------------------------------------------------


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
        v, (bool, np.bool_)
    )


def _finite(values: Iterable[Any]) -> list[float]:
    return [float(v) for v in values if _is_number(v) and not math.isnan(float(v))]


def combine(values: Sequence[Any], how: str) -> Any:
    """Combine one result's per-rank values (None/NaN are skipped; nothing left -> NaN)."""
    present = [v for v in values if v is not None and not (_is_number(v) and math.isnan(v))]
    if not present:
        return math.nan
    if how == ANY:
        return bool(any(bool(v) for v in present))
    if how == ALL or all(isinstance(v, (bool, np.bool_)) for v in present):
        return bool(all(bool(v) for v in present))
    nums = _finite(present)
    if len(nums) != len(present):  # strings or mixed: the common value, or "mixed"
        uniq = list(dict.fromkeys(str(v) for v in present))
        return present[0] if len(uniq) == 1 else "mixed"
    if how == SUM:
        if all(isinstance(v, (int, np.integer)) for v in present):
            return int(sum(int(v) for v in present))  # exact, past 2**53 too
        return float(np.sum(nums))
    if how == MAX:
        return float(np.max(nums))
    return float(np.median(nums))


def _role(summary: dict[str, Any]) -> str:
    role = summary.get("role")
    return DEFAULT_ROLE if role is None or role == "" else str(role)


def _measures(summary: dict[str, Any]) -> bool:
    if _role(summary) in PASSIVE_ROLES:
        return False
    if summary.get("metric"):
        return True
    return any(
        k in summary and RESULTS[k].measured and summary[k] is not None for k in RESULTS
    ) or any(k not in RESULTS and k not in _SUMMARY_KEYS and _is_number(v)
             for k, v in summary.items())


_SUMMARY_KEYS = frozenset({"rank", "role", "metric", "count", *SAMPLE_STATS, *NOT_RESULTS})


def _per_rank(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One summary per rank (results repeat across a rank's metric summaries)."""
    seen: dict[Any, dict[str, Any]] = {}
    for s in summaries:
        seen.setdefault(s.get("rank"), s)
    return list(seen.values())


def _role_columns(summaries: Sequence[dict[str, Any]], metric: str) -> dict[str, Any]:
    """Columns of one measuring role for one metric."""
    out: dict[str, Any] = {}
    ranks = _per_rank(summaries)
    out["ranks"] = len(ranks)
    sampled = [s for s in summaries if s.get("metric", "") == metric and metric]
    if sampled:
        out["count"] = int(sum(int(s.get("count", 0)) for s in sampled))
        for k in SAMPLE_STATS:
            vals = _finite(s.get(k) for s in sampled)
            out[k] = float(np.median(vals)) if vals else math.nan
        with_mean = [s for s in sampled if _finite([s.get("mean_us")])]
        if with_mean:
            slow = max(with_mean, key=lambda s: (float(s["mean_us"]), -int(s.get("rank", 0))))
            out["slowest_rank"] = slow.get("rank")
            for k in SAMPLE_STATS:
                out["slowest_" + k] = slow.get(k, math.nan)
    keys = list(dict.fromkeys(k for s in ranks for k in s if k not in _SUMMARY_KEYS))
    for k in keys:
        decl = RESULTS.get(k)
        if decl is not None and not decl.measured:
            continue  # bookkeeping: combined over every rank by the caller
        vals = [s.get(k) for s in ranks]
        out[k] = combine(vals, decl.combine if decl else MEDIAN)
        if decl is not None and decl.integer and _finite([out[k]]) and not isinstance(out[k], int):
            out[k] = round(float(out[k]))
        if decl is not None and decl.per_rank:
            out[k + "_per_rank"] = combine(vals, MEDIAN)
    return out


def _primary(roles: dict[str, list[dict[str, Any]]]) -> str:
    return max(roles, key=lambda r: (len(_per_rank(roles[r])), r == DEFAULT_ROLE, r))


def aggregate_point(params: dict[str, Any], summaries: Sequence[dict[str, Any]]) -> list[
        dict[str, Any]]:
    """The rows of one sweep point: one per sample metric the point has ("" when none).

    `summaries` are the per-rank (per metric) summaries described in the module docstring,
    from every rank of the job (receivers and idle ranks included: they carry `validated`).
    """
    summaries = [_normalized(s) for s in summaries]
    measuring: dict[str, list[dict[str, Any]]] = {}
    for s in summaries:
        if _measures(s):
            measuring.setdefault(_role(s), []).append(s)
    metrics = list(dict.fromkeys(s.get("metric") or "" for ms in measuring.values() for s in ms))
    metrics = [m for m in metrics if m] or [""]
    everyone = _per_rank(summaries)
    bookkeeping = {
        k: combine([s.get(k) for s in everyone], d.combine)
        for k, d in RESULTS.items()
        if not d.measured and any(k in s for s in everyone)
    }
    rows: list[dict[str, Any]] = []
    primary = _primary(measuring) if measuring else ""
    for metric in metrics:
        row: dict[str, Any] = {**params, "metric": metric, "role": primary}
        if not measuring:
            row["ranks"] = 0
        for role in sorted(measuring, key=lambda r: r != primary):
            cols = _role_columns(measuring[role], metric)
            if metric == WINDOW_METRIC:
                cols = {_window_key(k): v for k, v in cols.items()}
            prefix = "" if role == primary else role + "_"
            row.update({prefix + k: v for k, v in cols.items()})
        row.update(bookkeeping)
        rows.append(row)
    return rows


def _window_key(key: str) -> str:
    """p50_us -> window_p50_us, slowest_p50_us -> slowest_window_p50_us; other keys as they are."""
    slowest = key.startswith("slowest_") and key != "slowest_rank"
    stat = key.removeprefix("slowest_") if slowest else key
    if stat not in SAMPLE_STATS:
        return key
    return ("slowest_" if slowest else "") + "window_" + stat


def _normalized(summary: dict[str, Any]) -> dict[str, Any]:
    """A summary with statistics but no metric name keeps them under metric "samples"."""
    if "metric" not in summary and summary.get("count"):
        return {**summary, "metric": UNNAMED_METRIC}
    return summary


UNNAMED_METRIC = "samples"


def aggregate_rows(params: dict[str, Any], summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The one row rank 0 prints for a point whose ranks measure (at most) one sample metric.

    A point with several metrics has one row per metric: use aggregate_point for it.
    """
    rows = aggregate_point(params, summaries)
    if len(rows) != 1:
        names = [r["metric"] for r in rows]
        raise ValueError(f"point has {len(rows)} sample metrics {names}: use aggregate_point")
    return rows[0]


def rank_summaries(rank: int, role: str | None, results: dict[str, Any],
                   samples: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The summaries of one rank at one point (what the harness gathers to rank 0)."""
    base = {"rank": rank, "role": role or DEFAULT_ROLE,
            **{k: v for k, v in results.items() if k not in NOT_RESULTS}}
    if not samples:
        return [{**base, "metric": ""}]
    return [{**base, "metric": m, **summarize_samples(ns)} for m, ns in samples.items()]
