"""The harness: owns bring-up, the sweep, payload validation, traces and rank 0's output.

Experiments only fill their per-point contract (app/experiments/registry.py). Every phase ends in
a collective check so a failure on any rank reaches every rank with its reason; SIGTERM/SIGINT
(mpiexec or srun ending the job because a peer died) marks the trace incomplete before exiting.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .bootstrap.bringup import BringupStats, Resources, bring_up, resolve_progress
from .bootstrap.collective import JobFailure, Phase, describe, rendezvous
from .bootstrap.launch import init_mpi
from .bootstrap.topology import Topology, choose_gpu
from .config import RunConfig
from .errors import ValidationError
from .experiments import registry
from .experiments.registry import Experiment, PointResult
from .fabric.base import Fabric, host_view
from .output import Printer, SweepProgress, aggregate_senders, latency_summary
from .submit.host import HostSubmitter, lane_row, lane_table
from .trace import TraceWriter, write_manifest

ENV_KEYS = (
    "SLURM_JOB_ID",
    "SLURM_NODELIST",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "GICBENCH_FAULT",
)


class RunTerminated(BaseException):
    """SIGTERM/SIGINT arrived: the launcher is ending the job."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = signum
        super().__init__(message or f"terminated by {signal.Signals(signum).name}")


@dataclass
class RankContext:
    cfg: RunConfig
    comm: Any
    topo: Topology
    fabric: Fabric
    res: Resources
    submitter: HostSubmitter
    peer: int | None  # the partner of this rank's pair (rank ^ 1), None when unpaired

    @property
    def is_sender(self) -> bool:
        return self.peer is not None and self.topo.rank % 2 == 0

    def lanes(self, params: dict[str, Any]) -> np.ndarray:
        """The QPs an experiment drives towards the peer: the first `qps` RC QPs, or `qps`
        DCIs whose address vectors name the peer's DCTs round-robin."""
        assert self.peer is not None
        n = params.get("qps", 1)
        if params.get("transport", "rc") == "dc":
            dcts = self.res.peer_dcts[self.peer]
            rows = [lane_row(q, dcts[i % len(dcts)]) for i, q in enumerate(self.res.dcis[:n])]
        else:
            rows = [lane_row(q) for q in self.res.rc[self.peer][:n]]
        return lane_table(rows)


def pattern(seed: int, point: int, rank: int, nbytes: int) -> np.ndarray:
    """The bytes rank `rank` sends at `point`: every rank can compute any peer's."""
    return np.random.default_rng([seed, point, rank]).integers(0, 256, nbytes, dtype=np.uint8)


def default_run_dir(cfg: RunConfig) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    label = cfg.experiments[0] if len(cfg.experiments) == 1 else "suite"
    return Path("runs") / f"{label}-{stamp}"


def _fault(point: int, rank: int) -> None:
    """Test hook, GICBENCH_FAULT=ACTION:RANK:POINT. `kill` makes that rank die by SIGKILL at that
    point (a rank lost mid-run); `raise` makes it fail with an exception (a rank-local error that
    the collective check must carry to every rank)."""
    spec = os.environ.get("GICBENCH_FAULT", "")
    if not spec:
        return
    action, r, p = spec.split(":")
    if int(r) != rank or int(p) != point:
        return
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif action == "raise":
        raise RuntimeError(f"injected fault at point {point}")


