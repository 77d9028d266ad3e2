"""The status words a kernel call leaves (cuda/gda/queue.cuh StatusWord/StatusCode) and the
exception each failure becomes."""

from __future__ import annotations

import numpy as np

from ...errors import CompletionError, CompletionTimeout, FabricError
from ...mlx5.constants import Syndrome
from ..host import LoopInterrupted

WORDS = 16
CODE, LANE, QPN, PI, RETIRED, CQ_CI, SYNDROME, WQE_COUNTER, DONE, SEEN, EXPECTED = range(11)
OK, TIMEOUT, CQE_ERROR, INTERRUPTED = 0, 1, 2, 3


def raise_for(st: np.ndarray, rank: int, what: str, timeout_s: float, total: int) -> None:
    code = int(st[CODE])
    if code == OK:
        return
    where = (
        f"rank {rank}, {what} (GPU), lane {int(st[LANE])}, QP 0x{int(st[QPN]):06x}: SQ producer "
        f"index {int(st[PI])}, retired {int(st[RETIRED])}, CQ consumer index {int(st[CQ_CI])}"
    )
    if code == TIMEOUT:
        extra = ""
        if int(st[EXPECTED]):
            extra = f"; polled word holds {int(st[SEEN])}, waiting for {int(st[EXPECTED])}"
        raise CompletionTimeout(f"no completion within {timeout_s:g} s ({where}{extra})")
    if code == CQE_ERROR:
        synd = int(st[SYNDROME])
        try:
            name = Syndrome(synd).name
        except ValueError:
            name = "unknown"
        raise CompletionError(
            f"error CQE {name} (0x{synd:02x}) for WQE {int(st[WQE_COUNTER])} ({where})",
            synd,
            int(st[WQE_COUNTER]),
            int(st[QPN]),
        )
    if code == INTERRUPTED:
        done = int(st[DONE])
        raise LoopInterrupted(
            f"{what} interrupted by a signal after {done} of {total} operations ({where})",
            done,
            total,
        )
    raise FabricError(f"{what} failed with status {code} ({where})")
