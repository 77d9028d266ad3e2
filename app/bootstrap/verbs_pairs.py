"""A direct MPI bring-up through the verbs provider's API: one RC QP per peer, each with its own
CQ (send and receive, with receives posted for write-with-immediate), a source and a landing
buffer, endpoints exchanged by alltoall. The VM tests use it to drive the provider's posting API
directly; `gicbench run --provider verbs` brings up through app/bootstrap/bringup.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..fabric.base import Access, QueuePair, RemoteBuffer
from ..fabric.verbs.fabric import VerbsFabric
from ..fabric.verbs.posting import Posting
from ..fabric.verbs.types import VerbsMemoryRegion
from .collective import rendezvous

DEPTH = 128


@dataclass
class VerbsJob:
    comm: Any
    f: VerbsFabric
    qps: dict[int, QueuePair]
    src: VerbsMemoryRegion
    landing: VerbsMemoryRegion
    peer_landing: dict[int, RemoteBuffer] = field(default_factory=dict)

    @property
    def posting(self) -> Posting:
        return Posting(self.f)


def bring_up(
    comm: Any, nbytes: int = 1 << 16, recvs: int = 8, depth: int = DEPTH, **fabric_kw: Any
) -> VerbsJob:
    rank, size = comm.rank, comm.size
    f = VerbsFabric(rank=rank, world_size=size, job="pairs", **fabric_kw)
    try:
        qps = {}
        for p in range(size):
            if p != rank:
                qps[p] = f.create_qp(f.create_cq(2 * depth), depth, rq_wqes=depth)
        src = f.register(nbytes, Access.LOCAL_WRITE | Access.REMOTE_READ)
        landing = f.register(nbytes, Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ)
        f.add_peers(comm.allgather(f.local_info()))
        eps = comm.alltoall([f.endpoint(qps[p]) if p != rank else None for p in range(size)])
        posting = Posting(f)
        for p, qp in qps.items():
            f.connect(qp, eps[p])
            posting.post_recv(qp, recvs)  # before any peer can write with an immediate
        lands = comm.allgather((landing.addr, landing.length, landing.rkey))
    except BaseException:
        f.close()
        raise
    job = VerbsJob(comm, f, qps, src, landing)
    for p in qps:
        job.peer_landing[p] = RemoteBuffer(p, *lands[p])
    # A sleeping barrier: ranks spinning in MPI_Barrier starve the guest kernel's rxe work.
    rendezvous(comm, "verbs pairs: connected")
    return job
