"""`gicbench list [EXPERIMENT]`: the experiments, their knobs (from their Params), the submitters
and suites. Plain text wrapped to the terminal, so nothing is cut at 80 columns; one experiment
gets every knob with its default, what is allowed and its help."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import textwrap

from ..experiments import registry
from ..knobs import Knob, knob_fields
from ..submit import base as submitters


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "list",
        help="list experiments, their knobs and suites",
        description="Without a name: every experiment, what it measures and its knobs with "
        "their defaults. With a name: that experiment's knobs in full (default, allowed values, "
        "help).",
    )
    p.add_argument("experiment", nargs="?", metavar="EXPERIMENT",
                   help="one experiment to describe in full")
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
                "shown": _shown(k, default),
                "allowed": k.describe_allowed(),
                "help": k.help,
            }
        )
    return out


def _entry(name: str) -> dict:
    cls = registry.get(name)
    return {
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


def describe() -> list[dict]:
    return [_entry(name) for name in registry.names()]


def _shown(k: Knob, default: object) -> str:
    if default is None or default == "":
        return "auto"  # derived from another knob (e.g. -e defaults to -b)
    return k.show(default)


def _width() -> int:
    return max(40, min(shutil.get_terminal_size((100, 24)).columns, 120))


def _wrap(text: str, width: int, indent: str = "  ", first: str | None = None) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent if first is None else first,
                         subsequent_indent=indent + "  ", break_on_hyphens=False) or [indent]


def overview(exps: list[dict], width: int) -> list[str]:
    """Every experiment in a few wrapped lines: what it measures, where it runs, its knobs."""
    lines: list[str] = []
    for e in exps:
        lines += _wrap(f"{e['name']}: {e['summary']}", width, first="", indent="")
        lines += _wrap(f"method: {e['method']}", width)
        where = (f"submitters: {', '.join(e['submitters'])}; patterns: "
                 f"{', '.join(e['patterns'])}" + (f"; fits: {', '.join(e['fits'])}"
                                                  if e["fits"] else ""))
        lines += _wrap(where, width)
        knobs = "  ".join(f"{k['flag']}={k['shown']}" for k in e["knobs"])
        lines += _wrap(f"knobs (flag=default): {knobs}", width)
        lines.append("")
    return lines


def details(e: dict, width: int) -> list[str]:
    """One experiment: its description, then each knob's flags, default, allowed values, help."""
    lines = _wrap(f"{e['name']}: {e['summary']}", width, first="", indent="")
    lines += _wrap(f"method: {e['method']}", width)
    lines += _wrap(f"submitters: {', '.join(e['submitters'])}", width)
    lines += _wrap(f"patterns: {', '.join(e['patterns'])}", width)
    if e["fits"]:
        lines += _wrap(f"fits (analyze, report): {', '.join(e['fits'])}", width)
    lines += ["", "knobs:"]
    for k in e["knobs"]:
        flags = k["long"] if k["flag"] == k["long"] else f"{k['flag']}, {k['long']}"
        lines += _wrap(f"{flags}  (default {k['shown']}; {k['allowed']})", width)
        lines += _wrap(k["help"], width, indent="      ")
    return lines


def main(args: argparse.Namespace) -> int:
    if args.experiment is not None:
        entry = _entry(args.experiment)  # an unknown name is refused with the list (exit 2)
        if args.json:
            print(json.dumps(entry, indent=2, default=str))
        else:
            print("\n".join(details(entry, _width())))
            print("\nshared flags (every run): see `gicbench run --help`")
        return 0
    exps = describe()
    if args.json:
        print(json.dumps({"experiments": exps, "suites": registry.SUITES}, indent=2, default=str))
        return 0
    width = _width()
    lines = overview(exps, width)
    for name, members in registry.SUITES.items():
        lines += _wrap(f"suite {name}: {' '.join(members)}", width, first="", indent="")
    lines += _wrap("`gicbench list EXPERIMENT`: one experiment's knobs in full; shared flags "
                   "(every run): `gicbench run --help`", width, first="", indent="")
    print("\n".join(lines))
    return 0
