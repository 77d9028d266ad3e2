"""Send-WQE segments: encoders returning 16-byte uint8 arrays, and decoders (what the NIC reads).

Byte layouts follow rdma-core's struct mlx5_wqe_*_seg (tests compare them with the installed
<infiniband/mlx5dv.h>). All multi-byte fields are big-endian except ctrl.imm, which is stored as
passed: rdma-core's mlx5dv_set_ctrl_seg copies the already wire-ordered immediate. gicbench runs
on little-endian hosts and GPUs only, so "as passed" means the 4 bytes of a little-endian store.

Immediates: verbs' imm_data is a __be32. A host-order immediate x becomes the wire value
`imm_from_host(x)` (htobe32(x)); the bytes in the WQE are then x big-endian, which is what the
responder's CQE carries back and `imm_to_host` undoes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from ._fields import BytesLike, as_bytes, check_uint, to_array
from .constants import (
    AV_COMPACT_BYTES,
    AV_EXT,
    AV_FULL_BYTES,
    DS_MAX,
    EXT_ATOMIC_OPMOD,
    EXT_ATOMIC_SIZES,
    INLINE_FLAG,
    SEG_BYTES,
    WQEBB_BYTES,
    Opcode,
)


def imm_from_host(x: int) -> int:
    """htobe32: the wire-order value to pass as `imm` for a host-order immediate `x`."""
    return int.from_bytes(check_uint("imm", x, 32).to_bytes(4, "big"), "little")


def imm_to_host(raw: int) -> int:
    """be32toh: the host-order immediate from a raw (as stored) imm field."""
    return int.from_bytes(check_uint("imm", raw, 32).to_bytes(4, "little"), "big")


# ---- encoders ------------------------------------------------------------------------------------
def ctrl_seg(
    pi: int,
    opcode: int,
    qpn: int,
    ds: int,
    *,
    opmod: int = 0,
    fm_ce_se: int = 0,
    signature: int = 0,
    imm: int = 0,
) -> np.ndarray:
    """struct mlx5_wqe_ctrl_seg as mlx5dv_set_ctrl_seg fills it (reserved bytes zero).

    `pi` is the running producer index; the WQE index field keeps its low 16 bits.
    """
    w0 = (check_uint("opmod", opmod, 8) << 24) | ((int(pi) & 0xFFFF) << 8)
    w0 |= check_uint("opcode", opcode, 8)
    if not 0 <= int(ds) <= DS_MAX:
        raise ValueError(f"ds={ds} out of range: allowed 0..{DS_MAX} (16-byte segments per WQE)")
    w1 = (check_uint("qpn", qpn, 24) << 8) | int(ds)
    tail = bytes((check_uint("signature", signature, 8), 0, 0, check_uint("fm_ce_se", fm_ce_se, 8)))
    return to_array(
        struct.pack(">II", w0, w1) + tail + check_uint("imm", imm, 32).to_bytes(4, "little")
    )


def raddr_seg(raddr: int, rkey: int) -> np.ndarray:
    """struct mlx5_wqe_raddr_seg: raddr BE64, rkey BE32, reserved 0."""
    return to_array(
        struct.pack(">QII", check_uint("raddr", raddr, 64), check_uint("rkey", rkey, 32), 0)
    )


def data_seg(length: int, lkey: int, addr: int) -> np.ndarray:
    """struct mlx5_wqe_data_seg as mlx5dv_set_data_seg fills it."""
    return to_array(
        struct.pack(
            ">IIQ",
            check_uint("length", length, 32),
            check_uint("lkey", lkey, 32),
            check_uint("addr", addr, 64),
        )
    )


def atomic_seg(swap_add: int, compare: int = 0) -> np.ndarray:
    """struct mlx5_wqe_atomic_seg: swap_add (the addend for fetch-add) and compare, BE64."""
    return to_array(
        struct.pack(">QQ", check_uint("swap_add", swap_add, 64), check_uint("compare", compare, 64))
    )


def ext_atomic_opmod(size: int) -> int:
    """ctrl.opmod of an extended (masked) atomic on `size`-byte operands (4 or 8):
    0x08 | (log2(size) - 2)."""
    return EXT_ATOMIC_OPMOD | (_ext_size(size).bit_length() - 3)


def _ext_size(size: int) -> int:
    if size not in EXT_ATOMIC_SIZES:
        raise ValueError(f"size={size}: allowed {' or '.join(map(str, EXT_ATOMIC_SIZES))} (bytes)")
    return int(size)


def masked_fa_seg(size: int, add: int, field_boundary: int = 0) -> np.ndarray:
    """The extended atomic segment of a masked fetch-add (16 bytes, big-endian). 4-byte operands:
    add, field_boundary (BE32 each), then 8 reserved bytes; 8-byte operands: add, field_boundary
    (BE64 each, where struct mlx5_wqe_atomic_seg has swap_add and compare). A bit set in
    field_boundary ends a field there: its carry is not propagated; 0 is a plain add."""
    bits = 8 * _ext_size(size)
    a, fb = check_uint("add", add, bits), check_uint("field_boundary", field_boundary, bits)
    raw = struct.pack(">IIQ", a, fb, 0) if size == 4 else struct.pack(">QQ", a, fb)
    return to_array(raw)


def masked_cs_seg(
    size: int, swap: int, compare: int, swap_mask: int, compare_mask: int
) -> np.ndarray:
    """The extended atomic segment(s) of a masked compare-and-swap, big-endian. 4-byte operands:
    one segment of swap, compare, swap_mask, compare_mask (BE32 each); 8-byte operands: two
    segments, rdma-core's struct mlx5_wqe_masked_atomic_seg (swap_add, compare, swap_add_mask,
    compare_mask, BE64 each). The swap happens when ((old ^ compare) & compare_mask) == 0 and
    replaces the bits of swap_mask: new = (old & ~swap_mask) | (swap & swap_mask)."""
    bits = 8 * _ext_size(size)
    vals = tuple(
        check_uint(n, v, bits)
        for n, v in (
            ("swap", swap), ("compare", compare), ("swap_mask", swap_mask),
            ("compare_mask", compare_mask),
        )
    )  # fmt: skip
    return to_array(struct.pack(">IIII" if size == 4 else ">QQQQ", *vals))


def masked_atomic_segs(opcode: int, size: int) -> int:
    """Segments the extended atomic segment of `opcode` on `size`-byte operands takes."""
    return 2 if opcode == Opcode.ATOMIC_MASKED_CS and _ext_size(size) == 8 else 1


def _av_head(
    dc_key: int, dct_num: int, ext: bool, stat_rate_sl: int, fl_mlid: int, rlid: int
) -> bytes:
    dqp = check_uint("dct_num", dct_num, 24) | (AV_EXT if ext else 0)
    return struct.pack(
        ">QIBBH",
        check_uint("dc_key", dc_key, 64),
        dqp,
        check_uint("stat_rate_sl", stat_rate_sl, 8),
        check_uint("fl_mlid", fl_mlid, 8),
        check_uint("rlid", rlid, 16),
    )


def av_full(
    dc_key: int,
    dct_num: int,
    *,
    rlid: int = 0,
    stat_rate_sl: int = 0,
    fl_mlid: int = 0,
    rmac: bytes = b"\0" * 6,
    tclass: int = 0,
    hop_limit: int = 0,
    grh_gid_fl: int = 0,
    rgid: bytes = b"\0" * 16,
) -> np.ndarray:
    """struct mlx5_wqe_av, the 48-byte extended form (ext bit set in dqp_dct): 3 segments."""
    if len(rmac) != 6:
        raise ValueError(f"rmac: need 6 bytes, got {len(rmac)}")
    if len(rgid) != 16:
        raise ValueError(f"rgid: need 16 bytes, got {len(rgid)}")
    raw = _av_head(dc_key, dct_num, True, stat_rate_sl, fl_mlid, rlid)
    raw += b"\0" * 4 + bytes(rmac)
    raw += struct.pack(
        ">BBI",
        check_uint("tclass", tclass, 8),
        check_uint("hop_limit", hop_limit, 8),
        check_uint("grh_gid_fl", grh_gid_fl, 32),
    )
    raw += bytes(rgid)
    return to_array(raw)


def av_compact(
    dc_key: int, dct_num: int, *, rlid: int = 0, stat_rate_sl: int = 0, fl_mlid: int = 0
) -> np.ndarray:
    """struct mlx5_base_av, the 16-byte compact form (ext bit clear): 1 segment."""
    return to_array(_av_head(dc_key, dct_num, False, stat_rate_sl, fl_mlid, rlid))


def inline_header(length: int) -> bytes:
    """The 4-byte byte_count that opens an inline data segment (MLX5_INLINE_SEG | length)."""
    return struct.pack(">I", check_uint("length", length, 31) | INLINE_FLAG)


def inline_seg(payload: bytes) -> np.ndarray:
    """Inline data segment(s): header + payload, zero-padded to whole 16-byte segments."""
    raw = inline_header(len(payload)) + bytes(payload)
    return to_array(raw + b"\0" * (inline_seg_ds(len(payload)) * SEG_BYTES - len(raw)))


# ---- ds / WQEBB arithmetic -----------------------------------------------------------------------
def inline_seg_ds(length: int) -> int:
    """Segments an inline payload of `length` bytes takes: align(length + 4, 16) / 16."""
    return (int(length) + 4 + SEG_BYTES - 1) // SEG_BYTES


def ds_to_wqebbs(ds: int) -> int:
    """Basic blocks a WQE of `ds` segments occupies (how far the producer index advances)."""
    return (int(ds) * SEG_BYTES + WQEBB_BYTES - 1) // WQEBB_BYTES


def write_wqebbs(inline: bool, length: int, dc: bool = False, compact_av: bool = False) -> int:
    """Basic blocks one RDMA write WQE takes (ctrl, raddr, inline data or a data segment, and
    for DC the address vector): mlx5.cuh's ds_rc_write/ds_dc_write, in WQEBBs."""
    ds = 2 + (inline_seg_ds(length) if inline else 1)
    if dc:
        ds += (AV_COMPACT_BYTES if compact_av else AV_FULL_BYTES) // SEG_BYTES
    return ds_to_wqebbs(ds)


