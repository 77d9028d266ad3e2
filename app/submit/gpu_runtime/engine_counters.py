"""The emulated NIC's fidelity counters around a GPU submitter's launch: one rule for every
library path run on gicbench's queues (DOCA, NVSHMEM).

A library's device code is checked by what the engine saw while it ran: a WQE read before it was
complete (stale_wqes), a doorbell ahead of its record (dbrec_lag) or a doorbell value no producer
index explains (bad_doorbells) must not happen during a call, except where the library rings
ahead of its record by design (`allowed`)."""

from __future__ import annotations

from typing import Any

from ...errors import FabricError

FIDELITY = ("stale_wqes", "dbrec_lag", "bad_doorbells")  # recorded on every call


def snapshot(fabric: Any) -> dict[str, int]:
    """The engine's counters with every rung doorbell executed (the CUDA engine adds its warps'
    counts to the segment at quiesce; the CPU engine's are current anyway)."""
    fabric.quiesce()
    return {k: int(v) for k, v in fabric.counters().items()}


def call_details(before: dict[str, int], after: dict[str, int], *, who: str,
                 allowed: frozenset[str] = frozenset()) -> dict[str, int]:  # fmt: skip
    """The call's deltas as point details (emu_<counter>, doorbells, cqes); FabricError naming
    `who` when a fidelity counter other than `allowed` moved."""
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in FIDELITY}
    bad = {k: v for k, v in delta.items() if v and k not in allowed}
    if bad:
        raise FabricError(
            f"{who}: the engine counted "
            + ", ".join(f"{k}={v}" for k, v in bad.items())
            + " during the call (each must be 0: a WQE, record or doorbell the NIC saw early)"
        )
    out = {f"emu_{k}": v for k, v in delta.items()}
    for k in ("doorbells", "cqes"):
        out[k] = after.get(k, 0) - before.get(k, 0)
    return out
