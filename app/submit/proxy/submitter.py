"""The proxy submitter (mini-proxy): each call starts an engine (rings mapped, T workers pinned
and preconditioned), hands the rings to producers, then stops the workers and unmaps the rings,
whatever happened. Failures name the rank, the worker or producer, the ring and its indices."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, ClassVar

import numpy as np

from ...errors import ConfigError
from ...fabric.base import Posting
from ...platform import Probe
from ..base import Shape, Submitter, register
from ..failures import LoopFailure, raise_failure
from ..gpu_runtime.device import rank_device
from ..native_lanes import lane_table
from ..work import (
    MODE_CODES,
    CycleWork,
    KernelCostResult,
    KernelCostWork,
    LatencyWork,
    LoadedResult,
    LoadedWork,
    ProxyRateWork,
    RateResult,
    RateWork,
    RespondWork,
    cycle_unit_lanes,
    own_qp_lanes,
    refuse_dci_pairs,
)
from .cores import default_cores
from .params import HANDOFFS, MAX_CHAIN, ProxyParams
from .rings import (
    check_background,
    check_cycle_limits,
    cycle_geometry,
    lane_counts,
    proxy_geometry,
    ring_counts,
)
from .verbs import on_verbs, refusal, verbs_lanes
from .workers import worker_fields

MAX_INLINE = 512
HOST_PRODUCERS = 4  # proxy-rate's host producer threads by default (GPU: one CTA per ring)


def _native_proxy() -> Any:
    from ... import _native

    return _native.proxy


def local_rank(rank: int) -> int:
    for key in ("OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return rank


class Engine:
    """One native engine for one call: `with Engine(...) as e:` starts it; leaving the block
    stops the workers (the first failure is raised unless one is already propagating) and
    unmaps the rings."""

    def __init__(
        self,
        sub: ProxySubmitter,
        lanes: tuple,
        workers: int,
        rings: int,
        batch: int,
        max_size: int,
        inline: bool,
        lane_worker: list[int] | None = None,
    ) -> None:
        self.sub, self.workers = sub, workers
        p = sub.params
        cores = list(p.cores) or default_cores(workers, local_rank(sub.rank), sub.device_bus_id)
        self.cores = cores
        common = (
            workers,
            rings,
            batch,
            p.ring_depth,
            max_size,
            inline,
            cores,
            1 if p.precondition == "warm" else 0,
            int(p.precondition_s * 1e9),
            sub.timeout_ns,
        )
        if on_verbs(sub.fabric):  # workers post through ibv_post_send (proxy_verbs.cpp)
            rows = verbs_lanes(sub.fabric, lanes, inline, max_size)
            self.native = _native_proxy().Engine.over_verbs(sub.fabric.nic, rows, *common)
        else:
            self.native = _native_proxy().Engine(lane_table(lanes), *common, *sub.progress.cpu_hook)
        if lane_worker is not None:  # before init, which checks it
            self.native.assign_lanes(lane_worker)
        self.stats: list[dict[str, Any]] = []

    def __enter__(self) -> Engine:
        try:
            ok, err = self.native.init()
            if ok:
                ok, err = self.native.start()
            if not ok:
                self.sub.raise_error("engine start", err, {})
        except BaseException:
            self.native.close()
            raise
        return self

    def check(self, what: str, ok: bool, err: dict[str, Any], params: dict[str, Any]) -> None:
        """Raise a producer's failure, or the engine's when the producer only saw it stop."""
        if ok:
            return
        if err["kind"] == "stopped" and self.native.failed():
            err = self.native.first_error()
        self.sub.raise_error(what, err, params)

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            ok, err = self.native.stop()
            self.stats = list(self.native.stats())
            self.sub.last_workers = self.stats
            if on_verbs(self.sub.fabric):  # the verbs fabric counts what its posters post
                sw = self.sub.fabric.sw
                for key, stat in (("wqes", "descriptors"), ("doorbells", "doorbells"),
                                  ("cqes", "cqes"), ("bytes", "bytes")):  # fmt: skip
                    sw[key] += sum(int(w[stat]) for w in self.stats)
            if not ok and et is None:
                self.sub.raise_error("proxy workers", err, {})
        finally:
            self.native.close()


@register
class ProxySubmitter(Submitter):
    name = "proxy"
    summary = "mini-proxy: producers fill host rings, pinned CPU workers post chains of WQEs"
    shapes = frozenset(
        {Shape.LATENCY, Shape.RESPOND, Shape.RATE, Shape.LOADED, Shape.PROXY_RATE,
         Shape.CYCLE, Shape.KERNEL_COST}
    )  # fmt: skip
    posting = (Posting.MLX5_QUEUES.value, Posting.POST_SEND.value)
    Params = ProxyParams
    point_headers: ClassVar[dict[str, str]] = {"workers": "T", "rings": "R"}

    @classmethod
    def kernel_cost_refusal(cls, params: Any) -> str | None:
        from .kernel_cost import refusal as kernel_cost_refusal

        return kernel_cost_refusal(params)

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        try:
            _native_proxy()
        except (ImportError, AttributeError) as e:
            return f"native module missing ({e}); run `make setup`"
        return None

    @classmethod
    def check_points(cls, params: Any, points: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """What the engine would refuse at run time, refused in pre-flight (nothing created):
        chains longer than B, inline payloads the workers cannot copy, an all-QP quiet over
        more rings than there are, fewer rings than one QP's lanes, tuned producers beyond
        one per ring."""
        max_length = int(_native_proxy().MAX_LENGTH)  # a descriptor's length field
        for exp, pt in points:
            if exp == "kernel-cost":  # its own placement (kernel_cost.py), no rate loop's rings
                from .kernel_cost import point_refusal

                why = point_refusal(params, pt)
                if why is not None:
                    raise ConfigError("workers (--workers)", params.workers, why)
                continue
            if exp == "active-connections":
                cls._check_cycle(params, pt)
            batch, size = int(pt.get("batch", 1)), int(pt.get("size", 8))
            if size > max_length:
                raise ConfigError(
                    "size (-b/-e)",
                    size,
                    f"<= {max_length} B with --submitter proxy (a descriptor's 21-bit length; "
                    f"{exp})",
                )
            if batch > MAX_CHAIN:
                raise ConfigError(
                    "batch (--batch)", batch, f"1..{MAX_CHAIN} with --submitter proxy ({exp})"
                )
            if pt.get("payload") == "inline" and size > MAX_INLINE:
                raise ConfigError(
                    "payload (--payload)",
                    "inline",
                    f"pointer for sizes above {MAX_INLINE} B with --submitter proxy ({exp})",
                )
            if pt.get("scope") == "all" and int(pt.get("qps", 1)) > 32:
                raise ConfigError(
                    "qps (-q)", pt["qps"], "<= 32 with --scope all and --submitter proxy"
                )
            if "threads" in pt and params.rings and params.rings < int(pt.get("qps", 1)):
                raise ConfigError(
                    "rings (--rings)",
                    params.rings,
                    f">= {pt['qps']} for {exp} (one ring per lane of its rate loop)",
                )
            producers, rings = pt.get("producers"), pt.get("rings")
            tuned = params.handoff == "tuned" and producers is not None and rings is not None
            if tuned and int(producers) > int(rings):
                raise ConfigError(
                    "producers (--producers)",
                    producers,
                    f"<= {rings} rings with --handoff tuned (one producer per ring)",
                )

    @classmethod
    def _check_cycle(cls, params: ProxyParams, pt: Mapping[str, Any]) -> None:
        """What ProxySubmitter.cycle would refuse, from an active-connections point."""
        refuse_dci_pairs(pt.get("transport"), cls.name)
        for name, value in (("rings", params.rings), ("producers", params.producers)):
            if value:
                raise ConfigError(
                    f"{name} (--{name})", value,
                    "0 for active-connections with --submitter proxy (a ring and a producer "
                    "per submitting unit: --threads)",
                )
        check_cycle_limits(int(pt.get("threads", 1)), int(pt.get("pool", 0)), "pool (--pool)")

    @classmethod
    def check_rate_lanes(cls, params: ProxyParams, lanes: int) -> None:
        """--workers and --rings against the lanes a rank's msg-rate/payload rate loop drives
        (-q x its destinations), for a pre-flight caller that knows the rank's pattern (the
        experiment's check_rank): what ProxySubmitter.rate would otherwise refuse at the
        point's start."""
        proxy_geometry(params, lanes, 1)

    @classmethod
    def point_fields(
        cls, params: ProxyParams, shape: Shape, point: Mapping[str, Any]
    ) -> dict[str, Any]:
        if shape == Shape.LOADED:
            return {"workers": params.workers, "rings": params.loaded_rings(point["background"])}
        return {}

    @classmethod
    def loaded_lanes(cls, params: ProxyParams, background: int) -> int:
        return params.workers  # a QP per worker

    @classmethod
    def loaded_queues(cls, params: ProxyParams) -> tuple[str, ...]:
        # tuned: one producer per ring, so the probe cannot share a ring with the background
        return ("reserved",) if params.handoff == "tuned" else ("shared", "reserved")

    @classmethod
    def check_loaded(
        cls,
        params: ProxyParams,
        *,
        queues: Sequence[str],
        background: int,
        batch: int,
        max_size: int,
        sq_depth: int,
    ) -> None:
        if batch > MAX_CHAIN:
            raise ConfigError("batch (--batch)", batch, f"1..{MAX_CHAIN} with --submitter proxy")
        rings = params.loaded_rings(background)
        if "reserved" in queues and rings < 2:
            raise ConfigError(
                "rings (--rings)", rings, ">= 2 with --queue reserved (ring 0 is the probe's)"
            )
        tuned = params.handoff == "tuned"
        if "shared" in queues and tuned:
            raise ConfigError(
                "queue (--queue)",
                "shared",
                "reserved with --handoff tuned (one producer per ring: the probe cannot share "
                "a ring); use --handoff baseline to compare shared and reserved",
            )
        for q in queues:
            check_background(tuned, background, rings, q == "reserved")

    @classmethod
    def proxy_rate_producers(cls, params: ProxyParams, rings: int) -> int:
        """--producers, else one GPU CTA per ring, or up to HOST_PRODUCERS host threads."""
        if params.producers:
            return params.producers
        return rings if params.producer == "gpu" else min(rings, HOST_PRODUCERS)

    @classmethod
    def check_provider(
        cls,
        params: Any,
        points: Sequence[tuple[str, Mapping[str, Any]]],
        provider: str,
        caps: Any,
        provider_params: Any = None,
    ) -> None:
        why = refusal(points, provider, tuple(caps.posting))
        if why is not None:
            raise why

    @classmethod
    def preload(cls, params: Any, local_rank: int) -> None:
        """GPU producers: compile the kernels and load every one of them on this rank's GPU
        before the NIC opens (Submitter.preload; gpu.py's _force_load says why)."""
        if getattr(params, "producer", "host") != "gpu":
            return
        import cupy as cp

        from .gpu import load_kernels

        with rank_device(cp, local_rank, "GPU producers (--producer gpu)"):
            load_kernels(cp, _native_proxy())

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.last_workers: list[dict[str, Any]] = []
        self.device_bus_id: str | None = None
        self.gpu = None
        if self.params.producer == "gpu":
            from .gpu import GpuProducers

            self.gpu = GpuProducers(self.params, local_rank(self.rank))
            self.device_bus_id = self.gpu.pci_bus_id

    @property
    def handoff_code(self) -> int:
        return HANDOFFS.index(self.params.handoff)

    def engine(
        self,
        lanes: tuple,
        workers: int,
        rings: int,
        batch: int,
        max_size: int,
        inline: bool,
        lane_worker: list[int] | None = None,
    ) -> Engine:
        if batch > MAX_CHAIN:
            raise ConfigError("batch (--batch)", batch, f"1..{MAX_CHAIN} with --submitter proxy")
        if inline and max_size > MAX_INLINE:
            raise ConfigError("payload (--payload)", "inline", f"pointer above {MAX_INLINE} B")
        return Engine(self, lanes, workers, rings, batch, max_size, inline, lane_worker)

    # ---- errors -------------------------------------------------------------------------
    def raise_error(self, what: str, err: dict[str, Any], values: dict[str, Any]) -> None:
        where = f"rank {self.rank}, {what}, {err['who'] or 'proxy'}"
        if err["ring"] >= 0:
            where += (
                f", ring {err['ring']} (index {err['index']}, consumed {err['head']}, "
                f"completed {err['completed']})"
            )
        if err["qpn"]:
            where += (
                f", QP 0x{err['qpn']:06x}: SQ producer index {err['pi']}, retired "
                f"{err['retired']}, CQ consumer index {err['cq_ci']}"
            )
        f = LoopFailure.from_native(err, where)
        if f.kind == "cqe_error" and f.wc_status >= 0:  # a verbs lane's ibv_wc
            self.fabric.sw["errors"] += 1

        def wc_error(f: LoopFailure) -> BaseException:
            from ...fabric.verbs.posting import completion_error

            return completion_error(self.fabric, f.wc_status, f.wr_id, f.qpn, f.vendor_err, what)

        raise_failure(
            f,
            what,
            self.timeout_ns / 1e9,
            values=values,
            waiting_for="progress",
            wc_error=wc_error,
        )

    # ---- the shared loop shapes -----------------------------------------------------------
    def latency(self, work: LatencyWork) -> np.ndarray:
        sel = work.lanes[work.selected]
        others = [ln for i, ln in enumerate(work.lanes) if i != work.selected]
        # scope all: a ring per configured QP, each ring's counter is read (up to 32 rings)
        lanes = (sel, *others[:31]) if work.scope_all else (sel,)
        if work.scope_all and len(work.lanes) > 32:
            raise ConfigError(
                "qps (-q)", len(work.lanes), "<= 32 configured QPs with --scope all (a ring each)"
            )
        workers = 1
        rings = len(lanes)
        reply = work.reply.addr + work.size - 8 if work.reply is not None else 0
        if self.gpu is not None:
            with self.engine(lanes, workers, rings, 1, work.size, work.inline) as eng:
                return self.gpu.latency(eng, work, self.handoff_code)
        with self.engine(lanes, workers, rings, 1, work.size, work.inline) as eng:
            ok, samples, err = eng.native.latency(
                MODE_CODES[work.mode],
                self.handoff_code,
                0,
                work.size,
                work.scope_all,
                reply,
                work.iters,
                work.warmup,
            )
            eng.check(f"single-op {work.mode}", ok, err, {"size": work.size})
        return samples

    def respond(self, work: RespondWork) -> None:
        with self.engine((work.lane,), 1, 1, 1, work.size, work.inline) as eng:
            if self.gpu is not None:
                self.gpu.respond(eng, work, self.handoff_code)
                return
            ok, err = eng.native.respond(
                0, self.handoff_code, work.size, work.watch.addr + work.size - 8, work.count
            )
            eng.check("round-trip responder", ok, err, {"size": work.size})

    def rate(self, work: RateWork) -> RateResult:
        # Every lane the experiment hands out carries writes (and is validated): each needs a
        # ring, since ring r writes through lane r when rings = lanes.
        workers, rings, producers = proxy_geometry(self.params, len(work.lanes), work.threads)
        return self.proxy_rate(
            ProxyRateWork(
                lanes=work.lanes,
                workers=workers,
                rings=rings,
                batch=work.batch,
                producers=producers,
                size=work.size,
                inline=work.inline,
                messages=work.messages_per_thread,
                warmup=work.warmup_per_thread,
                window=work.window,
            )
        )

    def rate_lane_messages(
        self, nlanes: int, threads: int, batch: int, per_thread: int
    ) -> list[int] | None:
        return lane_counts(self.params, nlanes, threads, per_thread)

    # ---- the shapes only mini-proxy has among the CPU-driven submitters ---------------------
    def proxy_rate(self, work: ProxyRateWork) -> RateResult:
        if self.params.handoff == "tuned" and work.producers > work.rings:
            raise ConfigError(
                "producers (--producers)",
                work.producers,
                f"<= {work.rings} rings with --handoff tuned (one producer per ring)",
            )
        with self.engine(
            work.lanes, work.workers, work.rings, work.batch, work.size, work.inline
        ) as eng:
            if self.gpu is not None:
                windows, stats = self.gpu.rate(eng, work, self.handoff_code)
            else:
                ok, windows, stats, err = eng.native.rate(
                    work.producers,
                    self.handoff_code,
                    work.size,
                    work.messages,
                    work.warmup,
                    work.window,
                )
                eng.check(
                    "proxy rate",
                    ok,
                    err,
                    {"producers": work.producers, "messages": work.messages},
                )
        self.last_ring_messages = list(stats["ring_messages"])
        return RateResult(
            windows_ns=np.asarray(windows, dtype=np.int64),
            elapsed_ns=int(stats["elapsed_ns"]),
            messages=int(stats["messages"]),
            doorbells=sum(int(w["doorbells"]) for w in eng.stats),
            cqes=sum(int(w["cqes"]) for w in eng.stats),
        )

    def cycle(self, work: CycleWork) -> RateResult:
        # Unit u is a producer (a host thread or a GPU block) on ring u; its lanes belong to ring
        # u's worker (cycle_geometry).
        qps = own_qp_lanes(work.lanes, self.name)
        unit_lanes = cycle_unit_lanes(qps, work.units)
        workers, lane_worker = cycle_geometry(self.params, unit_lanes, len(work.lanes))
        with self.engine(
            work.lanes, workers, len(unit_lanes), work.batch, work.size, work.inline, lane_worker
        ) as eng:
            if self.gpu is not None:
                windows, stats = self.gpu.cycle(eng, work, unit_lanes, self.handoff_code)
            else:
                ok, windows, stats, err = eng.native.cycle(
                    unit_lanes,
                    self.handoff_code,
                    work.size,
                    work.writes_per_visit,
                    work.visits,
                    work.warmup_visits,
                    work.window,
                )
                eng.check(
                    "active-connections cycle",
                    ok,
                    err,
                    {"threads": work.units, "writes_per_visit": work.writes_per_visit,
                     "visits": work.visits, "warmup_visits": work.warmup_visits},
                )  # fmt: skip
        self.last_ring_messages = list(stats["ring_messages"])
        return RateResult(
            windows_ns=np.asarray(windows, dtype=np.int64),
            elapsed_ns=int(stats["elapsed_ns"]),
            messages=int(stats["messages"]),
            doorbells=sum(int(w["doorbells"]) for w in eng.stats),
            cqes=sum(int(w["cqes"]) for w in eng.stats),
        )

    def proxy_rate_lane_messages(
        self, workers: int, rings: int, producers: int, per_producer: int
    ) -> list[int]:
        # ring r writes through lane r mod T; its i-th descriptor to slot i mod slots
        counts = ring_counts(rings, producers, per_producer)
        return [
            max(c for r, c in enumerate(counts) if r % workers == lane) for lane in range(workers)
        ]

    def loaded(self, work: LoadedWork) -> LoadedResult:
        workers, rings = self.params.workers, self.params.loaded_rings(work.background)
        with self.engine(work.lanes, workers, rings, work.batch, work.size, True) as eng:
            if self.gpu is not None:
                rtt, stats = self.gpu.loaded(eng, work, self.handoff_code)
            else:
                ok, rtt, stats, err = eng.native.loaded(
                    work.requester,
                    self.handoff_code,
                    not work.shared,
                    work.background,
                    work.pace_mps,
                    work.size,
                    work.reply.addr + work.size - 8,
                    work.iters,
                    work.warmup,
                )
                eng.check(
                    "loaded round trip" if work.requester else "loaded responder",
                    ok,
                    err,
                    {"rings": rings, "handoff": self.params.handoff, "size": work.size},
                )
        self.last_ring_messages = list(stats["ring_messages"])
        return LoadedResult(
            rtt_ns=np.asarray(rtt, dtype=np.int64),
            background=int(stats["background"]),
            probe_ns=int(stats["probe_ns"]),
            details=worker_fields(eng.stats, self.params.precondition),
        )

    def kernel_cost(self, work: KernelCostWork) -> KernelCostResult:
        """Caller kernels with mini-proxy's call built in (kernel_cost.py): GPU producers."""
        from .kernel_cost import run

        return run(self, work)

    def point_details(self) -> dict[str, Any]:
        """Where the last engine's workers ran and their clock (workers.py), for every shape.
        Taken once: a point that started no engine records none."""
        stats, self.last_workers = self.last_workers, []
        return worker_fields(stats, self.params.precondition) if stats else {}

    def close(self) -> None:
        if self.gpu is not None:
            self.gpu.close()
            self.gpu = None
