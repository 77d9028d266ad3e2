"""A send-queue ring of 64-byte basic blocks, and builders for the WQEs gicbench posts.

A WQE that runs past the end of the ring continues at its start, as on the NIC: segments are
addressed by (WQE index, segment number) and wrap modulo the ring size. The ring may be a view of
shared memory (the emulated NIC reads it), so everything is written in place.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._fields import BytesLike
from .constants import (
    AV_COMPACT_BYTES,
    AV_FULL_BYTES,
    DS_MAX,
    EXT_ATOMIC_OPMOD,
    SEG_BYTES,
    WQEBB_BYTES,
    CtrlFlags,
    Opcode,
)
from .wqe import (
    Atomic,
    Av,
    Ctrl,
    Data,
    MaskedAtomic,
    Raddr,
    atomic_seg,
    ctrl_seg,
    data_seg,
    decode_atomic,
    decode_av,
    decode_ctrl,
    decode_data,
    decode_masked_atomic,
    decode_raddr,
    ds_to_wqebbs,
    ext_atomic_opmod,
    inline_seg,
    masked_atomic_segs,
    masked_cs_seg,
    masked_fa_seg,
    raddr_seg,
)

FETCH_ADD_BYTES = 8  # fetch-add returns the old 64-bit value into the local buffer


@dataclass(frozen=True)
class Wqe:
    """A parsed send WQE (see SqRing.parse)."""

    ctrl: Ctrl
    av: Av | None = None
    raddr: Raddr | None = None
    atomic: Atomic | None = None
    data: Data | None = None  # pointer data segment, or the inline header (lkey = addr = 0)
    inline: bytes | None = None  # inline payload
    masked: MaskedAtomic | None = None  # extended atomic segment(s) of a masked atomic

    @property
    def wqebbs(self) -> int:
        return ds_to_wqebbs(self.ctrl.ds)


def _flags(signaled: bool, fence: bool) -> int:
    return (CtrlFlags.CQ_UPDATE if signaled else 0) | (CtrlFlags.FENCE if fence else 0)


class SqRing:
    """`wqebb_cnt` (a power of two) basic blocks in `buf` (uint8, wqebb_cnt * 64 bytes)."""

    def __init__(self, buf: np.ndarray, wqebb_cnt: int) -> None:
        if wqebb_cnt < 1 or wqebb_cnt & (wqebb_cnt - 1):
            raise ValueError(f"wqebb_cnt={wqebb_cnt}: must be a power of two >= 1")
        if not isinstance(buf, np.ndarray) or buf.dtype != np.uint8 or buf.ndim != 1:
            raise TypeError("buf: need a 1-D numpy uint8 array")
        if buf.size != wqebb_cnt * WQEBB_BYTES:
            raise ValueError(f"buf: need {wqebb_cnt * WQEBB_BYTES} bytes, got {buf.size}")
        self.buf = buf
        self.wqebb_cnt = wqebb_cnt
        self.nbytes = wqebb_cnt * WQEBB_BYTES

    def offset(self, wqe_index: int, first_seg: int = 0) -> int:
        """Byte offset in the ring of segment `first_seg` of the WQE at `wqe_index`."""
        base = (int(wqe_index) & (self.wqebb_cnt - 1)) * WQEBB_BYTES
        return (base + int(first_seg) * SEG_BYTES) % self.nbytes

    def write(self, wqe_index: int, first_seg: int, data: BytesLike) -> None:
        """Copy `data` in from segment `first_seg` of WQE `wqe_index`, wrapping at the end."""
        src = (
            np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        )
        src = src.reshape(-1).view(np.uint8)
        if src.size > self.nbytes:
            raise ValueError(f"data: {src.size} bytes do not fit a {self.nbytes}-byte SQ")
        off = self.offset(wqe_index, first_seg)
        head = min(src.size, self.nbytes - off)
        self.buf[off : off + head] = src[:head]
        self.buf[: src.size - head] = src[head:]

    def read(self, wqe_index: int, first_seg: int, nbytes: int) -> np.ndarray:
        """A copy of `nbytes` from segment `first_seg` of WQE `wqe_index`, wrapping at the end."""
        if not 0 <= nbytes <= self.nbytes:
            raise ValueError(f"nbytes={nbytes} out of range: allowed 0..{self.nbytes}")
        off = self.offset(wqe_index, first_seg)
        head = min(nbytes, self.nbytes - off)
        return np.concatenate((self.buf[off : off + head], self.buf[: nbytes - head]))

    # ---- builders: write a whole WQE at producer index `pi`, return the WQEBBs used -------------
    def _post(
        self, pi: int, opcode: int, qpn: int, fm_ce_se: int, imm: int, body: list, opmod: int = 0
    ) -> int:
        ds = 1 + sum(len(s) for s in body) // SEG_BYTES
        if ds > DS_MAX:
            raise ValueError(f"WQE of {ds} segments exceeds the ds limit {DS_MAX}")
        if ds_to_wqebbs(ds) > self.wqebb_cnt:
            raise ValueError(f"WQE of {ds_to_wqebbs(ds)} WQEBBs exceeds the SQ ({self.wqebb_cnt})")
        ctrl = ctrl_seg(pi, opcode, qpn, ds, opmod=opmod, fm_ce_se=fm_ce_se, imm=imm)
        self.write(pi, 0, np.concatenate([ctrl, *body]))
        return ds_to_wqebbs(ds)

    @staticmethod
    def _av_segs(av: np.ndarray | None) -> list:
        if av is None:
            return []
        if av.size not in (AV_FULL_BYTES, AV_COMPACT_BYTES):
            raise ValueError(f"av: need {AV_FULL_BYTES} or {AV_COMPACT_BYTES} bytes, got {av.size}")
        return [np.asarray(av, dtype=np.uint8).reshape(-1)]

    def post_write(
        self,
        pi: int,
        qpn: int,
        raddr: int,
        rkey: int,
        *,
        payload: bytes | None = None,
        lkey: int = 0,
        addr: int = 0,
        length: int = 0,
        signaled: bool = False,
        fence: bool = False,
        imm: int | None = None,
        av: np.ndarray | None = None,
    ) -> int:
        """RDMA WRITE (WRITE_IMM when `imm` is given): ctrl [+ AV] + raddr + inline or data.

        `payload` given: the bytes go inline; else a pointer data segment (lkey, addr, length).
        `imm` is the wire-order value (see wqe.imm_from_host). `av` (DC): av_full/av_compact.
        """
        body = [*self._av_segs(av), raddr_seg(raddr, rkey)]
        body.append(inline_seg(payload) if payload is not None else data_seg(length, lkey, addr))
        opcode = Opcode.RDMA_WRITE if imm is None else Opcode.RDMA_WRITE_IMM
        return self._post(pi, opcode, qpn, _flags(signaled, fence), imm or 0, body)

    def post_fetch_add(
        self,
        pi: int,
        qpn: int,
        raddr: int,
        rkey: int,
        add: int,
        lkey: int,
        addr: int,
        *,
        signaled: bool = True,
        fence: bool = False,
        av: np.ndarray | None = None,
    ) -> int:
        """ATOMIC fetch-add: ctrl [+ AV] + raddr + atomic + data(8, lkey, addr)."""
        body = [*self._av_segs(av), raddr_seg(raddr, rkey), atomic_seg(add, 0)]
        body.append(data_seg(FETCH_ADD_BYTES, lkey, addr))
        return self._post(pi, Opcode.ATOMIC_FA, qpn, _flags(signaled, fence), 0, body)

    def post_masked_fetch_add(
        self,
        pi: int,
        qpn: int,
        raddr: int,
        rkey: int,
        add: int,
        lkey: int,
        addr: int,
        *,
        size: int = 8,
        field_boundary: int = 0,
        signaled: bool = True,
        fence: bool = False,
        av: np.ndarray | None = None,
    ) -> int:
        """Masked fetch-add (MLX5_OPCODE_ATOMIC_MASKED_FA, opmod for `size`-byte operands):
        ctrl [+ AV] + raddr + extended atomic segment + data(size, lkey, addr). The old value
        lands at addr. field_boundary 0 is a plain add (what NVSHMEM's and DeepEP's signals
        post)."""
        body = [*self._av_segs(av), raddr_seg(raddr, rkey)]
        body += [masked_fa_seg(size, add, field_boundary), data_seg(size, lkey, addr)]
        return self._post(pi, Opcode.ATOMIC_MASKED_FA, qpn, _flags(signaled, fence), 0, body,
                          ext_atomic_opmod(size))  # fmt: skip

    def post_masked_cmp_swap(
        self,
        pi: int,
        qpn: int,
        raddr: int,
        rkey: int,
        swap: int,
        compare: int,
        lkey: int,
        addr: int,
        *,
        size: int = 8,
        swap_mask: int | None = None,
        compare_mask: int | None = None,
        signaled: bool = True,
        fence: bool = False,
        av: np.ndarray | None = None,
    ) -> int:
        """Masked compare-and-swap (MLX5_OPCODE_ATOMIC_MASKED_CS): ctrl [+ AV] + raddr + the
        extended atomic segment(s) (two for 8-byte operands) + data(size, lkey, addr). Masks
        default to all ones (a plain compare-and-swap)."""
        ones = (1 << (8 * size)) - 1
        seg = masked_cs_seg(size, swap, compare, ones if swap_mask is None else swap_mask,
                            ones if compare_mask is None else compare_mask)  # fmt: skip
        body = [*self._av_segs(av), raddr_seg(raddr, rkey), seg, data_seg(size, lkey, addr)]
        return self._post(pi, Opcode.ATOMIC_MASKED_CS, qpn, _flags(signaled, fence), 0, body,
                          ext_atomic_opmod(size))  # fmt: skip

    def post_nop(self, pi: int, qpn: int, *, signaled: bool = False, fence: bool = False) -> int:
        """NOP: a control segment alone (ds=1)."""
        return self._post(pi, Opcode.NOP, qpn, _flags(signaled, fence), 0, [])

    # ---- parsing (what the NIC reads) ------------------------------------------------------------
    def parse(self, wqe_index: int, *, dc: bool = False) -> Wqe:
        """Decode the WQE at `wqe_index`. `dc`: an AV follows ctrl (its ext bit gives its size)."""
        ctrl = decode_ctrl(self.read(wqe_index, 0, SEG_BYTES))
        seg = 1
        av = None
        if dc:
            av = decode_av(self.read(wqe_index, seg, AV_FULL_BYTES))
            seg += av.nbytes // SEG_BYTES
        raddr = atomic = data = inline = masked = None
        masked_op = ctrl.opcode in (Opcode.ATOMIC_MASKED_CS, Opcode.ATOMIC_MASKED_FA)
        if masked_op or ctrl.opcode in (
            Opcode.RDMA_WRITE,
            Opcode.RDMA_WRITE_IMM,
            Opcode.RDMA_READ,
            Opcode.ATOMIC_CS,
            Opcode.ATOMIC_FA,
        ):
            raddr = decode_raddr(self.read(wqe_index, seg, SEG_BYTES))
            seg += 1
        if ctrl.opcode in (Opcode.ATOMIC_CS, Opcode.ATOMIC_FA):
            atomic = decode_atomic(self.read(wqe_index, seg, SEG_BYTES))
            seg += 1
        if masked_op and ctrl.opmod & ~7 == EXT_ATOMIC_OPMOD and ctrl.opmod & 7 < 2:
            size = 4 << (ctrl.opmod & 7)
            nseg = masked_atomic_segs(ctrl.opcode, size)
            masked = decode_masked_atomic(
                self.read(wqe_index, seg, nseg * SEG_BYTES), ctrl.opcode, size
            )
            seg += nseg
        if seg < ctrl.ds:
            data = decode_data(self.read(wqe_index, seg, SEG_BYTES))
            if data.is_inline:  # lkey/addr hold payload bytes there: keep the header alone
                inline = self.read(wqe_index, seg, 4 + data.length)[4:].tobytes()
                data = Data(data.byte_count, 0, 0)
        return Wqe(ctrl, av, raddr, atomic, data, inline, masked)


def read_inline(ring: SqRing, wqe_index: int, first_seg: int) -> bytes:
    """The payload of the inline segment at (`wqe_index`, `first_seg`)."""
    hdr = decode_data(ring.read(wqe_index, first_seg, SEG_BYTES))
    if not hdr.is_inline:
        raise ValueError(f"segment {first_seg} of WQE {wqe_index} is not inline")
    return ring.read(wqe_index, first_seg, 4 + hdr.length)[4:].tobytes()


__all__ = ["FETCH_ADD_BYTES", "SqRing", "Wqe", "read_inline"]
