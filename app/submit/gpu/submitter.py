"""The GPU submitter (mini-gda): GPU threads build WQEs, publish doorbell records, ring doorbells
and poll CQs through device addresses (the paper, arXiv 2610.01380, §3-4).

Python stages the work (the lane table, per-QP producer state kept in GPU memory across calls, a
device copy of the source bytes inline payloads are read from), launches one kernel per call and
waits for it without blocking signals: a signal sets a host-mapped abort word the kernel polls,
so it ends within a few microseconds. Every kernel wait has a deadline (globaltimer); a failure is
reported through the status words as CompletionTimeout / CompletionError / LoopInterrupted.
With `--doorbell host` a native thread rings for the kernels while each call runs (forward.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ConfigError, FabricError
from ...fabric.base import Posting, host_view
from ...fabric.registry import QueueOptions
from ...mlx5 import write_wqebbs
from ...platform import Probe
from ..base import Shape, Submitter, register
from ..gpu_runtime import clock_lock, smclock
from ..gpu_runtime.abort import abort_page
from ..gpu_runtime.device import rank_device
from ..gpu_runtime.device_map import DeviceMap, stage
from ..work import (
    MODE_CODES,
    Buffer,
    CycleWork,
    DispatchResult,
    DispatchWork,
    KernelCostResult,
    KernelCostWork,
    Lane,
    LatencyWork,
    LoadedResult,
    LoadedWork,
    RateResult,
    RateWork,
    RespondWork,
    cycle_lane_writes,
    own_qp_lanes,
    refuse_dci_pairs,
)
from . import build, lanes, status
from .forward import Forwarder
from .params import CQ_POLLS, DOORBELLS, ORDERINGS, PUBLISH_CODES, UNSAFE_ORDERINGS, GpuParams

MAX_QP_STATES = 32768  # emu's QP table holds 32,766 a rank
STATE_WORDS = 16  # uint32 words of cuda/gda/queue.cuh QpState (one 64-byte row)
MAX_DS = 63  # segments of one WQE (ds is 6 bits)
BLOCK = 128  # msg-rate threads per block (whole warps)
QUIET_BLOCK = 32  # single-op with --scope all and --cq-poll expected: lanes 1..31 quiet the rest


def _refuse_warp_units(params: Any) -> None:
    if getattr(params, "publish", None) == "warp":
        raise ConfigError("publish (--publish)", "warp",
                          "thread or lock for active-connections (a unit is one thread)")


@register
class GpuSubmitter(Submitter):
    name = "gpu"
    summary = "mini-gda: GPU threads build WQEs, ring doorbells and poll CQs (CUDA kernels)"
    shapes = frozenset(
        {Shape.LATENCY, Shape.RESPOND, Shape.RATE, Shape.LOADED, Shape.CLOCK, Shape.CYCLE,
         Shape.DISPATCH, Shape.KERNEL_COST}
    )  # fmt: skip
    posting = (Posting.MLX5_QUEUES.value,)
    needs_gpu = True
    cpu_progress = False
    threads_share_lanes = True  # msg-rate: more threads than QPs share them (publication modes)
    Params = GpuParams

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        cupy = probes["cupy"]
        if not cupy.ok:
            return f"the GPU submitter (mini-gda) needs an NVIDIA GPU and CuPy ({cupy.detail})"
        return None

    @classmethod
    def check_points(cls, params: Any, points: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """active-connections: a thread per unit, on its own QPs (what cycle refuses)."""
        for exp, pt in points:
            if exp != "active-connections":
                continue
            refuse_dci_pairs(pt.get("transport"), cls.name)
            _refuse_warp_units(params)
            if int(pt.get("pool", 0)) > MAX_QP_STATES:
                raise ConfigError("pool (--pool)", pt["pool"],
                                  f"<= {MAX_QP_STATES} QPs per rank with --submitter gpu")

    @classmethod
    def check_provider(
        cls,
        params: GpuParams,
        points: Sequence[tuple[str, Mapping[str, Any]]],
        provider: str,
        caps: Any,
        provider_params: Any,
    ) -> None:
        """Pre-flight (app/plan.py, before anything exists): refuse what these knobs cannot do on
        this provider. --doorbell host needs the doorbell record and doorbell in host memory: a
        host thread stores them (emu --queues device puts them in GPU memory)."""
        if params.doorbell == "host" and getattr(provider_params, "queues", "host") == "device":
            raise ConfigError(
                "doorbell (--doorbell)",
                params.doorbell,
                "gpu with --queues device (the host thread that forwards the doorbell stores the "
                "record and the doorbell, which --queues device keeps in GPU memory; use --queues "
                "host for --doorbell host)",
            )

    @classmethod
    def dispatch_backends(
        cls, params: Any, provider: str, provider_params: Any
    ) -> dict[str, str | None]:
        """Every backend but what the provider cannot serve: free-flow's host thread needs the
        queues in host memory, the GPI backends emu's CPU engine (app/submit/gpu/dispatch.py)."""
        from .dispatch import refusals

        return refusals(provider, provider_params)

    @classmethod
    def kernel_cost_refusal(cls, params: Any) -> str | None:
        """kernel-cost's caller rings from the GPU: the host-forwarded doorbell is not built."""
        if getattr(params, "doorbell", "gpu") == "host":
            return "kernel-cost rings from the GPU: use --doorbell gpu (the default)"
        return None

    @classmethod
    def loaded_lanes(cls, params: Any, background: int) -> int:
        from .loaded import lanes_needed

        return lanes_needed(background)

    @classmethod
    def check_loaded(
        cls,
        params: Any,
        *,
        queues: Sequence[str],
        background: int,
        batch: int,
        max_size: int,
        sq_depth: int,
    ) -> None:
        """mini-gda's limits: a warp builds a background batch, and a batch and the probe's
        WQE fit one SQ."""
        from .loaded import MAX_BATCH

        if batch > MAX_BATCH:
            raise ConfigError("batch (--batch)", batch, f"1..{MAX_BATCH} with --submitter gpu")
        bbs = write_wqebbs(True, max_size, False)
        if (batch + 1) * bbs > sq_depth:
            raise ConfigError(
                "batch (--batch)",
                batch,
                f"<= {sq_depth // bbs - 1}: a batch and the probe of {bbs} WQEBBs each "
                f"fit the SQ (--sq-depth {sq_depth})",
            )

    @classmethod
    def preload(cls, params: Any, local_rank: int) -> None:
        """Compile and load every kernel mini-gda launches on this rank's GPU before the NIC
        opens (see Submitter.preload): the ordering's module, loaded-rtt's, the SM clock's and
        the CuPy reduction the rate loop sums its counts with."""
        import cupy as cp

        from . import loaded

        p = params if isinstance(params, GpuParams) else GpuParams()
        with rank_device(cp, local_rank, "GPU submitter"):
            k = build.kernels(p.ordering, p.cq_poll)
            loaded.kernels(p.ordering)
            stream = cp.cuda.Stream(non_blocking=True)
            with stream:
                int(cp.zeros((2, 5), dtype=cp.int64)[:, 3].sum())
                smclock.measure(cp, k["gda_clock"], ns=1000)

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        import cupy as cp

        self.cp = cp
        self.device = rank_device(cp, self.rank, "GPU submitter")
        self.device.use()
        self.ordering = self.params.ordering
        if self.ordering not in ORDERINGS:
            raise ConfigError("ordering (--ordering)", self.ordering, " | ".join(ORDERINGS))
        if self.params.doorbell not in DOORBELLS:
            raise ConfigError("doorbell (--doorbell)", self.params.doorbell, " | ".join(DOORBELLS))
        if self.params.cq_poll not in CQ_POLLS:
            raise ConfigError("cq_poll (--cq-poll)", self.params.cq_poll, " | ".join(CQ_POLLS))
        self.k = build.kernels(self.ordering, self.params.cq_poll)
        host_db = self.params.doorbell == "host"
        self.fwd = Forwarder(cp, self.rank, self.timeout_ns / 1e9) if host_db else None
        self.dm = DeviceMap.of(self.fabric)
        self.states = cp.zeros((MAX_QP_STATES, STATE_WORDS), dtype=cp.uint32)
        self.slots: dict[int, int] = {}  # qpn -> QpState row
        self.status = cp.zeros(status.WORDS, dtype=cp.uint64)
        self._abort_host, self._abort_dev = abort_page(cp, self.device.id)
        self._abort = host_view(self._abort_host, 4096, np.uint32)
        self._abort[:] = 0
        self.stale_seen = 0
        self.host_rings = 0  # doorbells the host thread rang in the last call (--doorbell host)
        self._call: tuple[Any, int] = (None, 0)
        self.details: dict[str, float] = {"sm_clock_hz": float("nan")}
        self.sm_clock_hz = self.measure_clock()

    # ---- shared helpers --------------------------------------------------------------------
    def measure_clock(self, ns: int = 2_000_000) -> float:
        """The effective SM clock: clock64 cycles over globaltimer ns of one spinning thread."""
        return smclock.measure(self.cp, self.k["gda_clock"], ns)

    def _slot(self, qpn: int) -> tuple[int, bool]:
        if qpn in self.slots:
            return self.slots[qpn], False
        if len(self.slots) >= MAX_QP_STATES:
            raise ConfigError("qps", len(self.slots) + 1, f"<= {MAX_QP_STATES} QPs per rank (GPU)")
        self.slots[qpn] = len(self.slots)
        return self.slots[qpn], True

    def _stage(self, bufs: list[Buffer]) -> tuple[Any, list[int]]:
        """Device copies of source slices (inline payloads are read from GPU memory)."""
        return stage(self.cp, bufs)

    def _prepare(
        self, work_lanes: tuple, bbs: int, src_dev: list[int], wqes: list[int], inflight: int
    ) -> Any:
        """The lane table of a call, its QPs attached; `inflight`: the most CQEs one QP can owe
        in the call (how far the CQ record may lag: lanes.cq_slack)."""
        rows, attach, slack = [], [], []
        for lane, src, n in zip(work_lanes, src_dev, wqes, strict=True):
            slot, fresh = self._slot(lane.qp.qpn)
            ready = self.fwd.ready(lane.qp) if self.fwd is not None else 0
            rows.append(lanes.lane_row(self.dm, lane, slot, src, n, ready))
            attach.append(1 if fresh else 0)
            slack.append(lanes.cq_slack(lane.qp.sq.cq.ncqe, inflight))
        tab = self.cp.asarray(lanes.table(rows))
        att = self.cp.asarray(np.array(attach, dtype=np.uint8))
        n = len(rows)
        # scan: the record at every reap, as the first mini-gda
        cq_slack = min(slack) if self.params.cq_poll == "expected" else 0
        self.k["gda_prepare"](
            ((n + 127) // 128,),
            (128,),
            (tab, np.int32(n), self.states, att, np.uint32(bbs), np.uint32(cq_slack)),
        )
        self._call = (tab, n)
        return tab

    def _run(
        self,
        fn: str,
        grid: tuple,
        block: tuple,
        args: tuple,
        what: str,
        total: int,
        expect: list[tuple[int, int]] | None = None,
    ) -> None:
        """Launch and wait; a signal (an exception raised by the harness' handler while we
        sleep) sets the abort word, lets the kernel stop, and propagates. `expect`: (qpn,
        WQEBBs) each QP is marked up to (--doorbell host: the host thread runs meanwhile)."""
        self.status.fill(0)
        self._abort[0] = 0
        fwd = self.fwd.call(expect or []) if self.fwd is not None else contextlib.nullcontext()
        rings = self.fwd.rings() if self.fwd is not None else 0
        with fwd:
            self.k[fn](grid, block, args)
            ev = self.cp.cuda.Event()
            ev.record()
            try:
                while not ev.done:
                    time.sleep(20e-6)
            except BaseException:
                self._abort[0] = 1
                ev.synchronize()
                raise
            finally:
                tab, n = self._call
                self.k["gda_finish"](((n + 127) // 128,), (128,), (tab, np.int32(n), self.states))
        self.host_rings = self.fwd.rings() - rings if self.fwd is not None else 0
        st = self.status.get()
        status.raise_for(st, self.rank, what, self.timeout_ns / 1e9, total)
        self._check_stale()

    def _check_stale(self) -> None:
        """With the unsafe ordering a stale WQE (doorbell ahead of the WQE stores) is what is
        measured: the engine re-serves it; count it here, raise anything else."""
        if self.ordering not in UNSAFE_ORDERINGS or not hasattr(self.fabric, "errors"):
            return
        recs = self.fabric.errors()
        other = [r for r in recs if r.kind != "stale_wqe"]
        self.stale_seen += len(recs) - len(other)
        if other:
            raise FabricError("; ".join(str(r) for r in other[:8]))

    @staticmethod
    def _bbs(inline: bool, size: int, dc: bool) -> int:
        """WQEBBs of one write (DC with the full 48-byte AV), refused past 63 segments."""
        ds = 2 + (-(-(size + 4) // 16) if inline else 1) + (3 if dc else 0)
        if ds > MAX_DS:
            raise ConfigError("size", size, "a payload that fits one WQE of 63 segments")
        return write_wqebbs(inline, size, dc)

    # ---- loops -------------------------------------------------------------------------------
    def latency(self, work: LatencyWork) -> np.ndarray:
        sel = work.lanes[work.selected]
        if work.size < 8:
            raise ConfigError("size", work.size, ">= 8 (the sequence word)")
        bbs = self._bbs(work.inline, work.size, sel.dc is not None)
        keep, staged = self._stage([sel.src]) if work.inline else (None, [])
        src_dev = staged[0] if work.inline else self.dm.local(sel.src.addr, "source buffer")
        srcs = [0] * len(work.lanes)
        srcs[work.selected] = src_dev
        tab = self._prepare(work.lanes, bbs, srcs, [0] * len(work.lanes), 1)
        reply = work.reply if work.reply is not None else sel.src
        reply_dev = self.dm.local(reply.addr, "reply buffer") if work.mode == "round_trip" else 0
        samples = self.cp.zeros(work.iters, dtype=self.cp.int64)
        cycles = self.cp.zeros(work.iters, dtype=self.cp.int64)
        args = (
            tab, np.int32(len(work.lanes)), self.states, np.int32(work.selected),
            np.int32(MODE_CODES[work.mode]), np.uint32(work.size), np.int32(work.inline),
            np.int32(work.scope_all), np.uint64(src_dev), np.uint64(reply_dev),
            np.uint32(work.iters), np.uint32(work.warmup), np.uint64(self.timeout_ns),
            samples, cycles, self.status, np.uint64(self._abort_dev),
        )  # fmt: skip
        quiet = work.scope_all and work.mode == "put_completion" and len(work.lanes) > 1
        block = QUIET_BLOCK if quiet and self.params.cq_poll == "expected" else 1
        n_ops = work.iters + work.warmup
        self._run("gda_single_op", (1,), (block,), args, f"single-op {work.mode}", n_ops,
                  [(sel.qp.qpn, n_ops * bbs)])  # fmt: skip
        del keep
        ns = samples.get()
        cyc = cycles.get()
        total_ns = int(ns.sum())
        self.details = {
            "sm_clock_hz": float(cyc.sum()) / total_ns * 1e9 if total_ns > 0 else float("nan"),
            "issue_cycles_p50": float(np.median(cyc)) if cyc.size else float("nan"),
            **self._doorbell_details(),
        }
        return ns

    def respond(self, work: RespondWork) -> None:
        lane = work.lane
        bbs = self._bbs(work.inline, work.size, lane.dc is not None)
        keep, staged = self._stage([lane.src]) if work.inline else (None, [])
        src_dev = staged[0] if work.inline else self.dm.local(lane.src.addr, "source buffer")
        tab = self._prepare((lane,), bbs, [src_dev], [0], 1)
        watch = self.dm.local(work.watch.addr, "watched buffer")
        args = (
            tab, self.states, np.uint32(work.size), np.int32(work.inline), np.uint64(src_dev),
            np.uint64(watch), np.uint32(work.count), np.uint64(self.timeout_ns), self.status,
            np.uint64(self._abort_dev),
        )  # fmt: skip
        self._run("gda_respond", (1,), (1,), args, "round-trip responder", work.count,
                  [(lane.qp.qpn, work.count * bbs)])  # fmt: skip
        del keep
        self.details = self._doorbell_details()

    def rate_lane_messages(
        self, nlanes: int, threads: int, batch: int, per_thread: int
    ) -> list[int] | None:
        return lanes.lane_messages(nlanes, threads, self.params.publish, batch, per_thread)

    def rate(self, work: RateWork) -> RateResult:
        total = work.messages_per_thread + work.warmup_per_thread
        per_lane = lanes.lane_messages(len(work.lanes), work.threads, self.params.publish,
                                       work.batch, total)  # fmt: skip
        return self._msg_rate(work.lanes, work.threads, work.batch, 0, work.size, work.inline,
                              work.messages_per_thread, work.warmup_per_thread, work.window,
                              per_lane, "msg-rate")  # fmt: skip

    def cycle(self, work: CycleWork) -> RateResult:
        """Active connections through gda_msg_rate: a thread per unit, unit u on lanes u, u+U,
        ... (its QPs: CycleWork's rule), W writes a visit in chains of the batch, then its next
        lane; with --doorbell host the host thread rings every lane (the paper's configuration
        for the connection sweep)."""
        qpns = own_qp_lanes(work.lanes, self.name)
        _refuse_warp_units(self.params)
        per_lane = cycle_lane_writes(qpns, work.units, work.writes_per_visit,
                                     work.visits + work.warmup_visits)  # fmt: skip
        W = work.writes_per_visit
        return self._msg_rate(work.lanes, work.units, work.batch, W, work.size, work.inline,
                              work.visits * W, work.warmup_visits * W, work.window, per_lane,
                              "active-connections cycle")  # fmt: skip

    def _msg_rate(
        self,
        work_lanes: tuple[Lane, ...],
        threads: int,
        batch: int,
        writes_per_visit: int,
        size: int,
        inline: bool,
        per_thread: int,
        warmup_per_thread: int,
        window: int,
        per_lane: list[int],
        what: str,
    ) -> RateResult:
        """One gda_msg_rate call: `threads` threads (units by --publish) over `work_lanes`,
        lane i carrying per_lane[i] writes; a visit is a batch (writes_per_visit 0) or W
        writes."""
        publish = self.params.publish
        dc = any(lane.dc is not None for lane in work_lanes)
        bbs = self._bbs(inline, size, dc)
        L = len(work_lanes)
        depth = min(lane.qp.sq.wqebb_cnt for lane in work_lanes)
        ncqe = min(lane.qp.sq.cq.ncqe for lane in work_lanes)
        if batch * bbs > depth:
            raise ConfigError(
                "batch", batch, f"<= {depth // bbs} WQEs of {bbs} WQEBBs (SQ of {depth})"
            )
        se = lanes.signal_every(depth, bbs, batch)
        max_wqes = depth // bbs
        inflight = lanes.max_inflight_cqes(depth, bbs, se)
        if inflight > ncqe:
            raise ConfigError("lanes", ncqe, f"CQs of at least {-(-max_wqes // se) + 1} entries")
        total = per_thread + warmup_per_thread
        keep, staged = self._stage([lane.src for lane in work_lanes]) if inline else (None, [])
        srcs = staged if inline else [0] * L
        tab = self._prepare(work_lanes, bbs, srcs, per_lane, inflight)
        nunits = len(lanes.units(threads, publish))
        max_windows = per_thread // window + 3
        unit_out = self.cp.zeros((nunits, 5), dtype=self.cp.int64)
        windows = self.cp.zeros((nunits, max_windows), dtype=self.cp.int64)
        block = min(BLOCK, -(-threads // 32) * 32)
        grid = -(-threads // block)
        args = (
            tab, np.int32(L), self.states, np.uint32(threads),
            np.int32(PUBLISH_CODES[publish]), np.uint32(batch), np.uint64(writes_per_visit),
            np.uint32(size), np.int32(inline), np.uint64(per_thread),
            np.uint64(warmup_per_thread), np.uint64(window), np.uint32(se),
            np.uint64(self.timeout_ns), unit_out, windows, np.uint32(max_windows),
            self.status, np.uint64(self._abort_dev),
        )  # fmt: skip
        expect = [(lane.qp.qpn, n * bbs) for lane, n in zip(work_lanes, per_lane, strict=True)]
        self._run("gda_msg_rate", (grid,), (block,), args, what, total * threads, expect)
        del keep
        out = unit_out.get()
        win = windows.get()
        wins = np.concatenate([win[u, : int(out[u, 4])] for u in range(nunits)])
        # first unit's first timed post to the last unit's last completion (globaltimer)
        elapsed = int(out[:, 1].max() - out[:, 0].min())
        self.details = {
            "signal_every": float(se),
            "units": float(nunits),
            **self._doorbell_details(),
        }
        return RateResult(
            windows_ns=wins.astype(np.int64),
            elapsed_ns=elapsed,
            messages=per_thread * threads,
            doorbells=self.host_rings if self.fwd is not None else int(out[:, 2].sum()),
            cqes=int(out[:, 3].sum()),
        )

    def loaded(self, work: LoadedWork) -> LoadedResult:
        """loaded-rtt's probe under background load (app/submit/gpu/loaded.py)."""
        from .loaded import run

        return run(self, work)

    # The count signals' old values land in a region of 8 bytes a QP (dispatch's masked
    # fetch-adds): asked for here so the provider sizes its tables and segment for it.
    FETCH_BYTES_PER_QP = 8

    @classmethod
    def queue_options(cls, params: GpuParams, sq_depth: int) -> QueueOptions:
        from .dispatch import GPI_DEPTH, GPI_WINDOWS  # the GPI backends' one queue a rank

        return QueueOptions(scratch_per_qp=cls.FETCH_BYTES_PER_QP,
                            gpis=((GPI_DEPTH, 1, GPI_WINDOWS),))  # fmt: skip

    def attach_queues(self, qps: Sequence[Any]) -> None:
        self.attached_qps = len(qps)

    def dispatch(self, work: DispatchWork) -> DispatchResult:
        """MoE token dispatch, one of four backends (app/submit/gpu/dispatch.py)."""
        from .dispatch import run

        return run(self, work)

    def kernel_cost(self, work: KernelCostWork) -> KernelCostResult:
        """Caller kernels with mini-gda's call built in (app/submit/gpu/kernel_cost.py)."""
        from .kernel_cost import run

        return run(self, work)

    @contextlib.contextmanager
    def locked_clock(self, mhz: int) -> Iterator[float]:
        with clock_lock.locked(self.device.pci_bus_id, mhz):
            measured = self.measure_clock()
            clock_lock.check_measured(mhz, measured)
            yield measured

    def _doorbell_details(self) -> dict[str, float]:
        """--doorbell host: the doorbells the host thread rang in the call (the GPU rang none)."""
        return {"host_doorbells": float(self.host_rings)} if self.fwd is not None else {}

    def point_details(self) -> dict[str, float]:
        """What the last call measured besides its samples (the harness adds it to the point's
        results): the effective SM clock, stale WQEs seen with the unsafe ordering."""
        d = dict(self.details)
        d["stale_wqes_seen"] = float(self.stale_seen)
        return d

    def close(self) -> None:
        if getattr(self, "fwd", None) is not None:
            self.fwd.close()
        if getattr(self, "_abort_host", 0):
            # Our kernels run on the current stream; the page itself stays (see _abort_page).
            self.cp.cuda.get_current_stream().synchronize()
            self._abort[:] = 0
            self._abort_host = 0
