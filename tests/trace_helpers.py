"""Synthetic runs written through the real TraceWriter, shared by the trace and analysis tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from gicbench.trace import TraceWriter, write_manifest

META: dict[str, Any] = {
    "experiments": ["single-op", "msg-rate"],
    "config": {"iterations": 200, "warmup": 10, "sizes": [8, 64, 4096]},
    "provider": "emu",
    "submitter": "host",
    "host": "testhost",
    "gpu": {"name": "none"},
    "nic": {"name": "emu0"},
    "sm_clock_hz": float("nan"),
    "argv": ["gicbench", "run", "single-op"],
    "env": {"OMPI_COMM_WORLD_SIZE": "2"},
}

SIZES = (8, 64, 4096)
BATCHES = (1, 4, 16)


def single_op_latency_ns(size: int, mode: str) -> float:
    """A plausible median latency (ns) of the synthetic single-op points."""
    base = {"issue": 300.0, "put_completion": 2500.0, "round_trip": 5000.0}[mode]
    return base + size * 0.4


def write_points(w: TraceWriter, rank: int, rng: np.random.Generator, n: int) -> None:
    metric_of = {"issue": "issue_ns", "put_completion": "completion_ns", "round_trip": "rtt_ns"}
    for mode, metric in metric_of.items():
        for size in SIZES:
            params = {
                "size": size,
                "payload": "inline" if size <= 64 else "pointer",
                "transport": "rc",
                "scope": "selected",
                "mode": mode,
            }
            with w.begin_point("single-op", params) as p:
                center = single_op_latency_ns(size, mode) * (1 + 0.05 * rank)
                p.add_samples(metric, (center * rng.lognormal(0, 0.05, n)).astype(np.int64))
                p.set_counters({"wqes": 0, "doorbells": 0}, {"wqes": n, "doorbells": n})
                p.set_results({"validated": True})
    for qps in (1, 4):
        for batch in BATCHES:
            params = {
                "size": 8,
                "qps": qps,
                "threads": 1,
                "batch": batch,
                "payload": "inline",
                "transport": "rc",
            }
            with w.begin_point("msg-rate", params) as p:
                rate = 2.0 * qps * np.sqrt(batch)  # M msg/s
                windows = rng.normal(1e6, 1e4, 20).astype(np.int64)
                p.add_samples("window_ns", windows)
                messages = int(rate * 1e6 * windows.sum() / 1e9)
                p.set_results({"msg_rate_mps": rate, "gbps": rate * 8 / 1e3, "messages": messages})


def make_run(
    run_dir: Path, world_size: int = 2, n: int = 200, seed: int = 0, status: str = "complete"
) -> Path:
    """A finished synthetic run with single-op and msg-rate points on every rank."""
    write_manifest(run_dir, {**_manifest_meta(world_size), "status": "running"})
    for rank in range(world_size):
        rng = np.random.default_rng(seed + rank)
        with TraceWriter(run_dir, rank, world_size, {**META, "local_rank": rank}) as w:
            write_points(w, rank, rng, n)
    write_manifest(
        run_dir,
        {**_manifest_meta(world_size), "status": status, "end_utc": "2026-01-01T00:00:01+00:00"},
    )
    return run_dir


def _manifest_meta(world_size: int) -> dict[str, Any]:
    return {
        "experiments": META["experiments"],
        "config": META["config"],
        "world_size": world_size,
        "provider": "emu",
        "submitter": "host",
        "argv": META["argv"],
        "start_utc": "2026-01-01T00:00:00+00:00",
        "hosts": ["testhost"],
    }
