"""Helpers shared by the encoders and decoders: range checks with clear errors, buffer views."""

from __future__ import annotations

import numpy as np

# Anything a decoder accepts: bytes-like objects or uint8 arrays (e.g. views of a shared ring).
BytesLike = bytes | bytearray | memoryview | np.ndarray


def check_uint(name: str, value: int, bits: int) -> int:
    """Return `value` as int if it fits in `bits` unsigned bits, else raise naming the field."""
    v = int(value)
    if not 0 <= v < (1 << bits):
        raise ValueError(f"{name}={value} out of range: allowed 0..{(1 << bits) - 1} ({bits} bits)")
    return v


def as_bytes(b: BytesLike, nbytes: int, what: str) -> bytes:
    """The first `nbytes` of `b` as bytes; raises if `b` is shorter."""
    raw = np.asarray(b, dtype=np.uint8).tobytes() if isinstance(b, np.ndarray) else bytes(b)
    if len(raw) < nbytes:
        raise ValueError(f"{what}: need {nbytes} bytes, got {len(raw)}")
    return raw[:nbytes]


def to_array(raw: bytes) -> np.ndarray:
    """A writable uint8 array holding `raw`."""
    return np.frombuffer(raw, dtype=np.uint8).copy()
