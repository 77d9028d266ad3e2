"""Synthetic one-rank runs of every experiment, written through the real TraceWriter, shaped as
the experiments write their points (parameters, sample datasets, results), for the report and
analysis tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from gicbench.trace import TraceWriter, write_manifest

Point = tuple[str, dict[str, Any], dict[str, np.ndarray], dict[str, Any]]


def write_run(run_dir: Path, points: Iterable[Point]) -> Path:
    """A finished one-rank run of `points`: (experiment, params, samples in ns, results)."""
    points = list(points)
    experiments = list(dict.fromkeys(p[0] for p in points))
    write_manifest(run_dir, {"world_size": 1, "status": "running", "experiments": experiments})
    with TraceWriter(run_dir, 0, 1, {}) as w:
        for experiment, params, samples, results in points:
            with w.begin_point(experiment, params) as p:
                for metric, ns in samples.items():
                    p.add_samples(metric, np.asarray(ns, dtype=np.int64))
                p.set_results({"role": "sender", "validated": True, **results})
    write_manifest(run_dir, {"world_size": 1, "status": "complete", "experiments": experiments,
                             "end_utc": "2026-01-01T00:00:01+00:00"})
    return run_dir


def _lat(rng: np.random.Generator, center_ns: float, n: int = 200) -> np.ndarray:
    return (center_ns * rng.lognormal(0, 0.05, n)).astype(np.int64)


def _rate(rate_mps: float, size: int, messages: int = 20_000) -> dict[str, Any]:
    return {"msg_rate_mps": rate_mps, "gbps": rate_mps * size / 1e3, "messages": messages,
            "elapsed_ns": int(messages / rate_mps * 1e3)}


MODE_METRIC = {"issue": "issue_ns", "put_completion": "completion_ns", "round_trip": "rtt_ns"}


def single_op(rng: np.random.Generator) -> list[Point]:
    return [("single-op", {"size": s, "payload": "inline", "transport": "rc", "mode": m},
             {MODE_METRIC[m]: _lat(rng, base + s * 0.5)}, {})
            for m, base in (("issue", 300), ("put_completion", 2500), ("round_trip", 5000))
            for s in (8, 64, 512)]


def completion_scope(rng: np.random.Generator) -> list[Point]:
    ways = (("put_completion", "selected"), ("put_completion", "all"), ("round_trip", "selected"))
    return [("completion-scope", {"size": 8, "payload": "inline", "transport": "rc", "qps": q,
                                  "scope": scope, "mode": mode},
             {MODE_METRIC[mode]: _lat(rng, 2500 * (q if scope == "all" else 1))}, {})
            for q in (1, 2, 4, 8) for mode, scope in ways]


def clock_sweep(rng: np.random.Generator) -> list[Point]:
    out = []
    for mhz in (990, 1410, 1980):
        for mode, c_cycles, b_ns in (("issue", 1500, 100), ("put_completion", 6000, 2000)):
            measured = mhz + float(rng.normal(0, 2))
            ns = c_cycles / measured * 1e3 + b_ns
            out.append(("clock-sweep", {"size": 8, "mode": mode, "clock_mhz": mhz},
                        {MODE_METRIC[mode]: _lat(rng, ns)}, {"sm_clock_mhz": measured}))
    return out


def msg_rate(rng: np.random.Generator, sizes: tuple[int, ...] = (8,),
             batches: tuple[int, ...] = (1, 4, 16)) -> list[Point]:
    return [("msg-rate", {"size": s, "payload": "inline", "transport": "rc", "qps": 1,
                          "threads": 1, "batch": b, "messages_per_thread": 20_000},
             {"window_ns": _lat(rng, 1e6, 20)}, _rate(2.0 * np.sqrt(b) / (1 + s / 512), s))
            for s in sizes for b in batches]


def proxy_rate(rng: np.random.Generator) -> list[Point]:
    return [("proxy-rate", {"size": 8, "payload": "inline", "workers": t, "rings": 4,
                            "batch": b, "producers": 4, "messages_per_producer": 5000},
             {"window_ns": _lat(rng, 5e5, 20)},
             {**_rate(1.5 * t * (4 if b > 1 else 1), 8), "wqes_per_doorbell": float(b)})
            for t in (1, 2, 4) for b in (1, 16)]


def loaded_rtt(rng: np.random.Generator, backgrounds: tuple[int, ...] = (1, 2, 4)) -> list[Point]:
    return [("loaded-rtt", {"size": 8, "queue": q, "workers": 1, "rings": 4, "batch": 16,
                            "background": bg, "pace_mps": 0.0, "iters": 200, "warmup": 10},
             {"rtt_ns": _lat(rng, 5e3 * (bg * 40 if q == "shared" else bg))},
             {"background_mps": 3.0 / bg if q == "shared" else 2.0 * bg})
            for bg in backgrounds for q in ("shared", "reserved")]


def payload(rng: np.random.Generator, derived_messages: bool = True) -> list[Point]:
    """Goodput rising to 10 GB/s; with derived_messages the points carry the per-size message
    count (min(messages, point_bytes / size)) as a parameter, as a trace may."""
    out = []
    for i, size in enumerate(8 << k for k in range(14)):
        moved = min(20_000, (1 << 20) // size)  # what the point moved (a result)
        gbps = 10.0 * min(1.0, 2 ** (i - 9))
        rate = gbps * 1e3 / size
        out.append(("payload", {"size": size, "payload": "pointer", "transport": "rc",
                                "qps": 1, "threads": 1, "batch": 16,
                                "messages": moved if derived_messages else 20_000,
                                "point_bytes": 1 << 20, "warmup": 100, "reference_gbps": 0.0,
                                "fraction": 0.9},
                    {"window_ns": _lat(rng, 1e5, 20)}, _rate(rate, size, moved)))
    return out


def active_connections(rng: np.random.Generator) -> list[Point]:
    """Two passes, each its control then the grid: flat to 256 connections, then declining."""
    out = []
    for n in (1, 2):
        for control, x in ((True, 2), *((False, g) for g in (16, 64, 256, 1024, 4096))):
            rate = 20.0 * min(1.0, (x / 256) ** -0.5) * float(rng.normal(1, 0.01))
            out.append(("active-connections",
                        {"nic_role": "send-receive", "transport": "rc", "payload": "inline",
                         "writes_per_visit": 32, "batch": 32, "threads": 1, "pool": 4096,
                         "pass": n, "size": 8, "control": control, "connections": x},
                        {"window_ns": _lat(rng, 1e5, 20)}, _rate(rate, 8)))
    return out


EXPERIMENT_RUNS: dict[str, Callable[[np.random.Generator], list[Point]]] = {
    "single-op": single_op,
    "completion-scope": completion_scope,
    "clock-sweep": clock_sweep,
    "msg-rate": msg_rate,
    "proxy-rate": proxy_rate,
    "loaded-rtt": loaded_rtt,
    "payload": payload,
    "active-connections": active_connections,
}
