"""`gicbench jobs`: list and render the Slurm/mpiexec job templates shipped from jobs/."""

from __future__ import annotations

import argparse
import shlex
import string
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

LAUNCHERS = ("srun", "mpiexec")


def templates_dir() -> Path:
    return Path(str(resources.files("gicbench") / "jobs"))


def templates() -> dict[str, Path]:
    return {p.stem: p for p in sorted(templates_dir().glob("*.sbatch"))}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("jobs", help="list or render Slurm job scripts")
    jsub = p.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    ls = jsub.add_parser("list", help="list job templates")
    ls.set_defaults(func=list_main)
    r = jsub.add_parser(
        "render",
        help="print a job script: gicbench jobs render NAME -N 2 --ntasks-per-node 4 -- single-op",
        description="Print a job script; arguments after -- are passed to `gicbench run`.",
    )
    r.add_argument("name", help="template name (see `gicbench jobs list`)")
    r.add_argument("-N", "--nodes", type=int, default=1)
    r.add_argument("--ntasks-per-node", type=int, default=2)
    r.add_argument("--time", default="00:15:00", help="Slurm time limit")
    r.add_argument("--partition", default="", help="Slurm partition (empty: cluster default)")
    r.add_argument("--account", default="", help="Slurm account (empty: none)")
    r.add_argument("--launcher", default="srun", help="|".join(LAUNCHERS))
    r.add_argument("--mpi", default="pmix", help="srun --mpi plugin (pmix, pmi2, ...)")
    r.set_defaults(func=render_main)


def list_main(args: argparse.Namespace) -> int:
    for name, path in templates().items():
        first = next(
            (
                ln[2:].strip()
                for ln in path.read_text().splitlines()
                if ln.startswith("# ") and "SBATCH" not in ln
            ),
            "",
        )
        print(f"{name:24s} {first}")
    return 0


def render(
    name: str,
    *,
    nodes: int,
    ntasks_per_node: int,
    time: str,
    partition: str,
    account: str,
    launcher: str,
    mpi: str,
    run_args: list[str],
) -> str:
    tpls = templates()
    if name not in tpls:
        raise ConfigError("template", name, "one of " + ", ".join(tpls))
    if launcher not in LAUNCHERS:
        raise ConfigError("launcher", launcher, "one of " + ", ".join(LAUNCHERS))
    if nodes < 1:
        raise ConfigError("nodes", nodes, "an integer >= 1")
    if ntasks_per_node < 1:
        raise ConfigError("ntasks_per_node", ntasks_per_node, "an integer >= 1")
    ntasks = nodes * ntasks_per_node
    launch = (
        f"srun --mpi={mpi} -n {ntasks}"
        if launcher == "srun"
        else f"mpiexec -n {ntasks} --map-by ppr:{ntasks_per_node}:node"
    )
    args = list(run_args)
    extra = "\n".join(
        line
        for line in (
            f"#SBATCH --partition={partition}" if partition else "",
            f"#SBATCH --account={account}" if account else "",
        )
        if line
    )
    return string.Template(tpls[name].read_text()).substitute(
        NODES=nodes,
        NTASKS_PER_NODE=ntasks_per_node,
        NTASKS=ntasks,
        TIME=time,
        EXTRA_SBATCH=extra,
        LAUNCH=launch,
        RUN_ARGS=shlex.join(args),
    )


def render_main(args: argparse.Namespace) -> int:
    print(
        render(
            args.name,
            nodes=args.nodes,
            ntasks_per_node=args.ntasks_per_node,
            time=args.time,
            partition=args.partition,
            account=args.account,
            launcher=args.launcher,
            mpi=args.mpi,
            run_args=args.passthrough,
        ),
        end="",
    )
    return 0
