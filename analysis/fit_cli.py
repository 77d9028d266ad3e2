"""`gicbench fit clock|plateau|crossover|exposed FILE.csv`: the analysis fits on a user's table
(numbers copied from a paper, or exported with `gicbench analyze --csv`).

Columns are chosen by name (--x/--y) or are the first two; units come from --x-unit/--y-unit or
the column-name suffix (_hz, _khz, _mhz, _ghz; _ns, _us, _ms; _gbs; _b). Exit status 0, or 2
with one line naming what is wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from gicbench.errors import GicbenchError

from .fits.apply import FIT_NAMES, SOURCES, FitOutcome, data_line, fit_columns, format_param

EXIT_REFUSED = 2


def add_fit_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", choices=FIT_NAMES, help="which fit: " + "; ".join(
        f"{k}: {v}" for k, v in SOURCES.items()))
    parser.add_argument("file", type=Path, metavar="FILE.csv", help="a CSV table with a header")
    parser.add_argument("--x", default=None, metavar="COL", help="x column (default: the first)")
    parser.add_argument("--y", default=None, metavar="COL",
                        help="y column (default: the second)")
    parser.add_argument("--x-unit", default=None,
                        help="unit of x when its name has no suffix (clock: Hz, kHz, MHz, GHz)")
    parser.add_argument("--y-unit", default=None,
                        help="unit of y when its name has no suffix (times: ns, us, ms)")
    parser.add_argument("--noise", choices=("relative", "absolute"), default="relative",
                        help="clock fit: noise proportional to the latency (default) or equal")
    parser.add_argument("--reference", type=float, default=None,
                        help="crossover: reference bandwidth (default: the largest in the data)")
    parser.add_argument("--fraction", type=float, default=0.9,
                        help="crossover: fraction of the reference (default 0.9)")
    parser.add_argument("--interpolate", action="store_true",
                        help="crossover: place the crossing between sampled sizes")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def _read(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, skipinitialspace=True)
    except FileNotFoundError:
        raise GicbenchError(f"{path}: no such file") from None
    except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise GicbenchError(f"{path}: not a readable CSV table: {exc}") from None
    df.columns = [str(c).strip() for c in df.columns]
    if df.empty:
        raise GicbenchError(f"{path}: the table has no rows")
    return df


def run_fit(args: argparse.Namespace) -> int:
    try:
        df = _read(args.file)
        outcome = fit_columns(args.model, df, args.x, args.y, x_unit=args.x_unit,
                              y_unit=args.y_unit, reference=args.reference,
                              fraction=args.fraction, interpolate=args.interpolate,
                              noise=args.noise)
    except GicbenchError as exc:
        print(f"gicbench fit: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    if args.json:
        print(json.dumps(outcome.to_json(), indent=2, allow_nan=False))
    else:
        print_outcome(outcome, Console())
    return 0


def print_outcome(o: FitOutcome, console: Console) -> None:
    """One fit as a table: parameter, value ± error, unit; then R², points and flags."""
    where = ", ".join(f"{k}={v}" for k, v in o.group.items())
    title = f"{o.fit} fit: {SOURCES[o.fit]}" + (f" ({where})" if where else "")
    if o.error:
        console.print(f"{title}: not fitted: {o.error}", markup=False)
        return
    # The title on its own line: as a Table title rich wraps it to the narrow table's width.
    console.print(title, markup=False)
    t = Table()
    t.add_column("parameter")
    t.add_column("value", justify="right")
    for name, p in o.params.items():
        t.add_row(name, format_param(p))
    if o.r2 is not None:
        t.add_row("R²", "undefined" if o.r2 != o.r2 else f"{o.r2:.4f}")
    console.print(t)
    console.print(data_line(o), markup=False)
    if o.rows is not None:
        rows = Table(title="per row (µs)")
        keys = list(o.rows[0]) if o.rows else []
        for k in keys:
            rows.add_column(k.removesuffix("_us"), justify="right")
        for r in o.rows:
            rows.add_row(*(f"{r[k]:.4g}" for k in keys))
        console.print(rows)
    for f in o.flags:
        console.print(f"flag: {f}", markup=False)
