"""`gicbench analyze RUN [RUN...]` and `gicbench report RUN` (wired into the CLI by app/cli).

Exit status: 0 on success, 2 when a run is refused (missing, unknown schema, damaged or
incomplete without --allow-incomplete, an unknown --experiment); the reasons go to stderr, one
line per problem (at most load.MAX_PROBLEM_LINES), never a traceback (GICBENCH_DEBUG=1 shows it
for input nothing anticipated). report exits 1 when a plot could not be drawn (noted in
report.md) unless --allow-incomplete is given, and when a file could not be written (one line
naming the path and the cause); it refuses (2) an output path inside a run or sweep directory
other than the reported run's own report.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from gicbench import safe_files
from gicbench.errors import ConfigError, GicbenchError
from gicbench.knobs import parse_list
from gicbench.sweep.manifest import MANIFEST as SWEEP_MANIFEST
from gicbench.trace import TraceWarning
from gicbench.trace.schema import MANIFEST_NAME

from . import moe
from .fit_cli import print_outcome
from .fits import apply as fit_apply
from .load import aggregate_ranks, load_run, one_line
from .tables import (
    REPORT_HEAD,
    caption_candidates,
    compare_tables,
    experiment_table,
    fit_input,
    fit_outcomes,
    fmt,
    header,
    param_columns,
    records,
    split_constant,
)

EXIT_REFUSED = 2


def add_analyze_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN",
                        help="run directories; with several, the first is the baseline of the "
                             "ratios")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the tables as JSON")
    out.add_argument("--csv", action="store_true", help="print the tables as CSV")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="analyse incomplete runs (missing or aborted ranks) and flag them")
    parser.add_argument("--experiment", "-x", action="append", default=None,
                        help="only this experiment (repeatable)")
    parser.add_argument("--rank-stat", choices=("median", "slowest"), default="median",
                        help="which rank's statistics to show (default: median rank)")
    parser.add_argument("--on", type=_keys, default=None,
                        metavar="KEY[,KEY]",
                        help="compare runs row by row on these parameters only (e.g. --on size "
                             "to compare two runs made with different --batch); default: all")
    _add_jobs(parser)


def _keys(text: str) -> list[str]:
    try:
        return list(parse_list(text, "--on", "parameter names"))
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _add_jobs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--jobs", type=int, default=1,
                        help="read this many rank files in parallel processes (default 1)")


def add_report_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, metavar="RUN", help="run directory")
    parser.add_argument("-o", "--out", type=Path, default=None,
                        help="report file (default RUN/report.md; plots go to plots/ beside a "
                             "report.md, NAME-plots/ beside NAME.md)")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="report on an incomplete run and flag it at the top")
    _add_jobs(parser)


def _labels(paths: list[Path]) -> list[str]:
    """A, B, C ... (AA, AB ... past Z): short enough for ratio headers like "p50 B/A"."""
    out = []
    for i in range(len(paths)):
        label, n = "", i
        while True:
            label = chr(ord("A") + n % 26) + label
            n = n // 26 - 1
            if n < 0:
                break
        out.append(label)
    return out


Fits = dict[str, list[tuple[str, fit_apply.FitOutcome]]]


def _fits(exp: str, per_run: list[tuple[str, pd.DataFrame]], params: list[str]) -> list[
        tuple[str, fit_apply.FitOutcome]]:
    """The fits the experiment declares, applied to each run's full table (or what the
    experiment's fits read: tables.fit_input): one per curve."""
    out = []
    for name in fit_apply.declared_fits(exp):
        if moe.fits_itself(exp, name):
            continue
        for label, table in per_run:
            data, keys = fit_input(exp, table, params)
            out += [(label, outcome) for outcome in fit_outcomes(name, data, keys)]
    return out


