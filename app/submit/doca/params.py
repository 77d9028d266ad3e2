"""The doca submitter's knobs, declared once: which NIC handler DOCA's device verbs use, how
issuing units share a QP, thread or warp execution, and the CQ type."""

from __future__ import annotations

from dataclasses import dataclass

from ...knobs import KIND_STR, knob
from .layout import CqType, NicHandler, Scope, Sharing

HANDLERS = tuple(h.cli for h in NicHandler)  # gpu-sm-db, gpu-sm-no-dbr, gpu-sm-bf, cpu-proxy, ...
# Handlers that ring the doorbell before they store the doorbell record, by design: DOCA's
# submit_db rings "early ... to push WQEs to the NIC ASAP", then stores the record and rings
# again ("the later DB ringing will cover for correctness"); BlueFlame copies the WQE to the
# register before the record. The engine sees a doorbell ahead of its record and counts
# dbrec_lag: recorded for these handlers, never a failure. Stale WQEs and bad doorbells are.
EARLY_RING_HANDLERS = frozenset({"gpu-sm-db", "gpu-sm-bf"})
SHARINGS = tuple(s.name.lower() for s in Sharing)  # exclusive, cta, gpu
SCOPES = tuple(s.name.lower() for s in Scope)  # thread, warp
CQ_TYPES = {"64b": CqType.CQ_64B, "collapsed": CqType.CQ_64B_COLLAPSED}


@dataclass(frozen=True)
class DocaParams:
    doca_handler: str = knob(
        "gpu-sm-db",
        flag="--doca-handler",
        kind=KIND_STR,
        choices=HANDLERS,
        help="who rings the NIC: the GPU (doorbell; no record; BlueFlame) or a gicbench host "
        "thread (cpu-proxy: the GPU writes the producer index; free-flow: the host finds ready "
        "WQEs)",
    )
    doca_sharing: str = knob(
        "exclusive",
        flag="--doca-sharing",
        kind=KIND_STR,
        choices=SHARINGS,
        help="QP sharing: one issuing unit per QP, a block per QP, or any thread any QP",
    )
    doca_scope: str = knob(
        "thread",
        flag="--doca-scope",
        kind=KIND_STR,
        choices=SCOPES,
        help="thread: every thread posts its own ops; warp: a warp posts 32 puts together",
    )
    doca_cq: str = knob(
        "64b",
        flag="--doca-cq",
        kind=KIND_STR,
        choices=tuple(CQ_TYPES),
        help="CQ type: one CQE per slot (64b) or every CQE in entry 0 (collapsed)",
    )

    @property
    def nic_handler(self) -> NicHandler:
        return NicHandler[self.doca_handler.upper().replace("-", "_")]

    @property
    def sharing_mode(self) -> Sharing:
        return Sharing[self.doca_sharing.upper()]

    @property
    def exec_scope(self) -> Scope:
        return Scope[self.doca_scope.upper()]

    @property
    def cq_type(self) -> CqType:
        return CQ_TYPES[self.doca_cq]
