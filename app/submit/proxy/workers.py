"""Where mini-proxy's workers ran and their clock state (the paper, arXiv 2610.01380, App. C.1):
the one place that turns an engine's per-worker stats into trace fields. Every point that took
samples gets them through ProxySubmitter.point_details; a loaded round trip's responder, which
takes none, through its LoadedResult's details."""

from __future__ import annotations

from typing import Any

FIELDS = ("worker_cores", "worker_mhz_min", "worker_mhz_max", "precondition")


def worker_fields(stats: list[dict[str, Any]], precondition: str) -> dict[str, Any]:
    """The trace fields for one engine's workers (`stats`: Engine.stats() rows)."""
    khz = [int(w["khz"]) for w in stats if int(w["khz"]) > 0]
    return {
        "worker_cores": ",".join(str(w["core"]) for w in stats),
        "worker_mhz_min": min(khz) / 1e3 if khz else float("nan"),
        "worker_mhz_max": max(khz) / 1e3 if khz else float("nan"),
        "precondition": precondition,
    }

