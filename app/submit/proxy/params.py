"""The proxy submitter's knobs (mini-proxy, the paper arXiv 2610.01380 §4.2, Table 1/10), checked
in pre-flight: a GPU producer without a GPU, or cores outside this rank's CPU set, are refused
before any resource exists."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ...errors import ConfigError
from ...knobs import KIND_FLOAT, KIND_STR, check_knobs, knob

MAX_WORKERS = 8
MAX_RINGS = 32
MAX_CHAIN = 16  # B: WQEs a worker chains behind one doorbell
HANDOFFS = ("baseline", "tuned")
PRODUCERS = ("host", "gpu")
PRECONDITIONS = ("cold", "warm")


def parse_cores(text: str) -> tuple[int, ...]:
    """'0-3,8' -> (0, 1, 2, 3, 8)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ConfigError(
                "proxy_cores (--proxy-cores)", text, "a CPU list such as 2-5,8"
            ) from None
        if a < 0 or b < a:
            raise ConfigError("proxy_cores (--proxy-cores)", text, "a CPU list such as 2-5,8")
        out.extend(range(a, b + 1))
    return tuple(out)


@dataclass(frozen=True)
class ProxyParams:
    workers: int = knob(
        1, flag="--workers", lo=1, hi=MAX_WORKERS, help="proxy workers T (each with its own QP)"
    )
    rings: int = knob(
        0,
        flag="--rings",
        lo=0,
        hi=MAX_RINGS,
        help="descriptor rings R, at least one per worker (0: what the loop needs: one per "
        "lane of a rate loop; the probe's and one per background producer, loaded-rtt)",
    )
    ring_depth: int = knob(
        1024, flag="--ring-depth", lo=2, hi=1 << 20, help="16-byte slots per ring (power of two)"
    )
    producer: str = knob(
        "host",
        flag="--producer",
        kind=KIND_STR,
        choices=PRODUCERS,
        help="who writes descriptors: host threads, or GPU threads over mapped host rings",
    )
    handoff: str = knob(
        "tuned",
        flag="--handoff",
        kind=KIND_STR,
        choices=HANDOFFS,
        help="baseline (atomic reservation, progress read, system release) or tuned "
        "(one producer per ring, cached progress, one 16-byte store)",
    )
    producers: int = knob(
        0,
        flag="--producers",
        lo=0,
        hi=64,
        help="rate/payload producers (host threads or GPU CTAs); 0: the experiment's "
        "threads (msg-rate, payload) or one per ring (proxy-rate)",
    )
    proxy_cores: str = knob(
        "",
        flag="--proxy-cores",
        kind=KIND_STR,
        help="cores for the workers (e.g. 2-5); default: cores near the GPU/NIC, else the "
        "rank's CPU set",
    )
    precondition: str = knob(
        "cold",
        flag="--precondition",
        kind=KIND_STR,
        choices=PRECONDITIONS,
        help="worker clock state (App. C.1): cold = idle first, warm = CPU-only load first",
    )
    precondition_s: float = knob(
        0.2,
        flag="--precondition-s",
        kind=KIND_FLOAT,
        lo=0.0,
        hi=120.0,
        help="how long the idle (cold) or load (warm) lasts before each engine starts",
    )

    def __post_init__(self) -> None:
        # Each knob's own range first: `--workers 9` names workers, not the rings it would need.
        check_knobs(self)
        if self.ring_depth & (self.ring_depth - 1):
            raise ConfigError("ring_depth (--ring-depth)", self.ring_depth, "a power of two")
        if self.rings and self.rings < self.workers:
            raise ConfigError(
                "rings (--rings)", self.rings, f">= --workers {self.workers} (a ring per worker)"
            )
        if self.handoff == "tuned" and self.rings and self.producers > self.rings:
            raise ConfigError(
                "producers (--producers)",
                self.producers,
                f"<= --rings {self.rings} with --handoff tuned (one producer per ring)",
            )
        mine = os.sched_getaffinity(0)
        outside = [c for c in self.cores if c not in mine]
        if outside:
            raise ConfigError(
                "proxy_cores (--proxy-cores)",
                self.proxy_cores,
                f"cores of this rank's CPU set {sorted(mine)} ({outside} are not)",
            )
        if self.producer == "gpu":
            from ...platform import probe_cupy

            cupy = probe_cupy()
            if not cupy.ok:
                raise ConfigError(
                    "producer (--producer)",
                    "gpu",
                    f"host on this machine: GPU producers need an NVIDIA GPU and CuPy "
                    f"({cupy.detail})",
                )

    def rate_rings(self, lanes: int) -> int:
        """Rings of a rate loop over `lanes` lanes: --rings, else one per lane (ring r writes
        through lane r), and never fewer than the workers."""
        return max(self.rings or lanes, self.workers)

    def loaded_rings(self, background: int) -> int:
        """Rings of a loaded round trip: --rings, else ring 0 for the probe and one per
        background producer (what the tuned handoff needs: one producer per ring)."""
        return self.rings or max(self.workers, min(MAX_RINGS, 1 + background))

    @property
    def cores(self) -> tuple[int, ...]:
        return parse_cores(self.proxy_cores) if self.proxy_cores else ()
