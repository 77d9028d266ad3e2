"""Two emu ranks in one process for the host loops' tests (no MPI), and WQEs posted from Python.

Rank 0 submits through RC QPs and, with `dcis`, DCIs aimed at one DCT of rank 1; each QP has
its own CQ. `post_outside` posts and rings a write the way another producer would, without the
native loops knowing, so tests can check what the loops read from queue memory.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from gicbench import mlx5
from gicbench.fabric.base import Access, MemoryRegion, QueuePair, RemoteBuffer, host_view
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.host import HostSubmitter, lane_row, lane_table

SIZE = 4096
DC_KEY = 0xC0FFEE


@dataclass
class World:
    fabrics: list[EmuFabric]
    rc: list[list[QueuePair]]  # rc[i] = [rank 0's QP, rank 1's QP] of pair i
    dcis: list[QueuePair]  # rank 0's DCIs
    dc_target: dict[str, int]
    bufs: list[tuple[MemoryRegion, MemoryRegion]]  # per rank: (src, landing)
    subs: list[HostSubmitter]

    def lanes(self, n: int | None = None, side: int = 0) -> np.ndarray:
        return lane_table([lane_row(p[side]) for p in self.rc[:n]])

    def dc_lanes(self, n: int | None = None, compact_av: bool = False) -> np.ndarray:
        return lane_table([lane_row(q, self.dc_target, compact_av) for q in self.dcis[:n]])

    def landing(self, rank: int = 1) -> np.ndarray:
        return host_view(self.bufs[rank][1].addr, SIZE)

    def src(self, rank: int = 0) -> np.ndarray:
        return host_view(self.bufs[rank][0].addr, SIZE)


@contextmanager
def emu_world(
    nqps: int = 4, depth: int = 64, dcis: int = 0, timeout_s: float = 2.0
) -> Iterator[World]:
    job = "hl-" + uuid.uuid4().hex[:8]
    fs = [EmuFabric(r, 2, job, progress="inline", segment_bytes=16 << 20) for r in range(2)]
    try:
        infos = [f.local_info() for f in fs]
        for f in fs:
            f.add_peers(infos)
        for f in fs:
            f.seal()
        rc = []
        for _ in range(nqps):
            pair = [f.create_qp(f.create_cq(depth), depth) for f in fs]
            fs[0].connect(pair[0], fs[1].endpoint(pair[1]))
            fs[1].connect(pair[1], fs[0].endpoint(pair[0]))
            rc.append(pair)
        dci_qps = []
        for _ in range(dcis):
            q = fs[0].create_qp(fs[0].create_cq(depth), depth, dci=True)
            fs[0].connect(q, {})
            dci_qps.append(q)
        dct = fs[1].create_dct(fs[1].create_cq(depth), DC_KEY)
        target = {"dc_key": DC_KEY, "dctn": dct.dctn, "lid": dct.lid}
        bufs = []
        for f in fs:
            src = f.register(SIZE, Access.LOCAL_WRITE)
            landing = f.register(SIZE, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
            bufs.append((src, landing))
        subs = []
        for r, f in enumerate(fs):
            peer = bufs[1 - r][1]
            subs.append(
                HostSubmitter(
                    rank=r,
                    src=bufs[r][0],
                    landing=bufs[r][1],
                    peer_landing=RemoteBuffer(1 - r, peer.addr, peer.length, peer.rkey),
                    timeout_s=timeout_s,
                    progress=(f.progress_hook(), f.progress_ctx()),
                )
            )
        yield World(fs, rc, dci_qps, target, bufs, subs)
    finally:
        for f in fs:
            f.close()


def sq_pi(qp: QueuePair) -> int:
    """The producer index in the SQ doorbell record (low 16 bits)."""
    return struct.unpack(">I", host_view(qp.sq.dbrec, 8)[4:].tobytes())[0] & 0xFFFF


def cq_ci(qp: QueuePair) -> int:
    """The consumer index of the QP's send CQ, as its doorbell record holds it."""
    return struct.unpack(">I", host_view(qp.sq.cq.dbrec, 4).tobytes())[0] & 0xFFFFFF


def post_outside(qp: QueuePair, raddr: int, rkey: int, payload: bytes) -> None:
    """Post and ring one signaled inline write at the QP's producer index, as another producer."""
    pi = sq_pi(qp)
    ring = mlx5.SqRing(host_view(qp.sq.buf, qp.sq.wqebb_cnt * 64), qp.sq.wqebb_cnt)
    n = ring.post_write(pi, qp.qpn, raddr, rkey, payload=payload, signaled=True)
    host_view(qp.sq.dbrec, 8)[4:] = np.frombuffer(mlx5.dbrec_value(pi + n), np.uint8)
    host_view(qp.sq.doorbell, 8).view(np.uint64)[0] = mlx5.doorbell_value(ring.read(pi, 0, 16))
