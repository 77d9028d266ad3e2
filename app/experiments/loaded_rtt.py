"""loaded-rtt: an 8-byte probe's round trip while background producers load both endpoints (the
paper, arXiv 2610.01380, §4.2, Figure 6, Table 11).

--submitter proxy: the probe runs on ring 0: shared with bulk traffic (`--queue shared`, the
background also fills ring 0, so the probe waits behind it in one FIFO) or reserved (`--queue
reserved`, the background fills rings 1..R-1). Both endpoints run --background producers (host
threads or GPU CTAs) over the same workers. A shared ring takes several producers, so it needs
--handoff baseline.

--submitter gpu (mini-gda, app/submit/gpu/loaded.py): --background CTAs per endpoint each post
batches of --batch writes on their own QP; the probe's QP is shared with background CTA 0
(`--queue shared`) or private to it (`--queue reserved`: a QP no CTA posts on), so the same C
QPs carry the load either way.

Both: the rate the background carried during the probe is recorded (`background_mps`, per
endpoint), optionally paced to --pace M msg/s; --pattern pairs. The analysis' `ratio` compares
the probe's shared over its reserved (proxy: ring; gpu: private QP) round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..knobs import KIND_FLOAT, KIND_STR, Knob
from ..mlx5 import write_wqebbs
from ..submit.base import Shape
from .common import BATCH, ITERS, WARMUP, SizeSweep, field
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from .context import Layout, RankContext

QUEUES = ("shared", "reserved")
QUEUE = Knob(
    "--queue",
    "the probe's queue (proxy: a ring; gpu: a QP): shared with the background, or reserved",
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
    queue: tuple[str, ...] = field(QUEUE, QUEUES)
    background: int = field(BACKGROUND, 4)
    pace: float = field(PACE, 0.0)
    batch: int = field(BATCH, 16)


def background_results(res: Any) -> dict[str, float]:
    """The background carried while the probe was measured (either submitter's loaded result:
    `background` messages retired over the probes' `probe_ns`), in M msg/s."""
    rate = res.background / res.probe_ns * 1e3 if res.probe_ns > 0 else 0.0
    return {"background_mps": rate, "background_messages": res.background}


@register
class LoadedRtt(Experiment):
    name = "loaded-rtt"
    submitters = ("proxy", "gpu")
    summary = "probe round trip under background load: shared vs reserved ring (proxy) or QP (gpu)"
    method = "the paper (arXiv 2610.01380) §4.2, Figure 6, Table 11"
    Params = LoadedRttParams
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND})
    patterns = ("pairs",)
    fits = ("ratio",)  # analysis: shared/reserved p50 and p99, with the background carried

    @property
    def workers(self) -> int:
        return int(self.cfg.knobs.get("workers", 1))

    @property
    def rings(self) -> int:
        return int(self.cfg.knobs.get("rings", 1))

    @property
    def gpu(self) -> bool:
        return self.cfg.submitter == "gpu"

    @property
    def lanes_per_peer(self) -> int:
        if self.gpu:
            from ..submit.gpu.loaded import lanes_needed

            return lanes_needed(self.params.background)
        return self.workers

    def check(self) -> None:
        p = self.params
        if p.min_size < 8 or p.top > 512:
            raise ConfigError("min_size (-b)", p.min_size, "8..512 (an inline probe)")
        if self.gpu:
            self.check_gpu()
            return
        if p.batch > 16:
            raise ConfigError("batch (--batch)", p.batch, "1..16 with --submitter proxy")
        if "reserved" in p.queue and self.rings < 2:
            raise ConfigError(
                "rings (--rings)", self.rings, ">= 2 with --queue reserved (ring 0 is the probe's)"
            )
        if "shared" in p.queue and self.cfg.knobs.get("handoff", "tuned") == "tuned":
            raise ConfigError(
                "queue (--queue)",
                "shared",
                "reserved with --handoff tuned (one producer per ring: the probe cannot share "
                "a ring); use --handoff baseline to compare shared and reserved",
            )
        if self.cfg.knobs.get("handoff", "tuned") == "tuned" and p.background > self.rings - 1:
            raise ConfigError(
                "background (--background)",
                p.background,
                f"<= {self.rings - 1} (--rings - 1) with --handoff tuned: one producer per ring",
            )

    def check_gpu(self) -> None:
        """mini-gda's limits: a warp builds a background batch, and a batch and the probe's WQE
        fit one SQ."""
        from ..submit.gpu.loaded import MAX_BATCH

        p = self.params
        if p.batch > MAX_BATCH:
            raise ConfigError("batch (--batch)", p.batch, f"1..{MAX_BATCH} with --submitter gpu")
        bbs = write_wqebbs(True, p.top, False)
        if (p.batch + 1) * bbs > self.cfg.sq_depth:
            raise ConfigError(
                "batch (--batch)",
                p.batch,
                f"<= {self.cfg.sq_depth // bbs - 1}: a batch and the probe of {bbs} WQEBBs each "
                f"fit the SQ (--sq-depth {self.cfg.sq_depth})",
            )

    def points(self) -> list[dict[str, Any]]:
        p = self.params
        if self.gpu:
            return [
                {
                    "size": size,
                    "queue": q,
                    "batch": p.batch,
                    "background": p.background,
                    "pace_mps": p.pace,
                    "iters": p.iters,
                    "warmup": p.warmup,
                }
                for size in p.sizes
                for q in p.queue
            ]
        return [
            {
                "size": size,
                "queue": q,
                "workers": self.workers,
                "rings": self.rings,
                "batch": p.batch,
                "background": p.background,
                "pace_mps": p.pace,
                "iters": p.iters,
                "warmup": p.warmup,
            }
            for size in p.sizes
            for q in p.queue
        ]

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        from ..submit.proxy.work import LoadedWork
        from ..submit.proxy.workers import worker_results

        t = ctx.traffic
        requester = t.sends
        if requester:
            (peer,) = t.sends_to
        elif t.receives_from:
            (peer,) = t.receives_from
        else:
            return PointResult(role=t.role)
        # requester: the reply lands in our slice from the peer; responder: the request does
        reply = ctx.landing_from(peer)
        if self.gpu:
            return self.run_gpu(ctx, point, peer, requester, reply)
        lanes = ctx.lanes_to(peer, "rc", point["workers"])
        sub = ctx.submitter
        res = sub.loaded(  # type: ignore[attr-defined]
            LoadedWork(
                lanes=lanes,
                requester=requester,
                reserved=point["queue"] == "reserved",
                workers=point["workers"],
                rings=point["rings"],
                batch=point["batch"],
                background=point["background"],
                pace_mps=point["pace_mps"],
                size=point["size"],
                reply=reply,
                iters=point["iters"],
                warmup=point["warmup"],
            )
        )
        results = {**background_results(res), **worker_results(sub)}
        samples = {"rtt_ns": res.rtt_ns} if requester else {}
        return PointResult(samples=samples, results=results, role=t.role)

    def run_gpu(
        self, ctx: RankContext, point: dict[str, Any], peer: int, requester: bool, reply: Any
    ) -> PointResult:
        from ..submit.gpu.loaded import GpuLoadedWork, lanes_needed

        res = ctx.submitter.loaded(  # type: ignore[attr-defined]
            GpuLoadedWork(
                lanes=ctx.lanes_to(peer, "rc", lanes_needed(point["background"])),
                requester=requester,
                shared=point["queue"] == "shared",
                background=point["background"],
                batch=point["batch"],
                pace_mps=point["pace_mps"],
                size=point["size"],
                reply=reply,
                iters=point["iters"],
                warmup=point["warmup"],
            )
        )
        results = {
            **background_results(res),
            "background_posted": res.posted,
            "background_doorbells": res.doorbells,
        }
        samples = {"rtt_ns": res.rtt_ns} if requester else {}
        return PointResult(samples=samples, results=results, role=ctx.traffic.role)

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
        if self.gpu:
            return [
                Column("size(B)", "size", "{:d}"),
                Column("queue", "queue", "{}", width=9),
                Column("B", "batch", "{:d}", width=4),
                Column("bg", "background", "{:d}", width=4),
                Column("p50(µs)", "p50_us"),
                Column("p99(µs)", "p99_us"),
                Column("bg M msg/s", "background_mps"),
            ]
        return [
            Column("size(B)", "size", "{:d}"),
            Column("queue", "queue", "{}", width=9),
            Column("T", "workers", "{:d}", width=4),
            Column("R", "rings", "{:d}", width=4),
            Column("B", "batch", "{:d}", width=4),
            Column("bg", "background", "{:d}", width=4),
            Column("p50(µs)", "p50_us"),
            Column("p99(µs)", "p99_us"),
            Column("bg M msg/s", "background_mps"),
        ]