# ---- decoders ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ctrl:
    opcode: int
    opmod: int
    wqe_index: int
    qpn: int
    ds: int
    signature: int
    fm_ce_se: int
    imm: int  # raw, as stored (wire order)


@dataclass(frozen=True)
class Raddr:
    raddr: int
    rkey: int


@dataclass(frozen=True)
class Data:
    byte_count: int  # raw; with INLINE_FLAG set this is an inline header
    lkey: int
    addr: int

    @property
    def is_inline(self) -> bool:
        return bool(self.byte_count & INLINE_FLAG)

    @property
    def length(self) -> int:
        return self.byte_count & ~INLINE_FLAG if self.is_inline else self.byte_count


@dataclass(frozen=True)
class Atomic:
    swap_add: int
    compare: int


@dataclass(frozen=True)
class MaskedAtomic:
    """An extended atomic segment as the NIC reads it. Masked fetch-add: swap_add is the addend,
    swap_add_mask the field boundary (compare, compare_mask 0). Masked compare-and-swap: swap,
    compare, swap mask, compare mask."""

    size: int
    swap_add: int
    compare: int
    swap_add_mask: int
    compare_mask: int


@dataclass(frozen=True)
class Av:
    dc_key: int
    dct_num: int  # dqp_dct without the ext bit
    ext: bool  # True: 48-byte form, the fields below are meaningful
    stat_rate_sl: int
    fl_mlid: int
    rlid: int
    rmac: bytes = b"\0" * 6
    tclass: int = 0
    hop_limit: int = 0
    grh_gid_fl: int = 0
    rgid: bytes = b"\0" * 16

    @property
    def nbytes(self) -> int:
        return AV_FULL_BYTES if self.ext else AV_COMPACT_BYTES


