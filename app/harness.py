"""The harness: owns pre-flight, bring-up, the sweep, payload validation, traces and rank 0's
output. Experiments fill their contract (app/experiments/registry.py); submitters post.

Order of a run, and why:
1. pre-flight, on every rank, before anything exists: the plan (knobs, submitter, provider,
   pattern, limits) and the fault spec; the verdicts are gathered, and the lowest failing rank
   prints the one message (exit 2 everywhere).
2. the run directory, decided by rank 0 (new or empty, never an earlier run) and checked for
   visibility by every rank; again refused collectively (exit 2).
3. run.json and the rank files, then the NIC: every later failure marks the traces incomplete,
   closes the NIC (shared memory included) on every rank, and names the rank.
Every phase ends in a collective check; SIGTERM/SIGINT (the launcher ending the job) marks the
trace incomplete before exiting.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, faults, rundir
from .aggregate import aggregate_point, rank_summaries
from .bootstrap.bringup import BringupStats, Resources, bring_up
from .bootstrap.collective import JobFailure, Phase, describe, rendezvous
from .bootstrap.launch import init_mpi
from .bootstrap.topology import Topology, choose_gpu
from .config import RunConfig
from .errors import ConfigError, GicbenchError, Refused, UnsupportedError, ValidationError
from .experiments.context import Layout, RankContext
from .experiments.registry import Experiment, PointResult
from .fabric.base import Fabric, host_view
from .output import Printer, SweepProgress
from .patterns import Traffic, traffic
from .patterns import describe as describe_pattern
from .plan import RunPlan, make_plan
from .trace import TraceWriter, write_manifest

ENV_KEYS = (
    "SLURM_JOB_ID",
    "SLURM_NODELIST",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    faults.ENV,
)
# How long rank 0 waits, when the launcher ends the job, for the other ranks to mark their
# traces before it names the ranks that left none (the ones that died).
ABORT_GRACE_S = 3.0


class RunTerminated(BaseException):
    """SIGTERM/SIGINT arrived: the launcher is ending the job."""

    def __init__(self, signum: int, message: str = "") -> None:
        self.signum = signum
        super().__init__(message or f"terminated by {signal.Signals(signum).name}")


@dataclass
class Prepared:
    """What pre-flight decided on this rank."""

    plan: RunPlan
    traffic: Traffic
    layout: Layout
    settings: dict[str, Any]  # the provider's resolved settings (progress mode, ...)
    fault: faults.Fault | None


def pattern_bytes(seed: int, point: int, rank: int, nbytes: int) -> np.ndarray:
    """The bytes rank `rank` sends at `point`: every rank can compute any peer's."""
    return np.random.default_rng([seed, point, rank]).integers(0, 256, nbytes, dtype=np.uint8)


def _report_refusal(comm, exc: BaseException | None, json_out: bool) -> None:
    """Every rank learns every verdict; the lowest failing rank prints its message once, and
    every rank raises (exit 2 from the CLI). No rank exits before the message is out."""
    verdicts = comm.allgather(None if exc is None else f"{exc}")
    failing = [r for r, v in enumerate(verdicts) if v is not None]
    if not failing:
        return
    first = failing[0]
    if comm.rank == first:
        assert exc is not None
        kind = "unsupported" if isinstance(exc, UnsupportedError) else "error"
        print(f"gicbench: {kind}: {exc}", file=sys.stderr, flush=True)
        if json_out:
            print(json.dumps({"status": "refused", "error": str(exc), "rank": first}), flush=True)
    comm.Barrier()
    err = exc if exc is not None else Refused(f"rank {first}: {verdicts[first]}")
    err.reported = True  # type: ignore[attr-defined]
    raise err


def refuse(exc: BaseException, json_out: bool = False) -> None:
    """Report a refusal found before the harness ran (the command line's own checks) the same
    way: once, by the lowest rank that saw it, after every rank has reached this point."""
    comm = init_mpi()
    _report_refusal(comm, exc, json_out)


def _preflight(cfg: RunConfig, comm, topo: Topology) -> Prepared:
    refusal: BaseException | None = None
    prepared = None
    try:
        plan = make_plan(cfg)
        t = traffic(cfg.pattern, topo.rank, topo.size)
        for exp in plan.experiments:
            exp.check_rank(t)
        layout = plan.layout(topo.size)
        settings = plan.provider.preflight(
            plan.fabric_plan(topo, len(t.neighbours)), topo, plan.probes
        )
        prepared = Prepared(plan, t, layout, settings, faults.from_env())
    except (ConfigError, UnsupportedError) as e:
        refusal = e
    _report_refusal(comm, refusal, cfg.json)
    assert prepared is not None
    return prepared


