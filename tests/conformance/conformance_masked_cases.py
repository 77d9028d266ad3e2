"""Conformance cases of mlx5's extended (masked) atomics: MLX5_OPCODE_ATOMIC_MASKED_FA (0x15) and
MLX5_OPCODE_ATOMIC_MASKED_CS (0x14), 4- and 8-byte operands (ctrl opmod 0x08 / 0x09).

What the cases hold an engine to (docs/gpi.md, "Extended atomics", says where each rule comes
from): the operands travel big-endian in the extended atomic segment; the target word is
updated in host endianness, as the standard 8-byte atomics are (NVSHMEM's and DeepEP's IBGDA
signals add to counters the receiver reads natively); the old value lands in the local buffer,
`size` bytes. Masked fetch-add: a bit set in the field boundary is the most significant bit of
its field, whose carry is dropped (0: a plain add, all ones: XOR). Masked compare-and-swap: when
((old ^ compare) & compare_mask) == 0 the word becomes (old & ~swap_mask) | (swap & swap_mask).
"""

from __future__ import annotations

import struct

from conformance_cases import RO, SRC, completion_err, dc, err, ok, rc, u64
from conformance_model import Case, Cq, Expect, MaskedAtomic, Mr, Nop, Qp, Ring

from gicbench.fabric.base import ACCESS_ALL, Access, QpState
from gicbench.mlx5 import Opcode, Syndrome

FA, CS = Opcode.ATOMIC_MASKED_FA, Opcode.ATOMIC_MASKED_CS
HI16, TOP16 = 0x1111_0000_0000_0000, 0xFFFF_0000_0000_0000
SENTINEL = b"\xee" * 32  # around the target word: an engine must not touch it


def u32(v: int) -> bytes:
    return struct.pack("<I", v & 0xFFFF_FFFF)


def fa(dst: int, res: int, value: int, size: int = 4, **kw: object) -> MaskedAtomic:
    return MaskedAtomic("a", "fa", size, ("dst", dst), ("res", res), value, **kw)


def cs(dst: int, res: int, swap: int, size: int = 4, **kw: object) -> MaskedAtomic:
    return MaskedAtomic("a", "cs", size, ("dst", dst), ("res", res), swap, **kw)


def rc_atomic(dst_init: bytes, res_init: bytes = SENTINEL, **kw: object) -> dict:
    """rc() with the result buffer filled too: an engine writing more than `size` bytes of old
    value shows."""
    setup = rc(dst_init=dst_init, **kw)
    dst_access = kw.get("dst_access", ACCESS_ALL)
    assert isinstance(dst_access, Access)
    mrs = (Mr("src", 0, init=SRC), Mr("res", 0, init=res_init), Mr("dst", 1, access=dst_access,
                                                                   init=dst_init))  # fmt: skip
    return {**setup, "mrs": mrs}


def refused(synd: Syndrome, step: MaskedAtomic, dst_access: Access = ACCESS_ALL) -> dict:
    """A masked atomic the NIC refuses: the error CQE, QP a in ERR, nothing changed."""
    return {
        **rc_atomic(SENTINEL, dst_access=dst_access),
        "steps": (step, Ring(("a",))),
        "expect": Expect(
            memory=(("dst", 0, SENTINEL), ("res", 0, SENTINEL)),
            cqes={"scq": (err("a", 0, synd),)},
            states={"a": QpState.ERR, "b": QpState.RTS},
            counters={0: {"errors": 1, "wqes": 0, "bytes": 0}},
            errors={0: (completion_err("a", 0, synd),)},
        ),
    }


