"""single-op: the cost of one operation (the paper, arXiv 2610.01380, §4.1).

A submitter issues RDMA writes to each of its destinations with at most one outstanding and
times, per operation:
- issue: WQE construction, doorbell record and doorbell store (completion excluded);
- put+completion: issue plus the completion routine (the selected QP, or every configured QP
  when --scope all, each QP's CQ read from memory as NVSHMEM's quiet walks them);
- round trip: request to the peer and its reply observed through a polled data word (pairs).
With several destinations (fan-out, all-to-all) a sender measures them one after another; its
samples hold `iters` operations per destination.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..knobs import KIND_STR, Knob
from ..submit.base import LatencyWork, RespondWork, Shape
from ..submit.work import LATENCY_MODES
from .common import ITERS, PAYLOAD, QPS, TRANSPORT, WARMUP, SizeSweep, field
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from .context import Layout, RankContext

MODES = LATENCY_MODES
METRIC = {"issue": "issue_ns", "put_completion": "completion_ns", "round_trip": "rtt_ns"}

SCOPE = Knob(
    "--scope",
    "completion scope: the selected QP, or all configured QPs (a quiet)",
    KIND_STR,
    choices=("selected", "all"),
)
MODES_K = Knob(
    "--modes", "which timings to take, comma-separated", KIND_STR, choices=MODES, many=True
)


@dataclass(frozen=True)
class SingleOpParams(SizeSweep):
    iters: int = field(ITERS, 1000)
    warmup: int = field(WARMUP, 100)
    payload: str = field(PAYLOAD, "inline")
    transport: str = field(TRANSPORT, "rc")
    scope: str = field(SCOPE, "selected")
    qps: int = field(QPS, 1)
    modes: tuple[str, ...] = field(MODES_K, MODES)


@register
class SingleOp(Experiment):
    name = "single-op"
    summary = "issue, put+completion and round-trip latency of one operation"
    method = "the paper (arXiv 2610.01380) §4.1, Table 3, Figures 3-4"
    Params = SingleOpParams
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND})

    def check(self) -> None:
        p = self.params
        p.check_sizes(p.payload)
        if p.min_size < 8:
            raise ConfigError(
                "min_size (-b)",
                p.min_size,
                ">= 8 for single-op (the round trip polls an 8-byte word)",
            )
        if "round_trip" in p.modes and self.cfg.pattern != "pairs":
            raise ConfigError(
                "modes (--modes)",
                ",".join(p.modes),
                "issue,put_completion with --pattern "
                f"{self.cfg.pattern} (a round trip needs a partner that answers: --pattern pairs)",
            )

    def needed_shapes(self) -> frozenset[Shape]:
        # A responder loop only where a round trip is measured.
        if any(pt["mode"] == "round_trip" for pt in self.points()):
            return self.shapes
        return frozenset({Shape.LATENCY})

    def needs_queues_in_memory(self) -> str | None:
        if self.params.scope == "all":
            return "--scope all reads every configured QP's CQ from memory (as NVSHMEM's quiet)"
        return None

    def points(self) -> list[dict[str, Any]]:
        p = self.params
        return [
            {
                "size": size,
                "payload": p.payload,
                "transport": p.transport,
                "scope": p.scope,
                "qps": p.qps,
                "mode": mode,
                "iters": p.iters,
                "warmup": p.warmup,
            }
            for size in p.sizes
            for mode in MODES
            if mode in p.modes
        ]

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        mode, t = point["mode"], ctx.traffic
        if not t.sends:
            if mode == "round_trip" and t.receives_from:
                (source,) = t.receives_from  # pairs only (check())
                lane = ctx.lanes_to(source, point["transport"], point["qps"])[0]
                ctx.submitter.respond(
                    RespondWork(
                        lane,
                        ctx.landing_from(source),
                        point["size"],
                        point["payload"] == "inline",
                        point["iters"] + point["warmup"],
                    )
                )
            return PointResult(role=t.role)
        samples = []
        for dest in t.sends_to:
            lanes = self.scope_lanes(ctx, point, dest)
            work = LatencyWork(
                lanes=lanes,
                selected=0,
                mode=mode,
                size=point["size"],
                inline=point["payload"] == "inline",
                scope_all=point["scope"] == "all",
                iters=point["iters"],
                warmup=point["warmup"],
                reply=ctx.landing_from(dest) if mode == "round_trip" else None,
            )
            samples.append(ctx.submitter.latency(work))
        return PointResult(
            samples={METRIC[mode]: np.concatenate(samples)},
            results={"destinations": len(t.sends_to)},
            role=t.role,
        )

    def scope_lanes(self, ctx: RankContext, point: dict[str, Any], dest: int) -> tuple:
        """The QPs an all-QP quiet walks (lane 0 carries the operations): every configured QP."""
        return ctx.configured_lanes(point["transport"], point["qps"], dest)

    def expected_landing(
        self,
        ctx: RankContext,
        point: dict[str, Any],
        source: int,
        source_bytes: np.ndarray,
        layout: Layout,
    ) -> list[tuple[int, np.ndarray]]:
        # Requests land at destinations, replies at the requester (round trip). Lane 0 carries
        # them; the last 8 bytes hold the final sequence number, the rest the source's pattern.
        t = ctx.traffic
        lands = source in t.receives_from or (
            point["mode"] == "round_trip" and source in t.sends_to
        )
        if not lands:
            return []
        size, total = point["size"], point["iters"] + point["warmup"]
        seq = np.frombuffer(np.uint64(total).tobytes(), dtype=np.uint8)
        return [(0, np.concatenate([source_bytes[: size - 8], seq]))]

    def columns(self) -> list[Column]:
        return [
            Column("size(B)", "size", "{:d}"),
            Column("mode", "mode", "{}", width=14),
            Column("p50(µs)", "p50_us"),
            Column("p99(µs)", "p99_us"),
            Column("p99.9(µs)", "p999_us"),
            Column("mean(µs)", "mean_us"),
            Column("slowest-rank p50(µs)", "slowest_p50_us"),
        ]
