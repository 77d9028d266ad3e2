"""loaded-rtt: an 8-byte probe's round trip while background producers load both endpoints (the
paper, arXiv 2610.01380, §4.2, Figure 6, Table 11).

The probe's queue is shared with the background (`--queue shared`: it waits behind bulk work in
one FIFO) or reserved for it (`--queue reserved`); both endpoints run --background producers
posting batches of --batch writes, optionally paced to --pace M msg/s. Any submitter with the
loaded loop shape runs it, and its contract says what a queue is there (mini-proxy: a ring, the
background filling the others, a shared ring needing --handoff baseline; mini-gda: a QP shared
with background CTA 0 or private). The rate the background carried during the probe is recorded
(`background_mps`, per endpoint); --pattern pairs. The analysis' `ratio` compares the probe's
shared over its reserved round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..knobs import KIND_FLOAT, KIND_STR, Knob
from ..submit.base import LoadedWork, Shape
from .common import BATCH, ITERS, WARMUP, SizeSweep, field
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from .context import Layout, RankContext

QUEUES = ("shared", "reserved")
QUEUE = Knob(
    "--queue",
    "the probe's queue (proxy: a ring; gpu: a QP): shared with the background, or reserved "
    "(default: each one the submitter's knobs allow)",
    KIND_STR,
    choices=QUEUES,
    many=True,
)
BACKGROUND = Knob(
    "--background", "background producers per endpoint (host threads or GPU CTAs)", lo=1, hi=64
)
PACE = Knob(
    "--pace",
    "background target rate per endpoint, M msg/s (0: unpaced)",
    KIND_FLOAT,
    lo=0.0,
    hi=10_000.0,
)


@dataclass(frozen=True)
class LoadedRttParams(SizeSweep):
    iters: int = field(ITERS, 1000)
    warmup: int = field(WARMUP, 100)
    queue: tuple[str, ...] | None = field(QUEUE, None)
    background: int = field(BACKGROUND, 4)
    pace: float = field(PACE, 0.0)
    batch: int = field(BATCH, 16)


@register
class LoadedRtt(Experiment):
    name = "loaded-rtt"
    summary = "probe round trip under background load: shared vs reserved ring (proxy) or QP (gpu)"
    method = "the paper (arXiv 2610.01380) §4.2, Figure 6, Table 11"
    Params = LoadedRttParams
    shapes = frozenset({Shape.LOADED})
    patterns = ("pairs",)
    fits = ("ratio",)  # analysis: shared/reserved p50 and p99, with the background carried

    @property
    def queues(self) -> tuple[str, ...]:
        """--queue, else every probe queue the submitter's knobs can run."""
        return self.params.queue or self.submitter.loaded_queues(self.submitter_params)

    @property
    def lanes_per_peer(self) -> int:
        return self.submitter.loaded_lanes(self.submitter_params, self.params.background)

    def check(self) -> None:
        p = self.params
        if p.min_size < 8 or p.top > 512:
            raise ConfigError("min_size (-b)", p.min_size, "8..512 (an inline probe)")
        self.submitter.check_loaded(
            self.submitter_params,
            queues=self.queues,
            background=p.background,
            batch=p.batch,
            max_size=p.top,
            sq_depth=self.cfg.sq_depth,
        )

    def points(self) -> list[dict[str, Any]]:
        p = self.params
        points = []
        for size in p.sizes:
            for q in self.queues:
                point = {"size": size, "queue": q, "batch": p.batch, "background": p.background}
                point |= self.submitter.point_fields(self.submitter_params, Shape.LOADED, point)
                points.append({**point, "pace_mps": p.pace, "iters": p.iters, "warmup": p.warmup})
        return points

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        t = ctx.traffic
        requester = t.sends
        if requester:
            (peer,) = t.sends_to
        elif t.receives_from:
            (peer,) = t.receives_from
        else:
            return PointResult(role=t.role)
        res = ctx.submitter.loaded(
            LoadedWork(
                lanes=ctx.lanes_to(peer, "rc", self.lanes_per_peer),
                requester=requester,
                shared=point["queue"] == "shared",
                background=point["background"],
                batch=point["batch"],
                pace_mps=point["pace_mps"],
                size=point["size"],
                # requester: the reply lands in our slice from the peer; responder: the request
                reply=ctx.landing_from(peer),
                iters=point["iters"],
                warmup=point["warmup"],
            )
        )
        results = {
            "background_mps": res.background_mps,
            "background_messages": res.background,
            **res.details,
        }
        samples = {"rtt_ns": res.rtt_ns} if requester else {}
        return PointResult(samples=samples, results=results, role=t.role)

    def expected_landing(
        self,
        ctx: RankContext,
        point: dict[str, Any],
        source: int,
        source_bytes: np.ndarray,
        layout: Layout,
    ) -> list[tuple[int, np.ndarray]]:
        # Slot 0 of lane 0 carries the probe in each direction: the source's pattern with the
        # last sequence number in its last 8 bytes. Background writes fill slots 1.. (their count
        # depends on the load carried, so only the probe's slot is compared).
        t = ctx.traffic
        if source not in t.receives_from and source not in t.sends_to:
            return []
        size, total = point["size"], point["iters"] + point["warmup"]
        seq = np.frombuffer(np.uint64(total).tobytes(), dtype=np.uint8)
        return [(0, np.concatenate([source_bytes[: size - 8], seq]))]

    def columns(self) -> list[Column]:
        extra = [
            Column(header, key, "{:d}", width=4)
            for key, header in self.submitter.point_headers.items()
            if key in (self.points() or [{}])[0]
        ]
        return [
            Column("size(B)", "size", "{:d}"),
            Column("queue", "queue", "{}", width=9),
            *extra,
            Column("B", "batch", "{:d}", width=4),
            Column("bg", "background", "{:d}", width=4),
            Column("p50(µs)", "p50_us"),
            Column("p99(µs)", "p99_us"),
            Column("bg M msg/s", "background_mps"),
        ]
