"""The GPI descriptor format: the numpy twin (gicbench.fabric.emu.gpi_format) and cuda/gpi.cuh
(through gicbench._native.emu) encode every field to the same 64 bytes, and each decodes what
the other wrote; the owner rule; field limits refused before anything is written."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gicbench._native import emu
from gicbench.errors import ConfigError
from gicbench.fabric.emu import gpi_format as gf

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
u = st.integers


def _bits(n: int) -> st.SearchStrategy[int]:
    return u(0, (1 << n) - 1)


ONE = st.builds(
    gf.GpiDesc,
    op=st.sampled_from([o for o in gf.GpiOp if o != gf.GpiOp.FANOUT]),
    flags=_bits(8), counter=_bits(16), src_win=_bits(8), dst_win=_bits(8), sig_win=_bits(8),
    size=_bits(32), dst_rank=_bits(16), src_off=_bits(63), dst_off=_bits(63), sig_off=_bits(63),
    value=u(-(1 << 62), (1 << 62) - 1), inline=st.binary(min_size=8, max_size=8),
)  # fmt: skip
FAN = st.builds(
    gf.GpiDesc,
    op=st.just(gf.GpiOp.FANOUT),
    flags=_bits(8), counter=_bits(16), src_win=_bits(8), dst_win=_bits(8), sig_win=_bits(8),
    k=_bits(4), size=_bits(32), src_off=_bits(63), value=u(-(1 << 31), (1 << 31) - 1),
    stride=_bits(31), sig_base=_bits(31),
    dests=st.lists(st.builds(gf.Dest, _bits(8), _bits(15), _bits(8)), min_size=8, max_size=8).map(
        tuple
    ),
)  # fmt: skip


def _fields(d: gf.GpiDesc) -> dict:
    out = {k: getattr(d, k) for k in gf.GpiDesc.__dataclass_fields__}
    out["inline"] = bytes(d.inline)
    out["dests"] = [(e.rank, e.slot, e.signal) for e in d.dests]
    return out


def _same(d: gf.GpiDesc, native: dict) -> None:
    want = _fields(d)
    if d.op != gf.GpiOp.FANOUT:  # the fan-out fields decode as 0, and the reverse
        want.update(stride=0, sig_base=0, dests=[(0, 0, 0)] * 8)
    else:
        want.update(dst_rank=0, dst_off=0, sig_off=0, inline=bytes(8))
    assert native == want


@PROPS
@given(st.one_of(ONE, FAN), u(0, 1))
def test_numpy_and_cuh_encode_the_same_bytes(d: gf.GpiDesc, owner: int) -> None:
    ours = gf.encode(d)
    ours = (ours & np.uint64(gf.FIELD63)) | np.uint64(owner << 63)
    theirs = emu.gpi_encode(_fields(d), owner)
    assert ours.tobytes() == theirs
    # each decodes the other's
    back = gf.decode(np.frombuffer(theirs, np.uint64))
    if d.op == gf.GpiOp.FANOUT:
        assert back == d
    else:
        assert back == gf.GpiDesc(**{**_fields(d), "dests": ()})
    _same(d, emu.gpi_decode(ours.tobytes()))
    assert all((int(w) >> 63) == owner for w in np.frombuffer(theirs, np.uint64))


def test_field_positions() -> None:
    """docs/gpi.md's table, one field at a time."""
    w = gf.encode(gf.GpiDesc(gf.GpiOp.WRITE_SIGNAL, 1, 0x1234, 5, 6, 7, size=0x11223344,
                             dst_rank=0x99, src_off=3, dst_off=4, sig_off=5, value=-2,
                             inline=b"ABCDEFGH"))  # fmt: skip
    assert int(w[0]) == 0x02 | 0x01 << 8 | 0x1234 << 16 | 5 << 32 | 6 << 40 | 7 << 48
    assert int(w[1]) == 0x11223344 | 0x99 << 32
    assert [int(x) for x in w[2:5]] == [3, 4, 5]
    assert int(w[5]) == (1 << 63) - 2  # -2 in 63 bits
    assert int(w[6]) == int.from_bytes(b"ABCD", "little")
    assert int(w[7]) == int.from_bytes(b"EFGH", "little")
    f = gf.encode(gf.fanout(counter=3, size=64, src=(1, 8), dst_win=2, stride=4096,
                            dests=[gf.Dest(3, 5, 7), gf.Dest(255, 0x7FFF, 255)], sig_win=4,
                            sig_base=100, value=-1))  # fmt: skip
    assert int(f[0]) == 0x06 | 3 << 16 | 1 << 32 | 2 << 40 | 4 << 48 | 2 << 56
    assert int(f[1]) == 64 | 4096 << 32
    assert int(f[3]) == 0xFFFF_FFFF | 100 << 32
    e0, e1 = 3 | 5 << 8 | 7 << 23, (1 << 31) - 1
    assert int(f[4]) == e0 | e1 << 31
    assert [int(x) for x in f[5:]] == [0, 0, 0]


