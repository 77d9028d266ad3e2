"""`gicbench` command line: run | list | analyze | report | fit | jobs | doctor."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import NoReturn

from .. import __version__
from ..bootstrap.signals import RunTerminated
from ..errors import ConfigError, GicbenchError, Refused, UnsupportedError

REFUSALS = (ConfigError, UnsupportedError, Refused)  # bad input or a choice that cannot run: 2


class UsageError(GicbenchError):
    """argparse's own complaint (unknown flag, missing value), raised instead of exiting so
    `run` reports it like any other refusal: once, with every rank exiting 2."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        self.parser = parser
        super().__init__(message)


class _StoreOnce(argparse._StoreAction):
    """`store`, refusing a second occurrence (`-n 5 -n 6` kept 6 silently)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # type: ignore[override]
        given = namespace.__dict__.setdefault("_given", set())
        if self.option_strings and self.dest in given:
            parser.error(f"argument {'/'.join(self.option_strings)}: given more than once")
        given.add(self.dest)
        super().__call__(parser, namespace, values, option_string)


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Every store option of every subcommand (groups share these registries).
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def error(self, message: str):  # type: ignore[override]
        raise UsageError(self, message)


def build_parser() -> argparse.ArgumentParser:
    from . import doctor, jobs, listing, run

    p = Parser(
        prog="gicbench",
        description="Dissect GPU-initiated and CPU-proxy RDMA communication. Launch `run` under "
        "mpiexec/srun; analyse the per-rank HDF5 traces offline with `analyze`/`report`.",
    )
    p.add_argument("--version", action="version", version=f"gicbench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run.add_parser(sub)
    listing.add_parser(sub)
    _add_analysis(sub)
    jobs.add_parser(sub)
    doctor.add_parser(sub)
    return p


def _add_analysis(sub: argparse._SubParsersAction) -> None:
    from ..analysis import cli as acli

    a = sub.add_parser("analyze", help="summarise one or more runs (ratios side by side)")
    acli.add_analyze_args(a)
    a.set_defaults(func=acli.run_analyze)
    r = sub.add_parser("report", help="write RUN/report.md with tables and PNG plots")
    acli.add_report_args(r)
    r.set_defaults(func=acli.run_report)
    from ..analysis import fit_cli

    f = sub.add_parser("fit", help="fit clock|plateau|crossover|exposed to a CSV table (e.g. "
                       "numbers from a paper)")
    fit_cli.add_fit_args(f)
    f.set_defaults(func=fit_cli.run_fit)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # ^C before the command installed its own handling (imports)
        print("gicbench: interrupted (SIGINT)", file=sys.stderr, flush=True)
        return 128 + signal.SIGINT


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after `--` passes through untouched (e.g. `jobs render NAME -- <run args>`).
    passthrough: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1 :]
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        if argv[:1] == ["run"]:
            # Under a launcher every rank sees the same bad flag: report it once, collectively.
            from ..harness import refuse

            try:
                refuse(Refused(f"gicbench run: {e.args[0]} (see gicbench run --help)"))
            except REFUSALS:
                return 2
        e.parser.print_usage(sys.stderr)
        print(f"{e.parser.prog}: error: {e}", file=sys.stderr)
        return 2
    args.passthrough = passthrough
    try:
        return int(args.func(args) or 0)
    except RunTerminated as e:
        _ended_in_start_up(e)
    except REFUSALS as e:
        if getattr(e, "reported", False):
            return 2  # the harness printed it once, on the rank that saw it first
        from ..bootstrap.launch import launcher_rank

        if launcher_rank() == 0:
            print(f"gicbench: error: {e}", file=sys.stderr)
        return 2
    except GicbenchError as e:
        # Errors that reach here are the job's (collective failures carry every rank's reason):
        # one message from rank 0.
        from ..bootstrap.launch import launcher_rank

        if launcher_rank() == 0:
            print(f"gicbench: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def _ended_in_start_up(e: RunTerminated) -> NoReturn:
    """A signal before the run directory held a run: one line, and out without MPI_Finalize
    (the other ranks may be inside a collective this rank will never join)."""
    from ..bootstrap.launch import launcher_rank

    rank = launcher_rank()
    if not e.launcher or rank == 0:
        print(f"gicbench: rank {rank}: {e} during start-up", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(128 + e.signum)


if __name__ == "__main__":
    sys.exit(main())
