"""GPI queues of the emulated NIC (docs/gpi.md): the queue object, its windows, its status.

`EmuFabric.create_gpi` makes one in the rank's queue arena (host memory; `register_cuda()` maps
it into the GPU with the rest of the arena); producers write descriptors (gpi_format) into its
ring and the engine consumes them. Everything here checks its input before the native call, so
a bad value is a ConfigError naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ConfigError
from ..base import MemoryDomain, MemoryRegion, host_view
from .gpi_format import (
    COUNTER_COUNT_MASK,
    COUNTER_ERROR,
    LAST_ERROR_VALID,
    OFF_CI,
    OFF_COUNTERS,
    OFF_ERRORS,
    OFF_LAST_ERROR,
    OFF_PI,
    SEGS,
    GpiRing,
)

MAX_DEPTH = 32768
MAX_COUNTERS = 65536
MAX_WINDOWS = 256


@dataclass(frozen=True)
class GpiQueue:
    """A GPI queue of one rank: its number, ring and control block (this process's addresses;
    the GPU's come from register_cuda()["gpis"])."""

    num: int
    depth: int
    base: int  # the control block: pi, ci, errors, last_error, counters
    ring: int  # descriptor 0
    ncounters: int
    nwindows: int
    pd: int
    domain: MemoryDomain = MemoryDomain.HOST

    @property
    def log_depth(self) -> int:
        return self.depth.bit_length() - 1

    @property
    def pi(self) -> int:
        return self.base + OFF_PI

    @property
    def ci(self) -> int:
        return self.base + OFF_CI

    @property
    def counters(self) -> int:
        return self.base + OFF_COUNTERS


@dataclass(frozen=True)
class GpiWindow:
    """`length` bytes from `addr` (the owner's address of an MR) under `key`: what a descriptor's
    window handle stands for at one rank."""

    addr: int
    length: int
    key: int

    @classmethod
    def of(cls, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> GpiWindow:
        """The part of `mr` from `offset` (all the rest when `length` is None)."""
        if not isinstance(offset, int) or not 0 <= offset <= mr.length:
            raise ConfigError("offset", offset, f"an int in 0..{mr.length} (the MR's length)")
        n = mr.length - offset if length is None else length
        if not isinstance(n, int) or not 0 <= n <= mr.length - offset:
            raise ConfigError("length", length, f"an int in 0..{mr.length - offset}")
        return cls(mr.addr + offset, n, mr.rkey)


def _int_in(field: str, v: object, lo: int, hi: int, what: str = "") -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConfigError(field, v, what or f"an int in {lo}..{hi}")
    return v


def check_create(depth: object, ncounters: object, nwindows: object) -> None:
    d = _int_in("depth", depth, 1, MAX_DEPTH, f"a power of two in 1..{MAX_DEPTH}")
    if d & (d - 1):
        raise ConfigError("depth", depth, f"a power of two in 1..{MAX_DEPTH}")
    _int_in("ncounters", ncounters, 1, MAX_COUNTERS)
    _int_in("nwindows", nwindows, 1, MAX_WINDOWS)


def check_window(q: GpiQueue, handle: object, rank: object, world: int, w: object) -> None:
    _int_in("handle", handle, 0, q.nwindows - 1, f"0..{q.nwindows - 1} (the queue's nwindows)")
    _int_in("rank", rank, 0, world - 1)
    if not isinstance(w, GpiWindow):
        raise ConfigError("window", w, "a GpiWindow (GpiWindow.of(mr))")


def ring_of(q: GpiQueue) -> GpiRing:
    """The queue's ring as numpy words, to post descriptors from the host."""
    return GpiRing(host_view(q.ring, q.depth * SEGS * 8, np.uint64), q.depth)


def status(q: GpiQueue) -> dict[str, Any]:
    """pi, ci, errors, last_error (None, or the descriptor index, syndrome and destination of
    the latest failure) and the counters ((completed, error flag) each)."""
    words = host_view(q.base, OFF_COUNTERS + 8 * q.ncounters, np.uint64)
    last = int(words[OFF_LAST_ERROR // 8])
    counters = [
        (int(c) & COUNTER_COUNT_MASK, bool(int(c) & COUNTER_ERROR))
        for c in words[OFF_COUNTERS // 8 :]
    ]
    error = None
    if last & LAST_ERROR_VALID:
        error = {"index": last & 0xFFFF_FFFF, "syndrome": (last >> 32) & 0xFF,
                 "dest": (last >> 40) & 0xFF}  # fmt: skip
    return {
        "pi": int(words[OFF_PI // 8]),
        "ci": int(words[OFF_CI // 8]),
        "errors": int(words[OFF_ERRORS // 8]),
        "last_error": error,
        "counters": counters,
    }
