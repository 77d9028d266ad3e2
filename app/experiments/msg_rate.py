"""msg-rate: what message rate takes (the paper, arXiv 2610.01380, §4.3.1).

Submitting threads post writes with many outstanding to every destination of the pattern at
once: the lanes are `qps` QPs per destination, thread t owns lanes t, t+T, ...; each doorbell
announces --batch WQEs, reclamation is periodic through signaled WQEs and the final drain is
inside the timed region. Samples are the durations of fixed windows of messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..knobs import Knob
from ..mlx5 import write_wqebbs
from ..patterns import Traffic
from ..submit.base import RateWork, Shape
from .common import (
    BATCH,
    MAX_MESSAGES,
    PAYLOAD,
    QPS,
    THREADS,
    TRANSPORT,
    WARMUP,
    SizeSweep,
    field,
    rate_results,
)
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from .context import Layout, RankContext

WINDOWS = 20  # recorded windows per thread and point
MESSAGES = Knob(
    "--messages", "messages per thread and point (after warm-up)", lo=1, hi=MAX_MESSAGES
)


@dataclass(frozen=True)
class MsgRateParams(SizeSweep):
    messages: int = field(MESSAGES, 200_000)
    warmup: int = field(WARMUP, 100)
    payload: str = field(PAYLOAD, "inline")
    transport: str = field(TRANSPORT, "rc")
    qps: int = field(QPS, 1)
    threads: int = field(THREADS, 1)
    batch: int = field(BATCH, 1)


def lane_messages(lanes: int, threads: int, batch: int, per_thread: int) -> list[int]:
    """Messages each lane carries, as the rate loop hands them out: thread t owns lanes t, t+T,
    ... and sends batch b of its `per_thread` messages on its (b mod n)-th lane."""
    counts = [0] * lanes
    for t in range(threads):
        mine = list(range(t, lanes, threads))
        n = len(mine)
        nbatches = -(-per_thread // batch)
        for i, lane in enumerate(mine):
            batches = len(range(i, nbatches, n))
            counts[lane] = batches * batch
            if per_thread % batch and (nbatches - 1) % n == i:
                counts[lane] -= batch - per_thread % batch
    return counts


@register
class MsgRate(Experiment):
    name = "msg-rate"
    summary = "message rate with many writes outstanding (threads, QPs, WQEs per doorbell)"
    method = "the paper (arXiv 2610.01380) §4.3.1, Table 5"
    Params = MsgRateParams
    shapes = frozenset({Shape.RATE})
    fits = ("crossover",)  # goodput against size: the first size reaching 90% of a reference

    def _check_batch(self) -> None:
        p = self.params
        p.check_sizes(p.payload)
        # One doorbell's WQEs must fit the SQ with room to reclaim: inline and DC WQEs take
        # several 64-byte slots each, so the limit is in slots, not WQEs.
        bbs = write_wqebbs(p.payload == "inline", p.top, p.transport == "dc")
        limit = self.cfg.sq_depth
        if p.batch * bbs > limit:
            raise ConfigError(
                "batch (--batch)",
                p.batch,
                f"<= {max(0, limit // bbs)}: {p.batch} WQEs x {bbs} WQEBBs each "
                f"({p.payload} {p.top} B, {p.transport}) exceed the SQ "
                f"(--sq-depth {self.cfg.sq_depth} WQEBBs)",
            )

    def check(self) -> None:
        self._check_batch()
        if self.cfg.pattern in ("pairs", "fan-in"):  # one destination per sender
            self.check_rank(Traffic(self.cfg.pattern, 0, 2, (1,), ()))

    def check_rank(self, traffic: Traffic) -> None:
        lanes = self.params.qps * len(traffic.sends_to)
        shares = self.submitter.threads_share_lanes
        if traffic.sends:  # e.g. mini-proxy's --workers and --rings against the lanes
            self.submitter.check_rate_lanes(self.submitter_params, lanes)
        if traffic.sends and self.params.threads > lanes and not shares:
            raise ConfigError(
                "threads (-t)",
                self.params.threads,
                f"<= {lanes} on rank {traffic.rank} (-q {self.params.qps} QPs x "
                f"{len(traffic.sends_to)} destinations): each thread owns its QPs",
            )

    def points(self) -> list[dict[str, Any]]:
        p = self.params
        # --messages per thread, at least one message per recorded window.
        per_thread = max(p.messages, WINDOWS)
        return [
            {
                "size": size,
                "payload": p.payload,
                "transport": p.transport,
                "qps": p.qps,
                "threads": p.threads,
                "batch": p.batch,
                "messages_per_thread": per_thread,
                "warmup_per_thread": p.warmup,
                "window": max(1, per_thread // WINDOWS),
            }
            for size in p.sizes
        ]

    def counted(self, point: dict[str, Any]) -> dict[str, Any]:
        """The point with the message counts its rate loop runs (msg-rate: as given)."""
        return point

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        t = ctx.traffic
        if not t.sends:
            return PointResult(role=t.role)
        point = self.counted(point)
        lanes = tuple(
            lane for d in t.sends_to for lane in ctx.lanes_to(d, point["transport"], point["qps"])
        )
        res = ctx.submitter.rate(
            RateWork(
                lanes=lanes,
                threads=point["threads"],
                batch=point["batch"],
                size=point["size"],
                inline=point["payload"] == "inline",
                messages_per_thread=point["messages_per_thread"],
                warmup_per_thread=point["warmup_per_thread"],
                window=point["window"],
            )
        )
        return PointResult(
            samples={"window_ns": res.windows_ns},
            results=rate_results(res, point["size"], len(t.sends_to)),
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
        return rate_landing(ctx, self.counted(point), source, source_bytes, layout)

    def columns(self) -> list[Column]:
        return [
            Column("size(B)", "size", "{:d}"),
            Column("qps", "qps", "{:d}"),
            Column("threads", "threads", "{:d}"),
            Column("batch", "batch", "{:d}"),
            Column("M msg/s (sum)", "msg_rate_mps"),
            Column("GB/s (sum)", "gbps", "{:.3f}"),
            Column("M msg/s per rank (median)", "msg_rate_mps_per_rank"),
            Column("window p50(µs)", "window_p50_us"),
            Column("window p99(µs)", "window_p99_us"),
        ]


def rate_landing(
    ctx: RankContext,
    point: dict[str, Any],
    source: int,
    source_bytes: np.ndarray,
    layout: Layout,
) -> list[tuple[int, np.ndarray]]:
    """What a rate loop leaves in this rank's landing region for `source` (msg-rate, payload):
    each lane's k-th message in slot k mod slots of its slice, as far as the submitter's
    `rate_lane_messages` (else the thread-per-lane rule) says each lane was written."""
    # The source's lanes towards us are lanes j*qps .. j*qps+qps-1 of its lane list (j: our
    # place among its destinations); lane l's k-th message went to slot k mod slots of its
    # slice, from the same offset of the source's slice l.
    if source not in ctx.traffic.receives_from:
        return []
    from ..patterns import traffic

    theirs = traffic(ctx.traffic.pattern, source, ctx.topo.size)
    qps, size = point["qps"], point["size"]
    args = (
        qps * len(theirs.sends_to),
        point["threads"],
        point["batch"],
        point["messages_per_thread"] + point["warmup_per_thread"],
    )
    counts = ctx.submitter.rate_lane_messages(*args) or lane_messages(*args)
    j = theirs.sends_to.index(ctx.topo.rank)
    slots = max(1, layout.lane_bytes // size)
    pieces = []
    for lane in range(qps):
        written = min(slots, counts[j * qps + lane]) * size
        start = lane * layout.lane_bytes
        if written:
            pieces.append((start, source_bytes[start : start + written]))
    return pieces
