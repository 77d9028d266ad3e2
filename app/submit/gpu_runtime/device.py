"""Which GPU a rank's loops run on: one rule for every GPU submitter."""

from __future__ import annotations

from typing import Any

from ...errors import UnsupportedError

MAX_BLOCK = 1024  # threads a CUDA block may have


def rank_device(cp: Any, rank: int, who: str) -> Any:
    """The CuPy device of `rank`: GPU rank mod count (node-local rank i takes GPU i when each
    node's ranks are numbered from 0 and see the node's GPUs). `who` names the submitter in the
    refusal where there is no GPU."""
    n = cp.cuda.runtime.getDeviceCount()
    if n < 1:
        raise UnsupportedError(f"the {who} needs a CUDA GPU: none found")
    return cp.cuda.Device(rank % n)
