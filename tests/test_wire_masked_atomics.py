"""The extended (masked) atomic WQEs of gicbench.mlx5 and cuda/mlx5.cuh, byte for byte against the
C reference (tests/c/mlx5_layout.c: rdma-core's struct mlx5_wqe_masked_atomic_seg and
mlx5_wqe_atomic_seg, the PRM's 4-byte forms) and against each other, whole WQEs included."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from test_wire_rdma_core import PROPS, Ref, _diff, layout, layout_bin, ref  # noqa: F401

from gicbench import mlx5
from gicbench._native import wire

u32, u64 = st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1)
FA, CS = mlx5.Opcode.ATOMIC_MASKED_FA, mlx5.Opcode.ATOMIC_MASKED_CS

# [offset, size] of every field, as docs/gpi.md's "Extended atomics" table gives them
MASKED_FIELDS = {
    "mlx5_wqe_masked_atomic_seg.swap_add": (0, 8),
    "mlx5_wqe_masked_atomic_seg.compare": (8, 8),
    "mlx5_wqe_masked_atomic_seg.swap_add_mask": (16, 8),
    "mlx5_wqe_masked_atomic_seg.compare_mask": (24, 8),
    "ext_atomic32_fa_seg.add": (0, 4),
    "ext_atomic32_fa_seg.field_boundary": (4, 4),
    "ext_atomic32_fa_seg.reserved": (8, 8),
    "ext_atomic32_cs_seg.swap": (0, 4),
    "ext_atomic32_cs_seg.compare": (4, 4),
    "ext_atomic32_cs_seg.swap_mask": (8, 4),
    "ext_atomic32_cs_seg.compare_mask": (12, 4),
}


def test_masked_segment_layouts(layout: dict) -> None:  # noqa: F811
    got = {k: tuple(v) for k, v in layout["masked_fields"].items()}
    assert got == MASKED_FIELDS


def test_opcodes_and_opmods(layout: dict) -> None:  # noqa: F811
    enums, c = layout["enums"], wire.CONSTANTS
    assert enums["MLX5_OPCODE_ATOMIC_MASKED_CS"] == CS == c["OP_ATOMIC_MASKED_CS"] == 0x14
    assert enums["MLX5_OPCODE_ATOMIC_MASKED_FA"] == FA == c["OP_ATOMIC_MASKED_FA"] == 0x15
    assert mlx5.EXT_ATOMIC_OPMOD == c["EXT_ATOMIC_OPMOD"] == 0x08
    for size, opmod in ((4, 0x08), (8, 0x09)):
        assert mlx5.ext_atomic_opmod(size) == wire.ext_atomic_opmod(size) == opmod
        assert wire.ext_atomic_size(opmod) == size
    for opmod in (0x00, 0x0A, 0x0B, 0x18):  # not the 4- or 8-byte extended form
        assert wire.ext_atomic_size(opmod) == 0
    # ctrl + raddr + atomic segment(s) + data; an 8-byte compare-and-swap has two
    assert [wire.ds_masked_atomic(op, n) for op in (FA, CS) for n in (4, 8)] == [4, 4, 4, 5]
    assert wire.ds_masked_atomic(CS, 8, True, False) == 8
    assert mlx5.masked_atomic_segs(CS, 8) == 2 and mlx5.masked_atomic_segs(FA, 8) == 1


@PROPS
@given(st.lists(st.tuples(u64, u64), min_size=1, max_size=32))
def test_masked_fa_matches_reference(ref: Ref, cases: list[tuple[int, int]]) -> None:  # noqa: F811
    cases = [(0xFFFF_FFFB, 0), (0x0101_0101, 0x8080_8080), (2**64 - 1, 2**64 - 1), *cases]
    for size, cmd in ((4, "mfa4"), (8, "mfa8")):
        vals = [(a & ((1 << 8 * size) - 1), b & ((1 << 8 * size) - 1)) for a, b in cases]
        theirs = ref([f"{cmd} {a} {b}" for a, b in vals])
        for (a, b), t in zip(vals, theirs, strict=True):
            ours, cuh = mlx5.masked_fa_seg(size, a, b).tobytes(), wire.masked_fa_seg(size, a, b)
            assert ours == t, _diff(f"numpy masked_fa_seg/{size}", (a, b), ours, t)
            assert cuh == t, _diff(f"mlx5.cuh set_masked_fa_seg/{size}", (a, b), cuh, t)
            assert mlx5.decode_masked_atomic(t, FA, size) == mlx5.MaskedAtomic(size, a, 0, b, 0)
            assert wire.decode_masked_atomic(t, FA, size) == (a, 0, b, 0)


@PROPS
@given(st.lists(st.tuples(u64, u64, u64, u64), min_size=1, max_size=32))
def test_masked_cs_matches_reference(ref: Ref, cases: list[tuple[int, ...]]) -> None:  # noqa: F811
    cases = [(0x0102030405060708, 0x1112131415161718, 0x2122232425262728, 0x31323334), *cases]
    for size, cmd in ((4, "mcs4"), (8, "mcs8")):
        vals = [tuple(v & ((1 << 8 * size) - 1) for v in c) for c in cases]
        theirs = ref([f"{cmd} {' '.join(map(str, v))}" for v in vals])
        for v, t in zip(vals, theirs, strict=True):
            assert len(t) == 16 * mlx5.masked_atomic_segs(CS, size)
            ours, cuh = mlx5.masked_cs_seg(size, *v).tobytes(), wire.masked_cs_seg(size, *v)
            assert ours == t, _diff(f"numpy masked_cs_seg/{size}", v, ours, t)
            assert cuh == t, _diff(f"mlx5.cuh set_masked_cs_seg/{size}", v, cuh, t)
            assert mlx5.decode_masked_atomic(t, CS, size) == mlx5.MaskedAtomic(size, *v)
            assert wire.decode_masked_atomic(t, CS, size) == v


def _ring(n: int) -> mlx5.SqRing:
    return mlx5.SqRing(np.zeros(n * 64, np.uint8), n)


@PROPS
@given(st.integers(0, 7), st.sampled_from([4, 8]), st.tuples(u64, u64, u64, u64), st.booleans())
def test_whole_wqes_numpy_equals_cuh(
    pi: int, size: int, vals: tuple[int, int, int, int], dc: bool
) -> None:
    v, cmp, m1, m2 = (x & ((1 << 8 * size) - 1) for x in vals)
    signaled = bool(pi & 1)
    av_np = mlx5.av_compact(0xC0FFEE, 0x8001, rlid=2) if dc else None
    av_cuh = {"dc_key": 0xC0FFEE, "dct_num": 0x8001, "rlid": 2} if dc else None
    for op in (FA, CS):
        sq = _ring(8)  # 8 WQEBBs: a WQE at index 7 wraps
        if op == FA:
            n = sq.post_masked_fetch_add(
                pi, 0x10203, 0x4000, 0x55, v, 0x66, 0x5000, size=size, field_boundary=m1,
                signaled=signaled, av=av_np,
            )  # fmt: skip
            img, n2 = wire.post_masked_fetch_add(
                bytes(8 * 64), 8, pi, 0x10203, 0x4000, 0x55, size, v, m1, 0x66, 0x5000,
                signaled=signaled, av=av_cuh, compact_av=dc,
            )  # fmt: skip
        else:
            n = sq.post_masked_cmp_swap(
                pi, 0x10203, 0x4000, 0x55, v, cmp, 0x66, 0x5000, size=size, swap_mask=m1,
                compare_mask=m2, signaled=signaled, av=av_np,
            )  # fmt: skip
            img, n2 = wire.post_masked_cmp_swap(
                bytes(8 * 64), 8, pi, 0x10203, 0x4000, 0x55, size, v, cmp, m1, m2, 0x66, 0x5000,
                signaled=signaled, av=av_cuh, compact_av=dc,
            )  # fmt: skip
        assert n == n2 and sq.buf.tobytes() == img, (op, size, pi, dc)
        w = sq.parse(pi, dc=dc)
        assert (w.ctrl.opcode, w.ctrl.opmod) == (op, 8 | (size == 8))
        assert w.ctrl.ds == wire.ds_masked_atomic(op, size, dc, dc)
        assert w.raddr == mlx5.Raddr(0x4000, 0x55)
        assert w.data == mlx5.Data(size, 0x66, 0x5000)
        want = (v, 0, m1, 0) if op == FA else (v, cmp, m1, m2)
        assert w.masked == mlx5.MaskedAtomic(size, *want)
