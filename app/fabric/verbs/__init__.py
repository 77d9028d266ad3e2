"""The verbs provider: any RDMA device through pyverbs (RC), posting through post_send.

API for the harness (see README "verbs provider"): `caps(probes)`, `open(cfg, topo, job)`,
VerbsFabric, Posting (post_write/post_writes/post_read/post_recv/poll_cq).
"""

from __future__ import annotations

from ..base import MemoryDomain
from .fabric import VerbsFabric
from .posting import Chain, Completion, Posting, VerbsCompletionError
from .provider import caps, open
from .types import VerbsMemoryRegion

__all__ = [
    "Chain",
    "Completion",
    "MemoryDomain",
    "Posting",
    "VerbsCompletionError",
    "VerbsFabric",
    "VerbsMemoryRegion",
    "caps",
    "open",
]
