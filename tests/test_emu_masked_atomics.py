"""The engine's extended atomics against a bit-by-bit reference: random operands, field boundaries
and masks, 4- and 8-byte, several on one word in a row. The reference is the masked-atomics
definition itself (Linux's "IB/core: Add support for masked atomic operations": the fetch-add's
carry out of a boundary bit is dropped), written the slow way, so the engine's closed form
(emu_core.cuh masked_add) is checked against it."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent / "conformance"))
from conformance_cases import ok, rc
from conformance_model import Case, Expect, MaskedAtomic, Mr, Ring
from conformance_runner import run_case

from gicbench.fabric.base import ACCESS_ALL
from gicbench.mlx5 import Opcode


def fa_ref(old: int, add: int, boundary: int, bits: int) -> int:
    out, carry = 0, 0
    for i in range(bits):
        a, b = (old >> i) & 1, (add >> i) & 1
        s = a + b + carry
        out |= (s & 1) << i
        carry = (s >> 1) if not (boundary >> i) & 1 else 0  # a boundary bit ends its field
    return out


def cs_ref(old: int, swap: int, compare: int, swap_mask: int, compare_mask: int) -> int:
    if (old ^ compare) & compare_mask:
        return old
    return (old & ~swap_mask) | (swap & swap_mask)


def test_reference_is_the_definition() -> None:
    assert fa_ref(0xFF, 1, 0, 8) == 0 and fa_ref(0x0F, 1, 0x08, 8) == 0x00
    assert fa_ref(0x0F, 1, 0x01, 8) == 0x0E  # bit 0 is a field of its own
    assert fa_ref(0b1010, 0b0110, 0b1111, 4) == 0b1100  # all boundaries: XOR


OP = st.tuples(
    st.sampled_from(["fa", "cs"]),
    st.integers(0, 2**64 - 1),  # add / swap
    st.integers(0, 2**64 - 1),  # field boundary / swap mask
    st.integers(0, 2**64 - 1),  # compare
    st.sampled_from([0, 2**64 - 1, 0xFFFF, None]),  # compare mask (None: random)
    st.integers(0, 2**64 - 1),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([4, 8]), st.integers(0, 2**64 - 1), st.lists(OP, min_size=1, max_size=6))
def test_engine_matches_reference(size: int, init: int, ops: list[tuple]) -> None:
    bits, mask = 8 * size, (1 << (8 * size)) - 1
    word = init & mask
    steps, olds = [], []
    for k, (op, v, m, cmp, cm, rnd) in enumerate(ops):
        v, m, cmp, cm = v & mask, m & mask, cmp & mask, (rnd if cm is None else cm) & mask
        steps.append(
            MaskedAtomic(
                "a", op, size, ("dst", 8), ("res", 8 * k), v, mask=m, compare=cmp, compare_mask=cm
            )
        )
        olds.append(word)
        word = fa_ref(word, v, m, bits) if op == "fa" else cs_ref(word, v, cmp, m, cm)
    fmt = "<I" if size == 4 else "<Q"
    res = b"".join(struct.pack(fmt, o).ljust(8, b"\0") for o in olds)
    setup = rc(sq=64)
    dst = Mr("dst", 1, access=ACCESS_ALL, init=bytes(8) + struct.pack(fmt, init & mask))
    setup["mrs"] = (Mr("src", 0), Mr("res", 0), dst)
    op_code = {"fa": Opcode.ATOMIC_MASKED_FA, "cs": Opcode.ATOMIC_MASKED_CS}
    run_case(
        Case(
            "masked_random",
            **setup,
            steps=(*steps, Ring(("a",))),
            expect=Expect(
                memory=(("dst", 8, struct.pack(fmt, word)), ("res", 0, res)),
                cqes={
                    "scq": tuple(
                        ok("a", i, op_code[o[0]], size)
                        for i, o in zip(_indices(ops, size), ops, strict=True)
                    )
                },
            ),
        ),
        "cpu-inline",
    )


def _indices(ops: list[tuple], size: int) -> list[int]:
    """The WQE index of each op: an 8-byte compare-and-swap takes 2 WQEBBs, the others 1."""
    out, i = [], 0
    for op, *_ in ops:
        out.append(i)
        i += 2 if op == "cs" and size == 8 else 1
    return out
