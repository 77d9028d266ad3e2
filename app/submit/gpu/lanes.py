"""The lane table the kernels read (cuda/gda/queue.cuh LaneCol) and msg-rate's distribution of
messages over lanes, computed here exactly as gda_msg_rate hands them out."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..gpu_runtime.device_map import DeviceMap
from ..work import Lane

COLUMNS = (
    "sq_buf", "sq_wqebbs", "sq_dbrec", "sq_doorbell", "qpn", "cq_buf", "cq_ncqe", "cq_dbrec",
    "src_dev", "src_addr", "lkey", "dst_addr", "rkey", "region", "state", "lane_wqes",
    "dc", "dc_key", "dctn", "lid", "ready",
)  # fmt: skip
COL = {name: i for i, name in enumerate(COLUMNS)}


def lane_row(
    dm: DeviceMap, lane: Lane, state: int, src_dev: int, lane_wqes: int = 0, ready: int = 0
) -> list[int]:
    """One lane's row; `ready`: the device address of its QP's ready array (--doorbell host)."""
    sq, cq = lane.qp.sq, lane.qp.sq.cq
    sq_buf, sq_dbrec, sq_db = dm.sq(sq)
    cq_buf, cq_dbrec = dm.cq(cq)
    dc = lane.dc
    return [
        sq_buf, sq.wqebb_cnt, sq_dbrec, sq_db, lane.qp.qpn, cq_buf, cq.ncqe, cq_dbrec,
        src_dev, lane.src.addr, lane.src.key, lane.dst.addr, lane.dst.key,
        min(lane.src.length, lane.dst.length), state, lane_wqes,
        1 if dc else 0, dc.dc_key if dc else 0, dc.dctn if dc else 0, dc.lid if dc else 0, ready,
    ]  # fmt: skip


def table(rows: Sequence[list[int]]) -> np.ndarray:
    return np.ascontiguousarray(np.array(rows, dtype=np.uint64).reshape(-1, len(COLUMNS)))


def units(threads: int, publish: str) -> list[int]:
    """Threads of each publishing unit: a thread, or a warp of up to 32 (the last may be short)."""
    if publish != "warp":
        return [1] * threads
    return [min(32, threads - 32 * w) for w in range((threads + 31) // 32)]


def unit_lanes(unit: int, nunits: int, nlanes: int) -> list[int]:
    """Lanes unit `unit` posts to: its own u, u+U, ... when U <= L, else the shared u mod L."""
    if nunits <= nlanes:
        return list(range(unit, nlanes, nunits))
    return [unit % nlanes]


def lane_messages(
    nlanes: int, threads: int, publish: str, batch: int, per_thread: int
) -> list[int]:
    """Messages (= WQEs) each lane carries when every thread posts `per_thread` (warm-up
    included), `batch` per doorbell, batch b of a unit going to its (b mod n)-th lane."""
    counts = [0] * nlanes
    us = units(threads, publish)
    for u, size in enumerate(us):
        mine = unit_lanes(u, len(us), nlanes)
        n = len(mine)
        total = per_thread * size
        nbatches = -(-total // batch)
        for i, lane in enumerate(mine):
            batches = len(range(i, nbatches, n))
            got = batches * batch
            if total % batch and (nbatches - 1) % n == i:
                got -= batch - total % batch
            counts[lane] += got
    return counts


def signal_every(wqebb_cnt: int, bbs: int, batch: int) -> int:
    """WQEs per signaled WQE on a lane: a quarter SQ when that allows, and always
    (signal_every - 1 + batch) x bbs <= wqebb_cnt, so every wait for room ends (as the host
    loop's plan_reclaim)."""
    max_wqes = wqebb_cnt // bbs
    return max(1, min(wqebb_cnt // (4 * bbs), max_wqes - batch + 1))


def max_inflight_cqes(wqebb_cnt: int, bbs: int, signal_every: int) -> int:
    """The most CQEs one QP can owe in a msg-rate call: its signaled WQEs in flight when the SQ is
    full (every signal_every-th WQE, plus the lane's last)."""
    max_wqes = wqebb_cnt // bbs
    return min(max_wqes, -(-max_wqes // signal_every) + 1)


def cq_slack(ncqe: int, inflight: int) -> int:
    """Consumed CQEs the CQ record may lag by so that no CQE can pass record + ncqe (the NIC's
    overrun rule): ncqe - inflight (0: store the record at every reap)."""
    return max(0, ncqe - inflight)
