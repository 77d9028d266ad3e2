"""The GPI descriptor of the emulated NIC (docs/gpi.md): the numpy twin of cuda/gpi.cuh.

A descriptor is eight little-endian 64-bit segments; bit 63 of each is the owner bit, `owner(i)`
for descriptor index i. Encoders return the eight words without owner bits (`with_owner` adds
them); `GpiRing` writes them into a queue's ring, whole or segment by segment (a torn
descriptor, as a slow producer leaves it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag

import numpy as np

from ...errors import ConfigError

DESC_BYTES = 64
SEGS = 8
OWNER_BIT = 1 << 63
FIELD63 = OWNER_BIT - 1
MAX_FANOUT = 8
MAX_INLINE = 8

# The control block (byte offsets from the queue's base) and the counter word.
OFF_PI, OFF_CI, OFF_ERRORS, OFF_LAST_ERROR, OFF_COUNTERS = 0, 64, 128, 136, 256
COUNTER_ERROR = 1 << 62
COUNTER_COUNT_MASK = (1 << 56) - 1
LAST_ERROR_VALID = 1 << 63


class GpiOp(IntEnum):
    NOP = 0
    WRITE = 1
    WRITE_SIGNAL = 2
    SIGNAL = 3
    WRITE_INLINE = 4
    WRITE_INLINE_SIGNAL = 5
    FANOUT = 6


class GpiFlag(IntFlag):
    SIGNAL32 = 1  # 4-byte signal words (else 8-byte)
    NO_SIGNAL = 2  # FANOUT: the writes alone


def owner(index: int, log_depth: int) -> int:
    """The owner bit of descriptor `index` in a ring of 2**log_depth: 1 on the first lap."""
    return ((int(index) >> log_depth) & 1) ^ 1


@dataclass(frozen=True)
class Dest:
    """One destination of a fan-out: its rank, its slot in the dst window (x stride) and its
    signal word's index from the descriptor's signal base."""

    rank: int
    slot: int
    signal: int = 0


@dataclass(frozen=True)
class GpiDesc:
    """A descriptor's fields (both kinds; what a kind does not have is 0)."""

    op: int
    flags: int = 0
    counter: int = 0
    src_win: int = 0
    dst_win: int = 0
    sig_win: int = 0
    k: int = 0
    size: int = 0
    dst_rank: int = 0
    src_off: int = 0
    dst_off: int = 0
    sig_off: int = 0
    value: int = 0
    inline: bytes = bytes(MAX_INLINE)
    stride: int = 0
    sig_base: int = 0
    dests: tuple[Dest, ...] = field(default_factory=tuple)


def _uint(name: str, v: int, bits: int) -> int:
    if not isinstance(v, int) or not 0 <= v < (1 << bits):
        raise ConfigError(name, v, f"an int in 0..{(1 << bits) - 1} ({bits} bits)")
    return v


def _sint(name: str, v: int, bits: int) -> int:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    if not isinstance(v, int) or not lo <= v <= hi:
        raise ConfigError(name, v, f"an int in {lo}..{hi} ({bits}-bit signed)")
    return v & ((1 << bits) - 1)


def _head(d: GpiDesc) -> int:
    return (
        _uint("op", d.op, 8)
        | _uint("flags", d.flags, 8) << 8
        | _uint("counter", d.counter, 16) << 16
        | _uint("src_win", d.src_win, 8) << 32
        | _uint("dst_win", d.dst_win, 8) << 40
        | _uint("sig_win", d.sig_win, 8) << 48
        | _uint("k", d.k, 4) << 56
    )


