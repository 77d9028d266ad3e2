"""`gicbench run`: flags in the perftest/OSU style, validated into a RunConfig, then the harness."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..config import (
    ORDERINGS,
    PAYLOADS,
    PROVIDERS,
    SCOPES,
    SUBMITTERS,
    TRANSPORTS,
    RunConfig,
    parse_size,
)
from ..errors import ConfigError
from ..experiments import registry

# RunConfig field -> the flag users type (shown by `gicbench list`).
FLAGS = {
    "min_size": "-b",
    "max_size": "-e",
    "size_factor": "-f",
    "iters": "-n",
    "warmup": "-w",
    "qps": "-q",
    "threads": "-t",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run experiments (launch under mpiexec/srun; 2+ ranks)",
        description="Run one or more experiments on every rank. Example: "
        "mpiexec -n 2 gicbench run single-op -b 8 -e 4K -n 1000",
    )
    p.add_argument(
        "experiments",
        nargs="*",
        metavar="EXPERIMENT",
        help="experiments to run (see `gicbench list`); default: --suite default",
    )
    p.add_argument("--suite", help="a named suite: " + ", ".join(registry.SUITES))
    g = p.add_argument_group("sweep")
    g.add_argument("-b", "--min-size", default="8", help="smallest message size (8, 4K, 1M)")
    g.add_argument("-e", "--max-size", default=None, help="largest message size (default: -b)")
    g.add_argument("-f", "--factor", type=int, default=2, help="size multiplication factor")
    g.add_argument("-n", "--iters", type=int, default=1000, help="measured iterations per point")
    g.add_argument("-w", "--warmup", type=int, default=100, help="warm-up iterations, discarded")
    g = p.add_argument_group("traffic")
    g.add_argument("--payload", default="inline", help="|".join(PAYLOADS))
    g.add_argument("--transport", default="rc", help="|".join(TRANSPORTS))
    g.add_argument("--scope", default="selected", help="completion scope: " + "|".join(SCOPES))
    g.add_argument("-q", "--qps", type=int, default=1, help="QPs the experiment drives")
    g.add_argument("-t", "--threads", type=int, default=1, help="submitting threads per rank")
    g.add_argument("--batch", type=int, default=1, help="WQEs per doorbell")
    g.add_argument(
        "--messages", type=int, default=200_000, help="msg-rate: messages per thread and point"
    )
    g.add_argument("--ordering", default="gpu-fence", help="GPU ordering: " + "|".join(ORDERINGS))
    g = p.add_argument_group("bring-up")
    g.add_argument("--provider", default="emu", help="|".join(PROVIDERS))
    g.add_argument("--submitter", default="host", help="|".join(SUBMITTERS))
    g.add_argument("--qps-per-peer", type=int, default=1, help="RC QPs towards every peer")
    g.add_argument("--dcis", type=int, default=1, help="DCI pool size per rank")
    g.add_argument("--dcts", type=int, default=1, help="DC targets per rank (1-8)")
    g.add_argument(
        "--progress",
        default="auto",
        help="emu engine: thread (one spinning thread per rank), inline (driven by the "
        "rank's own polling) or auto (inline when ranks+engines exceed cores)",
    )
    g.add_argument("--sq-depth", type=int, default=256, help="WQEBBs per send queue")
    g.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="seconds before a missing completion is reported as a hang",
    )
    g.add_argument("--seed", type=int, default=1, help="payload pattern seed")
    g = p.add_argument_group("output")
    g.add_argument("-o", "--out", type=Path, help="run directory (default runs/<exp>-<UTC>)")
    g.add_argument("--json", action="store_true", help="print results as JSON (rank 0)")
    g.add_argument("--csv", action="store_true", help="print results as CSV (rank 0)")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def config_from_args(a: argparse.Namespace) -> RunConfig:
    if a.suite is not None and a.suite not in registry.SUITES:
        raise ConfigError("suite", a.suite, "one of " + ", ".join(registry.SUITES))
    exps = list(a.experiments) or list(registry.SUITES[a.suite or "default"])
    if a.suite and a.experiments:
        raise ConfigError("suite", a.suite, "either a suite or experiment names, not both")
    lo = parse_size(a.min_size, "min_size (-b)")
    hi = parse_size(a.max_size, "max_size (-e)") if a.max_size is not None else lo
    return RunConfig(
        experiments=exps,
        provider=a.provider,
        submitter=a.submitter,
        min_size=lo,
        max_size=hi,
        size_factor=a.factor,
        iters=a.iters,
        warmup=a.warmup,
        payload=a.payload,
        transport=a.transport,
        scope=a.scope,
        qps=a.qps,
        qps_per_peer=a.qps_per_peer,
        dcis=a.dcis,
        dcts=a.dcts,
        threads=a.threads,
        batch=a.batch,
        messages=a.messages,
        ordering=a.ordering,
        progress=a.progress,
        sq_depth=a.sq_depth,
        timeout_s=a.timeout,
        seed=a.seed,
        out=a.out,
        json=a.json,
        csv=a.csv,
        quiet=a.quiet,
    )


def main(a: argparse.Namespace) -> int:
    cfg = config_from_args(a)  # ConfigError -> exit 2 on every rank, before MPI resources
    from ..harness import run

    return run(cfg)
