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
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__, faults, rundir
from .aggregate import aggregate_point, rank_summaries
from .bootstrap import collective
from .bootstrap.bringup import BringupStats, Resources, bring_up
from .bootstrap.collective import JobFailure, Phase, Verdict, rendezvous
from .bootstrap.launch import init_mpi
from .bootstrap.signals import RunTerminated, SignalGuard
from .bootstrap.topology import Topology, choose_gpu
from .config import RunConfig
from .errors import ConfigError, GicbenchError, Refused, UnsupportedError, ValidationError
from .experiments.context import Layout, RankContext
from .experiments.registry import Experiment, PointResult
from .fabric.base import Fabric, host_view
from .fabric.registry import FabricPlan
from .output import Printer, SweepProgress
from .patterns import Traffic, traffic
from .patterns import describe as describe_pattern
from .plan import RunPlan, make_plan
from .trace import TraceWriter, read_manifest, write_manifest
from .trace.schema import rank_file

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
# traces before it names the ranks that left none (the ones that died). The launcher's SIGKILL
# usually comes first (prterun: about 0.25 s after its SIGTERM), so run.json is rewritten as
# soon as what is known changes.
ABORT_GRACE_S = 3.0
# When rank 0 left no trace, how long a rank the launcher is ending waits to hear from a lower
# rank before it writes run.json itself (the lowest rank still there does).
LEADER_WAIT_S = 0.02
QUIET_KINDS = (collective.OK, collective.LAUNCHER)  # verdicts that give no reason of their own


@dataclass
class Prepared:
    """What pre-flight decided on this rank."""

    plan: RunPlan
    traffic: Traffic
    layout: Layout
    fabric: FabricPlan  # what bring-up creates on this rank (computed once, here)
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
        fplan = plan.fabric_plan(topo, len(t.neighbours), layout)
        settings = plan.provider.preflight(fplan, topo, plan.probes)
        prepared = Prepared(plan, t, layout, fplan, settings, faults.from_env(topo.size))
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
    """Run on this rank. SIGTERM/SIGINT raise RunTerminated from here on (app/bootstrap/signals.py):
    before the run directory holds a run it reaches the caller (one line, no traceback); after,
    the run is marked and the job ended (see _run_rank)."""
    guard = SignalGuard().install()
    from . import _native

    _native.host.install_interrupt_handler()  # chains to the guard's handler
    try:
        return _run(cfg, guard)
    finally:
        guard.restore()
        _native.host.clear_interrupt()


def _run(cfg: RunConfig, guard: SignalGuard) -> int:
    comm = init_mpi()
    topo = Topology.from_comm(comm)
    faults.fire(faults.early_from_env(), "start", topo.rank)
    pre = _preflight(cfg, comm, topo)
    collective.attach(comm, cfg.timeout_s)
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
        "nic": {"provider": cfg.provider, **pre.settings},
        "status": "running",
    }
    writer: TraceWriter | None = None
    try:
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
    except (JobFailure, RunTerminated) as e:
        # Nothing runs yet: the files made so far are marked (a rank file stays incomplete,
        # run.json says why); the caller prints a signal's one line.
        guard.quiet()
        if writer is not None:
            writer.abort(str(e))
        if rank0 and (run_dir / "run.json").exists():
            # A RunTerminated here is the launcher's (the check turns one meant for a rank into
            # a JobFailure): nobody to name.
            blamed = e.blamed if isinstance(e, JobFailure) else []
            record = {**manifest, "status": "incomplete", "reason": str(e), "failed_ranks": blamed}
            write_manifest(run_dir, record)
        if isinstance(e, RunTerminated):
            raise
        if rank0:
            print(f"gicbench: run failed: {e}", file=sys.stderr, flush=True)
        collective.settle(comm, _told(e, topo))
        _leave(comm, guard, 1)
        return 1
    assert writer is not None
    return _run_rank(cfg, pre, comm, topo, run_dir, job, manifest, writer, guard)


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
    guard: SignalGuard,
) -> int:
    rank0 = topo.rank == 0
    fabric: Fabric | None = None
    submitter = None
    printer = Printer(
        "json" if cfg.json else "csv" if cfg.csv else "table", file=cfg.output_file
    )
    plan, fplan = pre.plan, pre.fabric
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
            submitter.attach_peers(res.rc, topo.size)
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
        # every rank's trace closed (a full disk fails the run on all ranks), then the end
        with Phase(comm, "end of run: close the trace"):
            writer.finish("complete")
        rendezvous(comm, "end of run")
    except JobFailure as e:
        return _end_failed(e, comm, topo, guard, writer, run_dir, manifest, fabric, printer)
    except RunTerminated as e:
        if e.launcher:  # every rank is being ended, SIGKILL follows: record, name, leave
            _end_by_launcher(e, comm, topo, guard, writer, run_dir, manifest, fabric, printer)
        where = "between phases"
        failure = collective.fail_outside(comm, where, e)
        return _end_failed(failure, comm, topo, guard, writer, run_dir, manifest, fabric, printer)
    except BaseException as e:  # a bug on this rank only: tell, record, and take the job down
        failure = collective.fail_outside(comm, "outside any phase", e)
        return _end_failed(failure, comm, topo, guard, writer, run_dir, manifest, fabric, printer)
    finally:
        if submitter is not None:
            submitter.close()
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