def _claim_run_dir(cfg: RunConfig, comm) -> Path:
    """Rank 0 claims the directory; every rank must see it (a shared filesystem)."""
    refusal: BaseException | None = None
    path, created = None, False
    if comm.rank == 0:
        path = Path(cfg.out) if cfg.out is not None else rundir.default_run_dir(cfg.experiments)
        try:
            created = rundir.claim(path)
        except ConfigError as e:
            refusal = e
    path = comm.bcast(path, root=0)
    if refusal is None and comm.rank != 0 and not Path(path).is_dir():
        refusal = ConfigError(
            "out (-o)",
            str(path),
            f"a directory on a filesystem every rank sees (rank {comm.rank} does not see it)",
        )
    try:
        _report_refusal(comm, refusal, cfg.json)
    except GicbenchError:
        if comm.rank == 0:
            rundir.release(path, created)
        raise
    return Path(path)


def run(cfg: RunConfig) -> int:
    comm = init_mpi()
    topo = Topology.from_comm(comm)
    pre = _preflight(cfg, comm, topo)
    run_dir = _claim_run_dir(cfg, comm)
    rank0 = topo.rank == 0
    job = comm.bcast(os.environ.get("SLURM_JOB_ID") or secrets.token_hex(4) if rank0 else None)
    run_id = comm.bcast(secrets.token_hex(8) if rank0 else None)
    from .platform import probe_gpus

    gpu = choose_gpu(topo, probe_gpus().data.get("gpus", []))
    n_points = sum(len(points) for _, points in pre.plan.points)
    manifest = {
        "run_id": run_id,
        "experiments": cfg.experiments,
        "config": cfg.to_dict(),
        "world_size": topo.size,
        "points_per_rank": n_points,
        "provider": cfg.provider,
        "submitter": cfg.submitter,
        "pattern": cfg.pattern,
        "argv": sys.argv,
        "start_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
        "hosts": sorted(set(topo.hosts)),
        "status": "running",
    }
    writer: TraceWriter | None = None
    with Phase(comm, "run directory: manifest and rank files"):
        if rank0:
            write_manifest(run_dir, manifest)
        writer = TraceWriter(
            run_dir,
            topo.rank,
            topo.size,
            meta={
                "run_id": run_id,
                "experiments": cfg.experiments,
                "config": cfg.to_dict(),
                "provider": cfg.provider,
                "submitter": cfg.submitter,
                "submitter_params": _as_dict(pre.plan.submitter_params),
                "pattern": cfg.pattern,
                "role": pre.traffic.role,
                "host": topo.host,
                "local_rank": topo.local_rank,
                "gpu": gpu or {},
                "nic": {"provider": cfg.provider, **pre.settings},
                "sm_clock_hz": float("nan"),  # no GPU code runs in the host submitter
                "argv": sys.argv,
                "env": {k: os.environ[k] for k in ENV_KEYS if k in os.environ},
            },
        )
    assert writer is not None

    def on_signal(signum: int, _frame: object) -> None:
        raise RunTerminated(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    from . import _native

    _native.host.install_interrupt_handler()
    try:
        return _run_rank(cfg, pre, comm, topo, run_dir, job, manifest, writer)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _native.host.clear_interrupt()


def _as_dict(params: Any) -> dict[str, Any]:
    import dataclasses

    return dataclasses.asdict(params) if dataclasses.is_dataclass(params) else {}


def _run_rank(
    cfg: RunConfig,
    pre: Prepared,
    comm,
    topo: Topology,
    run_dir: Path,
    job: str,
    manifest: dict[str, Any],
    writer: TraceWriter,
) -> int:
    rank0 = topo.rank == 0
    fabric: Fabric | None = None
    submitter = None
    printer = Printer("json" if cfg.json else "csv" if cfg.csv else "table")
    plan = pre.plan
    fplan = plan.fabric_plan(topo, len(pre.traffic.neighbours))
    try:
        t0 = time.perf_counter()
        # The NIC is assigned before the phase check, so any failure below still closes it.
        with Phase(comm, "bring-up: open NIC"):
            plan.submitter.preload(plan.submitter_params, topo.local_rank)  # before any engine
            fabric = plan.provider.open(fplan, topo, job, pre.settings)
            faults.fire(pre.fault, "open", topo.rank)
        open_s = time.perf_counter() - t0
        res, bring = bring_up(fabric, fplan, *fplan.mr_sizes, topo, comm, pre.traffic)
        submitter = plan.submitter(
            rank=topo.rank,
            fabric=fabric,
            progress=fabric.progress_policy(),
            timeout_s=cfg.timeout_s,
            params=plan.submitter_params,
        )
        with Phase(comm, "bring-up: attach queues to the submitter"):
            submitter.attach_queues([q for p in sorted(res.rc) for q in res.rc[p]] + res.dcis)
        ctx = RankContext(cfg, comm, topo, fabric, res, submitter, pre.traffic, pre.layout)
        if rank0:
            printer.preamble(
                _preamble(cfg, topo, bring, open_s, pre, run_dir),
                {
                    "gicbench": __version__,
                    "run_id": manifest["run_id"],
                    "config": cfg.to_dict(),
                    "world_size": topo.size,
                    "nic": pre.settings,
                    "bringup": bring.as_dict(),
                    "run_dir": str(run_dir),
                },
            )
        _sweep(ctx, plan, pre.fault, writer, printer, rank0)
        with Phase(comm, "end of run: close the trace"):
            writer.finish("complete")
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
            failed=None,
        )
        sys.stdout.flush()
        os._exit(128 + e.signum)  # peers may be gone: no MPI_Finalize
    except BaseException as e:  # a bug on this rank only: tell, record, and take the job down
        print(f"gicbench: rank {topo.rank}: {describe(e)}", file=sys.stderr, flush=True)
        _fail(
            e, writer, run_dir, manifest, rank0, fabric, printer, failed=[(topo.rank, describe(e))]
        )
        comm.Abort(1)
    finally:
        if submitter is not None:
            submitter.close()
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