def _summaries(exp: str, per_run: list[tuple[str, pd.DataFrame]],
               params: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """Per run, the experiment's table over its repeated passes, where it has one
    (active-connections: the median and range over passes)."""
    if exp != "active-connections":
        return []
    from .connections import pass_summary

    return [(label, pass_summary(table, params)) for label, table in per_run]


MoeTables = dict[str, list[tuple[str, dict[str, tuple[str, pd.DataFrame]]]]]


def _tables(args: argparse.Namespace) -> tuple[list[dict], dict[str, pd.DataFrame],
                                                 dict[str, dict], Fits, dict, MoeTables]:
    """Load every run; per experiment one table (several runs: joined, with ratios), the
    fits the experiment declares, and moe-dispatch's reductions over rounds (analysis/moe.py)."""
    runs_meta: list[dict] = []
    aggs: list[tuple[str, pd.DataFrame]] = []
    for label, path in zip(_labels(args.runs), args.runs, strict=True):
        df = load_run(path, allow_incomplete=args.allow_incomplete, workers=args.jobs)
        runs_meta.append({"label": label, "path": str(path), "status": df.attrs["status"],
                          "problems": df.attrs["problems"]})
        aggs.append((label, aggregate_ranks(df)))
    experiments = list(dict.fromkeys(e for _, a in aggs if not a.empty for e in a["experiment"]))
    if args.on:  # one run or several: an unknown key is refused, never ignored
        known = sorted({p for _, a in aggs for p in param_columns(a)})
        unknown = [k for k in args.on if k not in known]
        if unknown:
            raise ConfigError("--on", ",".join(unknown),
                              f"parameters of the run(s) {known} (every run lacks {unknown})")
    if args.experiment:
        unknown = [e for e in args.experiment if e not in experiments]
        if unknown:
            raise ConfigError("--experiment (-x)", ",".join(unknown),
                              f"experiments of the run(s): {experiments}")
        experiments = [e for e in experiments if e in args.experiment]
    tables: dict[str, pd.DataFrame] = {}
    fixed: dict[str, dict] = {}
    fits: Fits = {}
    summaries: dict[str, list[tuple[str, pd.DataFrame]]] = {}
    for exp in experiments:
        compact = not (args.json or args.csv)
        per_run = [(label, experiment_table(a, exp, args.rank_stat, compact=compact))
                   for label, a in aggs
                   if not a.empty and exp in set(a["experiment"])]
        params = [p for p in dict.fromkeys(p for _, a in aggs for p in param_columns(a))]
        full = [(label, experiment_table(a, exp, args.rank_stat)) for label, a in aggs
                if not a.empty and exp in set(a["experiment"])]
        fits[exp] = _fits(exp, full, params)
        summaries[exp] = _summaries(exp, full, params)
        if len(aggs) == 1:
            tables[exp] = per_run[0][1]
            _, fixed[exp] = split_constant(per_run[0][1], caption_candidates(aggs[0][1]))
        else:
            if args.on:
                keys = [*args.on, *(["metric"] if "metric" in per_run[0][1].columns else [])]
                _check_unique(exp, per_run, keys)
            else:
                keys = [c for c in per_run[0][1].columns if c in params or c == "metric"]
            tables[exp] = compare_tables(per_run, keys)
            _, fixed[exp] = split_constant(tables[exp], keys)
    moe_tables = {exp: [(label, moe.tables(a)) for label, a in aggs
                        if not a.empty and exp in set(a["experiment"])]
                  for exp in experiments if exp == moe.EXPERIMENT}
    return runs_meta, tables, fixed, fits, summaries, moe_tables


def _check_unique(exp: str, per_run: list[tuple[str, pd.DataFrame]], keys: list[str]) -> None:
    for label, table in per_run:
        missing = [k for k in keys if k not in table.columns]
        if missing:
            raise ConfigError("--on", ",".join(keys),
                              f"columns of {exp}; run {label} lacks {missing}")
        dup = table[table.duplicated(subset=keys, keep=False)]
        if not dup.empty:
            first = ", ".join(f"{k}={dup.iloc[0][k]}" for k in keys)
            raise ConfigError("--on", ",".join(keys),
                              f"keys naming one row per run in {exp}; run {label} has "
                              f"{len(dup)} rows sharing them (e.g. {first}): add a key")


def _print_table(console: Console, t: Table) -> None:
    if console.is_terminal:
        console.print(t)
    else:  # piped or redirected: print at the table's natural width instead of wrapping
        wide = Console(width=1000)
        width = wide.measure(t).maximum
        Console(width=max(width, 40)).print(t)


def _rich_table(title: str, table: pd.DataFrame, caption: str | None = None) -> Table:
    t = Table(title=title, caption=caption or None)
    for col in table.columns:
        numeric = pd.api.types.is_numeric_dtype(table[col])
        t.add_column(header(col), justify="right" if numeric else "left")
    for row in table.itertuples(index=False):
        t.add_row(*(fmt(v, c) for v, c in zip(row, table.columns, strict=True)))
    return t


def _moe_rich(title: str, table: pd.DataFrame) -> Table:
    """A moe-dispatch table (analysis/moe.py): constant cell parameters in the caption."""
    fixed = moe.constant_columns(table, moe.CELL)
    shown = table.drop(columns=list(fixed))
    caption = ", ".join(f"{moe.header(k)}={fmt(v, k)}" for k, v in fixed.items())
    t = Table(title=title, caption=caption or None)
    for col in shown.columns:
        numeric = pd.api.types.is_numeric_dtype(shown[col])
        t.add_column(moe.header(col, table.attrs), justify="right" if numeric else "left")
    for row in shown.itertuples(index=False):
        t.add_row(*(moe.fmt_cell(v, c) for v, c in zip(row, shown.columns, strict=True)))
    return t


def _print_rich(runs_meta: list[dict], tables: dict[str, pd.DataFrame],
                fixed: dict[str, dict], rank_stat: str, fits: Fits,
                summaries: dict[str, list[tuple[str, pd.DataFrame]]],
                moe_tables: MoeTables | None = None) -> None:
    console = Console()
    if len(runs_meta) > 1:
        for meta in runs_meta:
            console.print(f"{meta['label']} = {meta['path']}", markup=False)
    for meta in runs_meta:
        if meta["problems"]:
            console.print(f"[bold red]INCOMPLETE[/] {meta['label']} ({meta['path']}):")
            for p in meta["problems"]:
                console.print(f"  - {p}", markup=False)
    if not tables:
        console.print("no points to show")
    for exp, table in tables.items():
        shown = table.drop(columns=list(fixed.get(exp, {})))
        caption = ", ".join(f"{k}={fmt(v, k)}" for k, v in fixed.get(exp, {}).items())
        _print_table(console, _rich_table(f"{exp} ({rank_stat} rank)", shown, caption))
        for label, summary in summaries.get(exp, []):
            run = f", run {label}" if len(runs_meta) > 1 else ""
            _print_table(console, _rich_table(
                f"{exp}: median over passes [min, max]{run}", summary,
                "NIC rate: the median sender's (receive-only: the senders' aggregate over their "
                "common duration); normalised to the control of each pass"))
        for label, named in (moe_tables or {}).get(exp, []):
            run = f", run {label}" if len(runs_meta) > 1 else ""
            for title, table in named.values():
                _print_table(console, _moe_rich(title + run, table))
        for label, outcome in fits.get(exp, []):
            if len(runs_meta) > 1:
                console.print(f"run {label}:", markup=False)
            print_outcome(outcome, console)


def _guarded(command: str, work: Callable[[], object]) -> tuple[bool, object]:
    """Run work(); a refusal or damaged input becomes one line on stderr per problem, never a
    traceback. What the reader could not check (TraceWarning) is one line each, first."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TraceWarning)
        try:
            ok, got, lines = True, work(), []
        except GicbenchError as exc:
            ok, got = False, None
            lines = list(getattr(exc, "lines", None) or [one_line(str(exc))])
        except Exception as exc:
            if os.environ.get("GICBENCH_DEBUG"):
                traceback.print_exc()
            ok, got = False, None
            lines = [one_line(f"cannot {command} this input ({type(exc).__name__}: {exc}); the "
                              "trace may be damaged (GICBENCH_DEBUG=1 shows where)")]
    for w in caught:
        if issubclass(w.category, TraceWarning):
            print(f"gicbench {command}: warning: {one_line(str(w.message))}", file=sys.stderr)
        else:  # not ours: on to whatever shows warnings
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for line in lines:
        print(f"gicbench {command}: {one_line(line)}", file=sys.stderr)
    return ok, got


def run_analyze(args: argparse.Namespace) -> int:
    ok, got = _guarded("analyze", lambda: _tables(args))
    if not ok:
        return EXIT_REFUSED
    runs_meta, tables, fixed, fits, summaries, moe_tables = got  # type: ignore[misc]
    if args.json:
        doc = {"runs": runs_meta, "rank_stat": args.rank_stat,
               "experiments": {e: records(t) for e, t in tables.items()},
               "fits": {e: [{"run": label, **o.to_json()} for label, o in fs]
                        for e, fs in fits.items() if fs}}
        over = {e: [{"run": label, "rows": records(t)} for label, t in ss]
                for e, ss in summaries.items() if ss}
        if over:
            doc["over_passes"] = over
        rounds = {e: [{"run": label, "tables": {name: {"title": title, "rows": records(t)}
                                                for name, (title, t) in named.items()}}
                      for label, named in runs] for e, runs in moe_tables.items() if runs}
        if rounds:
            doc["moe_dispatch"] = rounds
        print(json.dumps(doc, indent=2, allow_nan=False))
    elif args.csv:
        for meta in runs_meta:
            for p in meta["problems"]:
                print(f"gicbench analyze: INCOMPLETE {meta['label']}: {p}", file=sys.stderr)
        frames = [t.assign(experiment=e)[["experiment", *t.columns]] for e, t in tables.items()]
        if frames:
            sys.stdout.write(pd.concat(frames, ignore_index=True).to_csv(index=False))
    else:
        _print_rich(runs_meta, tables, fixed, args.rank_stat, fits, summaries, moe_tables)
    return 0


def _is_a_report(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(REPORT_HEAD)) == REPORT_HEAD.encode()
    except OSError:
        return False


def check_report_out(run: Path, out: Path | None) -> None:
    """Refuse a report path that is a link or a directory, an existing file that is not an
    earlier report, or that lies inside a run or sweep directory and is not the reported run's
    own report.md: a report never replaces a run's files (run.json, traces, another run's
    report) or a user's."""
    if out is None:
        return
    label = "out (-o)"
    what = safe_files.describe(out)
    if what.startswith("a symbolic link"):
        raise ConfigError(label, str(out), f"a report file, not {what}: a report never "
                                           "writes through a link")  # fmt: skip
    if what == "a directory":
        raise ConfigError(label, str(out), "a file name for the report (this is a directory)")
    target = out.parent.resolve() / out.name
    if target == Path(run).resolve() / "report.md":
        return
    if what == "a file" and not _is_a_report(target):
        raise ConfigError(label, str(out), f"a new file or an earlier report (its first line "
                          f"'{REPORT_HEAD}...'): {out} exists and is not one")  # fmt: skip
    for d in (target.parent, *target.parent.parents):
        kind = next((k for k, name in (("run", MANIFEST_NAME), ("sweep", SWEEP_MANIFEST))
                     if (d / name).exists()), None)  # fmt: skip
        if kind is not None:
            raise ConfigError(
                label, str(out), f"a path outside run and sweep directories, or "
                f"{Path(run) / 'report.md'}: it is inside the {kind} directory {d}, whose files "
                "a report never replaces",
            )  # fmt: skip


