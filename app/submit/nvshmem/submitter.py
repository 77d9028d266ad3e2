"""--submitter nvshmem: NVSHMEM's own IBGDA device code (the 3.8 wheel's headers, unchanged) posting
on gicbench's queues, through its internal transport calls or its public API.

Bring-up creates every RC QP and send CQ as NVSHMEM's host transport creates them (`queue_options`:
a collapsed, overrun-ignoring CQ per QP of the QP's depth; depth a power of two >= 128);
`attach_queues` fills every CQ ring with 0xff (NVSHMEM's first poll reads entry 0's counter as
"WQE -1") and registers one ibuf slot pair per QP; `attach_peers` builds NVSHMEM's QP table by
peer and slot and installs both device states (rank_state.py: the symmetric heap is the whole
NIC address space in one key chunk, so the lanes' own addresses and keys go to NVSHMEM
unchanged). The tables live in GPU memory across calls: NVSHMEM's indices are there.

NVSHMEM chooses the QP (CTA id mod QPs per peer), so a launch places each unit in the CTA whose
choice is its lane's QP, checked once per call shape by a kernel that asks NVSHMEM's own lookup.

- single-op: one thread; `--payload inline` is nvshmem_uint64_p (8 B), `pointer` a putmem_nbi
  whose source carries the sequence word; put+completion waits with IBGDA's quiet of the op's QP
  (public API: nvshmemx_qp_quiet of the PE's default QPs) or, with --scope all, the quiet of every
  QP of every PE (nvshmem_quiet). The round trip is put-with-signal: size - 8 payload bytes and a
  signal add of 1 on the last 8 bytes, which the peer polls (inline: a p of the sequence number).
- msg-rate: one CTA per lane of -t / lanes threads, each posting its messages with the op; the
  doorbells are NVSHMEM's own (its batching threshold, `--nvshmem-batch`), so --batch is 1.
Every call checks the engine's fidelity counters (gpu_runtime/engine_counters.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import CompletionTimeout, ConfigError, FabricError, UnsupportedError
from ...fabric.base import Access, MemoryDomain, Posting, QueuePair, host_view
from ...fabric.registry import QueueOptions
from ...platform import Probe
from ..base import Shape, Submitter, register
from ..failures import TIMEOUT, LoopFailure, raise_failure
from ..gpu_runtime import engine_counters, smclock
from ..gpu_runtime.device import MAX_BLOCK, rank_device
from ..gpu_runtime.device_map import DeviceMap, stage
from ..work import (
    LATENCY_MODES,
    Lane,
    LatencyWork,
    RateResult,
    RateWork,
    RespondWork,
    even_lane_messages,
)
from . import layout
from .params import NvshmemParams
from .rank_state import RankQueues, rank_states, rkeys_rest
from .runtime import CQE_BYTES, Bases, array_bytes


def op_for(inline: bool, round_trip: bool) -> str:
    """The NVSHMEM call a write becomes: inline -> p (one uint64), pointer -> put, a pointer
    round trip -> put-with-signal."""
    if inline:
        return "p"
    return "put_signal" if round_trip else "put"


def refusal(params: NvshmemParams, exp: str, point: Mapping[str, Any]) -> str | None:
    """Why `point` of `exp` cannot run with these knobs, else None (pre-flight)."""
    if point.get("transport", "rc") != "rc":
        return "transport (--transport) dc: NVSHMEM's IBGDA table here holds RC QPs only (rc)"
    payload, size = point.get("payload", "pointer"), int(point["size"])
    if payload == "inline" and size != 8:
        return (f"-b/-e {size} with --payload inline: NVSHMEM's inline write (nvshmem_uint64_p) "
                "carries one 8-byte value (use -b 8, or --payload pointer)")  # fmt: skip
    if {"threads", "batch", "qps"} <= point.keys():  # a rate point (msg-rate, payload)
        if int(point["batch"]) != 1:
            return (f"--batch {point['batch']}: NVSHMEM rings by its own threshold "
                    "(--nvshmem-batch); use --batch 1")  # fmt: skip
        t, q = int(point["threads"]), int(point["qps"])
        if t % q:  # the rank's lanes are -q per destination: rate() checks the whole count
            return (f"-t {t} over -q {q} QPs: a multiple of {q} (one CTA per QP of the same "
                    "threads: NVSHMEM picks the QP by CTA)")  # fmt: skip
        return None
    if size % 8 or size < 8:
        return f"-b/-e {size}: whole 8-byte words (the sequence word is a message's last 8 bytes)"
    if point.get("mode") == "round_trip" and payload == "pointer" and size < 16:
        return ("-b 8 with --payload pointer and --modes round_trip: NVSHMEM's put-with-signal "
                "carries size - 8 payload bytes and the 8-byte signal (use -b >= 16, or "
                "--payload inline)")  # fmt: skip
    return None


@register
class NvshmemSubmitter(Submitter):
    name = "nvshmem"
    summary = (
        "NVSHMEM's own IBGDA device code (internal calls or the public API) on gicbench's "
        "queues: the library path under DeepEP and most MoE libraries"
    )
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND, Shape.RATE})
    posting = (Posting.MLX5_QUEUES.value,)
    needs_gpu = True
    cpu_progress = False
    threads_share_lanes = True
    Params = NvshmemParams

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        from .build import unbuildable_reason
        from .headers import find, unavailable_reason

        if find() is None:
            return unavailable_reason()
        cupy = probes["cupy"]
        if not cupy.ok:
            return f"the nvshmem submitter needs an NVIDIA GPU and CuPy ({cupy.detail})"
        return unbuildable_reason()  # a cubin built elsewhere, or nvcc and mlx5dv.h here

    @classmethod
    def queue_options(cls, params: Any, sq_depth: int) -> QueueOptions:
        q = layout.queue_kwargs(sq_depth)  # ConfigError for a depth NVSHMEM refuses
        # the scratch region: one ibuf slot pair per QP (attach_queues registers it)
        return QueueOptions(qp=q.qp, cq=q.cq, scratch_per_qp=2 * layout.IBUF_SLOT)

    @classmethod
    def preload(cls, params: Any, local_rank: int) -> None:
        import cupy as cp

        from .runtime import NvshmemDevice

        p = params if isinstance(params, NvshmemParams) else NvshmemParams()
        with rank_device(cp, local_rank, "nvshmem submitter"):
            NvshmemDevice(variant=p.variant).preload()
            smclock.measure(cp, ns=1000)

    @classmethod
    def check_provider(cls, params: Any, points: Sequence[tuple[str, Mapping[str, Any]]],
                       provider: str, caps: Any, provider_params: Any) -> None:  # fmt: skip
        queues = getattr(provider_params, "queues", "host")
        if params.nvshmem_build == "gpumem-only" and queues != "device":
            raise UnsupportedError(
                f"--submitter nvshmem --nvshmem-build gpumem-only with --provider {provider} "
                f"--queues {queues}: that build orders its WQEs and doorbells at GPU scope only, "
                "which a NIC reading host memory does not observe (use --queues device with "
                "--engine cuda, or --nvshmem-build wheel)"
            )
        if params.variant != "default":  # availability asked about the wheel's build only
            from .build import unbuildable_reason

            why = unbuildable_reason(variant=params.variant)
            if why is not None:
                raise UnsupportedError(f"--submitter nvshmem --nvshmem-build "
                                       f"{params.nvshmem_build}: {why}")  # fmt: skip

    @classmethod
    def check_points(cls, params: Any, points: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        b = params.nvshmem_batch
        if b & (b - 1):
            raise ConfigError("nvshmem_batch (--nvshmem-batch)", b, "a power of two")

        for exp, point in points:
            why = refusal(params, exp, point)
            if why is not None:
                raise UnsupportedError(f"{exp} with --submitter nvshmem: {why}")

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        import cupy as cp

        from .runtime import NvshmemDevice

        self.cp = cp
        self.device = rank_device(cp, self.rank, "nvshmem submitter")
        self.device.use()
        p: NvshmemParams = self.params
        self.path = p.nvshmem_path
        self.dev = NvshmemDevice(variant=p.variant, preloaded=True)
        self.qps: list[QueuePair] = []
        self.dm: DeviceMap | None = None
        self.ibuf: Any = None
        self.queues: RankQueues | None = None
        self.bases: Bases | None = None  # the GPU arrays' addresses (attach_peers)
        self.slot: dict[int, tuple[int, int]] = {}  # qpn -> (peer, slot)
        self.keys: tuple[int, tuple[int, ...]] | None = None  # (lkey, rkey per PE) installed
        self.checked: set[tuple[tuple[int, int], ...]] = set()  # CTA layouts checked
        self.sm_clock_hz = smclock.measure(cp)
        self.details: dict[str, Any] = {}

    # ---- bring-up ------------------------------------------------------------------------------
    def attach_queues(self, qps: Sequence[QueuePair]) -> None:
        if any(q.dci for q in qps):
            raise UnsupportedError("the nvshmem submitter drives RC QPs only (no DCIs)")
        self.qps = list(qps)
        # GPU-memory rings (CUDA engine, --queues device) on the launch stream, waited on alone:
        # the engine's kernel runs until its fabric closes (never synchronise the device)
        stream = self.dev.stream
        for q in self.qps:
            cq = q.sq.cq
            if cq.domain == MemoryDomain.DEVICE:
                self.cp.cuda.runtime.memsetAsync(int(cq.device_buf or cq.buf), layout.CQE_INIT,
                                                 cq.ncqe * CQE_BYTES, stream.ptr)  # fmt: skip
            else:
                host_view(cq.buf, cq.ncqe * CQE_BYTES)[:] = layout.CQE_INIT
        stream.synchronize()
        if self.qps:  # an idle rank of an odd pairs world has none (and no scratch region)
            self.ibuf = self.fabric.register(2 * layout.IBUF_SLOT * len(self.qps),
                                             Access.LOCAL_WRITE)  # fmt: skip
        self.dm = DeviceMap.of(self.fabric)

    def attach_peers(self, rc: Mapping[int, Sequence[QueuePair]], world: int) -> None:
        self.queues = RankQueues(self.rank, world, {p: list(v) for p, v in rc.items()}, self.ibuf)
        self.slot = {q.qpn: (p, s) for p, s, q in self.queues.ordered()}
        self.bases = self.dev.allocate(array_bytes(self.queues.rc_per_pe, world, world))

    def _install(self, lanes: Sequence[Lane]) -> None:
        """Both device states for these lanes' keys: the QP and CQ tables once, at the first
        call (their management variables hold NVSHMEM's indices from then on), the key tables
        again whenever a lane brings a key not installed yet."""
        if self.queues is None or self.dm is None or self.bases is None:
            raise FabricError("the nvshmem submitter needs attach_queues and attach_peers first")
        src = {ln.src.key for ln in lanes}
        if len(src) != 1:
            raise UnsupportedError(f"the lanes' sources use {len(src)} keys: NVSHMEM's one-chunk "
                                   "heap here holds one source key")  # fmt: skip
        lkey = src.pop()
        rk = list(self.keys[1]) if self.keys else [0] * self.queues.npes
        for ln in lanes:
            rk[ln.peer] = ln.dst.key
        keys = (lkey, tuple(rk))
        if keys == self.keys:
            return
        if self.keys is not None and lkey != self.keys[0]:
            raise UnsupportedError("the lanes' source key changed between calls")
        dm = self.dm
        # gicbench's regions are host memory mapped into the GPU (symmetric_heap_kind 1: a put
        # fences at system scope before it rings); the queues may be GPU memory.
        st = rank_states(self.queues, self.bases, sq_dev=lambda q: dm.sq(q.sq), cq_dev=dm.cq,
                         src_lkey=lkey, rkey_of_pe=keys[1],
                         requests_in_batch=self.params.nvshmem_batch,
                         nic_buf_on_gpumem=any(q.sq.domain == MemoryDomain.DEVICE
                                               for q in self.qps),
                         heap_in_sysmem=True)  # fmt: skip
        if self.keys is None:
            self.dev.write_arrays(st)
        self.dev.write_rkeys(rkeys_rest(keys[1]))
        self.dev.write_symbols(st)
        self.dev.states = st
        self.keys = keys

    # ---- helpers -------------------------------------------------------------------------------
    def _cta_of(self, lane: Lane) -> tuple[int, int]:
        """(peer, slot) of the lane's QP in NVSHMEM's table: its CTA is the slot (mod the
        QPs per peer)."""
        got = self.slot.get(lane.qp.qpn)
        if got is None or got[0] != lane.peer:
            raise FabricError(f"QP {lane.qp.qpn:#x} is not NVSHMEM's QP to PE {lane.peer} here")
        return got

    def _check_ctas(self, pes: Sequence[int], want: Sequence[int]) -> None:
        """NVSHMEM's own QP choice for CTA b and PE pes[b] is QP want[b] (pes[b] < 0: unused)."""
        layout_key = tuple(zip(pes, want, strict=True))
        if layout_key in self.checked:
            return
        cp = self.cp
        d_pes = cp.asarray(np.asarray(pes, np.int32))
        d_qpn = cp.zeros(len(pes), cp.uint32)
        self.dev.launch("gicbench_nvshmem_qp_of", len(pes), 32, (d_pes, d_qpn), timeout_s=10.0,
                        what="NVSHMEM's QP lookup", diagnose=lambda: "")  # fmt: skip
        got = cp.asnumpy(d_qpn).tolist()
        bad = [(b, p, w, g) for b, (p, w, g) in enumerate(zip(pes, want, got, strict=True))
               if p >= 0 and w != g]  # fmt: skip
        if bad:
            b, p, w, g = bad[0]
            raise FabricError(f"NVSHMEM picks QP {g:#x} for CTA {b} and PE {p}, not the lane's "
                              f"{w:#x} ({len(bad)} CTAs differ)")  # fmt: skip
        self.checked.add(layout_key)

    def _progress(self, lanes: Sequence[Lane]) -> tuple[int, ...] | None:
        """The lanes' QPs' producer and consumer indices (None: unreadable)."""
        st = self.dev.states
        if st is None:
            return None
        qps = list(dict.fromkeys(ln.qp.qpn for ln in lanes))
        mv = self.dev.read_mvars([st.index[q] for q in qps])
        if mv is None:
            return None
        return tuple(v for m in mv for v in (m["prod_idx"], m["cons_idx"]))

    def _diagnose(self, lanes: Sequence[Lane]) -> str:
        qps = list(dict.fromkeys(ln.qp for ln in lanes))
        return self.dev.describe(qps, [f"rank {self.rank}"] * len(qps),
                                 dict(self.fabric.counters()))  # fmt: skip

    def _launch(self, kernel: str, grid: int, block: int, args: tuple, lanes: Sequence[Lane],
                what: str) -> None:  # fmt: skip
        """One bounded launch with the fidelity counters checked around it."""
        before = engine_counters.snapshot(self.fabric)
        # NVSHMEM's polls have no bound: the launch gets the run's timeout and a margin, again
        # whenever the lanes' producer indices moved (a long healthy launch goes on)
        bound = self.timeout_ns / 1e9 + 10.0
        try:
            self.dev.launch(kernel, grid, block, args, timeout_s=bound, what=f"rank "
                            f"{self.rank}: {what} ({kernel})",
                            diagnose=lambda: self._diagnose(lanes),
                            progress=lambda: self._progress(lanes))  # fmt: skip
        except TimeoutError as e:
            raise CompletionTimeout(str(e)) from e
        self.details.update(engine_counters.call_details(
            before, engine_counters.snapshot(self.fabric), who=f"rank {self.rank}: nvshmem"))

    def _base_details(self) -> dict[str, Any]:
        h = self.dev.headers
        return {"nvshmem_path": self.path, "nvshmem_build": self.params.nvshmem_build,
                "nvshmem_batch": self.params.nvshmem_batch,
                "nvshmem_rc_per_pe": self.queues.rc_per_pe if self.queues else 0,
                "nvshmem_version": h.nvshmem_version, "nvshmem_wheel": h.wheel_version,
                "nvshmem_source": h.source}  # fmt: skip

    def _single(self, lane: Lane, op: str, mode: int, *, size: int, iters: int, quiet: int,
                watch: int, lanes: Sequence[Lane], what: str) -> np.ndarray:  # fmt: skip
        """One thread in the lane's CTA runs the single kernel; returns its samples."""
        assert self.dm is not None
        self._install(lanes)
        _, slot = self._cta_of(lane)
        self._check_ctas([-1] * slot + [lane.peer], [0] * slot + [lane.qp.qpn])
        job = np.zeros((), layout.SINGLE_JOB_DTYPE)
        src_dev = self.dm.local(lane.src.addr, "source buffer")
        for k, v in {"dst": lane.dst.addr, "src": lane.src.addr, "src_dev": src_dev,
                     "watch_dev": watch, "timeout_ns": self.timeout_ns, "size": size,
                     "iters": iters, "pe": lane.peer, "mode": mode, "quiet": quiet,
                     "cta": slot}.items():  # fmt: skip
            job[k] = v
        cp = self.cp
        d_job = cp.asarray(np.ascontiguousarray(job).reshape(1).view(np.uint8))
        d_out = cp.zeros(max(1, iters) * layout.SAMPLE_DTYPE.itemsize, cp.uint8)
        d_res = cp.zeros(layout.RESULT_DTYPE.itemsize, cp.uint8)
        self.details = self._base_details()
        self._launch(f"gicbench_nvshmem_single_{self.path}_{op}", slot + 1, 32,
                     (d_job, d_out, d_res, np.uint64(self.dev.abort_dev)), lanes, what)
        res = cp.asnumpy(d_res).view(layout.RESULT_DTYPE)[0]
        if int(res["status"]) == layout.STATUS_ABORTED:  # set by a launch that has raised
            raise FabricError(f"rank {self.rank}: {what}: aborted")
        if int(res["status"]) != layout.STATUS_OK:
            where = (f"rank {self.rank}, {what} (nvshmem {self.path}), QP {lane.qp.qpn:#x}: op "
                     f"{int(res['done'])} of {iters}")  # fmt: skip
            raise_failure(LoopFailure(TIMEOUT, where, message="no sequence word from the peer "
                                      f"(the word held {int(res['seen'])}, expected "
                                      f"{int(res['done']) + 1})"), what,
                          self.timeout_ns / 1e9)  # fmt: skip
        return cp.asnumpy(d_out).view(layout.SAMPLE_DTYPE)[:iters]

    # ---- loops ---------------------------------------------------------------------------------
    def latency(self, work: LatencyWork) -> np.ndarray:
        if work.mode not in LATENCY_MODES:
            raise ConfigError("modes (--modes)", work.mode, ", ".join(LATENCY_MODES))
        rtt = work.mode == "round_trip"
        lane = work.lanes[work.selected]
        watch = 0
        if rtt:
            if work.reply is None:
                raise ConfigError("reply", None, "the buffer a round trip's answer lands in")
            assert self.dm is not None
            watch = self.dm.local(work.reply.addr + work.size - 8, "reply buffer")
        quiet = layout.QUIET_ALL if work.scope_all else layout.QUIET_QP
        s = self._single(lane, op_for(work.inline, rtt), layout.MODE_RTT if rtt
                         else layout.MODE_LATENCY, size=work.size, iters=work.iters + work.warmup,
                         quiet=quiet, watch=watch, lanes=work.lanes,
                         what=f"single-op {work.mode}")  # fmt: skip
        hz = smclock.measure(self.cp)
        self.sm_clock_hz = hz
        col = "issue" if work.mode == "issue" else "complete"
        scope = "all" if work.scope_all else ("qp" if self.path == "internal" else "pe")
        issue_p50 = float(np.median(s["issue"][work.warmup :]))
        self.details.update(sm_clock_hz=hz, nvshmem_quiet=scope, issue_cycles_p50=issue_p50)
        return smclock.cycles_to_ns(s[col][work.warmup:].astype(np.int64), hz)

    def respond(self, work: RespondWork) -> None:
        """The far side of a round trip: wait for request n (its sequence word n + 1 in the last
        8 bytes of work.watch), answer with the requester's op (put-with-signal, or a p)."""
        assert self.dm is not None
        watch = self.dm.local(work.watch.addr + work.size - 8, "watched buffer")
        self._single(work.lane, op_for(work.inline, True), layout.MODE_RESPOND, size=work.size,
                     iters=work.count, quiet=layout.QUIET_ALL, watch=watch, lanes=[work.lane],
                     what="round-trip responder")  # fmt: skip

    def rate_lane_messages(self, nlanes: int, threads: int, batch: int, per_thread: int
                           ) -> list[int] | None:  # fmt: skip
        return even_lane_messages(nlanes, threads, per_thread)

    def _rate_grid(self, lanes: Sequence[Lane]) -> list[int]:
        """The lane each CTA drives (-1: none): lane l to its destination d (in the order the
        destinations first appear) in slot s sits in CTA d * QPs-per-peer + s."""
        assert self.queues is not None
        rc = self.queues.rc_per_pe
        dests = list(dict.fromkeys(ln.peer for ln in lanes))
        grid = [-1] * (len(dests) * rc)
        for i, ln in enumerate(lanes):
            _, s = self._cta_of(ln)
            b = dests.index(ln.peer) * rc + s
            if grid[b] >= 0:
                raise FabricError(f"lanes {grid[b]} and {i} ride the same QP {ln.qp.qpn:#x}")
            grid[b] = i
        return grid

    def rate(self, work: RateWork) -> RateResult:
        L, T = len(work.lanes), work.threads
        if T % L or not 1 <= T // L <= MAX_BLOCK:
            raise ConfigError("threads (-t)", T, f"a multiple of the {L} lanes, at most "
                              f"{MAX_BLOCK * L} (one CTA of <= {MAX_BLOCK} threads per lane)")
        block = T // L
        self._install(work.lanes)
        grid = self._rate_grid(work.lanes)
        self._check_ctas([work.lanes[i].peer if i >= 0 else -1 for i in grid],
                         [work.lanes[i].qp.qpn if i >= 0 else 0 for i in grid])  # fmt: skip
        op = op_for(work.inline, round_trip=False)
        slots = max(1, work.lanes[0].dst.length // work.size)
        cp = self.cp
        keep, copies = stage(cp, [ln.src for ln in work.lanes]) if work.inline else (None, [])
        table = np.zeros(len(grid), layout.RATE_LANE_DTYPE)
        table["pe"] = -1
        for b, i in enumerate(grid):
            if i >= 0:
                ln = work.lanes[i]
                table[b]["dst"], table[b]["src"], table[b]["pe"] = ln.dst.addr, ln.src.addr, ln.peer
                table[b]["src_dev"] = copies[i] if copies else 0
        d_lanes = cp.asarray(table.view(np.uint8))
        M, W, win = work.messages_per_thread, work.warmup_per_thread, max(1, work.window)
        max_windows = M // win + 1
        threads_total = len(grid) * block
        d_res = cp.zeros(threads_total * layout.RATE_RESULT_DTYPE.itemsize, cp.uint8)
        d_marks = cp.zeros(threads_total * max_windows, cp.uint64)
        kernel = f"gicbench_nvshmem_rate_{self.path}_{op}"
        self.details = self._base_details()

        def job(per: int, first: int, window: int) -> Any:
            j = np.zeros((), layout.RATE_JOB_DTYPE)
            for k, v in {"size": work.size, "per_thread": per, "first": first, "slots": slots,
                         "window": window, "max_windows": max_windows,
                         "quiet": layout.QUIET_QP}.items():  # fmt: skip
                j[k] = v
            return cp.asarray(np.ascontiguousarray(j).reshape(1).view(np.uint8))

        abort = np.uint64(self.dev.abort_dev)
        if W:
            self._launch(kernel, len(grid), block, (job(W, 0, 0), d_lanes, d_res, d_marks,
                                                    abort), work.lanes, "msg-rate warm-up")
        self._launch(kernel, len(grid), block, (job(M, W, win), d_lanes, d_res, d_marks, abort),
                     work.lanes, "msg-rate")  # fmt: skip
        counts = {k: self.details.get(k, 0) for k in ("doorbells", "cqes")}
        del keep
        res = cp.asnumpy(d_res).view(layout.RATE_RESULT_DTYPE).reshape(len(grid), block)
        used = [b for b, i in enumerate(grid) if i >= 0]
        short = int((res[used]["posted"] != M).sum())
        if short:  # only an abort ends a thread early, and that launch has raised
            raise FabricError(f"rank {self.rank}: msg-rate: {short} threads posted fewer than "
                              f"{M} messages")  # fmt: skip
        marks = cp.asnumpy(d_marks).reshape(len(grid), block, max_windows)
        windows: list[int] = []
        for b in used:
            for t in range(block):
                m = [int(v) for v in marks[b, t] if v]
                edges = [0, *m[: M // win]]
                total = int(res[b, t]["end_ns"]) - int(res[b, t]["start_ns"])
                if total > edges[-1]:
                    edges.append(total)  # the last window ends with the drain
                windows.extend(np.diff(edges).tolist())
        r = res[used]
        elapsed = int(r["end_ns"].max()) - int(r["start_ns"].min())
        self.details.update(ctas=float(len(used)), block=float(block),
                            sm_clock_hz=self.sm_clock_hz)  # fmt: skip
        return RateResult(windows_ns=np.asarray(windows, dtype=np.int64), elapsed_ns=elapsed,
                          messages=M * T, doorbells=int(counts["doorbells"]),
                          cqes=int(counts["cqes"]))  # fmt: skip

    def point_details(self) -> dict[str, Any]:
        return dict(self.details)
