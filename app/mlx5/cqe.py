"""64-byte mlx5 CQEs (struct mlx5_cqe64 / mlx5_err_cqe): decode, ownership, synthetic encoders.

Multi-byte fields are big-endian except imm_inval_pkey, which holds the immediate as it came off
the wire: decoded raw (a little-endian load), the value verbs hands back as a __be32.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ._fields import BytesLike, as_bytes, check_uint, to_array
from .constants import CQE_BYTES, CqeOpcode

# Byte offsets in the 64-byte CQE (checked against rdma-core's structs in the tests).
OFF_IMM = 36  # mlx5_cqe64.imm_inval_pkey
OFF_BYTE_CNT = 44
OFF_TIMESTAMP = 48
OFF_SOP_QPN = 56  # sop_drop_qpn / s_wqe_opcode_qpn: bits 31..24 WQE opcode, 23..0 QPN
OFF_WQE_COUNTER = 60
OFF_SIGNATURE = 62
OFF_OP_OWN = 63
OFF_VENDOR_SYND = 54  # mlx5_err_cqe.vendor_err_synd
OFF_SYNDROME = 55

_ERR_OPCODES = (CqeOpcode.REQ_ERR, CqeOpcode.RESP_ERR)


@dataclass(frozen=True)
class Cqe:
    opcode: int  # CqeOpcode value (op_own >> 4)
    owner: int  # op_own bit 0
    wqe_counter: int
    byte_cnt: int
    qpn: int
    wqe_opcode: int  # requester: send opcode of the completed WQE
    imm: int  # raw imm_inval_pkey (responder WRITE_IMM)
    syndrome: int  # error CQEs only, else 0
    vendor_syndrome: int  # error CQEs only, else 0
    timestamp: int

    @property
    def is_error(self) -> bool:
        return self.opcode in _ERR_OPCODES


def decode_cqe(b64: BytesLike) -> Cqe:
    """Decode a CQE. Error CQEs (mlx5_err_cqe) have no byte_cnt, imm or timestamp (bytes 36..53
    are reserved, the syndromes sit in the timestamp's last bytes): those decode as 0 there."""
    raw = as_bytes(b64, CQE_BYTES, "CQE")
    op_own = raw[OFF_OP_OWN]
    opcode = op_own >> 4
    sop = struct.unpack_from(">I", raw, OFF_SOP_QPN)[0]
    err = opcode in _ERR_OPCODES
    return Cqe(
        opcode=opcode,
        owner=op_own & 1,
        wqe_counter=struct.unpack_from(">H", raw, OFF_WQE_COUNTER)[0],
        byte_cnt=0 if err else struct.unpack_from(">I", raw, OFF_BYTE_CNT)[0],
        qpn=sop & 0xFFFFFF,
        wqe_opcode=sop >> 24,
        imm=0 if err else int.from_bytes(raw[OFF_IMM : OFF_IMM + 4], "little"),
        syndrome=raw[OFF_SYNDROME] if err else 0,
        vendor_syndrome=raw[OFF_VENDOR_SYND] if err else 0,
        timestamp=0 if err else struct.unpack_from(">Q", raw, OFF_TIMESTAMP)[0],
    )


def owner_for(ci: int, ncqe: int) -> int:
    """Owner bit a valid CQE carries at consumer index `ci` on a CQ of `ncqe` (power of two)."""
    return 1 if int(ci) & int(ncqe) else 0


def cqe_ready(b64: BytesLike, ci: int, ncqe: int) -> bool:
    """True when the CQE at consumer index `ci` was written by the NIC in this pass of the ring."""
    op_own = as_bytes(b64, CQE_BYTES, "CQE")[OFF_OP_OWN]
    return (op_own >> 4) != CqeOpcode.INVALID and (op_own & 1) == owner_for(ci, ncqe)


def init_cq(buf: np.ndarray) -> None:
    """Initialise a CQ buffer in place: every entry zero with op_own = INVALID << 4."""
    if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8 or buf.size % CQE_BYTES:
        raise ValueError(f"buf: need a uint8 array of a multiple of {CQE_BYTES} bytes")
    flat = buf.reshape(-1, CQE_BYTES)
    flat[:] = 0
    flat[:, OFF_OP_OWN] = CqeOpcode.INVALID << 4


def ready_mask(buf: np.ndarray, ci: int, ncqe: int, count: int) -> np.ndarray:
    """Vectorised cqe_ready for `count` consecutive consumer indices from `ci` (wrapping)."""
    cis = int(ci) + np.arange(count, dtype=np.int64)
    op_own = buf.reshape(-1, CQE_BYTES)[cis % ncqe, OFF_OP_OWN]
    owner = ((cis & ncqe) != 0).astype(np.uint8)
    return ((op_own >> 4) != CqeOpcode.INVALID) & ((op_own & 1) == owner)


def decode_cqes(buf: np.ndarray) -> dict[str, np.ndarray]:
    """Vectorised decode_cqe over a CQ buffer: one array per Cqe field, one entry per CQE."""
    e = np.ascontiguousarray(buf, dtype=np.uint8).reshape(-1, CQE_BYTES)

    def be(off: int, n: int) -> np.ndarray:
        return np.ascontiguousarray(e[:, off : off + n]).view(f">u{n}")[:, 0].astype(f"u{n}")

    op_own = e[:, OFF_OP_OWN]
    opcode = op_own >> 4
    err = np.isin(opcode, [int(o) for o in _ERR_OPCODES])
    sop = be(OFF_SOP_QPN, 4)
    imm = np.ascontiguousarray(e[:, OFF_IMM : OFF_IMM + 4]).view("<u4")[:, 0].astype("u4")
    return {
        "opcode": opcode,
        "owner": op_own & 1,
        "wqe_counter": be(OFF_WQE_COUNTER, 2),
        "byte_cnt": np.where(err, 0, be(OFF_BYTE_CNT, 4)).astype("u4"),
        "qpn": sop & 0xFFFFFF,
        "wqe_opcode": (sop >> 24).astype(np.uint8),
        "imm": np.where(err, 0, imm).astype("u4"),
        "syndrome": np.where(err, e[:, OFF_SYNDROME], 0).astype(np.uint8),
        "vendor_syndrome": np.where(err, e[:, OFF_VENDOR_SYND], 0).astype(np.uint8),
        "timestamp": np.where(err, 0, be(OFF_TIMESTAMP, 8)).astype("u8"),
    }


def _body(qpn: int, wqe_opcode: int, wqe_counter: int) -> bytearray:
    b = bytearray(CQE_BYTES)
    sop = (check_uint("wqe_opcode", wqe_opcode, 8) << 24) | check_uint("qpn", qpn, 24)
    struct.pack_into(">I", b, OFF_SOP_QPN, sop)
    struct.pack_into(">H", b, OFF_WQE_COUNTER, check_uint("wqe_counter", wqe_counter, 16))
    return b


def _op_own(opcode: int, owner: int) -> int:
    return (check_uint("opcode", opcode, 4) << 4) | check_uint("owner", owner, 1)


def req_cqe(
    qpn: int,
    wqe_opcode: int,
    wqe_counter: int,
    byte_cnt: int = 0,
    *,
    timestamp: int = 0,
    owner: int = 0,
) -> np.ndarray:
    """A requester CQE (opcode REQ) as a NIC writes it."""
    b = _body(qpn, wqe_opcode, wqe_counter)
    struct.pack_into(">I", b, OFF_BYTE_CNT, check_uint("byte_cnt", byte_cnt, 32))
    struct.pack_into(">Q", b, OFF_TIMESTAMP, check_uint("timestamp", timestamp, 64))
    b[OFF_OP_OWN] = _op_own(CqeOpcode.REQ, owner)
    return to_array(bytes(b))


def resp_cqe(
    opcode: int,
    qpn: int,
    wqe_counter: int,
    byte_cnt: int,
    *,
    imm: int = 0,
    timestamp: int = 0,
    owner: int = 0,
) -> np.ndarray:
    """A responder CQE (RESP_WR_IMM / RESP_SEND / RESP_SEND_IMM); `imm` raw (wire order)."""
    b = _body(qpn, 0, wqe_counter)
    b[OFF_IMM : OFF_IMM + 4] = check_uint("imm", imm, 32).to_bytes(4, "little")
    struct.pack_into(">I", b, OFF_BYTE_CNT, check_uint("byte_cnt", byte_cnt, 32))
    struct.pack_into(">Q", b, OFF_TIMESTAMP, check_uint("timestamp", timestamp, 64))
    b[OFF_OP_OWN] = _op_own(opcode, owner)
    return to_array(bytes(b))


def err_cqe(
    opcode: int,
    syndrome: int,
    qpn: int,
    wqe_opcode: int,
    wqe_counter: int,
    *,
    vendor_syndrome: int = 0,
    owner: int = 0,
) -> np.ndarray:
    """An error CQE (REQ_ERR / RESP_ERR) carrying an mlx5 syndrome."""
    if opcode not in _ERR_OPCODES:
        raise ValueError(f"opcode={opcode}: an error CQE needs REQ_ERR (13) or RESP_ERR (14)")
    b = _body(qpn, wqe_opcode, wqe_counter)
    b[OFF_SYNDROME] = check_uint("syndrome", syndrome, 8)
    b[OFF_VENDOR_SYND] = check_uint("vendor_syndrome", vendor_syndrome, 8)
    b[OFF_OP_OWN] = _op_own(opcode, owner)
    return to_array(bytes(b))
