"""Bring-up: every rank creates its NIC objects on an open fabric and exchanges endpoints.

Per rank: `rc_qps_per_peer` RC QPs (each with its own CQ) towards every neighbour of the traffic
pattern (not a full mesh), a DCI pool and DC targets only when an experiment uses DC, a send
buffer and a landing buffer with one region per neighbour. Endpoint information travels by
allgather/alltoall only; the cost grows linearly with the QP count. The caller opened the fabric
and closes it on every path, so nothing here can leak it.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..fabric.base import (
    Access,
    DcTarget,
    Fabric,
    MemoryRegion,
    QueuePair,
    RemoteBuffer,
)
from ..fabric.registry import FabricPlan
from ..patterns import Traffic
from .collective import Phase, rendezvous
from .topology import Topology

DC_KEY_BASE = 0x6B1C_0000_0000  # per-rank DC access keys: base + rank


@dataclass
class Resources:
    """What bring-up made on this rank, and what it learned about its peers."""

    rc: dict[int, list[QueuePair]] = field(default_factory=dict)  # peer -> QPs
    dcis: list[QueuePair] = field(default_factory=list)
    dcts: list[DcTarget] = field(default_factory=list)
    src: MemoryRegion | None = None
    landing: MemoryRegion | None = None
    peer_landing: dict[int, RemoteBuffer] = field(default_factory=dict)
    peer_dcts: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


@dataclass
class BringupStats:
    rc_qps: int
    dcis: int
    dcts: int
    seconds: float  # slowest rank, creation + exchange + connect
    create_s: float
    exchange_s: float
    connect_s: float

    @property
    def qps_per_second(self) -> float:
        n = self.rc_qps + self.dcis
        return n / self.seconds if self.seconds > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {
            "rc_qps": self.rc_qps,
            "dcis": self.dcis,
            "dcts": self.dcts,
            "seconds": self.seconds,
            "create_s": self.create_s,
            "exchange_s": self.exchange_s,
            "connect_s": self.connect_s,
            "qps_per_second": self.qps_per_second,
        }


def bring_up(
    fabric: Fabric, plan: FabricPlan, src_bytes: int, landing_bytes: int, topo: Topology,
    comm, traffic: Traffic,
) -> tuple[Resources, BringupStats]:  # fmt: skip
    """Create, exchange and connect on every rank; every phase ends in a collective check."""
    res = Resources()
    neighbours = traffic.neighbours
    t0 = time.perf_counter()
    # The NIC learns of every object at once (emu's CUDA engine: one handshake, not seven a QP),
    # at the end of the connect phase, so a failure there is collective; on an error before, the
    # batch ends without hiding it.
    batch = contextlib.ExitStack()
    batch.enter_context(fabric.setup_batch())
    with batch:
        with Phase(comm, "bring-up: create objects"):
            for p in neighbours:
                # as the submitter asked (QueueOptions: e.g. DOCA's overrun-ignoring CQs), in
                # one go where the provider can (emu: 32,766 QPs in a fraction of a second)
                res.rc[p] = fabric.create_qps(plan.rc_qps_per_peer, plan.sq_depth,
                                                 plan.queue_options.cq, plan.queue_options.qp)
            if plan.dcis:
                res.dcis = fabric.create_qps(plan.dcis, plan.sq_depth, {}, {"dci": True})
            for _ in range(plan.dcts):
                cq = fabric.create_cq(plan.sq_depth)
                res.dcts.append(fabric.create_dct(cq, DC_KEY_BASE + topo.rank))
            # A GPU submitter reads sources and polls landings: the regions are mapped into the GPU.
            dom = {"domain": plan.mr_domain} if plan.mr_domain else {}
            res.src = fabric.register(src_bytes, Access.LOCAL_WRITE, **dom)
            remote_access = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC
            res.landing = fabric.register(landing_bytes, remote_access, **dom)
            infos = fabric.local_info()
        t1 = time.perf_counter()

        with Phase(comm, "bring-up: exchange endpoints"):
            all_infos = comm.allgather(infos)
            landing = res.landing
            node = {
                "landing": (landing.addr, landing.length, landing.rkey),
                "dcts": [{"dctn": d.dctn, "dc_key": d.dc_key, "lid": d.lid} for d in res.dcts],
            }
            nodes = comm.allgather(node)
            # (count, the provider's endpoints of them): one object per peer, not one per QP
            outgoing = [
                (len(res.rc[p]), fabric.endpoints(res.rc[p])) if p in res.rc else (0, [])
                for p in range(topo.size)
            ]
            incoming = comm.alltoall(outgoing)
            fabric.add_peers(all_infos)
        t2 = time.perf_counter()

        with Phase(comm, "bring-up: connect"):
            for p in neighbours:
                count, remote = incoming[p]
                if count != len(res.rc[p]):
                    raise ConfigError(
                        "qps_per_peer",
                        count,
                        f"the same on every rank (rank {p} brought up {count}, this rank "
                        f"{len(res.rc[p])})",
                    )
                fabric.connect_rc(res.rc[p], remote)
            for dci in res.dcis:
                fabric.connect(dci, {})
            for p in neighbours:
                addr, length, rkey = nodes[p]["landing"]
                res.peer_landing[p] = RemoteBuffer(p, addr, length, rkey)
                res.peer_dcts[p] = nodes[p]["dcts"]
            batch.close()
    # Everyone has mapped everyone: the NIC may drop its names (nothing leaks after a crash).
    rendezvous(comm, "bring-up: attach")
    with Phase(comm, "bring-up: seal"):
        fabric.seal()
    t3 = time.perf_counter()

    local = (t1 - t0, t2 - t1, t3 - t2, t3 - t0)
    slowest = [max(col) for col in zip(*comm.allgather(local), strict=True)]
    stats = BringupStats(
        rc_qps=plan.rc_qps_per_peer * len(neighbours),
        dcis=plan.dcis,
        dcts=plan.dcts,
        create_s=slowest[0],
        exchange_s=slowest[1],
        connect_s=slowest[2],
        seconds=slowest[3],
    )
    return res, stats
