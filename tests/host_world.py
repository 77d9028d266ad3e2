"""Two emu ranks in one process for the host loops' tests (no MPI), and WQEs posted from Python.

Rank 0 submits through RC QPs and, with `dcis`, DCIs aimed at one DCT of rank 1; each QP has
its own CQ (resources.Traffic makes them). `post_outside` posts and rings a write the way
another producer would, without the native loops knowing, so tests can check what the loops
read from queue memory.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
from resources import Traffic

from gicbench import mlx5
from gicbench.fabric.base import MemoryRegion, QueuePair, host_view
from gicbench.submit.base import Buffer, Lane, LatencyWork, RateWork, RespondWork
from gicbench.submit.host import HostSubmitter
from gicbench.submit.proxy import ProxySubmitter
from gicbench.submit.proxy.params import ProxyParams

SIZE = 4096


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


class HostWorld(Traffic):
    """The host loops' world: per rank a source and a landing MR of SIZE (whole-MR lanes), RC
    pairs, DCIs and one DCT of rank 1 (made with or without DCIs), a Driver per rank."""

    def __init__(self, nqps: int, depth: int, dcis: int, timeout_s: float) -> None:
        super().__init__(nqps, depth, dcis=dcis, dct=True, mr_bytes=SIZE, prefix="hl")
        self.timeout_s = timeout_s
        self.subs: list[Driver] = []

    def create_resources(self) -> None:
        super().create_resources()
        self.subs = [
            Driver(
                HostSubmitter(
                    rank=r, fabric=f, progress=f.progress_policy(), timeout_s=self.timeout_s
                ),
                self.landing_mr(r),
            )
            for r, f in enumerate(self.fabrics)
        ]


def emu_world(
    nqps: int = 4, depth: int = 64, dcis: int = 0, timeout_s: float = 2.0
) -> HostWorld:
    """Two emu ranks in this process (inline progress, 16 MiB segments, sealed): a context
    manager that closes both however the test ends."""
    return HostWorld(nqps, depth, dcis, timeout_s)


def proxy(w: Traffic, rank: int, timeout_s: float = 2.0, **params: Any) -> ProxySubmitter:
    """A ProxySubmitter on `w`'s rank `rank`, ProxyParams from `params` (no CPU preconditioning
    unless they ask for it)."""
    f = w.fabrics[rank]
    knobs = ProxyParams(**{"precondition_s": 0.0, **params})
    return ProxySubmitter(
        rank=rank, fabric=f, progress=f.progress_policy(), timeout_s=timeout_s, params=knobs
    )


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
