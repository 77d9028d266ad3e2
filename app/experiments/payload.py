"""payload: pipelined goodput against payload size, and the first size reaching 90% of a
reference bandwidth (the paper, arXiv 2610.01380, §4.2, Figure 8, Table 12).

Pointer writes (a data segment per WQE) stream with many outstanding, as msg-rate does, for sizes
from 8 B to 1 MiB; each point moves at most --point-bytes per submitting thread (at least
WINDOWS messages). Runs with any submitter that has rate loops (host, proxy), so the paths
compare on one experiment. The crossover fit (analysis) takes --reference-gbps, or the largest
goodput measured when it is 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..knobs import KIND_FLOAT, KIND_SIZE, Knob
from ..submit.base import Shape
from .common import BATCH, QPS, THREADS, WARMUP, SizeSweep, field
from .msg_rate import MESSAGES, WINDOWS, MsgRate
from .registry import Column, register

REFERENCE = Knob(
    "--reference-gbps",
    "reference bandwidth for the crossover, GB/s (0: the largest measured)",
    KIND_FLOAT,
    lo=0.0,
    hi=10_000.0,
)
POINT_BYTES = Knob(
    "--point-bytes",
    "bytes each submitting thread moves per point at most (e.g. 256M)",
    KIND_SIZE,
    lo=1,
    hi=1 << 40,
    unit="bytes",
)
FRACTION = 0.9


@dataclass(frozen=True)
class PayloadParams(SizeSweep):
    min_size: int = field(SizeSweep.__dataclass_fields__["min_size"].metadata["knob"], 8)
    max_size: int | None = field(
        SizeSweep.__dataclass_fields__["max_size"].metadata["knob"], 1 << 20
    )
    messages: int = field(MESSAGES, 20_000)
    point_bytes: int = field(POINT_BYTES, 256 << 20)
    warmup: int = field(WARMUP, 100)
    threads: int = field(THREADS, 1)
    qps: int = field(QPS, 1)
    batch: int = field(BATCH, 16)
    reference_gbps: float = field(REFERENCE, 0.0)

    @property
    def payload(self) -> str:
        return "pointer"  # goodput of pointer writes (inline is capped at 512 B)

    @property
    def transport(self) -> str:
        return "rc"


@register
class Payload(MsgRate):
    name = "payload"
    summary = "pipelined goodput against payload size; first size at 90% of a reference"
    method = "the paper (arXiv 2610.01380) §4.2, Figure 8, Table 12"
    Params = PayloadParams
    shapes = frozenset({Shape.RATE})
    fits = ("crossover",)

    def points(self) -> list[dict[str, Any]]:
        # Per-size message counts are derived (per_thread), not parameters: the points differ
        # only in size, so the crossover fit sees one curve.
        p = self.params
        return [
            {
                "size": size,
                "payload": "pointer",
                "transport": "rc",
                "qps": p.qps,
                "threads": p.threads,
                "batch": p.batch,
                "messages": p.messages,
                "point_bytes": p.point_bytes,
                "warmup": p.warmup,
                "reference_gbps": p.reference_gbps,
                "fraction": FRACTION,
            }
            for size in p.sizes
        ]

    def counted(self, point: dict[str, Any]) -> dict[str, Any]:
        # the submitter says how its rate loop spread the messages (rate_lane_messages)
        return with_counts(point)

    def columns(self) -> list[Column]:
        return [
            Column("size(B)", "size", "{:d}"),
            Column("GB/s (sum)", "gbps", "{:.3f}"),
            Column("M msg/s (sum)", "msg_rate_mps"),
            Column("threads", "threads", "{:d}"),
            Column("batch", "batch", "{:d}"),
            Column("window p50(µs)", "window_p50_us"),
        ]


def with_counts(point: dict[str, Any]) -> dict[str, Any]:
    """The point with its message counts, as msg-rate's loops and landing model take them: at
    most point_bytes per thread, at least WINDOWS messages."""
    per = max(WINDOWS, min(point["messages"], point["point_bytes"] // point["size"]))
    return {
        **point,
        "messages_per_thread": per,
        "warmup_per_thread": min(point["warmup"], per),
        "window": max(1, per // WINDOWS),
    }
