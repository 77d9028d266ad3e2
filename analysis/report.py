"""report.md for one run: provenance, then one section per experiment with a table and plots.

Every experiment gicbench has a section writer in SECTIONS, with the plot of the papers' figure
for it; any other experiment gets the generic table and a plot of each fit it declares, so a new
experiment appears in the report without code changes here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from gicbench import safe_files
from gicbench.errors import ConfigError

from . import connections, kernel_cost, moe, plots
from .fits import apply as fit_apply
from .load import aggregate_ranks, load_run
from .tables import (
    REPORT_HEAD,
    caption_candidates,
    experiment_table,
    fit_input,
    fit_outcomes,
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
    fits: dict[str, list[fit_apply.FitOutcome]] = field(default_factory=dict)
    drawn_fits: set[str] = field(default_factory=set)  # fits a section's own figure shows
    modelled: str = ""  # the NIC model(s) that produced the section's rows ("": measured)
    caveat: str = ""  # said on every figure beside `modelled` (the engine below the model)

    def plot(self, out: Path, draw: Callable[..., Figure], *args: Any, **kwargs: Any) -> None:
        """Draw one figure and save it as `out`; data matplotlib cannot draw becomes a note,
        not a traceback. A figure of modelled rows says so on its face."""
        try:
            self.images.append(plots.save_figure(draw(*args, **kwargs), out,
                                                 modelled=self.modelled or False,
                                                 caveat=self.caveat))
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


WINDOW_NOTE = ("Window columns time how long the stream took to post one window of messages "
               "(a twentieth of each thread's messages; posting stalls while the queue is "
               "full, and the last window carries the final drain), not one message's latency: "
               "read M msg/s and GB/s for throughput.")


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
    if any(c.startswith("window_") for c in full.columns):
        lines += ["", WINDOW_NOTE]
    lines += ["", "Statistics are the median over ranks of each rank's percentile; the slowest "
                  "rank is the one with the largest mean."]
    return full, lines


def _params(agg: pd.DataFrame, full: pd.DataFrame) -> list[str]:
    return [p for p in param_columns(agg) if p in full.columns]


def _varies(full: pd.DataFrame, col: str) -> bool:
    return col in full.columns and full[col].nunique() > 1


def _single_op(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    full, lines = _table_block(agg, "single-op")
    section.lines += lines
    if "p50_us" not in full.columns:
        return
    out = plot_dir / "single-op-latency.png"
    title = "single-op latency (median rank)"
    if _varies(full, "size"):
        section.plot(out, plots.latency_vs_size, full, _params(agg, full), title)
    else:  # one size: a line per metric would be a dot; compare the percentiles instead
        section.plot(out, plots.latency_bars, full, title)


def _completion_scope(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    """Completion latency against the QP count: the selected QP, an all-QP quiet, a signal."""
    full, lines = _table_block(agg, "completion-scope")
    section.lines += lines
    if "p50_us" not in full.columns:
        return
    out = plot_dir / "completion-scope-latency.png"
    if _varies(full, "qps"):
        series = [c for c in ("mode", "scope") if c in full.columns]
        section.plot(out, plots.latency_vs, full, "qps", _params(agg, full),
                     "completion against QPs (median rank)",
                     names=plots._WAYS if series == ["mode", "scope"] else None, series=series)
    else:
        section.plot(out, plots.latency_bars, full, "completion-scope latency (median rank)")


def _clock_sweep(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    full, lines = _table_block(agg, "clock-sweep")
    section.lines += lines
    if "p50_us" in full.columns:
        section.plot(plot_dir / "clock-sweep-latency.png", plots.clock_latency, full,
                     section.fits.get("clock", []), "latency against SM clock (median rank)")
        section.drawn_fits.add("clock")


def _rate_axes(full: pd.DataFrame, candidates: tuple[str, ...]) -> list[str]:
    return [x for x in candidates if _varies(full, x)]


def _msg_rate(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    full, lines = _table_block(agg, "msg-rate")
    section.lines += lines
    if "msg_rate_mps" not in full.columns:
        return
    params = _params(agg, full)
    axes = _rate_axes(full, ("batch", "qps", "threads", "size"))
    for x in axes:
        section.plot(plot_dir / f"msg-rate-vs-{x}.png", plots.rate_vs, full, x, params,
                     "msg_rate_mps", f"message rate against {plots.quantity(x)}")
    if not axes:
        section.plot(plot_dir / "msg-rate.png", plots.rate_bars, full, params, "msg_rate_mps",
                     "message rate")
    if "size" in axes and "gbps" in full.columns:
        section.plot(plot_dir / "msg-rate-goodput.png", plots.goodput_vs_size, full, params,
                     section.fits.get("crossover", []), "msg-rate goodput against size")
        section.drawn_fits.add("crossover")


def _proxy_rate(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    """mini-proxy's rate against workers T, a line per chain limit B (Fig. 7)."""
    full, lines = _table_block(agg, "proxy-rate")
    section.lines += lines
    if "msg_rate_mps" not in full.columns:
        return
    params = _params(agg, full)
    axes = _rate_axes(full, ("workers", "batch", "rings", "size"))
    if axes:
        x = axes[0]
        section.plot(plot_dir / f"proxy-rate-vs-{x}.png", plots.rate_vs, full, x, params,
                     "msg_rate_mps", f"mini-proxy message rate against {plots.quantity(x)}",
                     log_y=True)
    else:
        section.plot(plot_dir / "proxy-rate.png", plots.rate_bars, full, params,
                     "msg_rate_mps", "mini-proxy message rate")