MASKED_ATOMIC_CASES: list[Case] = [
    Case(
        "masked_fa_4B_plain_add_is_deepep_signal",  # DeepEP adds -num_tokens-1 to an int32
        **rc_atomic(SENTINEL[:4] + u32(0) + SENTINEL[:8]),
        steps=(fa(4, 0, -5 & 0xFFFF_FFFF), fa(4, 8, 3), Ring(("a",))),
        expect=Expect(
            memory=(
                ("dst", 0, SENTINEL[:4] + u32(-2) + SENTINEL[:8]),
                # 4 bytes of old value each, nothing beyond them
                ("res", 0, u32(0) + SENTINEL[:4] + u32(-5) + SENTINEL[:4]),
            ),
            cqes={"scq": (ok("a", 0, FA, 4), ok("a", 1, FA, 4))},
            counters={0: {"wqes": 2, "bytes": 8, "messages": 2, "errors": 0}},
        ),
    ),
    Case(
        "masked_fa_4B_field_boundaries",  # four byte-wide fields: no carry between them
        **rc(dst_init=u32(0x01FF_7F00)),
        steps=(fa(0, 0, 0x0101_0101, mask=0x8080_8080), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, u32(0x0200_8001)), ("res", 0, u32(0x01FF_7F00))),
            cqes={"scq": (ok("a", 0, FA, 4),)},
        ),
    ),
    Case(
        "masked_fa_8B_plain_add_and_16bit_fields",
        **rc(dst_init=u64(1000) + u64(0x0001_FFFF_7FFF_FFFF)),
        steps=(
            fa(0, 0, 24, size=8),
            fa(8, 8, 0x0001_0001_0001_0001, size=8, mask=0x8000_8000_8000_8000),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(
                ("dst", 0, u64(1024) + u64(0x0002_0000_8000_0000)),
                ("res", 0, u64(1000) + u64(0x0001_FFFF_7FFF_FFFF)),
            ),
            cqes={"scq": (ok("a", 0, FA, 8), ok("a", 1, FA, 8))},
            counters={0: {"wqes": 2, "bytes": 16}},
        ),
    ),
    Case(
        "masked_fa_8B_all_boundaries_is_xor",  # how UCX-style and MORI's IBGDA post AMO XOR
        **rc(dst_init=u64(0xF0F0_F0F0_0000_FFFF)),
        steps=(fa(0, 0, 0xFF00_FF00_FFFF_FFFF, size=8, mask=(1 << 64) - 1), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, u64(0x0FF0_0FF0_FFFF_0000)), ("res", 0, u64(0xF0F0_F0F0_0000_FFFF))),
            cqes={"scq": (ok("a", 0, FA, 8),)},
        ),
    ),
    Case(
        "masked_cs_4B_swaps_masked_bits_only_on_match",
        **rc(dst_init=u32(0x1234_5678) + u32(0x1234_5678)),
        steps=(
            cs(0, 0, 0xAB00_0000, mask=0xFF00_0000, compare=0x0000_5678, compare_mask=0xFFFF),
            cs(4, 4, 0xAB00_0000, mask=0xFF00_0000, compare=0x0000_1111, compare_mask=0xFFFF),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(
                ("dst", 0, u32(0xAB34_5678) + u32(0x1234_5678)),  # the second does not match
                ("res", 0, u32(0x1234_5678) + u32(0x1234_5678)),
            ),
            cqes={"scq": (ok("a", 0, CS, 4), ok("a", 1, CS, 4))},
        ),
    ),
    Case(
        "masked_cs_4B_compare_mask_zero_is_or",  # MORI's AMO OR: always swaps, mask = value
        **rc(dst_init=u32(0x0000_00F0)),
        steps=(cs(0, 0, 0x0000_0F0F, mask=0x0000_0F0F), Ring(("a",))),
        expect=Expect(
            memory=(("dst", 0, u32(0x0000_0FFF)), ("res", 0, u32(0x0000_00F0))),
            cqes={"scq": (ok("a", 0, CS, 4),)},
        ),
    ),
    Case(
        "masked_cs_8B_two_segments_wrap_sq_end",  # 2 WQEBBs from index 3 of a 4-WQEBB SQ
        **rc(sq=4, dst_init=u64(0x1111_2222_3333_4444)),
        steps=(
            Nop("a"),
            Nop("a"),
            Nop("a", signaled=True),
            Ring(("a",)),
            cs(0, 8, 0xAAAA_0000, size=8, mask=0xFFFF_0000, compare=HI16, compare_mask=TOP16),
            Ring(("a",)),
        ),
        expect=Expect(
            memory=(("dst", 0, u64(0x1111_2222_AAAA_4444)), ("res", 8, u64(0x1111_2222_3333_4444))),
            cqes={"scq": (ok("a", 2, Opcode.NOP, 0), ok("a", 3, CS, 8))},
            counters={0: {"wqes": 4, "errors": 0}},
        ),
    ),
    Case(
        "masked_fa_4B_over_dc_compact_av",
        **{**dc(), "mrs": (Mr("src", 0), Mr("res", 0), Mr("dst", 1, init=u32(7)))},
        steps=(
            MaskedAtomic("d", "fa", 4, ("dst", 0), ("res", 0), 5, dct="t", compact_av=True),
            Ring(("d",)),
        ),
        expect=Expect(
            memory=(("dst", 0, u32(12)), ("res", 0, u32(7))),
            cqes={"scq": (ok("d", 0, FA, 4),)},
        ),
    ),
    Case(
        "masked_fa_4B_two_engines_concurrently",  # ranks 0 and 1 add to a word of rank 2
        world=3,
        mrs=(Mr("ctr", 2), Mr("r0", 0), Mr("r1", 1)),
        cqs=(Cq("c0", 0, 256), Cq("c1", 1, 256), Cq("c2", 2)),
        qps=(
            Qp("a", 0, "c0", sq_wqebbs=128, peer="x"),
            Qp("x", 2, "c2", peer="a"),
            Qp("b", 1, "c1", sq_wqebbs=128, peer="y"),
            Qp("y", 2, "c2", peer="b"),
        ),
        steps=(
            *[
                MaskedAtomic(q, "fa", 4, ("ctr", 4), (r, 8 * k), 3, signaled=(k == 99))
                for k in range(100)
                for q, r in (("a", "r0"), ("b", "r1"))
            ],
            Ring(("a", "b")),
        ),
        expect=Expect(
            memory=(("ctr", 0, bytes(4) + u32(600) + bytes(8)),),
            cqes={"c0": (ok("a", 99, FA, 4),), "c1": (ok("b", 99, FA, 4),)},
            counters={0: {"wqes": 100}, 1: {"wqes": 100}, 2: {"wqes": 0}},
            fa_olds=(("r0", 0, 100), ("r1", 0, 100)),  # 4-byte olds in zeroed 8-byte slots
            fa_step=3,
        ),
    ),
    Case(
        "masked_fa_without_remote_atomic_access",
        **refused(Syndrome.REMOTE_ACCESS, fa(0, 0, 1), dst_access=RO),
    ),
    Case(
        "masked_cs_8B_without_remote_atomic_access",
        **refused(Syndrome.REMOTE_ACCESS, cs(0, 0, 1, size=8, mask=1), dst_access=RO),
    ),
    Case("masked_fa_4B_misaligned", **refused(Syndrome.REMOTE_INVAL_REQ, fa(2, 0, 1))),
    Case(
        "masked_fa_8B_on_4_aligned_address",
        **refused(Syndrome.REMOTE_INVAL_REQ, fa(4, 0, 1, size=8)),
    ),
    Case(
        "masked_cs_out_of_bounds",
        **refused(Syndrome.REMOTE_ACCESS, cs(4096, 0, 1, mask=1)),
    ),
    Case(
        "masked_fa_result_length_not_operand_size",
        **refused(Syndrome.LOCAL_LENGTH, fa(0, 0, 1, result_len=8)),
    ),
    Case(
        "masked_fa_16B_operands_not_served",  # opmod 0x0a: 16-byte operands
        **refused(Syndrome.LOCAL_QP_OP, fa(0, 0, 1, size=8, opmod=0x0A)),
    ),
    Case(
        "masked_fa_without_extended_opmod",  # opmod 0: not the extended form
        **refused(Syndrome.LOCAL_QP_OP, fa(0, 0, 1, size=8, opmod=0)),
    ),
]
