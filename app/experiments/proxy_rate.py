"""proxy-rate: mini-proxy's message rate against workers T, rings R and chain limit B (the paper,
arXiv 2610.01380, §4.2, Figure 7, Table 10).

Producers (host threads or GPU CTAs, `--producer`) fill R rings with writes to the peer; T pinned
workers, each with its own QP, drain them in chains of up to B WQEs per doorbell. Samples are
windows of each producer's stream; the final drain (every ring's completion counter reaching what
it was given) is inside the timed region. Needs a submitter with the proxy-rate loop shape
(mini-proxy, --submitter proxy) and --pattern pairs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..knobs import KIND_STR, Knob, parse_int_list
from ..submit.base import ProxyRateWork, Shape
from .common import PAYLOAD, WARMUP, SizeSweep, field, rate_results
from .msg_rate import MESSAGES, WINDOWS
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from .context import Layout, RankContext

SWEEP_WORKERS = Knob("--sweep-workers", "worker counts T to sweep (1..8), e.g. 1,2,4,8", KIND_STR)
SWEEP_RINGS = Knob("--sweep-rings", "ring counts R to sweep (1..32, >= T)", KIND_STR)
SWEEP_BATCH = Knob("--sweep-batch", "chain limits B to sweep (1..16 WQEs per doorbell)", KIND_STR)


def int_list(label: str, text: str, lo: int, hi: int) -> tuple[int, ...]:
    return parse_int_list(text, label, lo, hi)


@dataclass(frozen=True)
class ProxyRateParams(SizeSweep):
    messages: int = field(MESSAGES, 100_000)
    warmup: int = field(WARMUP, 100)
    payload: str = field(PAYLOAD, "inline")
    sweep_workers: str = field(SWEEP_WORKERS, "1,2,4,8")
    sweep_rings: str = field(SWEEP_RINGS, "32")
    sweep_batch: str = field(SWEEP_BATCH, "1,16")

    @property
    def workers_list(self) -> tuple[int, ...]:
        return int_list("sweep_workers (--sweep-workers)", self.sweep_workers, 1, 8)

    @property
    def rings_list(self) -> tuple[int, ...]:
        return int_list("sweep_rings (--sweep-rings)", self.sweep_rings, 1, 32)

    @property
    def batch_list(self) -> tuple[int, ...]:
        return int_list("sweep_batch (--sweep-batch)", self.sweep_batch, 1, 16)


@register
class ProxyRate(Experiment):
    name = "proxy-rate"
    summary = "mini-proxy message rate against workers T, rings R and chain limit B"
    method = "the paper (arXiv 2610.01380) §4.2, Figure 7, Table 10"
    Params = ProxyRateParams
    shapes = frozenset({Shape.PROXY_RATE})
    patterns = ("pairs",)

    @property
    def lanes_per_peer(self) -> int:
        return max(self.params.workers_list)

    def check(self) -> None:
        p = self.params
        p.check_sizes(p.payload)
        bad = [(t, r) for t in p.workers_list for r in p.rings_list if r < t]
        if bad:
            raise ConfigError(
                "sweep_rings (--sweep-rings)",
                p.sweep_rings,
                f"rings >= workers in every point (T, R) = {bad} have fewer rings than workers",
            )

    def points(self) -> list[dict[str, Any]]:
        p = self.params
        per = max(p.messages, WINDOWS)
        return [
            {
                "size": size,
                "payload": p.payload,
                "workers": t,
                "rings": r,
                "batch": b,
                "producers": self.submitter.proxy_rate_producers(self.submitter_params, r),
                "messages_per_producer": per,
                "warmup_per_producer": p.warmup,
                "window": max(1, per // WINDOWS),
            }
            for size in p.sizes
            for t in p.workers_list
            for r in p.rings_list
            if r >= t
            for b in p.batch_list
        ]

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        t = ctx.traffic
        if not t.sends:
            return PointResult(role=t.role)
        (dest,) = t.sends_to
        lanes = ctx.lanes_to(dest, "rc", self.lanes_per_peer)[: point["workers"]]
        res = ctx.submitter.proxy_rate(
            ProxyRateWork(
                lanes=lanes,
                workers=point["workers"],
                rings=point["rings"],
                batch=point["batch"],
                producers=point["producers"],
                size=point["size"],
                inline=point["payload"] == "inline",
                messages=point["messages_per_producer"],
                warmup=point["warmup_per_producer"],
                window=point["window"],
            )
        )
        return PointResult(
            samples={"window_ns": res.windows_ns},
            results={
                **rate_results(res, point["size"], len(t.sends_to)),
                # warm-up included: the workers' doorbells count every chain
                "wqes_per_doorbell": (
                    (point["messages_per_producer"] + point["warmup_per_producer"])
                    * point["producers"]
                    / res.doorbells
                    if res.doorbells
                    else 0.0
                ),
            },
            role=t.role,
        )

    def expected_landing(
        self,
        ctx: RankContext,
        point: dict[str, Any],
        source: int,
        source_bytes: np.ndarray,
        layout: Layout,
    ) -> list[tuple[int, np.ndarray]]:
        # Worker lane l's slice holds slots written by its rings: as far as its busiest ring
        # wrote (the submitter says how it spread the messages), from the same offset of the
        # source's slice.
        if source not in ctx.traffic.receives_from:
            return []
        size = point["size"]
        counts = ctx.submitter.proxy_rate_lane_messages(
            point["workers"],
            point["rings"],
            point["producers"],
            point["messages_per_producer"] + point["warmup_per_producer"],
        )
        slots = max(1, layout.lane_bytes // size)
        pieces = []
        for lane, n in enumerate(counts):
            written = min(slots, n) * size
            start = lane * layout.lane_bytes
            if written:
                pieces.append((start, source_bytes[start : start + written]))
        return pieces

    def columns(self) -> list[Column]:
        return [
            Column("size(B)", "size", "{:d}"),
            Column("T", "workers", "{:d}", width=4),
            Column("R", "rings", "{:d}", width=4),
            Column("B", "batch", "{:d}", width=4),
            Column("P", "producers", "{:d}", width=4),
            Column("M msg/s (sum)", "msg_rate_mps"),
            Column("WQEs/doorbell", "wqes_per_doorbell"),
            Column("window p50(µs)", "window_p50_us"),
            Column("worker MHz", "worker_mhz_min", "{:.0f}"),
        ]
