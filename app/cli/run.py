"""`gicbench run`: the flags are generated from the knobs that RunConfig, the experiments and
the submitters declare (app/knobs.py); values go through the same checks as the Python API."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..config import OUTPUT_FORMATS, RunConfig
from ..errors import ConfigError
from ..experiments import registry
from ..knobs import KIND_FLOAT, KIND_INT, KIND_SIZE, Knob

# What a flag's value looks like in the usage line (the allowed range is in its help, once).
METAVARS = {KIND_INT: "N", KIND_SIZE: "SIZE", KIND_FLOAT: "X"}


def knob_catalog() -> list[tuple[str, Knob, dict[str, Any], list[str]]]:
    """(field, knob, {owner: default}, owners) for every knob a run takes, shared ones first.
    Owners are "all" (every run), experiment names, "--submitter NAME" and "--provider NAME";
    each owner's own default, since experiments differ (msg-rate's --batch is 1, payload's 16)."""
    from ..fabric import registry as providers
    from ..plan import all_knobs
    from ..submit import base as submitters

    owners: dict[str, list[str]] = {}
    defaults: dict[str, dict[str, Any]] = {}
    classes: list[tuple[str, type]] = [("all", RunConfig)]
    classes += [(n, registry.get(n).Params) for n in registry.names()]
    classes += [(f"--submitter {n}", submitters.get(n).Params) for n in submitters.names()]
    classes += [(f"--provider {n}", providers.get(n).Params) for n in providers.names()]
    for owner, cls in classes:
        for f in dataclasses.fields(cls):
            if "knob" in f.metadata:
                owners.setdefault(f.name, []).append(owner)
                if f.default is not dataclasses.MISSING:
                    defaults.setdefault(f.name, {})[owner] = f.default
    return [(name, k, defaults.get(name, {}), owners[name]) for name, k in all_knobs().items()]


def default_text(k: Knob, defaults: dict[str, Any]) -> str:
    """The default(s) of one flag, stated once: "default: 16", or per owner where they differ
    ("default: msg-rate 1; loaded-rtt, payload 16"). A help text that gives the default in its
    own words (e.g. "default: -b") covers the owners without a value; the others follow it
    by name ("payload: 1M")."""
    stated = "default" in k.help.lower()
    by_value: dict[str, list[str]] = {}
    for owner, v in defaults.items():
        if v is None or v == "":
            if stated:
                continue
            text = "chosen by the run"
        else:
            text = k.show(v)
        by_value.setdefault(text, []).append(owner)
    if not by_value:
        return ""
    if len(by_value) == 1 and not stated:
        return "default: " + next(iter(by_value))
    sep = ": " if stated else " "  # after the help's own default: "payload: 1M"
    parts = [f"{', '.join(o for o in owners if o != 'all') or 'all'}{sep}{text}"
             for text, owners in by_value.items()]
    return ("" if stated else "default: ") + "; ".join(parts)


def metavar(k: Knob) -> str | None:
    """LIST for comma-separated values, N/SIZE/X for numbers; None lets argparse name a
    choice by its flag (PATTERN)."""
    if k.many:
        return "LIST"
    if k.choices:
        return None
    return METAVARS.get(k.kind, "STR")


def flag_help(k: Knob, defaults: dict[str, Any]) -> str:
    """The help line of a flag: what it does, its default(s) and what is allowed, each once."""
    allowed = k.describe_allowed()
    allowed = "" if allowed == k.kind else allowed  # a bare type ("str") says nothing
    extra = [t for t in (default_text(k, defaults), allowed) if t]
    return f"{k.help} ({'; '.join(extra)})" if extra else k.help


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run experiments (launch under mpiexec/srun; 2+ ranks)",
        description="Run one or more experiments on every rank. Example: "
        "mpiexec -n 2 gicbench run single-op -b 8 -e 4K -n 1000. Every flag below names the "
        "experiments or submitter it applies to; a flag given to a run that does not use it "
        "is refused.",
    )
    p.add_argument(
        "experiments",
        nargs="*",
        metavar="EXPERIMENT",
        help="experiments to run (see `gicbench list`); default: --suite default",
    )
    p.add_argument("--suite", help="a named suite: " + ", ".join(registry.SUITES))
    groups: dict[str, argparse._ArgumentGroup] = {}
    for name, k, defaults, owners in knob_catalog():
        group_name = "run" if owners == ["all"] else ", ".join(owners)
        g = groups.get(group_name) or groups.setdefault(
            group_name, p.add_argument_group(group_name)
        )
        flags = [k.short, k.flag] if k.short else [k.flag]
        g.add_argument(
            *flags,
            dest=name,
            default=argparse.SUPPRESS,
            metavar=metavar(k),
            help=flag_help(k, defaults),
        )
    g = p.add_argument_group("output")
    g.add_argument(
        "-o", "--out", help="run directory, new or empty (default runs/<exp>-<UTC>)"
    )
    g.add_argument("--json", action="store_true", help="print results as JSON (rank 0)")
    g.add_argument("--csv", action="store_true", help="print results as CSV (rank 0)")
    g.add_argument(
        "-J",
        "--output-file",
        metavar="FILE",
        help="also write the results to FILE, JSON or CSV by its suffix ("
        + ", ".join(OUTPUT_FORMATS)
        + "), beside the table or --json/--csv on stdout (rank 0; a new file)",
    )
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=main)


def config_from_args(a: argparse.Namespace) -> RunConfig:
    if a.suite is not None and a.suite not in registry.SUITES:
        raise ConfigError("suite", a.suite, "one of " + ", ".join(registry.SUITES))
    if a.suite and a.experiments:
        raise ConfigError("suite", a.suite, "either a suite or experiment names, not both")
    exps = list(a.experiments) or list(registry.SUITES[a.suite or "default"])
    for name in exps:
        registry.get(name)  # refuses unknown names with the list
    values: dict[str, Any] = {}
    for name, k, _defaults, _owners in knob_catalog():
        if hasattr(a, name):
            values[name] = k.parse(name, getattr(a, name))
    return RunConfig.build(
        experiments=exps,
        out=a.out,
        json=a.json,
        csv=a.csv,
        output_file=a.output_file,
        quiet=a.quiet,
        **values,
    )


def share_gpu_connections() -> None:
    """Ranks sharing a GPU under MPS ask CUDA for few work queues, set before anything of this
    process initialises CUDA (cuda_host.share_mps_connections)."""
    import os

    from ..cuda_host import share_mps_connections
    from ..platform import probe_gpus, probe_mps, ranks_per_gpu
    from ..sweep.bind import launcher_local_size

    try:
        local = launcher_local_size(os.environ)
    except ConfigError:
        return  # not a count a launcher set: the run's own checks see the ranks from MPI
    if not local or local < 2 or not probe_mps().ok:  # the MPS probe first: no process runs
        return
    gpus = probe_gpus().data.get("gpus", [])
    if gpus:
        share_mps_connections(ranks_per_gpu(local, gpus))


def main(a: argparse.Namespace) -> int:
    from ..harness import refuse, run

    share_gpu_connections()
    try:
        cfg = config_from_args(a)
    except ConfigError as e:
        refuse(e, json_out=getattr(a, "json", False))  # once, by one rank; raises
        raise
    return run(cfg)
