"""Run configuration: one validated dataclass, built by the CLI or by Python callers.

Every field is checked in __post_init__ before any resource exists; a bad value raises ConfigError
naming the field, the value and what is allowed (the CLI turns it into exit status 2).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ConfigError

PROVIDERS = ("emu", "verbs", "mlx5")
SUBMITTERS = ("host", "proxy", "gpu")
PAYLOADS = ("inline", "pointer")
TRANSPORTS = ("rc", "dc")
SCOPES = ("selected", "all")
PROGRESS_MODES = ("auto", "thread", "inline")
# The seven GPU-side orderings of seed 000, Table 4 (build-time choice of the CUDA kernels).
ORDERINGS = (
    "none",
    "gpu-fence",
    "gpu-fence-dbrec",
    "gpu-release-store",
    "threadfence",
    "sys-release-store",
    "sys-fence",
)

MAX_SIZE = 1 << 30
MAX_INLINE = 512  # bytes of inline payload a WQE may carry here (ds stays within 6 bits)
MAX_QPS = 528  # the GPU submitter's largest QP count in the seeds (one per block)
MAX_THREADS = 16384
MAX_BATCH = 256
MAX_DCTS = 8


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, value, "one of " + ", ".join(allowed))


def _int_range(name: str, value: int, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, value, "an integer")
    if value < lo or (hi is not None and value > hi):
        allowed = f"{lo} <= {name} <= {hi}" if hi is not None else f"an integer >= {lo}"
        raise ConfigError(name, value, allowed)


def parse_size(text: str | int, name: str = "size") -> int:
    """'8', '4K', '1M', '2G' (powers of 1024, as perftest and OSU accept) -> bytes."""
    if isinstance(text, int):
        return text
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    digits = s[:-1] if s[-1:] in "KMG" else s
    try:
        return int(digits) * mult
    except ValueError:
        raise ConfigError(name, text, "a byte count such as 8, 4K, 1M") from None


def size_sweep(begin: int, end: int, factor: int) -> list[int]:
    """Sizes begin, begin*factor, ... up to end inclusive (the -b/-e/-f flags)."""
    sizes, s = [], begin
    while s <= end:
        sizes.append(s)
        s *= factor
    return sizes


@dataclass
class RunConfig:
    """Everything one `gicbench run` needs; values as the CLI flags name them."""

    experiments: list[str] = field(default_factory=lambda: ["single-op"])
    provider: str = "emu"
    submitter: str = "host"
    min_size: int = 8  # -b
    max_size: int = 8  # -e
    size_factor: int = 2  # -f
    iters: int = 1000  # -n
    warmup: int = 100  # -w
    payload: str = "inline"
    transport: str = "rc"
    scope: str = "selected"
    qps: int = 1  # -q: QPs the experiment drives
    qps_per_peer: int = 1  # RC QPs brought up towards every peer
    dcis: int = 1
    dcts: int = 1
    threads: int = 1  # -t
    batch: int = 1  # WQEs per doorbell
    messages: int = 200_000  # msg-rate: messages per thread and point (after warm-up)
    ordering: str = "gpu-fence"
    progress: str = "auto"
    sq_depth: int = 256  # WQEBBs per SQ
    timeout_s: float = 10.0  # a completion not seen by then is a hang: diagnose and abort
    seed: int = 1
    out: Path | None = None
    json: bool = False
    csv: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        from .experiments import registry  # the experiments register themselves on import

        if not self.experiments:
            raise ConfigError("experiment", "", "at least one of " + ", ".join(registry.names()))
        for name in self.experiments:
            _choice("experiment", name, registry.names())
        _choice("provider", self.provider, PROVIDERS)
        _choice("submitter", self.submitter, SUBMITTERS)
        _choice("payload", self.payload, PAYLOADS)
        _choice("transport", self.transport, TRANSPORTS)
        _choice("scope", self.scope, SCOPES)
        _choice("ordering", self.ordering, ORDERINGS)
        _choice("progress", self.progress, PROGRESS_MODES)
        _int_range("min_size (-b)", self.min_size, 1, MAX_SIZE)
        _int_range("max_size (-e)", self.max_size, 1, MAX_SIZE)
        if self.max_size < self.min_size:
            raise ConfigError("max_size (-e)", self.max_size, f">= min_size (-b) = {self.min_size}")
        _int_range("size_factor (-f)", self.size_factor, 2, 1024)
        if self.payload == "inline" and self.max_size > MAX_INLINE:
            raise ConfigError(
                "max_size (-e)", self.max_size, f"<= {MAX_INLINE} with --payload inline"
            )
        _int_range("iters (-n)", self.iters, 1)
        _int_range("warmup (-w)", self.warmup, 0)
        _int_range("qps (-q)", self.qps, 1, MAX_QPS)
        _int_range("qps_per_peer", self.qps_per_peer, 1, MAX_QPS)
        if self.transport == "rc" and self.qps > self.qps_per_peer:
            # the experiment drives a subset of the QPs bring-up created
            self.qps_per_peer = self.qps
        _int_range("dcis", self.dcis, 1, MAX_QPS)
        if self.transport == "dc" and self.qps > self.dcis:
            self.dcis = self.qps
        _int_range("dcts", self.dcts, 1, MAX_DCTS)
        _int_range("threads (-t)", self.threads, 1, MAX_THREADS)
        _int_range("batch", self.batch, 1, MAX_BATCH)
        _int_range("messages", self.messages, 1)
        _int_range("sq_depth", self.sq_depth, 64, 32768)
        if self.sq_depth & (self.sq_depth - 1):
            raise ConfigError("sq_depth", self.sq_depth, "a power of two in 64..32768")
        if self.batch * 2 > self.sq_depth:
            raise ConfigError("batch", self.batch, f"<= sq_depth/2 = {self.sq_depth // 2}")
        if not (isinstance(self.timeout_s, int | float) and math.isfinite(self.timeout_s)) or (
            self.timeout_s <= 0
        ):
            raise ConfigError("timeout_s", self.timeout_s, "a positive number of seconds")
        if self.json and self.csv:
            raise ConfigError("output", "--json --csv", "one of --json or --csv")
        if self.out is not None:
            self.out = Path(self.out)

    @property
    def sizes(self) -> list[int]:
        return size_sweep(self.min_size, self.max_size, self.size_factor)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["out"] = str(self.out) if self.out is not None else None
        return d
