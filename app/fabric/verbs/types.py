"""Memory objects of the verbs provider (host memory pyverbs allocated), and names for ibv_wc
statuses."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import MemoryRegion


@dataclass(frozen=True)
class VerbsMemoryRegion(MemoryRegion):
    """An ibv_mr over host memory pyverbs allocated (`addr` is its buffer; domain HOST)."""


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
