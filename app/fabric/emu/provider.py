"""The emu provider: pre-flight (one node, progress mode against the CPU binding) and opening
an EmuFabric sized for the plan."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ...cuda_host import MPS_DEVICE_CONNECTIONS, connections_in_force
from ...errors import ConfigError, UnsupportedError
from ...platform import MPS_RULE, Probe, ranks_per_gpu, visible_gpu_count
from ..base import Fabric, MemoryDomain, Posting, ProviderCaps
from ..registry import FabricPlan, Provider, register
from . import nic_model
from .fabric import PROGRESS_MODES
from .params import ENGINES, EmuParams


def resolve_progress(requested: str, local_size: int, rank: int, autonomous: bool,
                     engine_threads: int = 1) -> str:  # fmt: skip
    """emu's engine: each spinning engine thread of a rank needs a core of its own beside the
    rank's.

    A rank bound to a CPU set (mpiexec binds to a core by default for 2 ranks; srun with
    --cpus-per-task) owns that set; an unbound rank shares the machine with its node's ranks.
    An engine thread squeezed onto the poller's core costs a scheduler time slice (~4 ms) per
    hand-off: `thread` is refused there rather than measured wrong. A submitter that cannot call
    a CPU hook (`autonomous`) needs the thread. Several engine threads (`--engine-threads`) exist
    only in thread mode: inline progress is the poller's one thread.
    """
    need = 1 + engine_threads  # the rank's own core and its engine threads'
    mine = len(os.sched_getaffinity(0))
    bound = mine < (os.cpu_count() or mine)
    fits = mine >= need if bound else need * local_size <= mine
    where = f"bound to {mine} CPU(s)" if bound else f"{local_size} ranks share {mine} CPUs"
    if autonomous and requested == "inline":
        raise UnsupportedError(
            "--progress inline needs the submitter's CPU loops to drive the NIC; this submitter "
            "cannot (a GPU kernel cannot call a CPU hook): use --progress thread"
        )
    if engine_threads > 1 and (requested == "inline" or (requested == "auto" and not fits)):
        raise UnsupportedError(
            f"--engine-threads {engine_threads} runs {engine_threads} engine threads per rank, "
            f"which needs --progress thread and {need} free cores per rank (rank {rank}: "
            f"{where}); use fewer engine threads or more cores (`mpiexec --bind-to none`, "
            f"`srun --cpus-per-task={need}`)"
        )
    if requested == "auto":
        return "thread" if fits or autonomous else "inline"
    if requested == "thread" and not fits:
        raise UnsupportedError(
            f"--progress thread needs a free core for each of a rank's {engine_threads} engine "
            f"thread(s) (rank {rank}: {where}). Launch with `mpiexec --bind-to none` (or "
            f"`--map-by slot:PE={need}`, `srun --cpus-per-task={need}`), use --progress inline"
            + (" with --engine-threads 1" if engine_threads > 1 else "")
        )
    return requested


def emu_params(plan: FabricPlan) -> EmuParams:
    return plan.params if isinstance(plan.params, EmuParams) else EmuParams()


def check_cuda_engine(plan: FabricPlan, probes: Mapping[str, Probe]) -> int | None:
    """--engine cuda / --queues device pre-flight: a GPU, CuPy and nvcc here; GPU queues only
    for a GPU submitter; several ranks on one GPU only under MPS (without it their kernels
    time-slice: a round trip of milliseconds instead of microseconds). Returns the CUDA work
    queues per process in force when ranks share a GPU (_require_mps)."""
    p = emu_params(plan)
    if p.queues == "device" and p.engine != "cuda":
        raise UnsupportedError(
            "--queues device needs --engine cuda: the CPU engine cannot poll GPU memory at speed"
        )
    if p.engine != "cuda":
        if plan.autonomous_progress and plan.local_size > 1 and probes["gpus"].ok:
            return _require_mps(plan, probes, "a GPU submitter")
        return None
    if p.queues == "device" and not plan.autonomous_progress:
        raise UnsupportedError(
            "--queues device puts the rings, records and doorbells in GPU memory, which a CPU "
            "submitter cannot write at speed: use a GPU submitter or --queues host"
        )
    for name in ("gpus", "cupy", "nvcc"):
        if not probes[name].ok:
            raise UnsupportedError(f"--engine cuda needs {name}: {probes[name].detail}")
    return _require_mps(plan, probes, "--engine cuda")


def _require_mps(plan: FabricPlan, probes: Mapping[str, Probe], what: str) -> int | None:
    """Several ranks of this node on one GPU only under MPS: without it their kernels
    time-slice, and what is timed is the scheduler's turn (a round trip of milliseconds).
    Returns CUDA_DEVICE_MAX_CONNECTIONS in force when ranks share a GPU (None: unset)."""
    gpus = probes["gpus"].data.get("gpus", [])
    ngpu = max(1, visible_gpu_count(gpus))
    sharing = ranks_per_gpu(plan.local_size, gpus)
    if sharing > 1 and not probes["mps"].ok:
        raise UnsupportedError(
            f"{what} with {plan.local_size} ranks on {ngpu} GPU(s), and MPS is not "
            f"running ({probes['mps'].detail.split(';')[0]}): {MPS_RULE}"
        )
    if sharing > MPS_DEVICE_CONNECTIONS // 2:
        raise UnsupportedError(
            f"{what} with {sharing} ranks on one GPU: at most {MPS_DEVICE_CONNECTIONS // 2} "
            "(MPS's device connections would leave each rank one CUDA work queue, which "
            "serialises gicbench's streams: a kernel behind a waiting one never starts)"
        )
    # `gicbench run` set the variable before CUDA started (cli/run.py): record what is in force
    return connections_in_force() if sharing > 1 else None


def _connections(n: int | None) -> dict[str, int]:
    """The run's record of the work queues each process asked CUDA for, when gicbench set or
    kept CUDA_DEVICE_MAX_CONNECTIONS for ranks sharing a GPU."""
    return {} if n is None else {"cuda_device_max_connections": n}


def check_tables(plan: FabricPlan) -> None:
    """The segment's tables: QP numbers carry a 15-bit index (bit 15 marks a DCT, slot 0 is
    reserved) and CQ numbers 16 bits; a plan beyond them is refused before anything exists."""
    from ... import _native

    most_qps = int(_native.emu.MAX_QPS) - 1
    if plan.qps > most_qps:
        raise ConfigError(
            "QPs per rank",
            plan.qps,
            f"<= {most_qps:,} with --provider emu (its QP table): {plan.rc_peers} peer(s) x "
            f"{plan.rc_qps_per_peer} RC QPs + {plan.dcis} DCIs; ask for fewer (--pool, "
            "--active, --qps-per-peer, --dcis)",
        )
    if plan.cqs > 0xFFFE:
        raise ConfigError("CQs per rank", plan.cqs, f"<= {0xFFFE:,} with --provider emu")


@register
class EmuProvider(Provider):
    name = "emu"
    Params = EmuParams
    summary = "software mlx5 NIC over POSIX shared memory (one node), the embedded default"

    @classmethod
    def caps(cls, probes: Mapping[str, Probe]) -> ProviderCaps:
        try:
            from ... import _native  # noqa: F401

            why = ""
        except ImportError as e:
            why = f"native module missing ({e}); run `make setup`"
        shm = probes["shm"]
        return ProviderCaps(
            cls.name,
            not why and shm.ok,
            why or ("" if shm.ok else shm.detail),
            multi_node=False,
            dc=True,
            posting=(Posting.MLX5_QUEUES.value,),
            memory_domains=tuple(m.value for m in MemoryDomain),  # device: --engine cuda
            details={"what": cls.summary, "progress": list(PROGRESS_MODES), "engines": ENGINES},
        )

    @classmethod
    def preflight(cls, plan: FabricPlan, topo: Any, probes: Mapping[str, Probe]) -> dict[str, Any]:
        super().preflight(plan, topo, probes)
        if plan.nodes > 1:
            raise UnsupportedError(
                f"provider emu is one node only; this job spans {plan.nodes} nodes "
                f"({', '.join(sorted(set(topo.hosts)))}): use a real NIC provider"
            )
        p = emu_params(plan)
        threads = p.engine_threads or 1  # EmuParams checked it against the other knobs
        connections = check_cuda_engine(plan, probes)
        check_tables(plan)
        model = nic_model.load(p.nic_model)  # a bad name or file: ConfigError naming the field
        if model is not None and p.engine == "cuda":
            raise UnsupportedError(
                f"--nic-model {p.nic_model}: the NIC model is charged by the CPU engine only; "
                "use --engine cpu (the CUDA engine does not charge it yet)"
            )
        if p.engine == "cuda":
            # No CPU thread: the engine kernel is the NIC's progress (autonomous).
            from .cuda_engine import DEFAULT_CTAS

            ctas = p.engine_ctas or DEFAULT_CTAS
            out = {"progress": "cuda-engine", "engine": "cuda", "engine_ctas": ctas,
                   "queues": p.queues}  # fmt: skip
            return out | _connections(connections)
        mode = resolve_progress(plan.progress, plan.local_size, topo.rank, plan.autonomous_progress,
                                threads)  # fmt: skip
        out = {"progress": mode, "engine": "cpu", "engine_threads": threads, "queues": p.queues,
               "nic_model": p.nic_model if model is None else model.name}  # fmt: skip
        if model is not None:  # which constants produced every figure of the run
            out["nic_model_spec"] = model.record()
        return out | _connections(connections)

    @classmethod
    def open(cls, plan: FabricPlan, topo: Any, job: str, settings: dict[str, Any]) -> Fabric:
        from .fabric import EmuFabric
        from .sizing import segment_bytes_for

        # Exactly what bring-up creates (an idle rank of an odd pairs world creates no QP, but
        # the tables keep one slot).
        qps, cqs = max(1, plan.qps), max(1, plan.cqs)
        cuda = settings.get("engine") == "cuda"
        if cuda:  # node-local rank i on visible GPU i mod count, as choose_gpu says
            import cupy

            cupy.cuda.Device(topo.local_rank % cupy.cuda.runtime.getDeviceCount()).use()
        # the submitter's own region (QueueOptions.scratch_per_qp), registered after bring-up
        mrs = list(plan.mr_sizes) + ([plan.scratch_bytes] if plan.scratch_bytes else [])
        return EmuFabric(
            rank=topo.rank,
            world_size=topo.size,
            job=job,
            progress="inline" if cuda else settings["progress"],
            segment_bytes=segment_bytes_for(
                qps,
                cqs,
                plan.dcts,
                plan.sq_depth,
                plan.sq_depth,
                mrs,
                gpis=plan.queue_options.gpis,
                world=topo.size,
            ),
            max_qps=qps,
            max_cqs=cqs,
            max_dcts=plan.dcts,
            max_mrs=len(mrs),
            engine=settings.get("engine", "cpu"),
            engine_ctas=settings.get("engine_ctas") if cuda else None,
            engine_threads=None if cuda else settings.get("engine_threads", 1),
            queues=settings.get("queues", "host"),
            nic_model=_same_model(emu_params(plan).nic_model, settings),
        )


def _same_model(spec: str, settings: dict[str, Any]) -> nic_model.NicModel | None:
    """The model pre-flight recorded: a file changed since is refused, not charged unrecorded."""
    model = nic_model.load(spec)
    recorded = settings.get("nic_model_spec", {}).get("sha256")
    if model is not None and recorded is not None and model.digest != recorded:
        raise ConfigError(nic_model.FLAG, spec, f"a file that stays as pre-flight read it "
                          f"({model.origin} changed during bring-up)")  # fmt: skip
    return model
