"""Bring-up: every rank creates its NIC objects and exchanges endpoints over MPI.

Per rank: `qps_per_peer` RC QPs (each with its own CQ) towards every other rank, a DCI pool of
`dcis`, `dcts` DC targets, a source buffer and a landing buffer that peers write into. Endpoint
information travels by allgather/alltoall only; the cost grows linearly with the QP count (one
create and one connect per QP, two collectives in all).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from ..config import RunConfig
from ..errors import ConfigError, UnsupportedError
from ..fabric import make_fabric
from ..fabric.base import (
    Access,
    CompletionQueue,
    DcTarget,
    Fabric,
    MemoryRegion,
    QueuePair,
    RemoteBuffer,
)
from .collective import Phase, rendezvous
from .topology import Topology

SLOT_REGION = 4 << 20  # bytes of slots per landing buffer (msg-rate cycles over them)
MAX_SLOTS = 64
DC_KEY_BASE = 0x6B1C_0000_0000  # per-rank DC access keys: base + rank


def slots_for(max_size: int) -> int:
    return max(1, min(MAX_SLOTS, SLOT_REGION // max_size))


@dataclass
class Resources:
    """What bring-up made on this rank, and what it learned about its peers."""

    rc: dict[int, list[QueuePair]] = field(default_factory=dict)  # peer -> QPs
    rc_cqs: dict[int, CompletionQueue] = field(default_factory=dict)  # qpn -> its send CQ
    dcis: list[QueuePair] = field(default_factory=list)
    dcts: list[DcTarget] = field(default_factory=list)
    src: MemoryRegion | None = None
    landing: MemoryRegion | None = None
    peer_landing: dict[int, RemoteBuffer] = field(default_factory=dict)
    peer_dcts: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    slots: int = 1


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


def resolve_progress(cfg: RunConfig, topo: Topology) -> str:
    """emu's engine: a spinning thread per rank needs a core of its own beside the rank's.

    A rank bound to a CPU set (mpiexec binds to a core by default for 2 ranks; srun with
    --cpus-per-task) owns that set; an unbound rank shares the machine with its node's ranks.
    An engine thread squeezed onto the poller's core costs a scheduler time slice (~4 ms) per
    hand-off: `thread` is refused there rather than measured wrong.
    """
    mine = len(os.sched_getaffinity(0))
    bound = mine < (os.cpu_count() or mine)
    fits = mine >= 2 if bound else 2 * topo.local_size <= mine
    if cfg.progress == "auto":
        return "thread" if fits else "inline"
    if cfg.progress == "thread" and not fits:
        where = (
            f"bound to {mine} CPU(s)" if bound else (f"{topo.local_size} ranks share {mine} CPUs")
        )
        raise UnsupportedError(
            f"--progress thread needs a free core for each rank's engine thread (rank "
            f"{topo.rank}: {where}). Launch with `mpiexec --bind-to none` (or "
            f"`--map-by slot:PE=2`, `srun --cpus-per-task=2`), or use --progress inline"
        )
    return cfg.progress


def segment_bytes(cfg: RunConfig, topo: Topology) -> int:
    """Shared memory the emu segment of one rank needs for rings and buffers, with slack."""
    ring = cfg.sq_depth * 64
    qps = cfg.qps_per_peer * (topo.size - 1) + cfg.dcis
    per_qp = 2 * ring + 4096  # SQ + CQ + records and doorbell
    buffers = 2 * slots_for(cfg.max_size) * cfg.max_size + (1 << 16)
    dcts = cfg.dcts * (ring + 4096)
    total = qps * per_qp + buffers + dcts + (8 << 20)
    return (total + 4095) // 4096 * 4096


def open_fabric(cfg: RunConfig, topo: Topology, job: str) -> Fabric:
    if cfg.provider == "emu":
        if topo.nodes > 1:
            raise UnsupportedError(
                f"provider emu is one node only; this job spans {topo.nodes} nodes "
                f"({', '.join(sorted(set(topo.hosts)))}): use --provider verbs or mlx5"
            )
        qps = cfg.qps_per_peer * (topo.size - 1) + cfg.dcis
        return make_fabric(
            "emu",
            rank=topo.rank,
            world_size=topo.size,
            job=job,
            progress=resolve_progress(cfg, topo),
            segment_bytes=segment_bytes(cfg, topo),
            max_qps=qps,
            max_cqs=qps + cfg.dcts,
            max_dcts=cfg.dcts,
            max_mrs=8,
        )
    raise UnsupportedError(
        f"provider {cfg.provider!r} is not implemented in this release; "
        "`gicbench doctor` lists what runs here"
    )


def bring_up(
    cfg: RunConfig, topo: Topology, comm, job: str
) -> tuple[Fabric, Resources, BringupStats]:
    if topo.size < 2:
        raise ConfigError("ranks", topo.size, ">= 2 (launch with mpiexec -n 2 or srun -n 2)")
    res = Resources(slots=slots_for(cfg.max_size))
    fabric: Fabric | None = None
    peers = [p for p in range(topo.size) if p != topo.rank]

    t0 = time.perf_counter()
    with Phase(comm, "bring-up: open NIC"):
        fabric = open_fabric(cfg, topo, job)
    assert fabric is not None
    try:
        with Phase(comm, "bring-up: create objects"):
            for p in peers:
                qps = []
                for _ in range(cfg.qps_per_peer):
                    cq = fabric.create_cq(cfg.sq_depth)
                    qp = fabric.create_qp(cq, cfg.sq_depth)
                    res.rc_cqs[qp.qpn] = cq
                    qps.append(qp)
                res.rc[p] = qps
            for _ in range(cfg.dcis):
                cq = fabric.create_cq(cfg.sq_depth)
                res.dcis.append(fabric.create_qp(cq, cfg.sq_depth, dci=True))
            for _ in range(cfg.dcts):
                cq = fabric.create_cq(cfg.sq_depth)
                res.dcts.append(fabric.create_dct(cq, DC_KEY_BASE + topo.rank))
            nbytes = res.slots * cfg.max_size
            res.src = fabric.register(nbytes, Access.LOCAL_WRITE)
            res.landing = fabric.register(
                nbytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_ATOMIC
            )
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
            outgoing = [
                [fabric.endpoint(qp) for qp in res.rc[p]] if p != topo.rank else []
                for p in range(topo.size)
            ]
            incoming = comm.alltoall(outgoing)
            fabric.add_peers(all_infos)
        t2 = time.perf_counter()

        with Phase(comm, "bring-up: connect"):
            for p in peers:
                remote = incoming[p]
                if len(remote) != len(res.rc[p]):
                    raise ConfigError(
                        "qps_per_peer",
                        len(remote),
                        f"the same on every rank (rank {p} brought up {len(remote)})",
                    )
                for qp, ep in zip(res.rc[p], remote, strict=True):
                    fabric.connect(qp, ep)
            for dci in res.dcis:
                fabric.connect(dci, {})
            for p in peers:
                addr, length, rkey = nodes[p]["landing"]
                res.peer_landing[p] = RemoteBuffer(p, addr, length, rkey)
                res.peer_dcts[p] = nodes[p]["dcts"]
        # Everyone has mapped everyone: the NIC may drop its names (nothing leaks after a crash).
        rendezvous(comm, "bring-up: attach")
        with Phase(comm, "bring-up: seal"):
            fabric.seal()
        t3 = time.perf_counter()

    except BaseException:
        fabric.close()  # every object and the shared memory go with it
        raise

    local = (t1 - t0, t2 - t1, t3 - t2, t3 - t0)
    slowest = [max(col) for col in zip(*comm.allgather(local), strict=True)]
    stats = BringupStats(
        rc_qps=cfg.qps_per_peer * len(peers),
        dcis=cfg.dcis,
        dcts=cfg.dcts,
        create_s=slowest[0],
        exchange_s=slowest[1],
        connect_s=slowest[2],
        seconds=slowest[3],
    )
    return fabric, res, stats
