"""Where each rank runs: node, node-local rank, and the GPU it takes (if any)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Topology:
    rank: int
    size: int
    local_rank: int
    local_size: int
    host: str
    hosts: list[str] = field(default_factory=list)  # host of every rank

    @property
    def nodes(self) -> int:
        return len(set(self.hosts))

    @classmethod
    def from_comm(cls, comm) -> Topology:
        from mpi4py import MPI

        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.rank)
        try:
            host = socket.gethostname()
            hosts = comm.allgather(host)
            return cls(comm.rank, comm.size, local.rank, local.size, host, hosts)
        finally:
            local.Free()


def choose_gpu(topo: Topology, gpus: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Node-local rank i takes visible GPU i mod count (CUDA_VISIBLE_DEVICES is respected by the
    caller's probe); None on machines without GPUs."""
    if not gpus:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return None
    return gpus[topo.local_rank % len(gpus)]