def run(cfg: RunConfig) -> int:
    exps: list[Experiment] = [registry.get(n)() for n in cfg.experiments]
    plan = [(e, e.points(cfg)) for e in exps]  # ConfigError here, before MPI resources
    comm = init_mpi()
    topo = Topology.from_comm(comm)
    rank0 = topo.rank == 0
    run_dir = comm.bcast(cfg.out or default_run_dir(cfg) if rank0 else None, root=0)
    job = comm.bcast(
        os.environ.get("SLURM_JOB_ID") or secrets.token_hex(4) if rank0 else None, root=0
    )
    progress_mode = resolve_progress(cfg, topo)
    from .platform import probe_gpus

    gpu = choose_gpu(topo, probe_gpus().data.get("gpus", []))
    started = dt.datetime.now(dt.timezone.utc).isoformat()
    manifest = {
        "experiments": cfg.experiments,
        "config": cfg.to_dict(),
        "world_size": topo.size,
        "provider": cfg.provider,
        "submitter": cfg.submitter,
        "argv": sys.argv,
        "start_utc": started,
        "hosts": sorted(set(topo.hosts)),
        "status": "running",
    }
    if rank0:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        write_manifest(run_dir, manifest)
    rendezvous(comm, "run directory")
    writer = TraceWriter(
        Path(run_dir),
        topo.rank,
        topo.size,
        meta={
            "experiments": cfg.experiments,
            "config": cfg.to_dict(),
            "provider": cfg.provider,
            "submitter": cfg.submitter,
            "host": topo.host,
            "local_rank": topo.local_rank,
            "gpu": gpu or {},
            "nic": {"provider": cfg.provider, "progress": progress_mode},
            "sm_clock_hz": float("nan"),
            "argv": sys.argv,
            "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
        },
    )

    def on_signal(signum: int, _frame: object) -> None:
        raise RunTerminated(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    from . import _native

    _native.host.install_interrupt_handler()
    try:
        return _run_rank(cfg, plan, comm, topo, run_dir, job, progress_mode, manifest, writer)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _native.host.clear_interrupt()


def _run_rank(
    cfg: RunConfig,
    plan: list[tuple[Experiment, list[dict[str, Any]]]],
    comm,
    topo: Topology,
    run_dir: Path,
    job: str,
    progress_mode: str,
    manifest: dict[str, Any],
    writer: TraceWriter,
) -> int:
    rank0 = topo.rank == 0
    fabric: Fabric | None = None
    printer = Printer("json" if cfg.json else "csv" if cfg.csv else "table")
    try:
        fabric, res, bring = bring_up(cfg, topo, comm, job)
        ctx = _context(cfg, comm, topo, fabric, res, progress_mode)
        if rank0:
            printer.preamble(
                _preamble(cfg, topo, bring, progress_mode, run_dir),
                {
                    "gicbench": __version__,
                    "config": cfg.to_dict(),
                    "world_size": topo.size,
                    "progress": progress_mode,
                    "bringup": bring.as_dict(),
                    "run_dir": str(run_dir),
                },
            )
        _sweep(ctx, plan, writer, printer, rank0)
    except JobFailure as e:
        return _fail(e, writer, run_dir, manifest, rank0, fabric, printer, failed=e.failures)
    except RunTerminated as e:
        reason = f"rank {topo.rank} {e} (the launcher ends the job when a rank dies or on ^C)"
        _fail(
            RunTerminated(e.signum, reason),
            writer,
            run_dir,
            manifest,
            rank0,
            fabric,
            printer,
            failed=[],  # this rank was told to stop; the one that died is the launcher's to name
        )
        sys.stdout.flush()
        os._exit(128 + e.signum)  # peers may be gone: no MPI_Finalize
    except BaseException as e:  # a bug on this rank only: tell, record, and take the job down
        print(f"gicbench: rank {topo.rank}: {describe(e)}", file=sys.stderr, flush=True)
        _fail(
            e, writer, run_dir, manifest, rank0, fabric, printer, failed=[(topo.rank, describe(e))]
        )
        comm.Abort(1)
    writer.finish("complete")
    rendezvous(comm, "end of run")
    if rank0:
        write_manifest(
            run_dir,
            {
                **manifest,
                "status": "complete",
                "failed_ranks": [],
                "end_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
            },
        )
        printer.finish({"trace": str(run_dir)})
    fabric.close()
    return 0


def _context(
    cfg: RunConfig, comm, topo: Topology, fabric: Fabric, res: Resources, progress_mode: str
) -> RankContext:
    peer = topo.rank ^ 1
    if peer >= topo.size:
        peer = None  # odd world: the last rank has no partner and idles
    assert res.src is not None and res.landing is not None
    submitter = HostSubmitter(
        rank=topo.rank,
        src=res.src,
        landing=res.landing,
        peer_landing=res.peer_landing.get(peer) if peer is not None else None,
        timeout_s=cfg.timeout_s,
        progress=(fabric.progress_hook(), fabric.progress_ctx()),
    )
    return RankContext(cfg, comm, topo, fabric, res, submitter, peer)


def _preamble(
    cfg: RunConfig, topo: Topology, b: BringupStats, progress: str, run_dir: Path
) -> list[str]:
    return [
        f"gicbench {__version__}  {' '.join(cfg.experiments)}  provider={cfg.provider} "
        f"submitter={cfg.submitter} ranks={topo.size} nodes={topo.nodes} progress={progress}",
        f"bring-up: {b.rc_qps} RC QPs + {b.dcis} DCIs + {b.dcts} DCTs per rank in "
        f"{b.seconds * 1e3:.1f} ms (create {b.create_s * 1e3:.1f}, exchange "
        f"{b.exchange_s * 1e3:.1f}, connect {b.connect_s * 1e3:.1f}); "
        f"{b.qps_per_second:,.0f} QPs/s per rank",
        f"pairs: rank 2i sends to rank 2i+1; latency = median over sender ranks; trace: {run_dir}",
    ]


def _sweep(ctx: RankContext, plan, writer: TraceWriter, printer: Printer, rank0: bool) -> None:
    comm, topo, res = ctx.comm, ctx.topo, ctx.res
    assert res.src is not None and res.landing is not None
    src = host_view(res.src.addr, res.src.length)
    landing = host_view(res.landing.addr, res.landing.length)
    total = sum(len(points) for _, points in plan)
    index = 0
    with SweepProgress(total, rank0 and not (ctx.cfg.quiet or ctx.cfg.json or ctx.cfg.csv)) as bar:
        for exp, points in plan:
            if rank0:
                printer.begin_experiment(exp.name, exp.columns())
            for params in points:
                src[:] = pattern(ctx.cfg.seed, index, topo.rank, src.size)
                landing[:] = 0
                rendezvous(comm, f"start of point {index}")
                before = ctx.fabric.counters()
                where = f"{exp.name} point {index} ({_label(params)})"
                with Phase(comm, where):
                    _fault(index, topo.rank)
                    t0 = time.perf_counter()
                    result = (
                        exp.run_point(ctx, params)
                        if ctx.peer is not None
                        else PointResult(role="idle")
                    )
                    wall = time.perf_counter() - t0
                    after = ctx.fabric.counters()
                    ctx.fabric.check()
                # Every rank has finished sending (the phase check synchronises): validate.
                with Phase(comm, f"{where} payload validation"):
                    _validate(exp, ctx, params, index, landing)
                result.results["validated"] = True
                result.results["wall_s"] = wall
                with writer.begin_point(exp.name, params) as pw:
                    for metric, ns in result.samples.items():
                        pw.add_samples(metric, ns)
                    pw.set_counters(before, after)
                    pw.set_results({"role": result.role, **result.results})
                summary: dict[str, Any] = {"rank": topo.rank, "role": result.role, **result.results}
                for ns in result.samples.values():
                    summary.update(latency_summary(ns))
                rows = comm.gather(summary, root=0)
                if rank0:
                    printer.row(exp.name, aggregate_senders(params, rows))
                    bar.advance(f"{exp.name} {_label(params)}")
                index += 1


def _label(params: dict[str, Any]) -> str:
    keys = ("size", "mode", "qps", "threads", "batch")
    return " ".join(f"{k}={params[k]}" for k in keys if k in params)


def _validate(
    exp: Experiment, ctx: RankContext, params: dict[str, Any], index: int, landing: np.ndarray
) -> None:
    if ctx.peer is None:
        return
    peer_src = pattern(ctx.cfg.seed, index, ctx.peer, landing.size)
    expected = exp.expected_landing(params, ctx.is_sender, peer_src)
    if expected is None:
        return
    got = landing[: expected.size]
    if not np.array_equal(got, expected):
        bad = np.flatnonzero(got != expected)
        raise ValidationError(
            f"payload mismatch at rank {ctx.topo.rank} from rank {ctx.peer}: {bad.size} of "
            f"{expected.size} bytes differ, first at offset {bad[0]} (got 0x{got[bad[0]]:02x}, "
            f"expected 0x{expected[bad[0]]:02x})"
        )


def _fail(
    exc: BaseException,
    writer: TraceWriter,
    run_dir: Path,
    manifest: dict,
    rank0: bool,
    fabric: Fabric | None,
    printer: Printer,
    failed: list[tuple[int, str]],
) -> int:
    reason = str(exc)
    try:
        writer.abort(reason)
    finally:
        if rank0:
            write_manifest(
                run_dir,
                {
                    **manifest,
                    "status": "incomplete",
                    "reason": reason,
                    "failed_ranks": [r for r, _ in failed],
                    "end_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
                },
            )
            print(
                f"gicbench: run failed: {reason}\ngicbench: trace (incomplete): {run_dir}",
                file=sys.stderr,
                flush=True,
            )
        if fabric is not None:
            fabric.close()
    return 1
