"""The verbs provider: any RDMA device through pyverbs (RC), posting through post_send.

API (see README.md): VerbsProvider (registered as `verbs`: caps, pre-flight, open), VerbsFabric,
Posting (post_write/post_writes/post_read/post_recv/poll_cq).
"""

from __future__ import annotations

from ..base import MemoryDomain
from .fabric import VerbsFabric
from .posting import Completion, Posting, VerbsCompletionError
from .provider import VerbsParams, VerbsProvider, caps
from .types import VerbsMemoryRegion

__all__ = [
    "Completion",
    "MemoryDomain",
    "Posting",
    "VerbsCompletionError",
    "VerbsFabric",
    "VerbsMemoryRegion",
    "VerbsParams",
    "VerbsProvider",
    "caps",
]
