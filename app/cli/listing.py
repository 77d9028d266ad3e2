"""`gicbench list`: the experiments, their knobs (from their Params), the submitters and suites."""

from __future__ import annotations

import argparse
import dataclasses
import json

from ..experiments import registry
from ..knobs import knob_fields
from ..submit import base as submitters


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list experiments, their knobs and suites")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def _knobs(params: type) -> list[dict]:
    out = []
    for f, k in knob_fields(params):
        default = f.default if f.default is not dataclasses.MISSING else None
        out.append(
            {
                "field": f.name,
                "flag": k.short or k.flag,
                "long": k.flag,
                "default": list(default) if isinstance(default, tuple) else default,
                "allowed": k.describe_allowed(),
                "help": k.help,
            }
        )
    return out


def describe() -> list[dict]:
    out = []
    for name in registry.names():
        cls = registry.get(name)
        out.append(
            {
                "name": name,
                "summary": cls.summary,
                "method": cls.method,
                "shapes": sorted(s.value for s in cls.shapes),
                "submitters": [
                    s
                    for s in submitters.names()
                    if cls.shapes <= submitters.get(s).shapes
                ],
                "patterns": list(cls.patterns),
                "fits": list(cls.fits),
                "knobs": _knobs(cls.Params),
            }
        )
    return out


def _shown(default: object) -> str:
    if default is None:
        return "auto"  # derived from another knob (e.g. -e defaults to -b)
    if isinstance(default, list):
        return ",".join(map(str, default))
    return str(default)


def main(args: argparse.Namespace) -> int:
    exps = describe()
    if args.json:
        print(json.dumps({"experiments": exps, "suites": registry.SUITES}, indent=2, default=str))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title="gicbench experiments", show_lines=True)
    t.add_column("experiment", style="bold")
    t.add_column("what it measures")
    t.add_column("submitters / patterns")
    t.add_column("knobs (flag=default)")
    for e in exps:
        knobs = "  ".join(f"{k['flag']}={_shown(k['default'])}" for k in e["knobs"])
        t.add_row(
            e["name"],
            f"{e['summary']}\n[dim]{e['method']}[/dim]",
            f"{','.join(e['submitters'])}\n[dim]{','.join(e['patterns'])}[/dim]",
            knobs,
        )
    con = Console()
    con.print(t)
    for name, members in registry.SUITES.items():
        con.print(f"suite [bold]{name}[/bold]: {' '.join(members)}")
    con.print("shared flags (every run): see `gicbench run --help`")
    return 0
