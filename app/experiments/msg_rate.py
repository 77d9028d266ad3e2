"""msg-rate: what message rate takes (seed 000, §4.3.1).

Submitting threads post writes with many outstanding: each thread owns QPs (t, t+T, ...),
announces --batch WQEs per doorbell, reclaims periodically through signaled WQEs and drains at the
end; the time includes the final drain. Samples are the durations of fixed windows of messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import ConfigError
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..harness import RankContext

WINDOWS = 20  # recorded windows per thread and point


@register
class MsgRate(Experiment):
    name = "msg-rate"
    summary = "message rate with many writes outstanding (threads, QPs, WQEs per doorbell)"
    seed_section = "seed 000 §4.3.1 (Table 5)"
    knobs: ClassVar[tuple[str, ...]] = (
        "min_size",
        "max_size",
        "size_factor",
        "messages",
        "warmup",
        "payload",
        "transport",
        "qps",
        "threads",
        "batch",
    )

    def points(self, cfg: RunConfig) -> list[dict[str, Any]]:
        if cfg.threads > cfg.qps:
            raise ConfigError(
                "threads (-t)",
                cfg.threads,
                f"<= qps (-q) = {cfg.qps}: each host thread owns its QPs",
            )
        # --messages per thread, at least one message per recorded window.
        per_thread = max(cfg.messages, WINDOWS)
        return [
            {
                "size": size,
                "payload": cfg.payload,
                "transport": cfg.transport,
                "qps": cfg.qps,
                "threads": cfg.threads,
                "batch": cfg.batch,
                "messages_per_thread": per_thread,
                "warmup_per_thread": cfg.warmup,
                "window": max(1, per_thread // WINDOWS),
            }
            for size in cfg.sizes
        ]

    def run_point(self, ctx: RankContext, params: dict[str, Any]) -> PointResult:
        if not ctx.is_sender:
            return PointResult(role="receiver")
        windows, stats = ctx.submitter.msg_rate(ctx.lanes(params), params)
        elapsed_s = stats["elapsed_ns"] / 1e9
        msgs = stats["messages"]
        return PointResult(
            samples={"window_ns": windows},
            results={
                "messages": msgs,
                "elapsed_ns": stats["elapsed_ns"],
                "doorbells": stats["doorbells"],
                "cqes": stats["cqes"],
                "msg_rate_mps": msgs / elapsed_s / 1e6 if elapsed_s > 0 else 0.0,
                "gbps": msgs * params["size"] / elapsed_s / 1e9 if elapsed_s > 0 else 0.0,
            },
            role="sender",
        )

    def expected_landing(
        self, params: dict[str, Any], is_sender: bool, peer_src: np.ndarray
    ) -> np.ndarray | None:
        # Message m of every thread writes slot m mod slots with the peer's pattern for that slot,
        # so the slots written hold exactly the peer's source bytes whatever the order.
        if is_sender:
            return None
        size = params["size"]
        slots = max(1, peer_src.size // size)
        written = min(slots, params["messages_per_thread"] + params["warmup_per_thread"])
        return peer_src[: written * size]

    def columns(self) -> list[Column]:
        return [
            Column("size(B)", "size", "{:d}"),
            Column("qps", "qps", "{:d}"),
            Column("threads", "threads", "{:d}"),
            Column("batch", "batch", "{:d}"),
            Column("M msg/s", "msg_rate_mps"),
            Column("GB/s", "gbps", "{:.3f}"),
            Column("sum M msg/s", "sum_msg_rate_mps"),
            Column("window p50(µs)", "p50_us"),
            Column("window p99(µs)", "p99_us"),
        ]
