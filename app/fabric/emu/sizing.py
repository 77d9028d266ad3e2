"""Exact size of one rank's emu segment from the objects it will hold.

The segment is a header, fixed tables (MR, QP, CQ, DCT, error records), the queue arena (doorbell
registers and doorbell records for every table slot, then the rings, each padded to a 4 KiB page)
and the memory arena (memory regions, each rounded up to 64 bytes). The arithmetic lives in the
native layout (`native/src/emu_segment.cpp`, `plan`); this module only adds up the footprints, so
the number returned is the one the segment will use, not an estimate.
"""

from __future__ import annotations

from collections.abc import Sequence

from ...errors import ConfigError
from . import gpi as gpi_queue

CQE_BYTES = 64
WQEBB_BYTES = 64
RQ_WQE_BYTES = 16


def _native():  # the extension module
    from ..._native import emu

    return emu


def _each(field: str, v: int | Sequence[int], n: int) -> list[int]:
    vals = [v] * n if isinstance(v, int) else list(v)
    if len(vals) != n or any(not isinstance(x, int) or x < 0 for x in vals):
        raise ConfigError(field, v, f"an int >= 0 or a sequence of {n} of them")
    return vals


def segment_bytes_for(
    n_qps: int,
    n_cqs: int,
    n_dcts: int,
    sq_wqebbs: int | Sequence[int],
    ncqe: int | Sequence[int],
    mr_bytes: int | Sequence[int],
    *,
    rq_wqes: int | Sequence[int] = 0,
    dct_rq_wqes: int | Sequence[int] = 0,
    n_mrs: int | None = None,
    gpis: Sequence[tuple[int, int, int]] = (),
    world: int = 1,
) -> int:
    """Bytes of the segment of an EmuFabric created with max_qps=n_qps, max_cqs=n_cqs,
    max_dcts=n_dcts, max_mrs=n_mrs that then creates exactly those objects.

    sq_wqebbs, ncqe, rq_wqes (per QP) and dct_rq_wqes (per DCT): one value for all, or one per
    object. mr_bytes: the length of every memory region (a sequence), or one int = a single
    region of that length. n_mrs defaults to the number of regions given. gpis: one (depth,
    ncounters, nwindows) per GPI queue, of a fabric of `world` ranks (the window table has a row
    per rank).
    """
    for field, v in (("n_qps", n_qps), ("n_cqs", n_cqs), ("n_dcts", n_dcts)):
        if not isinstance(v, int) or v < 0:
            raise ConfigError(field, v, "an int >= 0")
    mrs = [mr_bytes] if isinstance(mr_bytes, int) else list(mr_bytes)
    if any(not isinstance(x, int) or x < 1 for x in mrs):
        raise ConfigError("mr_bytes", mr_bytes, "an int >= 1 or a sequence of them")
    if n_mrs is None:
        n_mrs = len(mrs)
    if not isinstance(n_mrs, int) or n_mrs < len(mrs):
        raise ConfigError("n_mrs", n_mrs, f"an int >= {len(mrs)} (the regions given)")
    nat = _native()
    ring = sum(nat.ring_footprint(s * WQEBB_BYTES) for s in _each("sq_wqebbs", sq_wqebbs, n_qps))
    ring += sum(nat.ring_footprint(c * CQE_BYTES) for c in _each("ncqe", ncqe, n_cqs))
    ring += sum(nat.ring_footprint(r * RQ_WQE_BYTES) for r in _each("rq_wqes", rq_wqes, n_qps) if r)
    ring += sum(
        nat.ring_footprint(r * RQ_WQE_BYTES) for r in _each("dct_rq_wqes", dct_rq_wqes, n_dcts) if r
    )
    if not isinstance(world, int) or not 1 <= world <= 256:
        raise ConfigError("world", world, "an int in 1..256 (the fabric's world_size)")
    for g in gpis:
        if not (isinstance(g, tuple) and len(g) == 3 and all(isinstance(x, int) for x in g)):
            raise ConfigError("gpis", g, "(depth, ncounters, nwindows) tuples of ints")
        gpi_queue.check_create(*g)
        ring += nat.gpi_footprint(*g, world)
    mem = sum(nat.mr_footprint(m) for m in mrs)
    # +1: slot 0 of every table is reserved, as EmuFabric does
    return int(nat.segment_bytes(n_mrs + 1, n_qps + 1, n_cqs + 1, n_dcts + 1, ring, mem))