def encode(d: GpiDesc) -> np.ndarray:
    """The eight segments of `d` (uint64), owner bits clear."""
    w = [0] * SEGS
    w[0] = _head(d)
    w[2] = _uint("src_off", d.src_off, 63)
    if d.op == GpiOp.FANOUT:
        if len(d.dests) > MAX_FANOUT:
            raise ConfigError("dests", len(d.dests), f"at most {MAX_FANOUT} destinations")
        w[1] = _uint("size", d.size, 32) | _uint("stride", d.stride, 31) << 32
        w[3] = _sint("value", d.value, 32) | _uint("sig_base", d.sig_base, 31) << 32
        for j, e in enumerate(d.dests):
            ent = (_uint("dest.rank", e.rank, 8) | _uint("dest.slot", e.slot, 15) << 8
                   | _uint("dest.signal", e.signal, 8) << 23)  # fmt: skip
            w[4 + j // 2] |= ent << (31 * (j % 2))
    else:
        inl = bytes(d.inline)
        if len(inl) > MAX_INLINE:
            raise ConfigError("inline", len(inl), f"at most {MAX_INLINE} bytes")
        inl = inl.ljust(MAX_INLINE, b"\0")
        w[1] = _uint("size", d.size, 32) | _uint("dst_rank", d.dst_rank, 16) << 32
        w[3] = _uint("dst_off", d.dst_off, 63)
        w[4] = _uint("sig_off", d.sig_off, 63)
        w[5] = _sint("value", d.value, 63)
        w[6] = int.from_bytes(inl[:4], "little")
        w[7] = int.from_bytes(inl[4:], "little")
    return np.array(w, dtype=np.uint64)


def _sext(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) else v


def decode(words: Sequence[int] | np.ndarray) -> GpiDesc:
    """The fields of eight segments (owner bits ignored)."""
    w = [int(x) & FIELD63 for x in words]
    op = w[0] & 0xFF
    common = dict(
        op=op, flags=(w[0] >> 8) & 0xFF, counter=(w[0] >> 16) & 0xFFFF, src_win=(w[0] >> 32) & 0xFF,
        dst_win=(w[0] >> 40) & 0xFF, sig_win=(w[0] >> 48) & 0xFF, k=(w[0] >> 56) & 0xF,
        size=w[1] & 0xFFFF_FFFF, src_off=w[2],
    )  # fmt: skip
    if op == GpiOp.FANOUT:
        dests = []
        for j in range(MAX_FANOUT):
            e = (w[4 + j // 2] >> (31 * (j % 2))) & ((1 << 31) - 1)
            dests.append(Dest(e & 0xFF, (e >> 8) & 0x7FFF, (e >> 23) & 0xFF))
        return GpiDesc(**common, stride=w[1] >> 32, value=_sext(w[3] & 0xFFFF_FFFF, 32),
                       sig_base=w[3] >> 32, dests=tuple(dests))  # fmt: skip
    inl = (w[6] & 0xFFFF_FFFF).to_bytes(4, "little") + (w[7] & 0xFFFF_FFFF).to_bytes(4, "little")
    return GpiDesc(**common, dst_rank=(w[1] >> 32) & 0xFFFF, dst_off=w[3], sig_off=w[4],
                   value=_sext(w[5], 63), inline=inl)  # fmt: skip


def with_owner(words: np.ndarray, index: int, log_depth: int) -> np.ndarray:
    """`words` with every segment's owner bit that of descriptor `index`."""
    bit = np.uint64(owner(index, log_depth) << 63)
    return (words & np.uint64(FIELD63)) | bit


# ---- builders ------------------------------------------------------------------------------------
def write(
    *,
    counter: int,
    size: int,
    dst_rank: int,
    src: tuple[int, int],
    dst: tuple[int, int],
    signal: tuple[int, int, int] | None = None,
    signal32: bool = False,
) -> GpiDesc:
    """WRITE (WRITE_SIGNAL with `signal`): `size` bytes from src = (window, offset) of this
    rank to dst = (window, offset) of dst_rank, then signal = (window, offset, value) added."""
    op = GpiOp.WRITE if signal is None else GpiOp.WRITE_SIGNAL
    sw, so, sv = signal or (0, 0, 0)
    return GpiDesc(op, GpiFlag.SIGNAL32 if signal32 else 0, counter, src[0], dst[0], sw,
                   size=size, dst_rank=dst_rank, src_off=src[1], dst_off=dst[1], sig_off=so,
                   value=sv)  # fmt: skip


def write_inline(
    *,
    counter: int,
    data: bytes,
    dst_rank: int,
    dst: tuple[int, int],
    signal: tuple[int, int, int] | None = None,
    signal32: bool = False,
) -> GpiDesc:
    """WRITE_INLINE (…_SIGNAL with `signal`): up to 8 bytes carried in the descriptor."""
    op = GpiOp.WRITE_INLINE if signal is None else GpiOp.WRITE_INLINE_SIGNAL
    sw, so, sv = signal or (0, 0, 0)
    return GpiDesc(op, GpiFlag.SIGNAL32 if signal32 else 0, counter, 0, dst[0], sw,
                   size=len(data), dst_rank=dst_rank, dst_off=dst[1], sig_off=so, value=sv,
                   inline=bytes(data))  # fmt: skip


def signal(
    *, counter: int, dst_rank: int, window: int, offset: int, value: int, signal32: bool = False
) -> GpiDesc:
    """SIGNAL: an atomic add of `value` to the signal word at (window, offset) of dst_rank."""
    return GpiDesc(GpiOp.SIGNAL, GpiFlag.SIGNAL32 if signal32 else 0, counter, sig_win=window,
                   dst_rank=dst_rank, sig_off=offset, value=value)  # fmt: skip


def nop(*, counter: int) -> GpiDesc:
    """NOP: counts on its counter once everything before it completed."""
    return GpiDesc(GpiOp.NOP, counter=counter)


def fanout(
    *,
    counter: int,
    size: int,
    src: tuple[int, int],
    dst_win: int,
    stride: int,
    dests: Iterable[Dest],
    sig_win: int = 0,
    sig_base: int = 0,
    value: int = 1,
    signal32: bool = False,
    no_signal: bool = False,
) -> GpiDesc:
    """FANOUT (GPI-MC): one token from src = (window, offset) to every destination's slot of
    the dst window (slot x stride), each followed by `value` added to its signal word
    (sig_base + dest.signal) of the signal window, unless `no_signal`."""
    ds = tuple(dests)
    flags = (GpiFlag.SIGNAL32 if signal32 else 0) | (GpiFlag.NO_SIGNAL if no_signal else 0)
    return GpiDesc(GpiOp.FANOUT, flags, counter, src[0], dst_win, sig_win, len(ds), size,
                   src_off=src[1], value=value, stride=stride, sig_base=sig_base,
                   dests=ds)  # fmt: skip


class GpiRing:
    """The descriptor ring of a GPI queue: `ring` a uint64 view of depth * 8 words."""

    def __init__(self, ring: np.ndarray, depth: int) -> None:
        if depth < 1 or depth & (depth - 1):
            raise ConfigError("depth", depth, "a power of two >= 1")
        if ring.dtype != np.uint64 or ring.size != depth * SEGS:
            raise ConfigError("ring", ring.shape, f"{depth * SEGS} uint64 words")
        self.ring, self.depth, self.log_depth = ring, depth, depth.bit_length() - 1

    def slot(self, index: int) -> np.ndarray:
        base = (int(index) & (self.depth - 1)) * SEGS
        return self.ring[base : base + SEGS]

    def post(
        self, index: int, d: GpiDesc | np.ndarray, segments: Iterable[int] = range(SEGS)
    ) -> None:
        """Write the `segments` of descriptor `index` (all: the whole descriptor), each with
        the owner bit of `index`."""
        words = with_owner(encode(d) if isinstance(d, GpiDesc) else d, index, self.log_depth)
        slot = self.slot(index)
        for s in segments:
            slot[s] = words[s]
