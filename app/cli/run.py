"""`gicbench run`: the flags are generated from the knobs that RunConfig, the experiments and
the submitters declare (app/knobs.py); values go through the same checks as the Python API."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ..config import RunConfig
from ..errors import ConfigError
from ..experiments import registry
from ..knobs import Knob


def knob_catalog() -> list[tuple[str, Knob, Any, list[str]]]:
    """(field, knob, default, owners) for every knob a run takes, shared ones first."""
    from ..fabric import registry as providers
    from ..plan import all_knobs
    from ..submit import base as submitters

    owners: dict[str, list[str]] = {}
    defaults: dict[str, Any] = {}
    classes: list[tuple[str, type]] = [("all", RunConfig)]
    classes += [(n, registry.get(n).Params) for n in registry.names()]
    classes += [(f"--submitter {n}", submitters.get(n).Params) for n in submitters.names()]
    classes += [(f"--provider {n}", providers.get(n).Params) for n in providers.names()]
    for owner, cls in classes:
        for f in dataclasses.fields(cls):
            if "knob" in f.metadata:
                owners.setdefault(f.name, []).append(owner)
                if f.default is not dataclasses.MISSING:
                    defaults.setdefault(f.name, f.default)
    return [(name, k, defaults.get(name), owners[name]) for name, k in all_knobs().items()]


def _default_text(v: Any) -> str:
    if isinstance(v, tuple):
        return ",".join(map(str, v))
    return "as needed" if v is None else str(v)


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
    for name, k, default, owners in knob_catalog():
        group_name = "run" if owners == ["all"] else ", ".join(owners)
        g = groups.get(group_name) or groups.setdefault(
            group_name, p.add_argument_group(group_name)
        )
        flags = [k.short, k.flag] if k.short else [k.flag]
        g.add_argument(
            *flags,
            dest=name,
            default=argparse.SUPPRESS,
            metavar=k.describe_allowed().upper() if k.choices is None else None,
            help=f"{k.help} (default: {_default_text(default)}; {k.describe_allowed()})",
        )
    g = p.add_argument_group("output")
    g.add_argument(
        "-o", "--out", help="run directory, new or empty (default runs/<exp>-<UTC>)"
    )
    g.add_argument("--json", action="store_true", help="print results as JSON (rank 0)")
    g.add_argument("--csv", action="store_true", help="print results as CSV (rank 0)")
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
    for name, k, _default, _owners in knob_catalog():
        if hasattr(a, name):
            values[name] = k.parse(name, getattr(a, name))
    return RunConfig.build(
        experiments=exps, out=a.out, json=a.json, csv=a.csv, quiet=a.quiet, **values
    )


def main(a: argparse.Namespace) -> int:
    from ..harness import refuse, run

    try:
        cfg = config_from_args(a)
    except ConfigError as e:
        refuse(e, json_out=getattr(a, "json", False))  # once, by one rank; raises
        raise
    return run(cfg)
