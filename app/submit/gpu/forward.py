"""`--doorbell host`: the host-forwarded doorbell (the second paper's "GDAKI Free Flow", the first
paper's CPU-assisted doorbell). Each QP gets a ready array (one 8-byte slot per WQEBB) in pinned
host memory mapped into the GPU; kernels mark every WQE ready in its slot instead of storing the
record and ringing; a native thread (native/src/gda_forward.cpp, `_native.gda.HostDoorbell`)
advances each QP's contiguous ready prefix and rings. The thread runs only while a kernel does:
`call()` arms it with what each QP must reach, starts it, and stops it however the call ends."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ...errors import CompletionTimeout, UnsupportedError
from ...fabric.base import MemoryDomain, QueuePair, host_view

_CUDA_HOST_ALLOC_PORTABLE_MAPPED = 0x01 | 0x02
# Pinned ready arrays live until the process exits: freeing pinned memory (cudaFreeHost) waits
# for every kernel of the device, and an emulated NIC's CUDA engine kernel may still run.
_KEEP: list[int] = []


def _native() -> Any:
    from ..._native import gda

    return gda


def host_reachable(qp: QueuePair) -> str | None:
    """None when a host thread can ring `qp` (record and doorbell in host memory), else why not."""
    sq = qp.sq
    if sq.domain == MemoryDomain.DEVICE or not sq.dbrec or not sq.doorbell:
        return (
            f"--doorbell host: QP {qp.qpn:#x} keeps its doorbell record and doorbell in GPU "
            "memory (--queues device), which the host thread cannot store to; use --queues host "
            "or --doorbell gpu"
        )
    return None


def start_index(qp: QueuePair) -> int:
    """The QP's producer index now, from its doorbell record (as gda_prepare attaches it)."""
    word = int(host_view(qp.sq.dbrec + 4, 4, np.uint32)[0])
    return int.from_bytes(word.to_bytes(4, "little"), "big") & 0xFFFF


class Forwarder:
    """The ready arrays of one submitter's QPs and the thread that rings for them."""

    def __init__(self, cp: Any, rank: int, timeout_s: float) -> None:
        self.cp = cp
        self.rank = rank
        self.timeout_s = timeout_s
        self.native = _native().HostDoorbell(rank)
        self.index: dict[int, int] = {}  # qpn -> native index
        self.dev: dict[int, int] = {}  # qpn -> device address of its ready array

    def ready(self, qp: QueuePair) -> int:
        """The device address of `qp`'s ready array (created and watched on first use)."""
        if qp.qpn not in self.dev:
            why = host_reachable(qp)
            if why is not None:
                raise UnsupportedError(why)
            rt = self.cp.cuda.runtime
            nbytes = max(4096, qp.sq.wqebb_cnt * 8)
            host = int(rt.hostAlloc(nbytes, _CUDA_HOST_ALLOC_PORTABLE_MAPPED))
            _KEEP.append(host)
            host_view(host, nbytes, np.uint8)[:] = 0
            get = getattr(rt, "hostGetDevicePointer", None)
            dev = int(get(host, 0)) if get else host
            self.index[qp.qpn] = int(
                self.native.add(host, qp.sq.dbrec, qp.sq.doorbell, qp.qpn, qp.sq.wqebb_cnt,
                                start_index(qp))
            )  # fmt: skip
            self.dev[qp.qpn] = dev
        return self.dev[qp.qpn]

    def rings(self) -> int:
        return sum(int(s[2]) for s in self.native.stats())

    @contextlib.contextmanager
    def call(self, expect: Sequence[tuple[int, int]]) -> Iterator[None]:
        """The thread runs inside the block: `expect` = (qpn, WQEBBs) each QP is marked up to in
        this call. Stopped however the block ends; a stalled QP raises CompletionTimeout with the
        thread's diagnostic (before any error the block raised: it names the cause)."""
        self.native.arm([(self.index[q], int(n)) for q, n in expect])
        self.native.start(self.timeout_s)
        try:
            yield
        finally:
            self.native.stop()
            err = self.native.error()
            if err is not None:
                raise CompletionTimeout(err)

    def close(self) -> None:
        self.native.stop()