def _leader(comm, topo: Topology, missing: list[int]) -> bool:
    """Who writes run.json: rank 0, or when rank 0 does not answer the lowest rank that does."""
    return topo.rank == 0 or all(r in missing for r in range(topo.rank))


def _end_failed(
    e: JobFailure,
    comm,
    topo: Topology,
    guard: SignalGuard,
    writer: TraceWriter,
    run_dir: Path,
    manifest: dict[str, Any],
    fabric: Fabric | None,
    printer: Printer,
) -> int:
    """Every rank that can be told knows of the failure: record it, wait until the others have
    recorded theirs, and leave (without MPI_Finalize where a step was left pending)."""
    guard.quiet()
    leader = _leader(comm, topo, e.missing)
    if leader and topo.rank != 0:
        manifest = _on_disk(run_dir, manifest)
    _fail(e, writer, run_dir, manifest, leader, fabric, printer, failed=e.blamed)
    collective.settle(comm, _told(e, topo))
    _leave(comm, guard, 1)
    return 1


def _told(e: JobFailure, topo: Topology) -> list[int]:
    """The ranks that know of the failure and record it: all after a clean one, else those that
    answered (the launcher's ranks are leaving)."""
    if e.clean:
        return list(range(topo.size))
    return [v.rank for v in e.verdicts if v.kind != collective.LAUNCHER]


def _end_by_launcher(
    e: RunTerminated,
    comm,
    topo: Topology,
    guard: SignalGuard,
    writer: TraceWriter,
    run_dir: Path,
    manifest: dict[str, Any],
    fabric: Fabric | None,
    printer: Printer,
) -> None:
    """The launcher is ending every rank and its SIGKILL follows within a fraction of a second:
    tell the others this rank is here, mark the trace, and (rank 0, or the lowest rank left
    when rank 0 left no trace) name the ranks to blame; the NIC is closed last. Never returns."""
    guard.quiet()
    # Who was dead before the launcher began: the rank whose death made it end the job. A rank
    # that dies from here on was most likely killed by the launcher before it could speak.
    known_gone = [collective.gone(comm, r) for r in range(topo.size)]
    died_first = None if None in known_gone else {r for r, g in enumerate(known_gone) if g}
    collective.tell(comm, e)
    reason = f"rank {topo.rank} {e}"
    # A rank resumed after the others named it (it was stopped) leaves their run.json be.
    on_disk = _on_disk(run_dir, manifest)
    leads = on_disk["status"] == "running" and (
        topo.rank == 0 or _orphaned(comm, topo, run_dir, died_first)
    )
    if not leads:
        writer.abort(reason)
    else:
        record = {
            **on_disk,
            "status": "incomplete",
            "reason": reason,
            "end_utc": dt.datetime.now(dt.timezone.utc).isoformat(),
        }
        # run.json first, then this rank's trace: on a loaded machine the SIGKILL can come
        # before both are written, and run.json is what a user reads first (a trace left
        # .partial reads as incomplete anyway).
        _name_dead_ranks(
            run_dir,
            record,
            lambda: collective.heard(comm),
            lambda r: collective.gone(comm, r),
            died_first,
            after_first_write=lambda: writer.abort(reason),
        )
        if printer.fmt == "json":
            printer.finish(
                {
                    "status": "incomplete",
                    "reason": record["reason"],
                    "trace": str(run_dir),
                    "failed_ranks": record["failed_ranks"],
                }
            )
    if fabric is not None:
        fabric.close()
    _leave(comm, guard, 1)


def _orphaned(comm, topo: Topology, run_dir: Path, died_first: set[int] | None) -> bool:
    """True when every lower rank left no trace and says nothing (dead): this rank leads. A
    lower rank known dead (`died_first`) is not waited for: the launcher's SIGKILL may be a few
    milliseconds away, the rest of its 0.25 s spent while this rank's loop noticed the signal."""
    lower = [r for r in range(topo.rank) if died_first is None or r not in died_first]
    deadline = time.monotonic() + LEADER_WAIT_S
    while True:
        heard = collective.heard(comm)
        for r in range(topo.rank):
            if r in heard or rank_file(run_dir, r).exists():
                return False
        if not lower or time.monotonic() > deadline:
            return True
        time.sleep(0.005)