def _preamble(
    cfg: RunConfig, topo: Topology, b: BringupStats, open_s: float, pre: Prepared, run_dir: Path
) -> list[str]:
    nic = " ".join(f"{k}={v}" for k, v in pre.settings.items())
    dc = f" + {b.dcis} DCIs + {b.dcts} DCTs" if b.dcis or b.dcts else ""
    return [
        f"gicbench {__version__}  {' '.join(cfg.experiments)}  provider={cfg.provider} "
        f"submitter={cfg.submitter} ranks={topo.size} nodes={topo.nodes} {nic}",
        f"bring-up: {b.rc_qps} RC QPs{dc} per rank in {(open_s + b.seconds) * 1e3:.1f} ms "
        f"(open {open_s * 1e3:.1f}, create {b.create_s * 1e3:.1f}, exchange "
        f"{b.exchange_s * 1e3:.1f}, connect {b.connect_s * 1e3:.1f}); "
        f"{b.qps_per_second:,.0f} QPs/s per rank",
        f"{describe_pattern(cfg.pattern, topo.size)}; latency = median over sending ranks; "
        f"trace: {run_dir}",
    ]


def _sweep(
    ctx: RankContext, plan: RunPlan, fault, writer: TraceWriter, printer: Printer, rank0: bool
) -> None:
    comm, topo, res = ctx.comm, ctx.topo, ctx.res
    assert res.src is not None and res.landing is not None
    src = host_view(res.src.addr, ctx.layout.region_bytes)
    landing = host_view(res.landing.addr, res.landing.length)
    total = sum(len(points) for _, points in plan.points)
    index = 0
    quiet = ctx.cfg.quiet or ctx.cfg.json or ctx.cfg.csv
    with SweepProgress(total, rank0 and not quiet) as bar:
        for exp, points in plan.points:
            if rank0:
                printer.begin_experiment(exp.name, exp.columns())
            for point in points:
                src[:] = pattern_bytes(ctx.cfg.seed, index, topo.rank, src.size)
                landing[:] = 0
                rendezvous(comm, f"start of point {index}")
                before = ctx.fabric.counters()
                where = f"{exp.name} point {index} ({_label(point)})"
                with Phase(comm, where):
                    faults.fire(fault, index, topo.rank)
                    t0 = time.perf_counter()
                    result = exp.run_point(ctx, point)
                    wall = time.perf_counter() - t0
                    if result.samples:  # what the submitter measured besides the samples
                        result.results.update(ctx.submitter.point_details())
                    after = ctx.fabric.counters()
                    ctx.fabric.check()
                # Every rank has finished sending (the phase check synchronises): validate.
                with Phase(comm, f"{where} payload validation"):
                    checked, sources = _validate(exp, ctx, point, index, landing)
                # A point is validated when bytes were compared somewhere in the job and all
                # matched (a mismatch anywhere has failed the phase above).
                total_checked = comm.allreduce(checked)
                result.results.update(
                    validated=total_checked > 0,
                    validated_bytes=checked,
                    validated_sources=sources,
                    wall_s=wall,
                )
                # A rank that cannot write its trace (a full disk) fails the job on every rank.
                with (
                    Phase(comm, f"{where}: writing the trace"),
                    writer.begin_point(exp.name, point) as pw,
                ):
                    for metric, ns in result.samples.items():
                        pw.add_samples(metric, ns)
                    pw.set_counters(before, after)
                    pw.set_results({"role": result.role, **result.results})
                _print_row(comm, printer, exp, point, result, topo.rank, rank0)
                if rank0:
                    bar.advance(f"{exp.name} {_label(point)}")
                index += 1


