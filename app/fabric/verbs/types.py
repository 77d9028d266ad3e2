"""Memory objects of the verbs provider, and the seams' additions it relies on.

The lead is adding to app/fabric/base.py a MemoryDomain enum and `domain`/`device_addr` fields on
memory objects; until that lands, the same names are defined here so this provider fits it
unchanged (the import prefers base's).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..base import MemoryRegion

try:  # the seams issue's definition, once merged
    from ..base import MemoryDomain  # type: ignore[attr-defined]
except ImportError:

    class MemoryDomain(str, enum.Enum):  # type: ignore[no-redef]
        """Where a buffer lives: host memory, pinned host mapped into the GPU, GPU memory."""

        HOST = "host"
        HOST_MAPPED = "host-mapped"
        DEVICE = "device"


@dataclass(frozen=True)
class VerbsMemoryRegion(MemoryRegion):
    """An ibv_mr over host memory pyverbs allocated (`addr` is its buffer)."""

    domain: MemoryDomain = MemoryDomain.HOST
    device_addr: int | None = None


# ibv_wc_status values (verbs.h; stable ABI): names for error messages.
WC_STATUS = (
    "SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
    "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
    "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
    "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
    "GENERAL_ERR", "TM_ERR", "TM_RNDV_INCOMPLETE",
)  # fmt: skip


def wc_status_name(status: int) -> str:
    return f"IBV_WC_{WC_STATUS[status]}" if 0 <= status < len(WC_STATUS) else f"status {status}"
