"""Work that only the proxy submitter takes: proxy-rate's T/R/B point and loaded-rtt's probe under
background load. The experiments that hand it out refuse other submitters in pre-flight."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError
from ..base import Buffer, Lane


@dataclass(frozen=True)
class ProxyRateWork:
    """T workers (lanes[:T], one QP each), R rings, chains of up to B WQEs; `producers` fill the
    rings with `messages` writes of `size` bytes each (after `warmup`)."""

    lanes: tuple[Lane, ...]
    workers: int
    rings: int
    batch: int
    producers: int
    size: int
    inline: bool
    messages: int
    warmup: int
    window: int


@dataclass(frozen=True)
class LoadedWork:
    """A probe's round trip on ring 0 (its own ring when `reserved`, else shared with the
    background), while `background` producers load this rank's rings; `requester` False answers
    the probe instead. `reply` is the word the answer lands in (requester) or the request lands
    in (responder): the last 8 bytes of a landing buffer of `size` bytes."""

    lanes: tuple[Lane, ...]
    requester: bool
    reserved: bool
    workers: int
    rings: int
    batch: int
    background: int
    pace_mps: float
    size: int
    reply: Buffer
    iters: int
    warmup: int


@dataclass
class LoadedResult:
    rtt_ns: np.ndarray  # requester only
    background: int  # background writes completed while the probe ran
    probe_ns: int
    ring_messages: list[int]
    workers: list[dict]


def proxy_geometry(knobs: dict, lanes: int, threads: int) -> tuple[int, int, int]:
    """(workers, rings, producers) the proxy's generic rate loop uses for `lanes` lanes and an
    experiment's `threads` (ProxySubmitter.rate): one place for that choice. Each worker owns
    at least one of the lanes (QPs), so --workers above the lanes is refused, not capped: the
    lanes (QPs x destinations of the rank) are only known once the pattern has a rank, so this
    is checked at the start of the point, before any ring or thread exists."""
    workers = int(knobs.get("workers", 1))
    if workers > lanes:
        raise ConfigError(
            "workers (--workers)",
            workers,
            f"1..{lanes} for this rate loop: one QP per worker, and it drives {lanes} QP(s) "
            "(-q x destinations); raise -q or lower --workers",
        )
    rings = max(int(knobs.get("rings", 1)), workers)
    producers = int(knobs.get("producers", 0)) or threads
    return workers, rings, producers


def rings_of(p: int, producers: int, rings: int, first: int = 0) -> list[int]:
    """Rings producer p fills (proxy_host.cpp's rings_of, the GPU kernels' loop): p, p+P, ...
    among rings first.. when there are enough, else one ring shared with other producers."""
    n = rings - first
    if producers <= n:
        return list(range(first + p, rings, producers))
    return [first + p % n]


def ring_counts(rings: int, producers: int, per_producer: int) -> list[int]:
    """Descriptors each ring is given when every producer sends `per_producer`, its k-th on
    its (k mod n)-th ring."""
    counts = [0] * rings
    for p in range(producers):
        mine = rings_of(p, producers, rings)
        for j, r in enumerate(mine):
            counts[r] += per_producer // len(mine) + (1 if j < per_producer % len(mine) else 0)
    return counts


def ring_lane(r: int, workers: int, lanes: int) -> int:
    """The lane ring r writes through (proxy_engine.cpp, Engine::init)."""
    w = r % workers
    n = (lanes - w + workers - 1) // workers
    return w + ((r // workers) % n) * workers


def lane_counts(knobs: dict, lanes: int, threads: int, per_thread: int) -> list[int]:
    """How far into its slots each lane's region is written by the generic rate loop: every
    ring writes its k-th message to slot k mod slots of its lane's region, so a lane shared by
    rings is covered as far as its busiest ring."""
    workers, rings, producers = proxy_geometry(knobs, lanes, threads)
    per_lane = [0] * lanes
    for r, c in enumerate(ring_counts(rings, producers, per_thread)):
        lane = ring_lane(r, workers, lanes)
        per_lane[lane] = max(per_lane[lane], c)
    return per_lane


def check_background(tuned: bool, producers: int, rings: int, reserved: bool) -> None:
    """Background producers the loaded loop can give rings to (host loop: proxy_host.cpp's
    loaded; GPU: px_background): tuned allows one producer per ring, so at most the rings the
    background gets (R - 1 with a reserved probe ring); a shared probe ring needs baseline."""
    avail = rings - (1 if reserved else 0)
    if producers < 1 or avail < 1:
        raise ConfigError("background (--background)", producers, f"1..64 with {rings} rings")
    if tuned and not reserved:
        raise ConfigError("queue (--queue)", "shared", "reserved with --handoff tuned")
    if tuned and producers > avail:
        raise ConfigError(
            "background (--background)",
            producers,
            f"<= {avail} with --handoff tuned (one producer per ring; two tuned producers "
            "on one ring would publish the same indices)",
        )
