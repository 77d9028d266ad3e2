"""The host submitter over the verbs posting path (providers with post_send and no mlx5 queues).

Same methods and results as app/submit/host.py's HostSubmitter, so the harness can pick either:
single_op(lanes, params, mode) -> int64 ns samples, respond(lanes, params), msg_rate(lanes,
params) -> (window ns, stats). `lanes` is the lane table the harness builds (its `qpn` column
names the QPs) or a list of QueuePair. The loops are Python over pyverbs: each operation is one
post_send and one or more ibv_poll_cq calls through prepared, pre-linked work requests
(fabric/verbs/posting.py), nothing allocated per operation; one submitting thread (Python).
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import CompletionTimeout, ConfigError
from ..fabric.base import MemoryRegion, QueuePair, RemoteBuffer
from ..fabric.verbs.posting import TIME_CHECK_EVERY, Posting

QPN_COLUMN = 4  # lane_row()'s qpn column (LANE_COLUMNS[4] == "qpn")
MODES = ("issue", "put_completion", "round_trip")


class VerbsSubmitter:
    name = "host"
    path = "verbs"

    def __init__(
        self,
        *,
        fabric: Any,
        rank: int,
        src: MemoryRegion,
        landing: MemoryRegion,
        peer_landing: RemoteBuffer | None,
        timeout_s: float,
        progress: tuple[int, int] = (0, 0),  # accepted for the harness; a verbs NIC needs none
    ) -> None:
        self.f, self.rank, self.src, self.landing = fabric, rank, src, landing
        self.peer_landing, self.timeout_s = peer_landing, timeout_s
        self.posting = Posting(fabric, chain=1024)  # chains up to min(1024, SQ depth)

    # ---- helpers --------------------------------------------------------------------------------
    def qps(self, lanes: np.ndarray | Sequence[QueuePair]) -> list[QueuePair]:
        if isinstance(lanes, np.ndarray):
            by_qpn = self.f._qp_objs
            return [by_qpn[int(q)] for q in lanes[:, QPN_COLUMN]]
        return list(lanes)

    def _flags(self, params: dict[str, Any], qp: QueuePair, signaled: bool) -> int:
        p = self.posting
        inline = params.get("payload") == "inline"
        if inline and params["size"] > self.f.max_inline(qp):
            raise ConfigError(
                "payload (--payload inline)",
                params["size"],
                f"sizes <= {self.f.max_inline(qp)} B on {self.f.device} (or --payload pointer)",
            )
        return (p.SIGNALED if signaled else 0) | (p.INLINE if inline else 0)

    def _timeout(self, what: str, qp: QueuePair, extra: str = "") -> CompletionTimeout:
        return CompletionTimeout(
            f"no completion within {self.timeout_s:g} s ({self.posting.where(qp)}, {what}{extra})"
        )

    def _wait_cqe(self, pcq: Any, qp: QueuePair, what: str) -> int:
        """Poll until one completion; returns its wr_id (raises on error status or timeout)."""
        poll = pcq.poll
        deadline = 0.0
        spins = 0
        while True:
            got, wcs = poll(1)
            if got:
                wc = wcs[0]
                if wc.status:
                    self.posting.raise_wc(qp, wc)
                return int(wc.wr_id)
            spins += 1
            if spins % TIME_CHECK_EVERY == 0:
                now = time.monotonic()
                if deadline == 0.0:
                    deadline = now + self.timeout_s
                elif now > deadline:
                    raise self._timeout(what, qp)

    def _wait_word(self, word: Any, seq: int, pcq: Any, qp: QueuePair, what: str) -> int:
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
                    raise self._timeout(what, qp, extra)
        return consumed

    # ---- single-op ------------------------------------------------------------------------------
    def single_op(self, lanes: Any, params: dict[str, Any], mode: int) -> np.ndarray:
        """`iters` timed operations of `size` bytes on the first lane, one outstanding.
        mode 0 issue (post_send only), 1 put+completion (post and poll until its CQE; with
        scope all, then one poll of every other lane's CQ), 2 round trip (the peer answers in
        respond(); completes when our polled word holds the sequence number)."""
        assert self.peer_landing is not None
        qps = self.qps(lanes)
        qp, size = qps[0], params["size"]
        if size < 8 and mode == 2:
            raise ConfigError("size", size, ">= 8 for the round trip (an 8-byte polled word)")
        p, f = self.posting, self.f
        c = p.chain(qp)
        wr, sge = c.slot(1, 0)
        p.fill(wr, sge, p.WRITE, self.src.addr, self.src.lkey, self.peer_landing.addr,
               self.peer_landing.rkey, size, self._flags(params, qp, True), None, 0)  # fmt: skip
        post, pcq = f.pv_qp(qp).post_send, f.pv_cq(qp.sq.cq)
        others = [f.pv_cq(q.sq.cq) for q in qps[1:]] if params.get("scope") == "all" else []
        seq_word = ctypes.c_uint64.from_address(self.src.addr + size - 8)
        reply = ctypes.c_uint64.from_address(self.landing.addr + size - 8)
        total = params["warmup"] + params["iters"]
        out = np.empty(params["iters"], dtype=np.int64)
        warm = params["warmup"]
        now = time.perf_counter_ns
        what = f"single-op {MODES[mode]}"
        for i in range(total):
            seq = i + 1
            seq_word.value = seq  # the sequence number rides in the payload's last 8 bytes
            if mode == 0:
                t0 = now()
                post(wr)
                t1 = now()
                self._wait_cqe(pcq, qp, what)
            elif mode == 1:
                t0 = now()
                post(wr)
                self._wait_cqe(pcq, qp, what)
                for o in others:
                    o.poll(1)
                t1 = now()
            else:
                t0 = now()
                post(wr)
                seen = self._wait_word(reply, seq, pcq, qp, what)
                t1 = now()
                if not seen:  # the request's own completion, unless the wait consumed it
                    self._wait_cqe(pcq, qp, what)
            if i >= warm:
                out[i - warm] = t1 - t0
        f.sw["wqes"] += total
        f.sw["doorbells"] += total
        f.sw["cqes"] += total
        f.sw["bytes"] += total * size
        return out

    def respond(self, lanes: Any, params: dict[str, Any]) -> None:
        """The round trip's other end: wait for sequence number s in our landing word, write
        our source (stamped s) back to the peer's landing buffer; iters + warmup times."""
        assert self.peer_landing is not None
        qp = self.qps(lanes)[0]
        size, p, f = params["size"], self.posting, self.f
        c = p.chain(qp)
        wr, sge = c.slot(1, 0)
        p.fill(wr, sge, p.WRITE, self.src.addr, self.src.lkey, self.peer_landing.addr,
               self.peer_landing.rkey, size, self._flags(params, qp, True), None, 0)  # fmt: skip
        post, pcq = f.pv_qp(qp).post_send, f.pv_cq(qp.sq.cq)
        seq_word = ctypes.c_uint64.from_address(self.src.addr + size - 8)
        watch = ctypes.c_uint64.from_address(self.landing.addr + size - 8)
        total = params["warmup"] + params["iters"]
        for seq in range(1, total + 1):
            self._wait_word(watch, seq, pcq, qp, "round-trip responder")
            seq_word.value = seq
            post(wr)
            self._wait_cqe(pcq, qp, "round-trip responder")
        f.sw["wqes"] += total
        f.sw["doorbells"] += total
        f.sw["cqes"] += total
        f.sw["bytes"] += total * size

    # ---- msg-rate -------------------------------------------------------------------------------
    def msg_rate(self, lanes: Any, params: dict[str, Any]) -> tuple[np.ndarray, dict[str, Any]]:
        """Writes with many outstanding: batches of `batch` WRs per post_send, round-robin over
        the lanes, every (SQ depth / 4)-th WR signaled (its CQE retires the earlier unsignaled
        ones), the last of each lane signaled, then a drain; windows of `window` messages."""
        assert self.peer_landing is not None
        if params.get("threads", 1) != 1:
            raise ConfigError(
                "threads (-t)", params["threads"], "1 on the verbs posting path (one Python thread)"
            )
        qps = self.qps(lanes)
        p, f = self.posting, self.f
        size, batch = params["size"], params["batch"]
        chains = [p.chain(q) for q in qps]
        depth = min(c.length for c in chains)
        if not 1 <= batch <= depth:
            raise ConfigError("batch (--batch)", batch, f"1..{depth} (the SQ depth here)")
        n = len(qps)
        posts = [c.pqp.post_send for c in chains]
        pcqs = [f.pv_cq(q.sq.cq) for q in qps]
        flags_sig = self._flags(params, qps[0], True)
        flags_uns = self._flags(params, qps[0], False)
        signal_every = max(1, depth // 4)
        warm, msgs, window = (
            params["warmup_per_thread"],
            params["messages_per_thread"],
            params["window"],
        )
        total = warm + msgs
        nslots = max(1, min(self.src.length, self.peer_landing.length) // size)
        posted_l = [0] * n  # WRs posted per lane
        retired_l = [0] * n  # WRs known complete per lane (wr_id of the last signaled CQE)
        since = [0] * n
        nbatches = (total + batch - 1) // batch
        src, lkey = self.src.addr, self.src.lkey
        dst, rkey = self.peer_landing.addr, self.peer_landing.rkey
        windows: list[int] = []
        doorbells = cqes = 0
        now = time.perf_counter_ns
        t_start = now() if warm == 0 else 0
        t_window = t_start
        next_window = warm + window
        posted = 0

        def reap_until(li: int, done: Callable[[], bool], what: str) -> int:
            """Poll lane li's CQ until `done()`; signaled completions retire WRs by wr_id.
            Returns the CQEs consumed; raises on an error completion or the timeout."""
            spins, deadline, got_total = 0, 0.0, 0
            while not done():
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
                            pending = posted_l[li] - retired_l[li]
                            raise self._timeout(f"{what} ({pending} WRs pending)", qps[li])
            return got_total

        for b in range(nbatches):
            li = b % n
            count = min(batch, total - posted)
            final_of_lane = b + n >= nbatches
            c = chains[li]
            # Room for `count` WRs: reap signaled completions until enough have retired.
            if depth - (posted_l[li] - retired_l[li]) < count:
                cqes += reap_until(
                    li,
                    lambda li=li, count=count: depth - (posted_l[li] - retired_l[li]) >= count,
                    "msg-rate: SQ full",
                )
            base = c.length - count
            for j in range(count):
                m = posted + j
                since[li] += 1
                sig = since[li] >= signal_every or (j + 1 == count and final_of_lane)
                if sig:
                    since[li] = 0
                wr, sge = c.wrs[base + j], c.sges[base + j]
                off = (m % nslots) * size
                sge.addr, sge.length, sge.lkey = src + off, size, lkey
                wr.set_wr_rdma(rkey, dst + off)
                wr.send_flags = flags_sig if sig else flags_uns
                wr.wr_id = posted_l[li] + j + 1  # cumulative WRs of this lane up to this one
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
            cqes += reap_until(li, lambda li=li: retired_l[li] >= posted_l[li], "msg-rate drain")
        t_end = now()
        windows.append(t_end - t_window)  # the last window carries the final drain
        f.sw["wqes"] += total
        f.sw["doorbells"] += doorbells
        f.sw["cqes"] += cqes
        f.sw["bytes"] += total * size
        stats = {
            "elapsed_ns": t_end - t_start,
            "messages": msgs,
            "doorbells": doorbells,
            "cqes": cqes,
        }
        return np.asarray(windows, dtype=np.int64), stats
