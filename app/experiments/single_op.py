"""single-op: the cost of one operation (seed 000, §4.1).

One submitter issues 8 B (or swept) RDMA writes to its peer with at most one outstanding and
times, per operation:
- issue: WQE construction, doorbell record and doorbell store (completion excluded);
- put+completion: issue plus the completion routine (selected QP, or every configured QP when
  --scope all, as NVSHMEM's quiet walks them);
- round trip: request to the peer and its reply observed through a polled data word.
Sender ranks (even) measure; their peers (odd) answer the round trip and validate payloads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..errors import ConfigError
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..harness import RankContext

MODES = ("issue", "put_completion", "round_trip")
METRIC = {"issue": "issue_ns", "put_completion": "completion_ns", "round_trip": "rtt_ns"}


@register
class SingleOp(Experiment):
    name = "single-op"
    summary = "issue, put+completion and round-trip latency of one operation"
    seed_section = "seed 000 §4.1 (Table 3, Fig. 3-4)"
    knobs: ClassVar[tuple[str, ...]] = (
        "min_size",
        "max_size",
        "size_factor",
        "iters",
        "warmup",
        "payload",
        "transport",
        "scope",
        "qps",
    )

    def points(self, cfg: RunConfig) -> list[dict[str, Any]]:
        if cfg.min_size < 8:
            raise ConfigError(
                "min_size (-b)",
                cfg.min_size,
                ">= 8 for single-op (the round trip polls an 8-byte word)",
            )
        return [
            {
                "size": size,
                "payload": cfg.payload,
                "transport": cfg.transport,
                "scope": cfg.scope,
                "qps": cfg.qps,
                "mode": mode,
                "iters": cfg.iters,
                "warmup": cfg.warmup,
            }
            for size in cfg.sizes
            for mode in MODES
        ]

    def run_point(self, ctx: RankContext, params: dict[str, Any]) -> PointResult:
        mode = params["mode"]
        if not ctx.is_sender:
            if mode == "round_trip":
                ctx.submitter.respond(ctx.lanes(params), params)
            return PointResult(role="receiver")
        samples = ctx.submitter.single_op(ctx.lanes(params), params, MODES.index(mode))
        return PointResult(samples={METRIC[mode]: samples}, role="sender")

    def expected_landing(
        self, params: dict[str, Any], is_sender: bool, peer_src: np.ndarray
    ) -> np.ndarray | None:
        # Requests land at the receiver; replies land at the sender in the round trip. The last
        # 8 bytes carry the final sequence number, the rest is the peer's pattern.
        if is_sender and params["mode"] != "round_trip":
            return None
        size, total = params["size"], params["iters"] + params["warmup"]
        seq = np.frombuffer(np.uint64(total).tobytes(), dtype=np.uint8)
        return np.concatenate([peer_src[: size - 8], seq])

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
