"""Knobs that several experiments share, declared once (the same Knob object everywhere), and
the sweep helpers built on them."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import size_sweep
from ..errors import ConfigError
from ..knobs import KIND_SIZE, KIND_STR, Knob, parse_int, parse_list

MAX_SIZE = 1 << 30
MAX_INLINE = 512  # bytes of inline payload a WQE may carry here (ds stays within 6 bits)
MAX_QPS = 528  # the GPU submitter's largest QP count in the paper (one per block)
MAX_THREADS = 16384
MAX_BATCH = 256
MAX_ITERS = 100_000_000  # samples are kept in memory: 8 bytes each
MAX_MESSAGES = 1 << 40

PAYLOADS = ("inline", "pointer")
TRANSPORTS = ("rc", "dc")
SCOPES = ("selected", "all")

MIN_SIZE = Knob(
    "--min-size",
    "smallest message size (8, 4K, 1M)",
    KIND_SIZE,
    "-b",
    lo=1,
    hi=MAX_SIZE,
    unit="bytes",
)
MAX_SIZE_K = Knob(
    "--max-size",
    "largest message size (default: -b)",
    KIND_SIZE,
    "-e",
    lo=1,
    hi=MAX_SIZE,
    unit="bytes",
)
FACTOR = Knob("--factor", "size multiplication factor", short="-f", lo=2, hi=1024)
ITERS = Knob("--iters", "measured iterations per point", short="-n", lo=1, hi=MAX_ITERS)
WARMUP = Knob("--warmup", "warm-up iterations per point, discarded", short="-w", lo=0, hi=MAX_ITERS)
PAYLOAD = Knob(
    "--payload", "inline (in the WQE) or pointer (a data segment)", KIND_STR, choices=PAYLOADS
)
TRANSPORT = Knob(
    "--transport", "rc (a QP per peer) or dc (DCIs to DC targets)", KIND_STR, choices=TRANSPORTS
)
QPS = Knob(
    "--qps", "QPs the experiment drives towards each destination", short="-q", lo=1, hi=MAX_QPS
)
THREADS = Knob("--threads", "submitting threads per rank", short="-t", lo=1, hi=MAX_THREADS)
BATCH = Knob("--batch", "WQEs per doorbell", lo=1, hi=MAX_BATCH)


def field(k: Knob, default: Any) -> Any:
    return dataclasses.field(default=default, metadata={"knob": k})


@dataclasses.dataclass(frozen=True)
class SizeSweep:
    """-b/-e/-f, shared by every experiment that sweeps message sizes."""

    min_size: int = field(MIN_SIZE, 8)
    max_size: int | None = field(MAX_SIZE_K, None)
    size_factor: int = field(FACTOR, 2)

    @property
    def top(self) -> int:
        return self.max_size if self.max_size is not None else self.min_size

    @property
    def sizes(self) -> list[int]:
        return size_sweep(self.min_size, self.top, self.size_factor)

    def check_sizes(self, payload: str) -> None:
        if self.top < self.min_size:
            raise ConfigError("max_size (-e)", self.top, f">= min_size (-b) = {self.min_size}")
        if payload == "inline" and self.top > MAX_INLINE:
            raise ConfigError("max_size (-e)", self.top, f"<= {MAX_INLINE} with --payload inline")


def rate_results(res: Any, size: int, destinations: int) -> dict[str, Any]:
    """A rate loop's results (msg-rate, payload, proxy-rate): counts, the job's rate and
    goodput over the timed region."""
    s = res.elapsed_ns / 1e9
    return {
        "messages": res.messages,
        "elapsed_ns": res.elapsed_ns,
        "doorbells": res.doorbells,
        "cqes": res.cqes,
        "msg_rate_mps": res.messages / s / 1e6 if s > 0 else 0.0,
        "gbps": res.messages * size / s / 1e9 if s > 0 else 0.0,
        "destinations": destinations,
    }


def list_text(values: Any) -> str:
    """A list knob's value as typed: the command line's tuple, or a sweep file's list or text."""
    return values if isinstance(values, str) else ",".join(map(str, values))


def int_list(knob: Knob, name: str, values: Any, lo: int, hi: int) -> tuple[int, ...]:
    """A list knob's integers, each in lo..hi, or refused naming the field."""
    label = knob.label(name)
    allowed = f"a comma-separated list of integers in {lo}..{hi}"
    items = parse_list(list_text(values), label, f"integers in {lo}..{hi}")
    out = tuple(parse_int(v, label, allowed) for v in items)
    bad = [v for v in out if not lo <= v <= hi]
    if bad:
        raise ConfigError(label, ",".join(items), f"{allowed} ({bad[0]} is not)")
    return out
