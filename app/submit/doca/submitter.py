"""--submitter doca: NVIDIA's DOCA GPUNetIO device verbs (GDAKI, what NVSHMEM and NCCL's GIN
post with) on gicbench's queues, over mini-gda's harness pieces (device address map, SM clock).

Bring-up creates every RC QP and send CQ as DOCA needs them (`queue_options`: layout.queue_kwargs
for the handler and CQ type, plus host-mapped proxy words for the host-thread handlers);
`attach_queues` initialises the CQ rings (layout.init_cq), maps the queues into the GPU, builds one
DOCA QP structure per QP in GPU memory (kept across calls: DOCA's indices live there) and, for
cpu-proxy / cpu-proxy-free-flow, the HostRinger that rings for the GPU (started around each
launch). A call gathers its lanes' QP structures into a launch array and scatters them back.

single-op / completion-scope: the latency kernels (one issuing unit on lane 0, an all-QP quiet
walks the other lanes' QPs), clock64 cycles converted to ns with the SM clock measured at each
call. msg-rate: the rate kernels, windows from globaltimer marks. Payloads follow the experiments'
expected_landing (single-op: the sequence word, msg-rate: slots of the lane slice), so the harness
validates every point. Every call checks the engine's stale_wqes, dbrec_lag and bad_doorbells
deltas are zero and records them with the handler, sharing, scope, CQ type and header versions.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import CompletionTimeout, ConfigError, FabricError, UnsupportedError
from ...fabric.base import Access, MemoryDomain, Posting, QueuePair
from ...fabric.registry import QueueOptions
from ...platform import Probe
from ..base import Shape, Submitter, register
from ..failures import CQE_ERROR, TIMEOUT, LoopFailure, raise_failure
from ..gpu_runtime import engine_counters, smclock
from ..gpu_runtime.device import MAX_BLOCK, rank_device
from ..gpu_runtime.device_map import DeviceMap, stage
from ..work import (
    LATENCY_MODES,
    KernelCostResult,
    KernelCostWork,
    Lane,
    LatencyWork,
    RateResult,
    RateWork,
    RespondWork,
    even_lane_messages,
)
from .layout import (
    ENOSEQ,
    LANE_DTYPE,
    MODE_LATENCY,
    MODE_RESPOND,
    MODE_RTT,
    QP_BYTES,
    SEQ,
    STATUS,
    VALUE_FROM_SRC,
    NicHandler,
    Op,
    Scope,
    Sharing,
    be32,
    init_cq,
    job_record,
    proxy_bytes,
    queue_kwargs,
    queue_record,
    supported,
)
from .params import EARLY_RING_HANDLERS, DocaParams

BF_MAX_BLOCK = 512  # gpu-sm-bf thread scope: 64 B of shared memory per thread (<= 32 KB a block)


def max_block(handler: NicHandler, scope: Scope) -> int:
    """Threads per block a launch may have (BlueFlame stages each thread's WQE in shared memory)."""
    bf = NicHandler(handler) == NicHandler.GPU_SM_BF and Scope(scope) == Scope.THREAD
    return BF_MAX_BLOCK if bf else MAX_BLOCK


def op_for(payload: str, size: int) -> Op:
    """gicbench's write as a DOCA op: inline -> p (one 8-byte inline value), pointer -> put."""
    return Op.P if payload == "inline" else Op.PUT


def refusal(params: DocaParams, exp: str, point: Mapping[str, Any]) -> str | None:
    """Why `point` of `exp` cannot run with these knobs, else None (pre-flight)."""
    if exp == "kernel-cost":  # its own call: DOCA's put from one thread (kernel_cost.py)
        from .kernel_cost import point_refusal

        return point_refusal(params, point)
    h, e = params.nic_handler, params.exec_scope
    if point.get("transport", "rc") != "rc":
        return "transport (--transport) dc: DOCA's one-sided verbs build no DC address vector (rc)"
    payload, size = point.get("payload", "pointer"), int(point["size"])
    op = op_for(payload, size)
    if op == Op.P and size != 8:
        return (
            f"-b/-e {size} with --payload inline: DOCA's inline write "
            "(doca_gpu_dev_verbs_p) carries one 8-byte value (use -b 8, or --payload pointer)"
        )
    if op == Op.PUT and size < 8 and exp != "msg-rate":
        return f"-b {size}: single-op's sequence word needs >= 8 bytes"
    if not supported(h, e, op):
        why = (
            "DOCA's warp-scope p is a stub that posts nothing"
            if e == Scope.WARP
            else f"{h.cli} is rung for put and p only"
        )
        return (
            f"--payload {payload} with --doca-handler {h.cli} --doca-scope {e.name.lower()}: {why}"
        )
    if exp == "msg-rate":
        if int(point["batch"]) != 1:
            return (
                f"--batch {point['batch']}: DOCA rings once per op (per 32 in warp scope); "
                "use --batch 1"
            )
        t, q = int(point["threads"]), int(point["qps"])
        per_unit = 32 if e == Scope.WARP else 1
        if t % (q * per_unit):
            return (
                f"-t {t} over -q {q} QPs: a multiple of {q * per_unit} (the same number of "
                f"{'warps' if per_unit > 1 else 'threads'} on every QP)"
            )
        if params.sharing_mode == Sharing.EXCLUSIVE and t // q != per_unit:
            unit = "warp" if per_unit > 1 else "thread"
            return f"-t {t} with --doca-sharing exclusive: one {unit} per QP (-t {q * per_unit})"
        cap = max_block(h, e)
        if params.sharing_mode == Sharing.CTA and t // q > cap:
            return f"-t {t} with --doca-sharing cta: one block per QP, <= {cap} threads each"
    return None


def queues_refusal(params: DocaParams, queues: str) -> str | None:
    """Why these knobs cannot run on queues placed at `queues` ("host" or "device"), else None.
    The host-thread handlers (cpu-proxy, cpu-proxy-free-flow) store the SQ's doorbell record and
    ring its doorbell register from a CPU thread: both must be host-visible, and with --queues
    device they are GPU memory (cudaMalloc), which a CPU store cannot reach. The GPU_SM_*
    handlers ring from the GPU and run on either placement."""
    h = params.nic_handler
    if queues == "device" and h.host_thread:
        return (
            f"--doca-handler {h.cli} with --queues device: its host thread stores the doorbell "
            "record and rings the doorbell register, which --queues device puts in GPU memory "
            "(a CPU store cannot reach it); use --queues host (either engine) or a gpu-sm-* "
            "handler"
        )
    return None


@register
class DocaSubmitter(Submitter):
    name = "doca"
    summary = (
        "DOCA GPUNetIO device verbs (GDAKI: NVSHMEM/NCCL GIN's GPU-initiated path) on "
        "gicbench's queues; every NIC handler"
    )
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND, Shape.RATE, Shape.KERNEL_COST})
    posting = (Posting.MLX5_QUEUES.value,)
    needs_gpu = True
    cpu_progress = False
    threads_share_lanes = True
    Params = DocaParams

    @classmethod
    def kernel_cost_refusal(cls, params: Any) -> str | None:
        from .kernel_cost import refusal as kernel_cost_refusal

        return kernel_cost_refusal(params)

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        from .build import nvcc
        from .headers import find, unavailable_reason

        if find() is None:
            return unavailable_reason()
        if nvcc() is None:
            return "the doca submitter compiles its kernels with nvcc at run time: nvcc not found"
        cupy = probes["cupy"]
        if not cupy.ok:
            return f"the doca submitter needs an NVIDIA GPU and CuPy ({cupy.detail})"
        return None

    @classmethod
    def queue_options(cls, params: Any, sq_depth: int) -> QueueOptions:
        p = params if isinstance(params, DocaParams) else DocaParams()
        q = queue_kwargs(p.nic_handler, p.cq_type, sq_depth)
        return QueueOptions(qp=q.qp, cq=q.cq, scratch_per_qp=proxy_bytes(p.nic_handler, sq_depth))

    @classmethod
    def preload(cls, params: Any, local_rank: int) -> None:
        """Compile and load every kernel on this rank's GPU before the NIC opens (see
        Submitter.preload): the DOCA module, the CuPy kernels of the loops, the SM clock's."""
        import cupy as cp

        from .device import DocaDevice

        with rank_device(cp, local_rank, "doca submitter"):
            DocaDevice().preload()
            smclock.measure(cp, ns=1000)

    @classmethod
    def check_provider(
        cls,
        params: Any,
        points: Sequence[tuple[str, Mapping[str, Any]]],
        provider: str,
        caps: Any,
        provider_params: Any,
    ) -> None:
        why = queues_refusal(params, getattr(provider_params, "queues", "host"))
        if why is not None:
            raise UnsupportedError(f"--submitter doca with --provider {provider}: {why}")

    @classmethod
    def check_points(cls, params: Any, points: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        for exp, point in points:
            why = refusal(params, exp, point)
            if why is not None:
                raise UnsupportedError(f"{exp} with --submitter doca: {why}")

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        import cupy as cp

        from .device import DocaDevice

        self.cp = cp
        self.device = rank_device(cp, self.rank, "doca submitter")
        self.device.use()
        p: DocaParams = self.params
        self.handler, self.sharing = p.nic_handler, p.sharing_mode
        self.scope, self.cq_type = p.exec_scope, p.cq_type
        self.dev = DocaDevice()
        self.index: dict[int, int] = {}  # qpn -> row of self.qps
        self.qps: Any = None  # (nqps, QP_BYTES) uint8 in GPU memory: DOCA's QP structures
        self.ringer: Any = None
        self.dm: DeviceMap | None = None
        self.sm_clock_hz = smclock.measure(cp)
        self.details: dict[str, Any] = {}

    # ---- bring-up ------------------------------------------------------------------------------
    def attach_queues(self, qps: Sequence[QueuePair]) -> None:
        rc = [q for q in qps if not q.dci]
        if len(rc) != len(qps):
            raise UnsupportedError("the doca submitter drives RC QPs only (no DCIs)")
        if self.handler.host_thread and any(q.sq.domain == MemoryDomain.DEVICE for q in rc):
            raise UnsupportedError(str(queues_refusal(self.params, "device")))
        need = proxy_bytes(self.handler, max((q.sq.wqebb_cnt for q in rc), default=0))
        scratch = None
        if self.handler.host_thread and rc:
            scratch = self.fabric.register(
                need * len(rc), Access.LOCAL_WRITE, domain=MemoryDomain.HOST_MAPPED
            )
        for q in rc:  # before the first post: owner-1 CQEs (DOCA's sm_90 poll)
            if q.sq.cq.domain == MemoryDomain.DEVICE:
                self.dev.init_cq(q.sq.cq)  # GPU memory (CUDA engine, --queues device)
            else:
                init_cq(q.sq.cq)
        self.dm = DeviceMap.of(self.fabric)
        device = {"qps": self.dm.qps, "cqs": self.dm.cqs}
        recs = []
        if self.handler.host_thread:
            from .proxy import HostRinger

            self.ringer = HostRinger()
        for i, q in enumerate(rc):
            word = 0 if scratch is None else scratch.addr + i * need
            proxy = self.dm.local(word, "proxy words") if word else 0
            recs.append(queue_record(q, self.handler, self.cq_type, device, proxy_addr=proxy))
            if self.ringer is not None:
                self.ringer.add(q, self.handler, word)
            self.index[q.qpn] = i
        if recs:
            self.qps = self.dev.build(np.stack(recs)).reshape(len(recs), QP_BYTES)

    # ---- helpers -------------------------------------------------------------------------------
    def _lanes(self, lanes: Sequence[Lane]) -> np.ndarray:
        assert self.dm is not None
        out = np.zeros(len(lanes), LANE_DTYPE)
        out["src"] = [ln.src.addr for ln in lanes]
        out["src_lkey_be"] = [be32(ln.src.key) for ln in lanes]
        out["dst"] = [ln.dst.addr for ln in lanes]
        out["dst_rkey_be"] = [be32(ln.dst.key) for ln in lanes]
        out["src_dev"] = [self.dm.local(ln.src.addr, "source buffer") for ln in lanes]
        return out

    def _rows(self, lanes: Sequence[Lane]) -> Any:
        try:
            return self.cp.asarray(np.array([self.index[ln.qp.qpn] for ln in lanes], np.int64))
        except KeyError as e:
            raise FabricError(f"QP {e} was not attached to the doca submitter") from e

    def _counters(self) -> dict[str, int]:
        return engine_counters.snapshot(self.fabric)

    @contextlib.contextmanager
    def _launching(self, rows: Any) -> Iterator[Any]:
        """The lanes' DOCA QP structures as one launch array, written back after the launch;
        the host ringer runs around it; the engine's fidelity counters are checked (dbrec_lag
        allowed for the handlers that ring before the record)."""
        before = self._counters()
        arr = self.cp.ascontiguousarray(self.qps[rows])
        if self.ringer is not None:
            self.ringer.start()
        try:
            yield arr.reshape(-1)
        except TimeoutError as e:  # the kernel outlived its bound (DOCA's own slot wait)
            raise CompletionTimeout(f"rank {self.rank}: doca {self.handler.cli}: {e}") from e
        finally:
            if self.ringer is not None:
                self.ringer.stop()
        # the kernel has finished (DocaDevice waits for its stream): keep DOCA's indices
        self.qps[rows] = arr
        lag_ok = self.handler.cli in EARLY_RING_HANDLERS
        self.details.update(engine_counters.call_details(
            before, self._counters(), who=f"rank {self.rank}: doca {self.handler.cli}",
            allowed=frozenset({"dbrec_lag"}) if lag_ok else frozenset()))  # fmt: skip

    def _raise_for(self, res: np.ndarray, what: str) -> None:
        """The first failed unit's result row as the one native failure record."""
        for u, r in enumerate(res):
            st = int(r["status"])
            if st == 0:
                continue
            where = (
                f"rank {self.rank}, {what} (doca {self.handler.cli}), unit {u}: last "
                f"ticket {int(r['ticket'])}, DOCA poll returned {int(r['cq_status'])}"
            )
            if st == ENOSEQ:  # the peer's sequence word did not come (the word is in post_ns)
                failure = LoopFailure(
                    TIMEOUT,
                    where,
                    message=f"no sequence word from the peer (the word held {int(r['post_ns'])})",
                )
            elif st == 2:
                failure = LoopFailure(TIMEOUT, where)
            elif st == 3:  # DOCA's poll reports an error CQE without its syndrome
                failure = LoopFailure(CQE_ERROR, where, wqe_counter=int(r["ticket"]))
            else:
                failure = LoopFailure(str(STATUS.get(st, f"status {st}")), where)
            raise_failure(failure, what, self.timeout_ns / 1e9)

    def _base_details(self) -> dict[str, Any]:
        h = self.dev.headers
        return {
            "doca_handler": self.handler.cli,
            "doca_sharing": self.sharing.name.lower(),
            "doca_scope": self.scope.name.lower(),
            "doca_cq": "collapsed" if int(self.cq_type) else "64b",
            "gpunetio_wheel": h.wheel_version,
            "doca_version": h.doca_version,
            "gpunetio_source": h.source,
        }

    # ---- loops ---------------------------------------------------------------------------------
    def latency(self, work: LatencyWork) -> np.ndarray:
        if work.mode not in LATENCY_MODES:
            raise ConfigError("modes (--modes)", work.mode, ", ".join(LATENCY_MODES))
        op = op_for("inline" if work.inline else "pointer", work.size)
        # the selected lane first: the one unit posts on QP 0, the quiet walks them all
        order = [work.lanes[work.selected]] + [
            ln for i, ln in enumerate(work.lanes) if i != work.selected
        ]
        rtt = work.mode == "round_trip"
        reply = 0
        if rtt:
            if work.reply is None:
                raise ConfigError("reply", None, "the buffer a round trip's answer lands in")
            assert self.dm is not None
            reply = self.dm.local(work.reply.addr, "reply buffer")
        total = work.iters + work.warmup
        job = job_record(
            op,
            work.size if op == Op.PUT else 8,
            total,
            1,
            timeout_ns=self.timeout_ns,
            slots=1,
            flags=SEQ,
            nquiet=len(order) if work.scope_all and not rtt else 0,
            reply=reply,
            mode=MODE_RTT if rtt else MODE_LATENCY,
        )
        _, cyc = self._one_unit(order, job, f"single-op {work.mode}")
        hz = smclock.measure(self.cp)
        self.sm_clock_hz = hz
        col = 0 if work.mode == "issue" else 1
        c = cyc[0, work.warmup :, col]
        self.details.update(
            sm_clock_hz=hz, issue_cycles_p50=float(np.median(cyc[0, work.warmup :, 0]))
        )
        return smclock.cycles_to_ns(c, hz)

    def respond(self, work: RespondWork) -> None:
        """The far side of a round trip: for request n (its sequence word n + 1 in the last 8
        bytes of work.watch), post the answer (stamped n + 1) through DOCA on work.lane and wait
        its completion; mini-gda's protocol (gda_respond), so the two interoperate."""
        assert self.dm is not None
        op = op_for("inline" if work.inline else "pointer", work.size)
        job = job_record(
            op,
            work.size if op == Op.PUT else 8,
            work.count,
            1,
            timeout_ns=self.timeout_ns,
            slots=1,
            flags=SEQ,
            reply=self.dm.local(work.watch.addr, "watched buffer"),
            mode=MODE_RESPOND,
        )
        self._one_unit([work.lane], job, "round-trip responder")

    def _one_unit(self, order: Sequence[Lane], job: np.ndarray, what: str) -> tuple[Any, Any]:
        """One issuing unit (a thread, or a warp in warp scope) on order[0] with the latency
        kernel; order[1:] are the QPs an all-QP quiet walks. Raises on a failed unit."""
        threads = 32 if self.scope == Scope.WARP else 1
        lanes = self._lanes(order[:1])
        self.details = self._base_details()
        with self._launching(self._rows(order)) as qps:
            res, cyc = self.dev.latency(
                qps, lanes, job, self.handler, self.sharing, self.scope, 1, threads
            )
        self._raise_for(res, what)
        return res, cyc

    def _rate_shape(self, nlanes: int, threads: int) -> tuple[int, int]:
        """(blocks, threads per block) of a rate launch over `nlanes` QPs."""
        cap = max_block(self.handler, self.scope)
        per_unit = 32 if self.scope == Scope.WARP else 1
        if threads % (nlanes * per_unit):
            raise ConfigError(
                "threads (-t)",
                threads,
                f"a multiple of {nlanes * per_unit} "
                f"({nlanes} QPs x {per_unit} threads per unit): every QP takes the "
                "same number of units",
            )
        if self.sharing == Sharing.CTA:
            per = threads // nlanes
            if per > cap or (self.scope == Scope.WARP and per % 32):
                raise ConfigError(
                    "threads (-t)",
                    threads,
                    f"{nlanes} blocks (one per QP) of <= {cap} threads (whole warps in warp scope)",
                )
            return nlanes, per
        block = threads if threads <= cap else math.gcd(threads, cap)
        return threads // block, block

    def rate_lane_messages(
        self, nlanes: int, threads: int, batch: int, per_thread: int
    ) -> list[int] | None:
        return even_lane_messages(nlanes, threads, per_thread)

    def rate(self, work: RateWork) -> RateResult:
        L = len(work.lanes)
        if work.batch != 1:
            raise ConfigError("batch (--batch)", work.batch, "1 (DOCA rings once per op)")
        blocks, block = self._rate_shape(L, work.threads)
        op = op_for("inline" if work.inline else "pointer", work.size)
        size = work.size if op == Op.PUT else 8
        slots = max(1, work.lanes[0].dst.length // size)
        lanes = self._lanes(work.lanes)
        keep = None
        if op == Op.P:  # p's value read from a GPU copy of the source, as mini-gda stages it
            keep, lanes["src_dev"] = stage(self.cp, [ln.src for ln in work.lanes])
        self.details = self._base_details()
        common = {"timeout_ns": self.timeout_ns, "slots": slots, "flags": VALUE_FROM_SRC}
        rows = self._rows(work.lanes)
        M, W = work.messages_per_thread, work.warmup_per_thread
        win = max(1, work.window)
        max_windows = M // win + 1
        args = (self.handler, self.sharing, self.scope, blocks, block)
        with self._launching(rows) as qps:
            if W:
                warm = job_record(op, size, W, L, **common)
                r = self.dev.post(qps, lanes, warm, *args)
                self._raise_for(r, "msg-rate warm-up")
            job = job_record(op, size, M, L, first=W, window=win, max_windows=max_windows, **common)
            c0 = self._counters()  # doorbells and CQEs of the measured launch only
            res, marks = self.dev.post(qps, lanes, job, *args, marks=True)
            c1 = self._counters()
        del keep
        self._raise_for(res, "msg-rate")
        windows = []
        for u in range(len(res)):
            m = [int(v) for v in marks[u] if v]
            edges = [0, *m[: M // win]]
            if int(res[u]["total_ns"]) > edges[-1]:
                edges.append(int(res[u]["total_ns"]))  # the last window ends with the drain
            windows.extend(np.diff(edges).tolist())
        elapsed = int(res["total_ns"].max())
        self.details.update(
            units=float(len(res)),
            blocks=float(blocks),
            block=float(block),
            sm_clock_hz=self.sm_clock_hz,
        )
        return RateResult(
            windows_ns=np.asarray(windows, dtype=np.int64),
            elapsed_ns=elapsed,
            messages=M * work.threads,
            doorbells=int(c1.get("doorbells", 0)) - int(c0.get("doorbells", 0)),
            cqes=int(c1.get("cqes", 0)) - int(c0.get("cqes", 0)),
        )

    def kernel_cost(self, work: KernelCostWork) -> KernelCostResult:
        """Caller kernels with DOCA's put built in (kernel_cost.py), on the lanes' QPs."""
        from .kernel_cost import run

        return run(self, work)

    def point_details(self) -> dict[str, Any]:
        return dict(self.details)

    def close(self) -> None:
        if self.ringer is not None and self.ringer.running:
            self.ringer.stop()
        self.ringer = None
