"""Two emu ranks in one process, for benchmarks and in-process runs that need no MPI: the ranks
opened and told of each other, and RC QP pairs from rank 0 to rank 1 made with a submitter's
queue options (each rank-0 QP with its own send CQ, each rank-1 QP with its own CQ)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from ..base import QueuePair
from .fabric import EmuFabric


def open_pair(prefix: str, **fabric_kw: Any) -> list[EmuFabric]:
    """Ranks 0 and 1 of a fresh job named `prefix`-<random>, each knowing the other; both closed
    again if either fails to open or attach. `fabric_kw`: EmuFabric's keywords (progress,
    segment_bytes, ...)."""
    job = f"{prefix}-{uuid.uuid4().hex[:8]}"
    fabrics: list[EmuFabric] = []
    try:
        for r in range(2):
            fabrics.append(EmuFabric(r, 2, job, **fabric_kw))
        infos = [f.local_info() for f in fabrics]
        for f in fabrics:
            f.add_peers(infos)
    except BaseException:
        close_pair(fabrics)
        raise
    return fabrics


def rc_pairs(fabrics: list[EmuFabric], n: int, depth: int, *, ncqe: int | None = None,
             qp: Mapping[str, Any] | None = None, cq: Mapping[str, Any] | None = None
             ) -> list[tuple[QueuePair, QueuePair]]:  # fmt: skip
    """`n` connected RC pairs (rank 0's QP, rank 1's): rank 0's made with `qp`/`cq` (create_qp /
    create_cq keywords) and a send CQ of `ncqe` entries (default `depth`), rank 1's plain."""
    f0, f1 = fabrics
    out = []
    for _ in range(n):
        q0 = f0.create_qp(f0.create_cq(ncqe or depth, **(cq or {})), depth, **(qp or {}))
        q1 = f1.create_qp(f1.create_cq(depth), depth)
        f0.connect(q0, f1.endpoint(q1))
        f1.connect(q1, f0.endpoint(q0))
        out.append((q0, q1))
    return out


def close_pair(fabrics: list[EmuFabric]) -> None:
    for f in reversed(fabrics):
        f.close()
