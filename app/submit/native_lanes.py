"""The lane table the native loops read: one row of uint64 columns per lane, in the order of
`gicbench._native.host.LANE_COLUMNS` (the host submitter's loops and mini-proxy's workers both
take it). Below every submitter, so either may build one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .work import Lane


def _columns() -> Any:
    from .. import _native

    return _native.host.LANE_COLUMNS


def lane_row(lane: Lane, compact_av: bool = False) -> list[int]:
    sq, cq = lane.qp.sq, lane.qp.sq.cq
    row = [sq.buf, sq.wqebb_cnt, sq.dbrec, sq.doorbell, lane.qp.qpn, cq.buf, cq.ncqe, cq.dbrec]
    if lane.dc is not None:
        row += [1, lane.dc.dc_key, lane.dc.dctn, (lane.dc.lid & 0xFFFF) | (int(compact_av) << 32)]
    else:
        row += [0, 0, 0, 0]
    region = min(lane.src.length, lane.dst.length)
    row += [lane.src.addr, lane.src.key, lane.dst.addr, lane.dst.key, region]
    return row


def lane_table(lanes: Sequence[Lane]) -> np.ndarray:
    width = len(_columns())
    rows = [lane_row(lane) for lane in lanes]
    return np.ascontiguousarray(np.array(rows, dtype=np.uint64).reshape(-1, width))