def run_report(args: argparse.Namespace) -> int:
    from .report import write_report  # matplotlib only when a report is asked for

    failures: list[str] = []

    def work() -> Path | safe_files.WriteError:
        check_report_out(args.run, args.out)
        try:
            return write_report(args.run, args.out, allow_incomplete=args.allow_incomplete,
                                workers=args.jobs, failures=failures)  # fmt: skip
        except safe_files.WriteError as exc:  # the output's fault, not the trace's
            return exc

    ok, out = _guarded("report", work)
    if not ok:
        return EXIT_REFUSED
    if isinstance(out, safe_files.WriteError):
        print(f"gicbench report: {out}", file=sys.stderr)
        return 1
    for f in failures:
        print(f"gicbench report: {f}", file=sys.stderr)
    print(f"wrote {out}")
    return 1 if failures and not args.allow_incomplete else 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (python -m gicbench.analysis.cli analyze|report ...)."""
    parser = argparse.ArgumentParser(prog="gicbench-analysis")
    sub = parser.add_subparsers(dest="command", required=True)
    add_analyze_args(sub.add_parser("analyze", help="summary tables of one or more runs"))
    add_report_args(sub.add_parser("report", help="write RUN/report.md with plots"))
    args = parser.parse_args(argv)
    return run_analyze(args) if args.command == "analyze" else run_report(args)


if __name__ == "__main__":
    raise SystemExit(main())