def test_owner_rule() -> None:
    # lap 0 writes 1 (a zeroed ring holds nothing), lap 1 writes 0, ...
    for log_depth in (0, 2, 5):
        depth = 1 << log_depth
        for i in range(4 * depth):
            want = ((i // depth) & 1) ^ 1
            assert gf.owner(i, log_depth) == emu.gpi_owner_for(i, log_depth) == want


def test_ring_post_sets_every_owner_bit_and_only_the_segments_asked() -> None:
    ring = gf.GpiRing(np.zeros(4 * 8, np.uint64), 4)
    d = gf.nop(counter=1)
    ring.post(5, d, segments=(0, 3))  # lap 1 (owner 0) over a zeroed slot: no owner bit set
    assert [int(w) >> 63 for w in ring.slot(5)] == [0] * 8 and int(ring.slot(5)[0]) == 1 << 16
    ring.ring[:] = 0
    ring.post(1, d, segments=(0, 3))  # lap 0: owner 1 on segments 0 and 3 only
    assert [int(w) >> 63 for w in ring.slot(1)] == [1, 0, 0, 1, 0, 0, 0, 0]
    ring.post(1, d)
    assert all(int(w) >> 63 == 1 for w in ring.slot(1))


@pytest.mark.parametrize(
    ("desc", "field"),
    [
        (lambda: gf.nop(counter=1 << 16), "counter"),
        (lambda: gf.write(counter=0, size=1 << 32, dst_rank=0, src=(0, 0), dst=(0, 0)), "size"),
        (lambda: gf.write(counter=0, size=1, dst_rank=1 << 16, src=(0, 0), dst=(0, 0)), "dst_rank"),
        (lambda: gf.write(counter=0, size=1, dst_rank=0, src=(256, 0), dst=(0, 0)), "src_win"),
        (lambda: gf.signal(counter=0, dst_rank=0, window=0, offset=0, value=1 << 62), "value"),
        (lambda: gf.write_inline(counter=0, data=b"123456789", dst_rank=0, dst=(0, 0)), "inline"),
        (
            lambda: gf.fanout(
                counter=0, size=1, src=(0, 0), dst_win=0, stride=1 << 31, dests=[gf.Dest(0, 0)]
            ),
            "stride",
        ),
        (
            lambda: gf.fanout(
                counter=0, size=1, src=(0, 0), dst_win=0, stride=1, dests=[gf.Dest(0, 1 << 15)]
            ),
            "dest.slot",
        ),
        (
            lambda: gf.fanout(
                counter=0, size=1, src=(0, 0), dst_win=0, stride=1, dests=[gf.Dest(0, 0)] * 9
            ),
            "dests",
        ),
    ],
)
def test_limits_refused_naming_the_field(desc, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        gf.encode(desc())
