"""The host submitter: Python configures, the native loops in proxy/ post and poll.

Lanes (QPs with their CQs and, for DC, address vectors) travel to C++ as one uint64 table with
the columns of `gicbench._native.host.LANE_COLUMNS`. A loop that fails returns the queue state;
it is raised here as CompletionTimeout or CompletionError with rank, QP and indices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import _native
from ..errors import CompletionError, CompletionTimeout, ConfigError, FabricError
from ..fabric.base import MemoryRegion, QueuePair, RemoteBuffer
from ..mlx5.constants import Syndrome

LANE_COLUMNS = tuple(_native.host.LANE_COLUMNS)


class LoopInterrupted(FabricError):
    """SIGTERM/SIGINT ended a native loop early; `done` of `total` operations had been issued."""

    def __init__(self, message: str, done: int, total: int) -> None:
        self.done, self.total = done, total
        super().__init__(message)


def write_wqebbs(payload: str, size: int, transport: str = "rc", compact_av: bool = False) -> int:
    """64-byte WQEBBs of one RDMA write as the native loops build it (ValueError if unbuildable)."""
    return _native.host.write_wqebbs(payload == "inline", size, transport == "dc", compact_av)


def max_batch(sq_wqebbs: int, payload: str, size: int, transport: str = "rc") -> int:
    """The largest msg-rate batch (WQEs per doorbell) the native loop accepts on this SQ."""
    return sq_wqebbs // write_wqebbs(payload, size, transport)


def lane_row(
    qp: QueuePair, dc_target: dict[str, Any] | None = None, compact_av: bool = False
) -> list[int]:
    sq, cq = qp.sq, qp.sq.cq
    row = [
        sq.buf,
        sq.wqebb_cnt,
        sq.dbrec,
        sq.doorbell,
        qp.qpn,
        cq.buf,
        cq.ncqe,
        cq.dbrec,
        0,
        0,
        0,
        0,
    ]
    if dc_target is not None:
        row[8:12] = [
            1,
            dc_target["dc_key"],
            dc_target["dctn"],
            (dc_target["lid"] & 0xFFFF) | (int(compact_av) << 32),
        ]
    return row


def lane_table(rows: list[list[int]]) -> np.ndarray:
    return np.ascontiguousarray(np.array(rows, dtype=np.uint64).reshape(-1, len(LANE_COLUMNS)))


def _buf(b: MemoryRegion | RemoteBuffer) -> tuple[int, int, int]:
    key = b.lkey if isinstance(b, MemoryRegion) else b.rkey
    return (b.addr, key, b.length)


class HostSubmitter:
    name = "host"

    def __init__(
        self,
        *,
        rank: int,
        src: MemoryRegion,
        landing: MemoryRegion,
        peer_landing: RemoteBuffer | None,
        timeout_s: float,
        progress: tuple[int, int] = (0, 0),
    ) -> None:
        self.rank, self.src, self.landing, self.peer_landing = rank, src, landing, peer_landing
        self.timeout_ns = int(timeout_s * 1e9)
        self.progress_fn, self.progress_ctx = progress

    def _raise(self, what: str, err: dict[str, Any], params: dict[str, Any]) -> None:
        where = (
            f"rank {self.rank}, {what}, QP 0x{err['qpn']:06x}: SQ producer index "
            f"{err['pi']}, retired {err['retired']}, CQ consumer index {err['cq_ci']}"
        )
        if err["kind"] == "timeout":
            extra = ""
            if err["word_expected"]:
                extra = (
                    f"; polled word holds {err['word_seen']}, waiting for {err['word_expected']}"
                )
            raise CompletionTimeout(
                f"no completion within {self.timeout_ns / 1e9:g} s ({where}{extra})"
            )
        if err["kind"] == "cqe_error":
            synd = err["syndrome"]
            try:
                name = Syndrome(synd).name
            except ValueError:
                name = "unknown"
            raise CompletionError(
                f"error CQE {name} (0x{synd:02x}, vendor 0x{err['vendor_syndrome']:02x}) for WQE "
                f"{err['wqe_counter']} ({where})",
                synd,
                err["wqe_counter"],
                err["qpn"],
            )
        if err["kind"] == "interrupted":
            raise LoopInterrupted(
                f"{what} interrupted by a signal after {err['done']} of {err['total']} "
                f"operations ({where})",
                err["done"],
                err["total"],
            )
        if err["kind"] == "bad_arguments":
            # refused before anything was posted: the field, what is allowed; the native
            # sentence (lane, QP) rides along as a note
            field = err["field"]
            exc = ConfigError(field, params.get(field, err["message"]), err["allowed"])
            exc.add_note(err["message"])
            raise exc
        detail = f": {err['message']}" if err["message"] else ""
        raise FabricError(f"{what} failed: {err['kind']}{detail} ({where})")

    def single_op(self, lanes: np.ndarray, params: dict[str, Any], mode: int) -> np.ndarray:
        assert self.peer_landing is not None
        ok, samples, err = _native.host.single_op(
            lanes,
            mode,
            params["size"],
            params["payload"] == "inline",
            params["scope"] == "all",
            0,
            _buf(self.src),
            _buf(self.peer_landing),
            _buf(self.landing),
            params["iters"],
            params["warmup"],
            self.timeout_ns,
            self.progress_fn,
            self.progress_ctx,
        )
        if not ok:
            self._raise(f"single-op {params['mode']}", err, params)
        return samples

    def respond(self, lanes: np.ndarray, params: dict[str, Any]) -> None:
        assert self.peer_landing is not None
        ok, err = _native.host.rtt_respond(
            lanes,
            0,
            params["size"],
            params["payload"] == "inline",
            _buf(self.landing),
            _buf(self.src),
            _buf(self.peer_landing),
            params["iters"] + params["warmup"],
            self.timeout_ns,
            self.progress_fn,
            self.progress_ctx,
        )
        if not ok:
            self._raise("round-trip responder", err, params)

    def msg_rate(self, lanes: np.ndarray, params: dict[str, Any]) -> tuple[np.ndarray, dict]:
        assert self.peer_landing is not None
        ok, windows, stats, err = _native.host.msg_rate(
            lanes,
            params["threads"],
            params["batch"],
            params["size"],
            params["payload"] == "inline",
            _buf(self.src),
            _buf(self.peer_landing),
            params["messages_per_thread"],
            params["warmup_per_thread"],
            params["window"],
            self.timeout_ns,
            self.progress_fn,
            self.progress_ctx,
        )
        if not ok:
            self._raise("msg-rate", err, params)
        return windows, stats