def _on_disk(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """run.json as rank 0 wrote it (a rank that writes it in rank 0's place keeps its fields)."""
    try:
        return {**manifest, **read_manifest(run_dir)}
    except GicbenchError:
        return manifest


def _leave(comm, guard: SignalGuard, code: int) -> None:
    """Return to the caller when MPI can finalize; else leave now: a step was left pending (a
    rank does not answer, or left the sequence), or a signal ended this rank (exit 128+N)."""
    ended = guard.raised
    if not collective.is_dirty(comm) and ended is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + ended.signum if ended is not None else code)


def _preamble(
    cfg: RunConfig, topo: Topology, b: BringupStats, open_s: float, pre: Prepared, run_dir: Path
) -> list[str]:
    nic = " ".join(f"{k}={v}" for k, v in pre.settings.items() if not isinstance(v, dict))
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
                    result.results.update(ctx.fabric.point_results(before, after))
                    ctx.fabric.check()
                # Every rank has finished sending (the phase check synchronises): validate.
                with Phase(comm, f"{where} payload validation") as check:
                    checked, sources = _validate(exp, ctx, point, index, landing)
                    check.value = checked
                # A point is validated when bytes were compared somewhere in the job and all
                # matched (a mismatch anywhere has failed the phase above).
                total_checked = sum(check.values)
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
    mine = rank_summaries(rank, result.role, result.results, result.samples)
    rows = collective.gather(comm, f"{exp.name} results", mine)
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


def _name_dead_ranks(
    run_dir: Path,
    record: dict[str, Any],
    heard: Callable[[], dict[int, Verdict]],
    gone: Callable[[int], bool | None],
    died_first: set[int] | None = None,
    after_first_write: Callable[[], object] = lambda: None,
) -> None:
    """The launcher ends the job: name the ranks to blame (collective.blame) from what the
    others said (`heard`: a signal meant for them, their failure, or that the launcher ends them
    too) and the ranks that say nothing and are dead: their process has exited (a rank on this
    host), or they leave no finished trace (elsewhere). The launcher's SIGKILL may follow within
    a fraction of a second, so run.json is written, and stderr told, as soon as what is known
    changes; the ranks still silent are waited for until ABORT_GRACE_S. `died_first`: the ranks
    already dead when this rank heard the launcher (None: not known for every rank); a rank
    that died later was ended by the launcher before it could speak, and is not blamed.
    `after_first_write` runs once, right after run.json was first written."""
    world, reason = record["world_size"], record["reason"]
    deadline, written = time.monotonic() + ABORT_GRACE_S, None
    while True:
        said = heard()
        silent = [r for r in range(world) if r not in said]
        finished = {r for r in silent if rank_file(run_dir, r).exists()}
        dead = [r for r in silent if gone(r) or (gone(r) is None and r not in finished)]
        others = [(r, v.reason) for r, v in sorted(said.items()) if v.kind not in QUIET_KINDS]
        died = dead if died_first is None else [r for r in dead if r in died_first]
        ended = [r for r in dead if r not in died]
        known = (collective.blame(list(said.values()), died, world), dead, others)
        if known != written:
            text = reason + "".join(f"; rank {r}: {why}" for r, why in others)
            if died:
                text += (
                    f"; rank(s) {', '.join(map(str, died))} left no finished trace "
                    "(died, or killed before closing it)"
                )
            if ended:
                text += (
                    f"; rank(s) {', '.join(map(str, ended))} ended by the launcher before "
                    "closing their trace"
                )
            record["failed_ranks"], record["reason"] = known[0], text
            write_manifest(run_dir, record)
            print(
                f"gicbench: run failed: {text}\ngicbench: trace (incomplete): {run_dir}",
                file=sys.stderr,
                flush=True,
            )
            if written is None:
                after_first_write()
            written = known
        if set(silent) <= set(dead) | finished or time.monotonic() > deadline:
            return
        time.sleep(0.01)


def _fail(
    exc: BaseException,
    writer: TraceWriter,
    run_dir: Path,
    manifest: dict,
    rank0: bool,
    fabric: Fabric | None,
    printer: Printer,
    failed: list[int],
) -> int:
    """Mark this rank's trace incomplete, close the NIC, and (the rank that writes run.json,
    `rank0`) the manifest, naming the `failed` ranks."""
    reason = str(exc)
    try:
        if fabric is not None:
            fabric.close()
    finally:
        writer.abort(reason)  # never raises: a trace it cannot close stays .partial
        if rank0:
            record = {
                **manifest,
                "status": "incomplete",
                "reason": reason,
                "failed_ranks": failed,
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
            footer = {
                "status": "incomplete",
                "reason": reason,
                "trace": str(run_dir),
                "failed_ranks": failed,
            }
            if printer.fmt == "json":
                printer.finish(footer)
            else:
                printer.write_file(footer)  # -J: the rows measured before the failure
    return 1


__all__ = ["Resources", "RunTerminated", "pattern_bytes", "refuse", "run"]