def _print_row(
    comm,
    printer: Printer,
    exp: Experiment,
    point: dict,
    result: PointResult,
    rank: int,
    rank0: bool,
) -> None:
    rows = comm.gather(rank_summaries(rank, result.role, result.results, result.samples), root=0)
    if rank0:
        for row in aggregate_point(point, [s for r in rows for s in r]):
            printer.row(exp.name, row)


def _label(point: dict[str, Any]) -> str:
    keys = ("size", "mode", "qps", "threads", "batch")
    return " ".join(f"{k}={point[k]}" for k in keys if k in point)


def _validate(
    exp: Experiment, ctx: RankContext, point: dict[str, Any], index: int, landing: np.ndarray
) -> tuple[int, list[int]]:
    """Compare this rank's landing regions with what each neighbour sent; returns the bytes
    compared and the sources checked."""
    checked, sources = 0, []
    for source in ctx.traffic.neighbours:
        sent = pattern_bytes(ctx.cfg.seed, index, source, ctx.layout.region_bytes)
        # The round trip's requester stamps the sequence into its send buffer's last word.
        pieces = exp.expected_landing(ctx, point, source, sent, ctx.layout)
        base = ctx.layout.region_offset(ctx.traffic, source)
        for offset, expected in pieces:
            got = landing[base + offset : base + offset + expected.size]
            if not np.array_equal(got, expected):
                bad = np.flatnonzero(got != expected)
                raise ValidationError(
                    f"payload mismatch at rank {ctx.topo.rank} from rank {source}: {bad.size} "
                    f"of {expected.size} bytes differ at region offset {offset}, first at "
                    f"{offset + bad[0]} (got 0x{got[bad[0]]:02x}, expected "
                    f"0x{expected[bad[0]]:02x})"
                )
            checked += expected.size
        if pieces:
            sources.append(source)
    return checked, sources


def _name_dead_ranks(run_dir: Path, record: dict[str, Any]) -> None:
    """The launcher ends the job because ranks died: name those that leave no finished trace.
    Live ranks close theirs within milliseconds of the SIGTERM; the launcher's SIGKILL may
    follow soon, so the manifest is rewritten as soon as the list settles, then refined."""
    world, reason = record["world_size"], record["reason"]
    deadline, written = time.monotonic() + ABORT_GRACE_S, None
    while True:
        dead = [r for r in range(world) if not (run_dir / f"rank-{r:05d}.h5").exists()]
        if dead != written:
            record["failed_ranks"] = dead
            record["reason"] = (
                f"{reason}; rank(s) {', '.join(map(str, dead))} left no finished trace "
                "(died, or killed before closing it)"
                if dead
                else reason
            )
            write_manifest(run_dir, record)
            written = dead
        if not dead or time.monotonic() > deadline:
            return
        time.sleep(0.02)


def _fail(
    exc: BaseException,
    writer: TraceWriter,
    run_dir: Path,
    manifest: dict,
    rank0: bool,
    fabric: Fabric | None,
    printer: Printer,
    failed: list[tuple[int, str]] | None,
) -> int:
    """Mark this rank's trace incomplete, close the NIC, and (rank 0) the manifest. `failed`
    None: the launcher is ending the job; the dead ranks are those that leave no trace."""
    reason = str(exc)
    try:
        if fabric is not None:
            fabric.close()
    finally:
        writer.abort(reason)  # never raises: a trace it cannot close stays .partial
        if rank0:
            failed_ranks = None if failed is None else [r for r, _ in failed]
            record = {
                **manifest,
                "status": "incomplete",
                "reason": reason,
                "failed_ranks": failed_ranks,
                "end_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
            }
            unmarked = None
            try:  # first, in case the launcher's SIGKILL follows
                write_manifest(run_dir, record)
            except (OSError, GicbenchError) as e:  # a full disk: say so, and go on failing
                unmarked = e
            print(
                f"gicbench: run failed: {reason}\ngicbench: trace (incomplete): {run_dir}",
                file=sys.stderr,
                flush=True,
            )
            if unmarked is not None:
                print(f"gicbench: run.json could not be marked incomplete (it still says "
                      f"running): {unmarked}", file=sys.stderr, flush=True)
            if printer.fmt == "json":
                printer.finish(
                    {
                        "status": "incomplete",
                        "reason": reason,
                        "trace": str(run_dir),
                        "failed_ranks": failed_ranks,
                    }
                )
            if failed is None and unmarked is None:
                _name_dead_ranks(run_dir, record)
    return 1


__all__ = ["Resources", "RunTerminated", "pattern_bytes", "refuse", "run"]
