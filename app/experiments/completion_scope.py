"""completion-scope: what completion costs as the QP count grows (the paper, arXiv 2610.01380,
§4.1, "Price the completion needed").

For 1, 2, 4, ... up to --qps QPs towards the destination, one write at a time on the first QP,
completed three ways: the selected QP's CQ only; a quiet over all those QPs (each QP's doorbell
record and CQ read from memory, as NVSHMEM's PE-wide quiet walks them); and a signal round trip
(the peer answers; --pattern pairs). The paper: the all-QP quiet doubles from 1 to 16 QPs while
the selected-QP completion and the signal stay flat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .common import ITERS, PAYLOAD, QPS, TRANSPORT, WARMUP, SizeSweep, field
from .registry import Column, register
from .single_op import SingleOp

if TYPE_CHECKING:
    from .context import RankContext


def qp_counts(top: int) -> list[int]:
    """1, 2, 4, ... below `top`, then `top`."""
    out, q = [], 1
    while q < top:
        out.append(q)
        q *= 2
    return [*out, top]


@dataclass(frozen=True)
class CompletionScopeParams(SizeSweep):
    iters: int = field(ITERS, 1000)
    warmup: int = field(WARMUP, 100)
    payload: str = field(PAYLOAD, "inline")
    transport: str = field(TRANSPORT, "rc")
    qps: int = field(QPS, 16)

    @property
    def modes(self) -> tuple[str, ...]:  # SingleOp.check reads it
        return ("put_completion",)


@register
class CompletionScope(SingleOp):
    name = "completion-scope"
    summary = "completion of the selected QP vs an all-QP quiet vs a signal, over QP counts"
    method = "the paper (arXiv 2610.01380) §4.1 (completion scope), §5"
    Params = CompletionScopeParams

    def points(self) -> list[dict[str, Any]]:
        p = self.params
        ways = [("put_completion", "selected"), ("put_completion", "all")]
        if self.cfg.pattern == "pairs":
            ways.append(("round_trip", "selected"))
        return [
            {
                "size": size,
                "payload": p.payload,
                "transport": p.transport,
                "qps": q,
                "scope": scope,
                "mode": mode,
                "iters": p.iters,
                "warmup": p.warmup,
            }
            for size in p.sizes
            for q in qp_counts(p.qps)
            for mode, scope in ways
        ]

    def scope_lanes(self, ctx: RankContext, point: dict[str, Any], dest: int) -> tuple:
        # The quiet's scope is the point's QP count, not every QP brought up.
        return ctx.lanes_to(dest, point["transport"], point["qps"])

    def columns(self) -> list[Column]:
        return [
            Column("size(B)", "size", "{:d}"),
            Column("qps", "qps", "{:d}"),
            Column("mode", "mode", "{}", width=14),
            Column("scope", "scope", "{}", width=8),
            Column("p50(µs)", "p50_us"),
            Column("p99(µs)", "p99_us"),
            Column("mean(µs)", "mean_us"),
        ]
