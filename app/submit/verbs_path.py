"""The host submitter's post-send path: its loops on a provider without mlx5 queues in memory.

A generic verbs device keeps its queues behind libibverbs, so the host submitter
(app/submit/host.py) hands its typed work (LatencyWork, RespondWork, RateWork) to this path
instead of its native WQE loops: each chain of work requests is one post_send, completions come
from ibv_poll_cq. The loops are Python over pyverbs through prepared, pre-linked work requests
(fabric/verbs/posting.py): nothing is allocated per operation; one submitting thread.

Same contract as the native loops: the sequence number rides in the payload's last 8 bytes (the
round trip polls it), lane l's k-th rate message goes to slot k mod (region / size) of the
lane's slices, a missing completion raises CompletionTimeout naming rank, QP and the
posted/completed counts, an error completion raises VerbsCompletionError (rank, QP, peer,
ibv_wc_status). SIGTERM/SIGINT interrupt these loops between two polls (Python signal handlers
run there).
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np

from ..errors import CompletionTimeout, ConfigError
from ..fabric.base import QueuePair
from ..fabric.verbs.posting import TIME_CHECK_EVERY, Posting
from .base import Buffer, Lane, LatencyWork, RateResult, RateWork, RespondWork


def post_send_path(fabric: Any, rank: int, timeout_ns: int) -> PostSendPath | None:
    """The path for `fabric` when it has no mlx5 queues in memory, else None."""
    if getattr(fabric, "mlx5_queues", True):
        return None
    return PostSendPath(fabric, rank, timeout_ns / 1e9)


class PostSendPath:
    def __init__(self, fabric: Any, rank: int, timeout_s: float) -> None:
        self.f, self.rank, self.timeout_s = fabric, rank, timeout_s
        self.posting = Posting(fabric, chain=1024)  # chains up to min(1024, SQ depth)

    # ---- helpers --------------------------------------------------------------------------------
    def _flags(self, inline: bool, size: int, qp: QueuePair, signaled: bool) -> int:
        p = self.posting
        if inline and size > self.f.max_inline(qp):
            raise ConfigError(
                "payload (--payload inline)",
                size,
                f"sizes <= {self.f.max_inline(qp)} B on {self.f.device} (or --payload pointer)",
            )
        return (p.SIGNALED if signaled else 0) | (p.INLINE if inline else 0)

    def _timeout(self, what: str, qp: QueuePair, posted: int, done: int, extra: str = "") -> Any:
        return CompletionTimeout(
            f"no completion within {self.timeout_s:g} s ({self.posting.where(qp)}, {what}: "
            f"{posted} posted, {done} completed{extra})"
        )

    def _single(self, qp: QueuePair, src: Buffer, dst: Buffer, size: int, inline: bool) -> Any:
        """The one prepared WR of a single-op loop: `size` bytes from src to dst, signaled."""
        for b, side in ((src, "source"), (dst, "destination")):
            if size > b.length:
                raise ConfigError("size", size, f"<= {b.length} B (the lane's {side} slice)")
        p = self.posting
        wr, sge = p.chain(qp).slot(1, 0)
        flags = self._flags(inline, size, qp, True)
        p.fill(wr, sge, p.WRITE, src.addr, src.key, dst.addr, dst.key, size, flags, None, 0)
        return wr

    def _wait_cqe(self, pcq: Any, qp: QueuePair, what: str, posted: int, done: int) -> None:
        """Poll until one completion (raises on an error status or the timeout)."""
        poll = pcq.poll
        deadline = 0.0
        spins = 0
        while True:
            got, wcs = poll(1)
            if got:
                if wcs[0].status:
                    self.posting.raise_wc(qp, wcs[0])
                return
            spins += 1
            if spins % TIME_CHECK_EVERY == 0:
                now = time.monotonic()
                if deadline == 0.0:
                    deadline = now + self.timeout_s
                elif now > deadline:
                    raise self._timeout(what, qp, posted, done)

    def _wait_word(self, word: Any, seq: int, pcq: Any, qp: QueuePair, what: str,
                   posted: int, done: int) -> int:  # fmt: skip
        """Spin until `word` holds `seq`. Every TIME_CHECK_EVERY spins it also polls the CQ (a
        failed send shows there) and returns how many successful completions it consumed, so
        the caller does not wait for them again."""
        deadline = 0.0
        spins = consumed = 0
        while word.value != seq:
            spins += 1
            if spins % TIME_CHECK_EVERY == 0:
                got, wcs = pcq.poll(1)
                if got:
                    if wcs[0].status:
                        self.posting.raise_wc(qp, wcs[0])
                    consumed += 1
                now = time.monotonic()
                if deadline == 0.0:
                    deadline = now + self.timeout_s
                elif now > deadline:
                    extra = f"; polled word holds {word.value}, waiting for {seq}"
                    raise self._timeout(what, qp, posted, done, extra)
        return consumed

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
        wr = self._single(qp, lane.src, lane.dst, size, work.inline)
        post, pcq = self.f.pv_qp(qp).post_send, self.f.pv_cq(qp.sq.cq)
        seq_word = ctypes.c_uint64.from_address(lane.src.addr + size - 8)
        rtt = work.mode == "round_trip"
        if rtt:
            if work.reply is None or work.reply.length < size:
                raise ConfigError("reply", work.reply, f"a local buffer of >= {size} B")
            reply = ctypes.c_uint64.from_address(work.reply.addr + size - 8)
        total = work.warmup + work.iters
        out = np.empty(work.iters, dtype=np.int64)
        warm, mode = work.warmup, work.mode
        now = time.perf_counter_ns
        what = f"single-op {mode}"
        for i in range(total):
            seq = i + 1
            seq_word.value = seq  # the sequence number rides in the payload's last 8 bytes
            if mode == "issue":
                t0 = now()
                post(wr)
                t1 = now()
                self._wait_cqe(pcq, qp, what, seq, i)
            elif not rtt:
                t0 = now()
                post(wr)
                self._wait_cqe(pcq, qp, what, seq, i)
                t1 = now()
            else:
                t0 = now()
                post(wr)
                seen = self._wait_word(reply, seq, pcq, qp, what, seq, i)
                t1 = now()
                if not seen:  # the request's own completion, unless the wait consumed it
                    self._wait_cqe(pcq, qp, what, seq, i)
            if i >= warm:
                out[i - warm] = t1 - t0
        self._count(total, total, total, total * size)
        return out

    def respond(self, work: RespondWork) -> None:
        """The round trip's far end: wait for sequence number s in `watch`'s word at size-8,
        write our source (stamped s) back through the lane; `count` times."""
        lane, size = work.lane, work.size
        if size > work.watch.length:
            raise ConfigError("size", size, f"<= {work.watch.length} B (the watched slice)")
        qp = lane.qp
        wr = self._single(qp, lane.src, lane.dst, size, work.inline)
        post, pcq = self.f.pv_qp(qp).post_send, self.f.pv_cq(qp.sq.cq)
        seq_word = ctypes.c_uint64.from_address(lane.src.addr + size - 8)
        watch = ctypes.c_uint64.from_address(work.watch.addr + size - 8)
        what = "round-trip responder"
        for seq in range(1, work.count + 1):
            self._wait_word(watch, seq, pcq, qp, what, seq - 1, seq - 1)
            seq_word.value = seq
            post(wr)
            self._wait_cqe(pcq, qp, what, seq, seq - 1)
        self._count(work.count, work.count, work.count, work.count * size)

    # ---- msg-rate -------------------------------------------------------------------------------
    def rate(self, work: RateWork) -> RateResult:
        """Writes with many outstanding: batch b goes to lane b mod n as one post_send chain,
        every (depth / 4)-th WR signaled (its CQE retires the earlier unsignaled ones, wr_id =
        the lane's cumulative WR count), the last of each lane signaled, then a drain inside
        the timed region; windows of `window` messages."""
        if work.threads != 1:
            raise ConfigError(
                "threads (-t)", work.threads, "1 on the post-send path (one Python thread)"
            )
        lanes: tuple[Lane, ...] = work.lanes
        p, size, batch = self.posting, work.size, work.batch
        qps = [lane.qp for lane in lanes]
        chains = [p.chain(q) for q in qps]
        depth = min(c.length for c in chains)
        if not 1 <= batch <= depth:
            raise ConfigError("batch (--batch)", batch, f"1..{depth} (the SQ depth here)")
        n = len(lanes)
        posts = [c.pqp.post_send for c in chains]
        pcqs = [self.f.pv_cq(q.sq.cq) for q in qps]
        flags_sig = self._flags(work.inline, size, qps[0], True)
        flags_uns = self._flags(work.inline, size, qps[0], False)
        signal_every = max(1, depth // 4)
        warm, window = work.warmup_per_thread, work.window
        total = warm + work.messages_per_thread
        slots = [max(1, min(ln.src.length, ln.dst.length) // size) for ln in lanes]
        posted_l = [0] * n  # WRs posted per lane
        retired_l = [0] * n  # WRs known complete per lane (wr_id of the last signaled CQE)
        since = [0] * n
        nbatches = (total + batch - 1) // batch
        windows: list[int] = []
        doorbells = cqes = 0
        now = time.perf_counter_ns
        t_start = now() if warm == 0 else 0
        t_window = t_start
        next_window = warm + window
        posted = 0

        def reap_until(li: int, room: int, what: str) -> int:
            """Poll lane li's CQ until at most depth - room WRs are outstanding (room = depth:
            all retired). Returns the CQEs consumed; raises on an error or the timeout."""
            spins, deadline, got_total = 0, 0.0, 0
            while depth - (posted_l[li] - retired_l[li]) < room:
                got, wcs = pcqs[li].poll(4)
                for wc in wcs[:got]:
                    if wc.status:
                        p.raise_wc(qps[li], wc)
                    retired_l[li] = int(wc.wr_id)
                got_total += got
                if not got:
                    spins += 1
                    if spins % TIME_CHECK_EVERY == 0:
                        t = time.monotonic()
                        deadline = deadline or t + self.timeout_s
                        if t > deadline:
                            raise self._timeout(what, qps[li], posted_l[li], retired_l[li])
            return got_total

        for b in range(nbatches):
            li = b % n
            count = min(batch, total - posted)
            final_of_lane = b + n >= nbatches
            c, src, dst = chains[li], lanes[li].src, lanes[li].dst
            if depth - (posted_l[li] - retired_l[li]) < count:
                cqes += reap_until(li, count, "msg-rate: SQ full")
            base = c.length - count
            for j in range(count):
                k = posted_l[li] + j  # this lane's k-th message
                since[li] += 1
                sig = since[li] >= signal_every or (j + 1 == count and final_of_lane)
                if sig:
                    since[li] = 0
                wr, sge = c.wrs[base + j], c.sges[base + j]
                off = (k % slots[li]) * size
                sge.addr, sge.length, sge.lkey = src.addr + off, size, src.key
                wr.set_wr_rdma(dst.key, dst.addr + off)
                wr.send_flags = flags_sig if sig else flags_uns
                wr.wr_id = k + 1  # cumulative WRs of this lane up to this one
            posts[li](c.wrs[base])
            doorbells += 1
            posted_l[li] += count
            before = posted
            posted += count
            if before < warm <= posted:
                t_start = t_window = now()
            while posted >= next_window and next_window < total:
                t = now()
                windows.append(t - t_window)
                t_window = t
                next_window += window
        for li in range(n):  # drain: every lane's last WR is signaled
            cqes += reap_until(li, depth, "msg-rate drain")
        t_end = now()
        windows.append(t_end - t_window)  # the last window carries the final drain
        self._count(total, doorbells, cqes, total * size)
        return RateResult(
            windows_ns=np.asarray(windows, dtype=np.int64),
            elapsed_ns=t_end - t_start,
            messages=work.messages_per_thread,
            doorbells=doorbells,
            cqes=cqes,
        )
