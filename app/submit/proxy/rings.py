"""How mini-proxy's producers, rings, workers and lanes map onto each other: one place for the
geometry the native engine (proxy/src/proxy_engine.cpp, proxy_host.cpp) and the GPU producers
(cuda/proxy/) follow, so the Python side can predict what lands where."""

from __future__ import annotations

from ...errors import ConfigError
from ..work import Lane
from .params import ProxyParams


def proxy_geometry(params: ProxyParams, lanes: int, threads: int) -> tuple[int, int, int]:
    """(workers, rings, producers) the proxy's generic rate loop uses for `lanes` lanes and an
    experiment's `threads` (ProxySubmitter.rate): one place for that choice. Each worker owns
    at least one of the lanes (QPs), and every lane needs a ring (ring r writes through lane r
    when rings = lanes), so --workers above the lanes and --rings below them are refused, not
    capped. The lanes (QPs x destinations of the rank) are known once the pattern has a rank:
    pre-flight's check_rank asks this (ProxySubmitter.check_rate_lanes)."""
    workers = params.workers
    if workers > lanes:
        raise ConfigError(
            "workers (--workers)",
            workers,
            f"1..{lanes} for this rate loop: one QP per worker, and it drives {lanes} QP(s) "
            "(-q x destinations); raise -q or lower --workers",
        )
    if params.rings and params.rings < lanes:
        raise ConfigError(
            "rings (--rings)",
            params.rings,
            f">= {lanes} (one ring per lane of this rate loop: -q x destinations), or 0 "
            "for as many as it needs",
        )
    rings = params.rate_rings(lanes)
    producers = params.producers or threads
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


def lane_counts(params: ProxyParams, lanes: int, threads: int, per_thread: int) -> list[int]:
    """How far into its slots each lane's region is written by the generic rate loop: every
    ring writes its k-th message to slot k mod slots of its lane's region, so a lane shared by
    rings is covered as far as its busiest ring."""
    workers, rings, producers = proxy_geometry(params, lanes, threads)
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


MAX_RINGS = 32  # the native engine's limit (proxy_engine.cpp, Engine::init)
MAX_LANES = 1 << 16  # a descriptor's 16-bit lane field (proxy/src/proxy_ring.hpp)


def check_cycle_limits(units: int, connections: int, connections_field: str) -> None:
    """A cycle's units (one ring each) and connections (a descriptor's 16-bit lane field)
    within what the engine takes: in pre-flight from --threads and --pool, at run time from
    the units and lanes of the point."""
    if units > MAX_RINGS:
        raise ConfigError(
            "threads (--threads)", units,
            f"1..{MAX_RINGS} with --submitter proxy (one ring per submitting unit)",
        )
    if connections > MAX_LANES:
        raise ConfigError(
            connections_field, connections,
            f"<= {MAX_LANES} connections per rank with --submitter proxy (a descriptor's "
            "16-bit lane field)",
        )


def lane_slots(lane: Lane, size: int) -> int:
    """How many `size`-byte slots a lane's regions hold (at least 1): a descriptor's k-th write
    on it goes to slot k mod this (proxy_host.cpp's lane_slots, the same rule)."""
    return max(1, min(lane.src.length, lane.dst.length) // size)


def cycle_geometry(params: ProxyParams, unit_lanes: list[list[int]], lanes: int) -> tuple[
    int, list[int]
]:
    """(workers, lane_worker) of an active-connections cycle: unit u is a producer filling
    ring u, ring u's worker is u mod T, and that worker owns unit u's lanes (so every
    descriptor of a ring names a lane of the ring's worker). T: --workers, fewer when there are
    fewer units."""
    units = len(unit_lanes)
    check_cycle_limits(units, lanes, "active (--active)")
    workers = min(params.workers, units)
    lane_worker = [0] * lanes
    for u, mine in enumerate(unit_lanes):
        for lane in mine:
            lane_worker[lane] = u % workers
    return workers, lane_worker