def _loaded_rtt(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    """The probe's round trip under load, shared vs reserved queue (Fig. 6)."""
    full, lines = _table_block(agg, "loaded-rtt")
    section.lines += lines
    if "p50_us" not in full.columns:
        return
    section.plot(plot_dir / "loaded-rtt-rtt.png", plots.loaded_rtt, full, _params(agg, full),
                 "loaded round trip (median rank)")


def _payload(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    """Goodput against size with the crossover (Fig. 8)."""
    full, lines = _table_block(agg, "payload")
    section.lines += lines
    if "gbps" not in full.columns:
        return
    section.plot(plot_dir / "payload-goodput.png", plots.goodput_vs_size, full,
                 _params(agg, full), section.fits.get("crossover", []),
                 "pipelined goodput against size")
    section.drawn_fits.add("crossover")


def _active_connections(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    """The rate through one NIC against its active connections, absolute and normalised to
    each pass's control, median over passes with their range, and the plateau + power-law fit
    of each curve (Fig. 10)."""
    exp = "active-connections"
    lines = _table_block(agg, exp)[1]
    section.lines += lines
    table = experiment_table(agg, exp)  # with the counts and times the NIC rate needs
    params = _params(agg, table)
    if "msg_rate_mps_per_rank" not in table.columns:
        return
    summary = connections.pass_summary(table, params)
    keys = connections.curve_params(table, params)
    common = connections.common_label(table, keys)
    model = connections.modelled(agg.attrs)
    section.modelled = section.modelled or model
    section.lines += ["", "Median over passes, with the smallest and largest pass. NIC rate: the "
                      "median sender's (receive-only: the senders' messages over the slowest "
                      "sender's time, their common duration); normalised: each point over the "
                      "control of its own pass."
                      + (f" Modelled, not measured ({md(model)} NIC model)." if model else ""),
                      "", *markdown_table(summary)]
    section.plot(plot_dir / f"{exp}-rate.png", plots.connections_curves, summary, keys,
                 connections.RATE, "message rate through one NIC (M msg/s)",
                 "rate against active connections (median over passes)", common=common)
    section.plot(plot_dir / f"{exp}-normalized.png", plots.connections_curves, summary, keys,
                 connections.NORMALIZED, "normalised rate (× its pass's control)",
                 "normalised rate against active connections",
                 outcomes=section.fits.get("plateau", []), common=common)
    section.drawn_fits.add("plateau")


def _moe_tables_md(agg: pd.DataFrame) -> list[str]:
    """The moe-dispatch tables (analysis/moe.py) as Markdown, fixed cell parameters above."""
    lines: list[str] = []
    for _name, (title, table) in moe.tables(agg).items():
        fixed = moe.constant_columns(table, moe.CELL)
        shown = table.drop(columns=list(fixed))
        lines += ["", f"**{md(title)}.**", ""]
        if fixed:
            lines += ["Fixed: " + ", ".join(md(f"{moe.header(k)}={fmt(v, k)}")
                                            for k, v in fixed.items()) + ".", ""]
        cols = list(shown.columns)
        lines.append("| " + " | ".join(md(moe.header(c, table.attrs)) for c in cols) + " |")
        lines.append("|" + "|".join("---:" if pd.api.types.is_numeric_dtype(shown[c])
                                    else ":---" for c in cols) + "|")
        for row in shown.itertuples(index=False):
            lines.append("| " + " | ".join(md(moe.fmt_cell(v, c))
                                           for v, c in zip(row, cols, strict=True)) + " |")
    return lines


def _moe_model(agg: pd.DataFrame) -> str:
    """What produced a moe-dispatch run's network side where no NIC did: emu's NIC model, or
    the emulated NIC itself (its in-flight and receive-wait times are the emulator's)."""
    model = connections.modelled(agg.attrs)
    provider = (agg.attrs.get("manifest") or {}).get("provider")
    return model or ("emulated NIC" if provider == "emu" else "")


def _moe_dispatch(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    """The factor sweep's Fig. 5-style heatmaps (the reference in µs, the others as the paired
    change, one figure per top-k) or the wait sweep's Fig. 6-style ones (exposed time over
    tokens × wait, the knee outlined), with the over-rounds and fit tables."""
    # One row per point and metric would run to thousands of lines (rounds x backends x
    # cells): the report gives the reductions; `gicbench analyze --json` has every point.
    section.lines += ["Per point and rank the trace holds send_ns, recv_ns, exposed_ns and "
                      "wait_ns; the tables below are the job's figure (the slowest rank's mean) "
                      "reduced over rounds. Every point's row: `gicbench analyze RUN --json`."]
    rounds = moe.round_table(agg)
    if rounds.empty or rounds["send_us"].isna().all():
        return
    model = _moe_model(agg)
    note = ""
    if model:
        note = (f"network side: {model} (send and receive are GPU kernel times; the time in "
                "flight is the emulator's, not a NIC's)")
        section.lines += ["", f"> **Network side emulated** ({md(model)}): send and receive "
                          "are GPU kernel times, but how long transfers stay in flight (and so "
                          "the knee, the receive wait and every GPI/GPI-MC descriptor's "
                          "execution) is the emulator's, not a NIC's (docs/moe-dispatch.md)."]
    section.lines += _moe_tables_md(agg)
    s = moe.summary(rounds)
    varying = [k for k in ("hidden", "experts", "topk", "ranks", "sm_cap")
               if k in s.columns and s[k].nunique() > 1]
    if s.attrs["wait"]:
        fits = moe.wait_fits(rounds)
        split = varying
        for key, g in (s.groupby(split, sort=True) if split else [((), s)]):
            key = key if isinstance(key, tuple) else (key,)
            tag = "".join(f"-{k.replace('_', '')}{plots._int_text(v)}"
                          for k, v in zip(split, key, strict=True))
            sel = fits
            for k, v in zip(split, key, strict=True):
                sel = sel[sel[k] == v] if not sel.empty else sel
            fixed = moe.constant_columns(g, moe.CELL[:-1])
            what = ", ".join(f"{moe.header(k)} {fmt(v, k)}" for k, v in fixed.items())
            section.plot(plot_dir / f"moe-dispatch-exposed{tag}.png", plots.moe_wait_heatmap,
                         g, sel, f"exposed time over tokens × wait ({what}; median of "
                         "rounds)", note=note)
    else:
        split = [k for k in varying if k in ("hidden", "experts", "topk")]
        if "topk" not in split and "topk" in s.columns:
            split.append("topk")
        for key, g in s.groupby(split, sort=True):
            key = key if isinstance(key, tuple) else (key,)
            tag = "".join(f"-{k.replace('_', '')}{plots._int_text(v)}"
                          for k, v in zip(split, key, strict=True))
            what = ", ".join(f"{moe.header(k)} {fmt(v, k)}" for k, v in zip(split, key,
                                                                            strict=True))
            section.plot(plot_dir / f"moe-dispatch-send{tag}.png", plots.moe_factor_heatmap,
                         g, f"dispatch send over tokens × SM cap ({what}; mean of rounds)",
                         note=note)


def _kc_table(table: pd.DataFrame, cols: list[str]) -> list[str]:
    cols = [c for c in cols if c in table.columns]
    lines = ["| " + " | ".join(md(kernel_cost.header(c)) for c in cols) + " |",
             "|" + "|".join(":---" if c in kernel_cost.KEYS else "---:" for c in cols) + "|"]
    for _, row in table.iterrows():
        lines.append("| " + " | ".join(md(kernel_cost.fmt_cell(row[c], c)) for c in cols)
                     + " |")  # fmt: skip
    return [*lines, ""]


def _kernel_cost(agg: pd.DataFrame, plot_dir: Path, section: Section) -> None:
    """Fig. 9's bars, the loss of every point against its paired reference, waiting against
    sending (Table 14's waiting loss) and the compiled resources per build."""
    table = kernel_cost.rows(agg)
    if table.empty:
        section.lines.append("No kernel-cost points.")
        return
    bars = kernel_cost.bars(table)
    path, how = kernel_cost.path_of(agg)
    section.lines += [f"Path: {path}" + (f" ({how})" if how else "") + ".", ""]
    if not bars.empty:
        what = (f"{bars.attrs['per_block']} messages of {bars.attrs['size']} B per block"
                if bars.attrs["size"] else f"{bars.attrs['per_block']} messages per block")
        section.plot(plot_dir / "kernel-cost-loss.png", plots.kernel_cost_bars, bars,
                     f"useful-work throughput loss against no communication code ({what})",
                     path=path)
    section.lines += ["Loss against the paired reference (no communication code), median of "
                      "paired passes; 100 × (1 − t_reference / t_variant).", ""]
    section.lines += _kc_table(table, [*kernel_cost.KEYS, "kernel_us", "reference_us",
                                       "loss_pct", "loss_min_pct", "loss_max_pct"])
    waits = kernel_cost.wait_extra(table)
    if not waits.empty:
        section.lines += ["Waiting against sending without waiting (the paper's Table 14 "
                          "waiting loss): 100 × (1 − t_send / t_send-wait).", ""]
        section.lines += _kc_table(waits, ["caller", "live", "build", "per_block", "size",
                                           "wait_extra_pct"])
    section.lines += ["Compiled resources (from the cubin) and blocks per SM (occupancy API).",
                      ""]
    section.lines += _kc_table(kernel_cost.resources(table),
                               ["caller", "live", "build", *kernel_cost.RESOURCE_COLUMNS])


def _fit_lines(section: Section) -> None:
    """The fits the experiment declares: parameters, uncertainties, R² and flags."""
    for name, outcomes in section.fits.items():
        section.lines += ["", f"### {name} fit", ""]
        for o in outcomes:
            section.lines += ["    " + " ".join(line.splitlines())  # stays in the code block
                              for line in fit_apply.outcome_lines(o)]


def _fit_plots(agg: pd.DataFrame, experiment: str, plot_dir: Path, section: Section) -> None:
    """A plot of each declared fit that was made and that no figure of the section shows."""
    full = experiment_table(agg, experiment)
    for name, outcomes in section.fits.items():
        if name in section.drawn_fits or not any(o.error is None for o in outcomes):
            continue
        out = plot_dir / f"{experiment}-fit-{name}.png"
        if name == "crossover":
            section.plot(out, plots.goodput_vs_size, full, _params(agg, full), outcomes,
                         f"{experiment}: goodput against size")
        elif name in ("clock", "plateau"):
            section.plot(out, plots.fit_curves, outcomes, f"{experiment}: {name} fit")


def _generic(experiment: str) -> Callable[[pd.DataFrame, Path, Section], None]:
    """An experiment without a section of its own: its table (so a new experiment appears in
    the report without code changes here); its fits are plotted as for every experiment."""
    def write(agg: pd.DataFrame, _plot_dir: Path, section: Section) -> None:
        section.lines += _table_block(agg, experiment)[1]
    return write


SECTIONS: dict[str, Callable[[pd.DataFrame, Path, Section], None]] = {
    "single-op": _single_op,
    "completion-scope": _completion_scope,
    "clock-sweep": _clock_sweep,
    "msg-rate": _msg_rate,
    "proxy-rate": _proxy_rate,
    "loaded-rtt": _loaded_rtt,
    "payload": _payload,
    "active-connections": _active_connections,
    moe.EXPERIMENT: _moe_dispatch,
    kernel_cost.EXPERIMENT: _kernel_cost,
}


def _fits(agg: pd.DataFrame, experiment: str) -> dict[str, list[fit_apply.FitOutcome]]:
    """The fits the experiment declares, one per curve, as analyze computes them."""
    names = tuple(n for n in fit_apply.declared_fits(experiment)
                  if not moe.fits_itself(experiment, n))
    if not names:
        return {}
    full = experiment_table(agg, experiment)
    params = [p for p in param_columns(agg) if p in full.columns]
    data, keys = fit_input(experiment, full, params)
    return {name: fit_outcomes(name, data, keys) for name in names}


def _provenance(df: pd.DataFrame, models: list[str]) -> list[str]:
    m: dict[str, Any] = df.attrs.get("manifest", {})
    keys = ("experiments", "provider", "submitter", "world_size", "hosts", "tool_version",
            "git_rev", "start_utc", "end_utc", "status", "argv")
    lines = ["| field | value |", "|:---|:---|"]
    for k in keys:
        v = m.get(k)
        if isinstance(v, list):
            v = " ".join(str(x) for x in v)
        lines.append(f"| {k} | {'-' if v is None else md(v)} |")
    nic = m.get("nic") if isinstance(m.get("nic"), dict) else {}
    spec = nic.get("nic_model_spec") if isinstance(nic.get("nic_model_spec"), dict) else {}
    model = ", ".join(models) or nic.get("nic_model") or "-"
    where = f" ({spec.get('origin')}, sha256 {str(spec.get('sha256', ''))[:12]})" if spec else ""
    lines.append(f"| nic model | {md(str(model) + where)} |")
    return lines


def nic_models(rows: pd.DataFrame) -> list[str]:
    """The NIC models (emu's --nic-model) that produced these rows; empty when measured."""
    if "nic_model" not in rows.columns:
        return []
    return sorted({str(v) for v in rows["nic_model"].dropna() if str(v) not in ("", "none")})


def saturation_caveat(rows: pd.DataFrame) -> str:
    """For a modelled section's figures: how many rows the engine set, not the model."""
    if "nic_model_saturated" not in rows.columns:
        return ""
    flagged = int(rows["nic_model_saturated"].fillna(False).astype(bool).sum())
    if not flagged:
        return ""
    return (f"engine below the model at {flagged} of {len(rows)} rows: "
            "those figures are the engine's")


def model_lines(models: list[str], rows: pd.DataFrame) -> list[str]:
    """What a reader of modelled rows must know: a prediction, and where the engine lagged."""
    if not models:
        return []
    lines = [f"> **Modelled.** NIC model: {md(', '.join(models))}. These rows and figures are "
             "predictions from the model's stated constants (app/fabric/emu/nic_models.toml), "
             "not a measurement of hardware."]
    if saturation_caveat(rows):
        lines.append("> Rows with *engine below model* = yes: the CPU engine was slower than "
                     "the modelled NIC, so their numbers are the engine's, not the model's.")
    return [*lines, ""]


def plot_dir_for(out: Path) -> Path:
    """Where a report's PNGs go: plots/ beside a report.md; NAME-plots/ beside any other NAME.md,
    so that reports written into one folder (-o a.md, -o b.md) keep their own figures."""
    return out.parent / ("plots" if out.name == "report.md" else f"{out.stem}-plots")


def write_report(run_dir: Path, out: Path | None = None, allow_incomplete: bool = False,
                 workers: int = 1, failures: list[str] | None = None) -> Path:
    """Write report.md (default RUN/report.md) and its PNGs (plot_dir_for: in plots/ next to a
    report.md, in NAME-plots/ next to any other NAME.md).

    Figures that could not be drawn are noted in the report and appended to `failures`."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "report.md"
    plot_dir = plot_dir_for(out)
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
    lines = [f"{REPORT_HEAD}{md(run_dir.name)}", ""]
    if df.attrs.get("problems"):
        lines += ["> **Incomplete run**: analysed with --allow-incomplete; numbers may be "
                  "missing ranks or points.", ">"]
        lines += [f"> - {md(p)}" for p in df.attrs["problems"]]
        lines.append("")
    lines += [*_provenance(df, nic_models(agg)), ""]
    experiments = list(dict.fromkeys(agg["experiment"])) if not agg.empty else []
    if not experiments:
        lines.append("The run has no points.")
    for experiment in experiments:
        rows = agg[agg["experiment"] == experiment]
        models = nic_models(rows)
        section = Section(experiment, fits=_fits(agg, experiment), modelled=", ".join(models),
                          caveat=saturation_caveat(rows) if models else "")
        section.lines += model_lines(models, rows)
        SECTIONS.get(experiment, _generic(experiment))(agg, plot_dir, section)
        _fit_plots(agg, experiment, plot_dir, section)
        _fit_lines(section)
        lines += [f"## {md(experiment)}", "", *section.lines, ""]
        if failures is not None:
            failures += section.failures
        for image in section.images:
            rel = image.relative_to(out.parent)
            lines += [f"![{md(experiment)}: {md(image.stem)}]({rel.as_posix()})", ""]
    return safe_files.write_text(out, "\n".join(lines), "report directory")
