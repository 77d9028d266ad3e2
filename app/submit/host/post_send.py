"""The host submitter's post-send path: its loops on a provider without mlx5 queues in memory.

A generic verbs device keeps its queues behind libibverbs, so the host submitter
(submitter.py) hands its typed work (LatencyWork, RespondWork, RateWork) to this path
instead of its WQE loops. The loops are native (native/src/verbs_loops.cpp, over the NIC objects
the verbs fabric owns natively): ibv_post_send chains of pre-linked work requests, ibv_poll_cq,
no allocation and no Python per operation. One submitting thread.

Same contract as the WQE loops: the sequence number rides in the payload's last 8 bytes (the
round trip polls it), lane l's k-th rate message goes to slot k mod (slice / size), signaled
every depth/4 (fewer near the depth) with the final drain timed. A missing completion raises
CompletionTimeout naming rank, QP and the posted/completed counts; an error completion raises
VerbsCompletionError (rank, QP, peer, ibv_wc_status); SIGTERM/SIGINT end a loop within 256 polls
(LoopInterrupted).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ConfigError
from ...fabric.base import QueuePair
from ...fabric.verbs.fabric import native
from ...fabric.verbs.posting import completion_error
from ..failures import LoopFailure, raise_failure
from ..work import (
    MODE_CODES,
    Buffer,
    CycleWork,
    LatencyWork,
    RateResult,
    RateWork,
    RespondWork,
)


def post_send_path(fabric: Any, rank: int, timeout_ns: int) -> PostSendPath | None:
    """The path for `fabric` when it has no mlx5 queues in memory, else None."""
    if getattr(fabric, "mlx5_queues", True):
        return None
    return PostSendPath(fabric, rank, timeout_ns / 1e9)


def _side(b: Buffer) -> tuple[int, int, int]:
    return (b.addr, b.key, b.length)


class PostSendPath:
    def __init__(self, fabric: Any, rank: int, timeout_s: float) -> None:
        self.f, self.rank, self.timeout_s = fabric, rank, timeout_s
        self.timeout_ns = int(timeout_s * 1e9)
        self._loops = native()

    # ---- checks and errors ----------------------------------------------------------------------
    def _check(self, qp: QueuePair, size: int, inline: bool, sides: dict[str, Buffer]) -> None:
        """Refuse, before anything is posted, what the loop could not do."""
        if size < 8:
            raise ConfigError("size", size, ">= 8 (the sequence number is an 8-byte word)")
        if inline and size > self.f.max_inline(qp):
            raise ConfigError(
                "payload (--payload inline)",
                size,
                f"sizes <= {self.f.max_inline(qp)} B on {self.f.device} (or --payload pointer)",
            )
        for name, b in sides.items():
            if size > b.length:
                raise ConfigError("size", size, f"<= {b.length} B (the lane's {name} buffer)")

    def _raise(self, what: str, err: dict[str, Any]) -> None:
        qpn = err["qpn"]
        peer = self.f._peer_of.get(qpn)
        to = f" to rank {peer}" if peer is not None else ""
        where = (
            f"rank {self.rank}, QP 0x{qpn:06x}{to}, {what}: {err['posted']} posted, "
            f"{err['completed']} completed"
        )
        f = LoopFailure.from_native(err, where)
        if f.kind == "cqe_error":  # a work completion's ibv_wc status
            self.f.sw["errors"] += 1
            f.wc_status, f.qpn = int(err["status"]), int(err["wc_qpn"] or qpn)

        def wc_error(f: LoopFailure) -> BaseException:
            return completion_error(self.f, f.wc_status, f.wr_id, f.qpn, f.vendor_err, what)

        raise_failure(f, what, self.timeout_s, wc_error=wc_error)

    def _count(self, wqes: int, doorbells: int, cqes: int, nbytes: int) -> None:
        sw = self.f.sw
        sw["wqes"] += wqes
        sw["doorbells"] += doorbells
        sw["cqes"] += cqes
        sw["bytes"] += nbytes

    # ---- single-op ------------------------------------------------------------------------------
    def latency(self, work: LatencyWork) -> np.ndarray:
        """`iters` timed operations on lanes[selected], one outstanding: issue (post_send
        only), put_completion (post and poll until its CQE) or round_trip (completes when the
        reply buffer's last word holds the sequence number; the peer answers in respond())."""
        if work.scope_all:  # the plan refuses it (experiment.needs_queues_in_memory)
            raise ConfigError("scope (--scope)", "all", "selected on the post-send path")
        lane = work.lanes[work.selected]
        qp, size = lane.qp, work.size
        sides = {"source": lane.src, "destination": lane.dst}
        rtt = work.mode == "round_trip"
        reply = work.reply if work.reply is not None else lane.src
        if rtt:
            if work.reply is None:
                raise ConfigError("reply", None, "a local buffer for the round trip's answer")
            sides["reply"] = reply
        self._check(qp, size, work.inline, sides)
        ok, samples, err = self._loops.single_op(
            self.f.nic, self.f.qpn_of(qp), self.f.cqn_of(qp.sq.cq), MODE_CODES[work.mode],
            _side(lane.src), _side(lane.dst), _side(reply), size, work.inline, work.iters,
            work.warmup, self.timeout_ns,
        )  # fmt: skip
        total = work.iters + work.warmup
        if not ok:
            self._count(err["posted"], err["posted"], err["completed"], err["posted"] * size)
            self._raise(f"single-op {work.mode}", err)
        self._count(total, total, total, total * size)
        return samples

    def respond(self, work: RespondWork) -> None:
        """The round trip's far end: wait for sequence number s in `watch`'s word at size-8,
        write our source (stamped s) back through the lane; `count` times."""
        lane, size = work.lane, work.size
        sides = {"source": lane.src, "destination": lane.dst, "watched": work.watch}
        self._check(lane.qp, size, work.inline, sides)
        ok, err = self._loops.respond(
            self.f.nic, self.f.qpn_of(lane.qp), self.f.cqn_of(lane.qp.sq.cq), _side(lane.src),
            _side(lane.dst), _side(work.watch), size, work.inline, work.count, self.timeout_ns,
        )  # fmt: skip
        if not ok:
            self._count(err["posted"], err["posted"], err["completed"], err["posted"] * size)
            self._raise("round-trip responder", err)
        self._count(work.count, work.count, work.count, work.count * size)

    # ---- msg-rate -------------------------------------------------------------------------------
    def rate(self, work: RateWork) -> RateResult:
        """Writes with many outstanding: batch b goes to lane b mod n as one post_send chain,
        every (depth / 4)-th WR signaled (fewer for a batch near the depth), the last of each
        lane signaled, then a drain inside the timed region; windows of `window` messages."""
        if work.threads != 1:
            raise ConfigError(
                "threads (-t)", work.threads, "1 on the post-send path (one submitting thread)"
            )
        size = work.size
        depth = min(lane.qp.sq.wqebb_cnt for lane in work.lanes)
        if not 1 <= work.batch <= depth:
            raise ConfigError("batch (--batch)", work.batch, f"1..{depth} (the SQ depth here)")
        for lane in work.lanes:
            self._check(lane.qp, size, work.inline, {"source": lane.src, "destination": lane.dst})
        lanes = [
            (self.f.qpn_of(ln.qp), self.f.cqn_of(ln.qp.sq.cq), _side(ln.src), _side(ln.dst))
            for ln in work.lanes
        ]
        ok, windows, stats, err = self._loops.msg_rate(
            self.f.nic, lanes, work.batch, size, work.inline, work.messages_per_thread,
            work.warmup_per_thread, work.window, self.timeout_ns,
        )  # fmt: skip
        if not ok:
            self._raise("msg-rate", err)
        total = work.messages_per_thread + work.warmup_per_thread
        self._count(total, int(stats["doorbells"]), int(stats["cqes"]), total * size)
        return RateResult(
            windows_ns=np.asarray(windows, dtype=np.int64),
            elapsed_ns=int(stats["elapsed_ns"]),
            messages=int(stats["messages"]),
            doorbells=int(stats["doorbells"]),
            cqes=int(stats["cqes"]),
        )

    # ---- active connections ---------------------------------------------------------------------
    def cycle(self, work: CycleWork) -> RateResult:
        """One thread cycles the lanes, W writes per visit in post_send chains of min(batch,
        W), the drain timed (the WQE loop's contract)."""
        if work.units != 1:
            raise ConfigError(
                "threads (-t)", work.units, "1 on the post-send path (one submitting thread)"
            )
        if any(lane.dc is not None for lane in work.lanes):
            raise ConfigError("transport (--transport)", "dc", "rc on the post-send path")
        size = work.size
        depth = min(lane.qp.sq.wqebb_cnt for lane in work.lanes)
        chain = min(work.batch, work.writes_per_visit)
        if not 1 <= chain <= depth:
            raise ConfigError("batch (--batch)", work.batch, f"1..{depth} (the SQ depth here)")
        for lane in work.lanes:
            self._check(lane.qp, size, work.inline, {"source": lane.src, "destination": lane.dst})
        lanes = [
            (self.f.qpn_of(ln.qp), self.f.cqn_of(ln.qp.sq.cq), _side(ln.src), _side(ln.dst))
            for ln in work.lanes
        ]
        ok, windows, stats, err = self._loops.cycle(
            self.f.nic, lanes, work.writes_per_visit, work.batch, size, work.inline,
            work.visits, work.warmup_visits, work.window, self.timeout_ns,
        )  # fmt: skip
        if not ok:
            self._raise("active-connections cycle", err)
        total = (work.visits + work.warmup_visits) * work.writes_per_visit
        self._count(total, int(stats["doorbells"]), int(stats["cqes"]), total * size)
        return RateResult(
            windows_ns=np.asarray(windows, dtype=np.int64),
            elapsed_ns=int(stats["elapsed_ns"]),
            messages=int(stats["messages"]),
            doorbells=int(stats["doorbells"]),
            cqes=int(stats["cqes"]),
        )
