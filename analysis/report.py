"""report.md for one run: provenance, then one section per experiment with a table and plots.

Experiments with a section writer in SECTIONS get their plots; any other experiment gets the
generic table, so a new experiment appears in the report without code changes here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gicbench import safe_files
from gicbench.errors import ConfigError

from . import plots
from .fits import apply as fit_apply
from .load import aggregate_ranks, load_run
from .tables import (
    caption_candidates,
    experiment_table,
    fmt,
    header,
    param_columns,
    split_constant,
)

LOW_TAIL_SAMPLES = 1000  # below this, p99.9 is close to the maximum and says little


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)
    images: list[Path] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def plot(self, draw: Callable[..., Path], *args: Any) -> None:
        """Draw one figure; data matplotlib cannot draw becomes a note, not a traceback."""
        try:
            self.images.append(draw(*args))
        except (safe_files.WriteError, ConfigError):
            raise  # the output cannot be written: the whole report fails, naming why
        except Exception as exc:
            plt_close_all()
            why = f"{self.title}: plot {draw.__name__} could not be drawn: " \
                  f"{type(exc).__name__}: {exc}"
            self.failures.append(why)
            self.lines += ["", f"> Plot missing: {why}"]


def plt_close_all() -> None:
    import matplotlib.pyplot as plt

    plt.close("all")


_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", **{c: "\\" + c for c in "\\`|[]*~"}}


def md(value: object) -> str:
    """Text from a run (run.json, trace parameters) as inert Markdown on one line: no HTML, no
    link or image, no code span, no table cell boundary, no line break."""
    text = " ".join(str(value).splitlines())
    return "".join(_MD_ESCAPES.get(c, c) for c in text)


def markdown_table(table: pd.DataFrame) -> list[str]:
    cols = list(table.columns)
    lines = ["| " + " | ".join(md(header(c)) for c in cols) + " |",
             "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(table[c]) else ":---"
                            for c in cols) + "|"]
    for row in table.itertuples(index=False):
        lines.append("| " + " | ".join(md(fmt(v, c)) for v, c in zip(row, cols, strict=True))
                     + " |")
    return lines


def _table_block(agg: pd.DataFrame, experiment: str) -> tuple[pd.DataFrame, list[str]]:
    full = experiment_table(agg, experiment, with_slowest=True, compact=True)
    shown, fixed = split_constant(full, caption_candidates(agg))
    lines: list[str] = []
    if fixed:
        lines.append("Fixed: " + ", ".join(md(f"{k}={fmt(v, k)}") for k, v in fixed.items()) + ".")
        lines.append("")
    lines += markdown_table(shown)
    if "count" in full.columns:
        per_rank = full["count"] / full.get("ranks", 1)
        if (per_rank < LOW_TAIL_SAMPLES).any():
            lines += ["", f"Note: some points have fewer than {LOW_TAIL_SAMPLES} samples per "
                          "rank; their p99.9 is close to the maximum."]
    lines += ["", "Statistics are the median over ranks of each rank's percentile; the slowest "
                  "rank is the one with the largest mean."]
    return full, lines


def _single_op(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    full, lines = _table_block(agg, "single-op")
    section.lines += lines
    if "p50_us" not in full.columns:
        return
    params = [p for p in param_columns(agg) if p in full.columns]
    out = plot_dir / "single-op-latency.png"
    title = "single-op latency (median rank)"
    if "size" in full.columns and full["size"].nunique() > 1:
        section.plot(plots.latency_vs_size, full, params, title, out)
    else:  # one size: a line per metric would be a dot; compare the percentiles instead
        section.plot(plots.latency_bars, full, title, out)


def _msg_rate(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    full, lines = _table_block(agg, "msg-rate")
    section.lines += lines
    if "msg_rate_mps" not in full.columns:
        return
    params = [p for p in param_columns(agg) if p in full.columns]
    axes = [x for x in ("batch", "qps", "threads") if x in full.columns and full[x].nunique() > 1]
    for x in axes:
        section.plot(plots.rate_vs, full, x, params, "msg_rate_mps", f"msg-rate against {x}",
                     plot_dir / f"msg-rate-vs-{x}.png")
    if not axes:
        section.plot(plots.rate_bars, full, params, "msg_rate_mps", "msg-rate",
                     plot_dir / "msg-rate.png")


def _fit_block(agg: pd.DataFrame, experiment: str, plot_dir: Path, section: Section) -> None:
    """The fits the experiment declares: parameters, uncertainties, R², flags, and a plot of
    the fitted curve over the data."""
    names = fit_apply.declared_fits(experiment)
    if not names:
        return
    full = experiment_table(agg, experiment)
    params = [p for p in param_columns(agg) if p in full.columns]
    for name in names:
        outcomes = fit_apply.fit_table(name, full, params)
        section.lines += ["", f"### {name} fit", ""]
        for o in outcomes:
            section.lines += ["    " + " ".join(line.splitlines())  # stays in the code block
                              for line in fit_apply.outcome_lines(o)]
        if name not in ("exposed", "ratio") and any(o.error is None for o in outcomes):
            section.plot(plots.fit_curves, outcomes, f"{experiment}: {name} fit",
                         plot_dir / f"{experiment}-fit-{name}.png")


def _generic(experiment: str) -> Callable[[pd.DataFrame, Path, Section], None]:
    def write(agg: pd.DataFrame, _plot_dir: Path, section: Section) -> None:
        section.lines += _table_block(agg, experiment)[1]
    return write


SECTIONS: dict[str, Callable[[pd.DataFrame, Path, Section], None]] = {
    "single-op": _single_op,
    "msg-rate": _msg_rate,
}


def _provenance(df: pd.DataFrame) -> list[str]:
    m: dict[str, Any] = df.attrs.get("manifest", {})
    keys = ("experiments", "provider", "submitter", "world_size", "hosts", "tool_version",
            "git_rev", "start_utc", "end_utc", "status", "argv")
    lines = ["| field | value |", "|:---|:---|"]
    for k in keys:
        v = m.get(k)
        if isinstance(v, list):
            v = " ".join(str(x) for x in v)
        lines.append(f"| {k} | {'-' if v is None else md(v)} |")
    return lines


def write_report(run_dir: Path, out: Path | None = None, allow_incomplete: bool = False,
                 workers: int = 1, failures: list[str] | None = None) -> Path:
    """Write report.md (default RUN/report.md) and its PNGs (in plots/ next to it).

    Figures that could not be drawn are noted in the report and appended to `failures`."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.md"
    plot_dir = out.parent / "plots"
    places = ((out.parent, "report directory"), (plot_dir, "report plots directory"))
    for d, label in places:  # refused before the work when another user could plant links
        if os.path.lexists(d):
            with safe_files.opened_dir(d, label):
                pass
    df = load_run(run_dir, allow_incomplete=allow_incomplete, workers=workers)
    for d, label in places:  # made only for a run that loaded
        with safe_files.opened_dir(d, label, create=True):
            pass
    agg = aggregate_ranks(df)
    lines = [f"# gicbench report: {md(run_dir.name)}", ""]
    if df.attrs.get("problems"):
        lines += ["> **Incomplete run**: analysed with --allow-incomplete; numbers may be "
                  "missing ranks or points.", ">"]
        lines += [f"> - {md(p)}" for p in df.attrs["problems"]]
        lines.append("")
    lines += [*_provenance(df), ""]
    experiments = list(dict.fromkeys(agg["experiment"])) if not agg.empty else []
    if not experiments:
        lines.append("The run has no points.")
    for experiment in experiments:
        section = Section(experiment)
        SECTIONS.get(experiment, _generic(experiment))(agg, plot_dir, section)
        _fit_block(agg, experiment, plot_dir, section)
        lines += [f"## {md(experiment)}", "", *section.lines, ""]
        if failures is not None:
            failures += section.failures
        for image in section.images:
            rel = image.relative_to(out.parent)
            lines += [f"![{md(experiment)}: {md(image.stem)}]({rel.as_posix()})", ""]
    return safe_files.write_text(out, "\n".join(lines), "report directory")
