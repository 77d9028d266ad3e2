"""Doorbell values: what a submitter stores to the UAR and to the doorbell record."""

from __future__ import annotations

import struct

from ._fields import BytesLike, as_bytes


def doorbell_value(ctrl16: BytesLike) -> int:
    """The 64-bit doorbell: the first 8 bytes of the last WQE's ctrl segment as a (little-endian)
    CPU loads and stores them, so storing this value writes those bytes unchanged."""
    return int.from_bytes(as_bytes(ctrl16, 8, "ctrl segment"), "little")


def dbrec_value(pi: int) -> bytes:
    """The send doorbell-record word (dbrec[SND_DBR]): BE32 of the producer index & 0xffff."""
    return struct.pack(">I", int(pi) & 0xFFFF)


def cq_ci_value(ci: int) -> bytes:
    """The CQ doorbell-record word (dbrec[CQ_SET_CI]): BE32 of the consumer index & 0xffffff."""
    return struct.pack(">I", int(ci) & 0xFFFFFF)