def decode_ctrl(b: BytesLike) -> Ctrl:
    raw = as_bytes(b, SEG_BYTES, "ctrl segment")
    w0, w1 = struct.unpack_from(">II", raw)
    return Ctrl(
        opcode=w0 & 0xFF,
        opmod=w0 >> 24,
        wqe_index=(w0 >> 8) & 0xFFFF,
        qpn=w1 >> 8,
        ds=w1 & DS_MAX,
        signature=raw[8],
        fm_ce_se=raw[11],
        imm=int.from_bytes(raw[12:16], "little"),
    )


def decode_raddr(b: BytesLike) -> Raddr:
    raddr, rkey = struct.unpack_from(">QI", as_bytes(b, SEG_BYTES, "raddr segment"))
    return Raddr(raddr, rkey)


def decode_data(b: BytesLike) -> Data:
    return Data(*struct.unpack_from(">IIQ", as_bytes(b, SEG_BYTES, "data segment")))


def decode_atomic(b: BytesLike) -> Atomic:
    return Atomic(*struct.unpack_from(">QQ", as_bytes(b, SEG_BYTES, "atomic segment")))


def decode_masked_atomic(b: BytesLike, opcode: int, size: int) -> MaskedAtomic:
    """Decode the extended atomic segment(s) of a masked `opcode` on `size`-byte operands."""
    n = masked_atomic_segs(opcode, size) * SEG_BYTES
    raw = as_bytes(b, n, "extended atomic segment")
    if opcode == Opcode.ATOMIC_MASKED_FA:
        add, fb = struct.unpack_from(">II" if size == 4 else ">QQ", raw)
        return MaskedAtomic(size, add, 0, fb, 0)
    if opcode != Opcode.ATOMIC_MASKED_CS:
        raise ValueError(f"opcode={opcode:#x}: not an extended atomic (0x14 or 0x15)")
    return MaskedAtomic(size, *struct.unpack_from(">IIII" if size == 4 else ">QQQQ", raw))


def decode_av(b: BytesLike) -> Av:
    """Decode an AV; reads 48 bytes when the ext bit says so (then `b` must hold them)."""
    head = as_bytes(b, AV_COMPACT_BYTES, "address vector")
    dc_key, dqp, srsl, flm, rlid = struct.unpack_from(">QIBBH", head)
    if not dqp & AV_EXT:
        return Av(dc_key, dqp & ~AV_EXT, False, srsl, flm, rlid)
    raw = as_bytes(b, AV_FULL_BYTES, "address vector (ext bit set)")
    tclass, hop, gfl = struct.unpack_from(">BBI", raw, 26)
    return Av(
        dc_key, dqp & ~AV_EXT, True, srsl, flm, rlid, raw[20:26], tclass, hop, gfl, raw[32:48]
    )
