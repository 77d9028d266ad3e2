"""The status words a kernel call leaves (cuda/gda/queue.cuh StatusWord/StatusCode), turned into
the one native failure record (app/submit/failures.py) and raised through its decoder."""

from __future__ import annotations

import numpy as np

from ..failures import CQE_ERROR, INTERRUPTED, TIMEOUT, LoopFailure, raise_failure

WORDS = 16
CODE, LANE, QPN, PI, RETIRED, CQ_CI, SYNDROME, WQE_COUNTER, DONE, SEEN, EXPECTED = range(11)
OK, STATUS_TIMEOUT, STATUS_CQE_ERROR, STATUS_INTERRUPTED = 0, 1, 2, 3
KINDS = {STATUS_TIMEOUT: TIMEOUT, STATUS_CQE_ERROR: CQE_ERROR, STATUS_INTERRUPTED: INTERRUPTED}


def raise_for(st: np.ndarray, rank: int, what: str, timeout_s: float, total: int) -> None:
    code = int(st[CODE])
    if code == OK:
        return
    # `total`: the operations of the whole call (msg-rate: every thread's messages, warm-up
    # included), which is what the producer index counts towards (in WQEBBs, from the call's start).
    where = (
        f"rank {rank}, {what} (GPU), lane {int(st[LANE])}, QP 0x{int(st[QPN]):06x}: SQ producer "
        f"index {int(st[PI])}, retired {int(st[RETIRED])}, CQ consumer index {int(st[CQ_CI])}; "
        f"{total} operations in the call"
    )
    failure = LoopFailure(
        kind=KINDS.get(code, f"status {code}"),
        where=where,
        qpn=int(st[QPN]),
        syndrome=int(st[SYNDROME]),
        wqe_counter=int(st[WQE_COUNTER]),
        word_seen=int(st[SEEN]),
        word_expected=int(st[EXPECTED]),
        done=int(st[DONE]),
        total=total,
    )
    raise_failure(failure, what, timeout_s)
