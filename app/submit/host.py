"""The host submitter: Python configures, the native loops in proxy/ post and poll.

Lanes travel to C++ as one uint64 table with the columns of `gicbench._native.host.LANE_COLUMNS`
(the submitter's own layout). A loop that fails returns the queue state; it is raised here as
CompletionTimeout or CompletionError with rank, QP and indices. On a provider without mlx5 queues
in memory (verbs), the same typed work goes through the post-send path (verbs_path.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import CompletionError, CompletionTimeout, ConfigError, FabricError
from ..fabric.base import Posting
from ..mlx5.constants import Syndrome
from ..platform import Probe
from .base import (
    Buffer,
    Lane,
    LatencyWork,
    RateResult,
    RateWork,
    RespondWork,
    Shape,
    Submitter,
    register,
)

MODE_CODES = {"issue": 0, "put_completion": 1, "round_trip": 2}


class LoopInterrupted(FabricError):
    """SIGTERM/SIGINT ended a native loop early; `done` of `total` operations had been issued."""

    def __init__(self, message: str, done: int, total: int) -> None:
        self.done, self.total = done, total
        super().__init__(message)


def write_wqebbs(payload: str, size: int, transport: str = "rc", compact_av: bool = False) -> int:
    """64-byte WQEBBs of one RDMA write as the native loops build it (ValueError if unbuildable)."""
    return _native_host().write_wqebbs(payload == "inline", size, transport == "dc", compact_av)


def max_batch(sq_wqebbs: int, payload: str, size: int, transport: str = "rc") -> int:
    """The largest msg-rate batch (WQEs per doorbell) the native loop accepts on this SQ."""
    return sq_wqebbs // write_wqebbs(payload, size, transport)


def _native_host() -> Any:
    from .. import _native

    return _native.host


def lane_row(lane: Lane, compact_av: bool = False) -> list[int]:
    sq, cq = lane.qp.sq, lane.qp.sq.cq
    row = [sq.buf, sq.wqebb_cnt, sq.dbrec, sq.doorbell, lane.qp.qpn, cq.buf, cq.ncqe, cq.dbrec]
    if lane.dc is not None:
        row += [1, lane.dc.dc_key, lane.dc.dctn, (lane.dc.lid & 0xFFFF) | (int(compact_av) << 32)]
    else:
        row += [0, 0, 0, 0]
    region = min(lane.src.length, lane.dst.length)
    row += [lane.src.addr, lane.src.key, lane.dst.addr, lane.dst.key, region]
    return row


def lane_table(lanes: tuple[Lane, ...] | list[Lane]) -> np.ndarray:
    width = len(_native_host().LANE_COLUMNS)
    rows = [lane_row(lane) for lane in lanes]
    return np.ascontiguousarray(np.array(rows, dtype=np.uint64).reshape(-1, width))


def _buf(b: Buffer) -> tuple[int, int, int]:
    return (b.addr, b.key, b.length)


@register
class HostSubmitter(Submitter):
    name = "host"
    summary = "CPU threads post WQEs and poll CQEs directly (native C++ loops; post_send on verbs)"
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND, Shape.RATE})
    posting = (Posting.MLX5_QUEUES.value, Posting.POST_SEND.value)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        from .verbs_path import post_send_path

        # None on a provider with mlx5 queues in memory (emu, mlx5): the native WQE loops.
        self._post_send = post_send_path(self.fabric, self.rank, self.timeout_ns)

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        try:
            _native_host()
        except ImportError as e:
            return f"native module missing ({e}); run `make setup`"
        return None

    @property
    def _hook(self) -> tuple[int, int]:
        return self.progress.cpu_hook

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

    def latency(self, work: LatencyWork) -> np.ndarray:
        if self._post_send is not None:
            return self._post_send.latency(work)
        sel = work.lanes[work.selected]
        reply = work.reply if work.reply is not None else sel.src
        ok, samples, err = _native_host().single_op(
            lane_table(work.lanes),
            MODE_CODES[work.mode],
            work.size,
            work.inline,
            work.scope_all,
            work.selected,
            _buf(sel.src),
            _buf(sel.dst),
            _buf(reply),
            work.iters,
            work.warmup,
            self.timeout_ns,
            *self._hook,
        )
        if not ok:
            self._raise(f"single-op {work.mode}", err, {"size": work.size})
        return samples

    def respond(self, work: RespondWork) -> None:
        if self._post_send is not None:
            return self._post_send.respond(work)
        ok, err = _native_host().rtt_respond(
            lane_table([work.lane]),
            0,
            work.size,
            work.inline,
            _buf(work.watch),
            _buf(work.lane.src),
            _buf(work.lane.dst),
            work.count,
            self.timeout_ns,
            *self._hook,
        )
        if not ok:
            self._raise("round-trip responder", err, {"size": work.size})

    def rate(self, work: RateWork) -> RateResult:
        if self._post_send is not None:
            return self._post_send.rate(work)
        ok, windows, stats, err = _native_host().msg_rate(
            lane_table(work.lanes),
            work.threads,
            work.batch,
            work.size,
            work.inline,
            work.messages_per_thread,
            work.warmup_per_thread,
            work.window,
            self.timeout_ns,
            *self._hook,
        )
        if not ok:
            self._raise(
                "msg-rate",
                err,
                {
                    "batch": work.batch,
                    "threads": work.threads,
                    "size": work.size,
                    "messages_per_thread": work.messages_per_thread,
                    "warmup_per_thread": work.warmup_per_thread,
                    "window": work.window,
                },
            )
        return RateResult(
            windows_ns=windows,
            elapsed_ns=int(stats["elapsed_ns"]),
            messages=int(stats["messages"]),
            doorbells=int(stats["doorbells"]),
            cqes=int(stats["cqes"]),
        )
