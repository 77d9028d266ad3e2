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
from gicbench.fabric.base import Access, MemoryRegion, QueuePair, host_view
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.base import Buffer, DcAddress, Lane, LatencyWork, RateWork, RespondWork
from gicbench.submit.host import HostSubmitter

SIZE = 4096
DC_KEY = 0xC0FFEE


MODES = ("issue", "put_completion", "round_trip")


class Driver:
    """Calls one rank's HostSubmitter with the flat parameter dicts the loop tests use."""

    def __init__(self, sub: HostSubmitter, landing: MemoryRegion) -> None:
        self.sub, self.landing = sub, landing

    def single_op(self, lanes: tuple[Lane, ...], p: dict, mode: int) -> np.ndarray:
        return self.sub.latency(
            LatencyWork(
                lanes,
                0,
                MODES[mode],
                p["size"],
                p["payload"] == "inline",
                p.get("scope", "selected") == "all",
                p["iters"],
                p["warmup"],
                Buffer.local(self.landing),
            )
        )

    def respond(self, lanes: tuple[Lane, ...], p: dict) -> None:
        self.sub.respond(
            RespondWork(
                lanes[0],
                Buffer.local(self.landing),
                p["size"],
                p["payload"] == "inline",
                p["iters"] + p["warmup"],
            )
        )

    def msg_rate(self, lanes: tuple[Lane, ...], p: dict) -> tuple[np.ndarray, dict]:
        r = self.sub.rate(
            RateWork(
                lanes,
                p["threads"],
                p["batch"],
                p["size"],
                p["payload"] == "inline",
                p["messages_per_thread"],
                p["warmup_per_thread"],
                p["window"],
            )
        )
        stats = {
            "elapsed_ns": r.elapsed_ns,
            "messages": r.messages,
            "doorbells": r.doorbells,
            "cqes": r.cqes,
        }
        return r.windows_ns, stats


def lane_of(
    qp: QueuePair, src: MemoryRegion, dst: MemoryRegion, dc: dict[str, int] | None = None
) -> Lane:
    """A lane reading all of `src` and writing all of the peer's `dst`."""
    av = DcAddress(dc["dctn"], dc["dc_key"], dc["lid"]) if dc else None
    return Lane(qp, 1, Buffer.local(src), Buffer(dst.addr, dst.rkey, dst.length), av)


@dataclass
class World:
    fabrics: list[EmuFabric]
    rc: list[list[QueuePair]]  # rc[i] = [rank 0's QP, rank 1's QP] of pair i
    dcis: list[QueuePair]  # rank 0's DCIs
    dc_target: dict[str, int]
    bufs: list[tuple[MemoryRegion, MemoryRegion]]  # per rank: (src, landing)
    subs: list[Driver]

    def lane(self, qp: QueuePair, side: int = 0, dc: dict[str, int] | None = None) -> Lane:
        return lane_of(qp, self.bufs[side][0], self.bufs[1 - side][1], dc)

    def lanes(self, n: int | None = None, side: int = 0) -> tuple[Lane, ...]:
        return tuple(self.lane(p[side], side) for p in self.rc[:n])

    def dc_lanes(self, n: int | None = None) -> tuple[Lane, ...]:
        return tuple(self.lane(q, 0, self.dc_target) for q in self.dcis[:n])

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
        subs = [
            Driver(
                HostSubmitter(rank=r, fabric=f, progress=f.progress_policy(), timeout_s=timeout_s),
                bufs[r][1],
            )
            for r, f in enumerate(fs)
        ]
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
