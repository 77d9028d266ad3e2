"""numpy views of raw host addresses (emu objects live in a shared-memory segment)."""

from __future__ import annotations

import ctypes

import numpy as np


def host_view(addr: int, nbytes: int, dtype: np.typing.DTypeLike = np.uint8) -> np.ndarray:
    """A writable numpy array over `nbytes` at `addr` (no copy; valid while the fabric is open)."""
    if addr <= 0 or nbytes <= 0:
        raise ValueError(f"host_view: need addr > 0 and nbytes > 0, got {addr:#x}, {nbytes}")
    raw = (ctypes.c_uint8 * nbytes).from_address(addr)
    return np.frombuffer(raw, dtype=np.uint8).view(dtype)
