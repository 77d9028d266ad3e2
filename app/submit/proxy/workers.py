"""Where mini-proxy's workers ran and their clock state (the paper, arXiv 2610.01380, App. C.1):
the one place that turns an engine's per-worker stats into trace fields. proxy-rate and
loaded-rtt add them to their results; single-op and payload get them through
ProxySubmitter.point_details (the harness adds those to every point that took samples)."""

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


def worker_results(sub: Any) -> dict[str, Any]:
    """The fields of `sub`'s last engine (a proxy submitter)."""
    return worker_fields(
        list(getattr(sub, "last_workers", [])), str(getattr(sub.params, "precondition", ""))
    )
