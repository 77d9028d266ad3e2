"""`gicbench list`: the experiments, their knobs and the suites."""

from __future__ import annotations

import argparse
import dataclasses
import json

from ..config import RunConfig
from ..experiments import registry
from .run import FLAGS


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("list", help="list experiments, their knobs and suites")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=main)


def describe() -> list[dict]:
    defaults = {f.name: f.default for f in dataclasses.fields(RunConfig) if f.default is not None}
    out = []
    for name in registry.names():
        cls = registry.get(name)
        knobs = [
            {
                "field": k,
                "flag": FLAGS.get(k, "--" + k.replace("_", "-")),
                "default": defaults.get(k),
            }
            for k in cls.knobs
        ]
        out.append(
            {
                "name": name,
                "summary": cls.summary,
                "method": cls.seed_section,
                "submitters": list(cls.submitters),
                "knobs": knobs,
            }
        )
    return out


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
    t.add_column("submitters")
    t.add_column("knobs (flag=default)")
    for e in exps:
        knobs = "  ".join(f"{k['flag']}={k['default']}" for k in e["knobs"])
        t.add_row(
            e["name"], f"{e['summary']}\n[dim]{e['method']}[/dim]", ",".join(e["submitters"]), knobs
        )
    con = Console()
    con.print(t)
    for name, members in registry.SUITES.items():
        con.print(f"suite [bold]{name}[/bold]: {' '.join(members)}")
    return 0
