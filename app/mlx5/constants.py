"""mlx5 wire-format constants (rdma-core <infiniband/mlx5dv.h>; see shared/reference/mlx5.md).

The same values live in cuda/mlx5.cuh; tests check both against the installed rdma-core header.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

SEG_BYTES = 16  # one WQE segment: the unit of ctrl.ds
WQEBB_BYTES = 64  # one send-queue basic block (MLX5_SEND_WQE_BB)
CQE_BYTES = 64  # struct mlx5_cqe64
AV_FULL_BYTES = 48  # struct mlx5_wqe_av (extended: GRH/MAC)
AV_COMPACT_BYTES = 16  # struct mlx5_base_av (HCAs reporting compact_address_vector)
DS_MAX = 0x3F  # ds is a 6-bit field: a WQE holds at most 63 segments
INLINE_FLAG = 0x80000000  # MLX5_INLINE_SEG, or-ed into an inline segment's byte_count
AV_EXT = 0x80000000  # MLX5_EXTENDED_UD_AV, bit 31 of av.dqp_dct: the 48-byte form

# Extended (masked) atomics: ctrl.opmod = 0x08 | (log2(operand bytes) - 2), as the PRM defines
# it and UCX (UCT_IB_MLX5_OPMOD_EXT_ATOMIC), NVSHMEM's and DeepEP's IBGDA code (0x08 for 4 bytes,
# 0x09 for 8) post it. The emulated NIC serves the 4- and 8-byte forms.
EXT_ATOMIC_OPMOD = 0x08
EXT_ATOMIC_SIZES = (4, 8)

# Doorbell-record slots (32-bit words): MLX5_RCV_DBR / MLX5_SND_DBR; CQ consumer index SET_CI.
RCV_DBR = 0
SND_DBR = 1
CQ_SET_CI = 0


class Opcode(IntEnum):
    """Send opcodes, the low byte of ctrl.opmod_idx_opcode (MLX5_OPCODE_*)."""

    NOP = 0x00
    RDMA_WRITE = 0x08
    RDMA_WRITE_IMM = 0x09
    SEND = 0x0A
    SEND_IMM = 0x0B
    RDMA_READ = 0x10
    ATOMIC_CS = 0x11
    ATOMIC_FA = 0x12
    ATOMIC_MASKED_CS = 0x14  # extended atomics: opmod selects the operand size (ext_atomic_opmod)
    ATOMIC_MASKED_FA = 0x15


class CtrlFlags(IntFlag):
    """Bits of ctrl.fm_ce_se (MLX5_WQE_CTRL_*)."""

    SOLICITED = 0x02
    CQ_UPDATE = 0x08  # signaled: the NIC writes a CQE for this WQE
    INITIATOR_SMALL_FENCE = 0x20
    FENCE = 0x80


class CqeOpcode(IntEnum):
    """CQE opcodes, op_own >> 4 (MLX5_CQE_*)."""

    REQ = 0
    RESP_WR_IMM = 1
    RESP_SEND = 2
    RESP_SEND_IMM = 3
    REQ_ERR = 13
    RESP_ERR = 14
    INVALID = 15


class Syndrome(IntEnum):
    """Error-CQE syndromes (MLX5_CQE_SYNDROME_*_ERR)."""

    LOCAL_LENGTH = 0x01
    LOCAL_QP_OP = 0x02
    LOCAL_PROT = 0x04
    WR_FLUSH = 0x05
    BAD_RESP = 0x10
    LOCAL_ACCESS = 0x11
    REMOTE_INVAL_REQ = 0x12
    REMOTE_ACCESS = 0x13
    REMOTE_OP = 0x14
    TRANSPORT_RETRY_EXC = 0x15
    RNR_RETRY_EXC = 0x16
    REMOTE_ABORTED = 0x22
