"""PNG plots for the report (matplotlib, Agg backend: no display needed), in the conventions of
the papers' figures (arXiv 2610.01380):

- latency against message size: log-log, sizes on a base-2 axis, p50 solid and p99 dashed;
- message rate against workers T, one line per chain limit B, log rate axis (Fig. 7); against
  batch, QPs or threads a base-2 x axis and a rate axis from 0 (§4.3.1);
- the loaded round trip against the background load, shared queue dashed and reserved solid,
  log latency axis, each point labelled with the background rate it carried (Fig. 6);
- goodput against size with the reference, the threshold and a star at the first sampled size
  reaching it (Fig. 8).

Every axis names its quantity and unit, every line has a legend entry, and panel titles say
what was timed ("put + completion", not a trace's dataset name). Each function returns the
Figure; `save_figure` is the one place a figure is written to disk.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from gicbench import safe_files
from gicbench.aggregate import unit_of

from .fits.apply import FitOutcome
from .tables import curve_keys

DPI = 120

# What each sample dataset timed, as a panel title.
METRIC_TITLES = {
    "issue_ns": "issue (post + doorbell)",
    "completion_ns": "put + completion",
    "rtt_ns": "round trip",
    "window_ns": "window of messages",
}
# Axis label of a column: the quantity, then its unit in parentheses. Counts have no unit:
# their label names what is counted.
AXES = {
    "size": "message size (B)",
    "qps": "QPs per destination",
    "threads": "submitting threads per rank",
    "batch": "WQEs per doorbell (batch)",
    "workers": "CPU workers T",
    "rings": "descriptor rings R",
    "producers": "producers P",
    "background": "background producers per endpoint",
    "sm_clock_mhz": "SM clock (MHz)",
    "clock_mhz": "locked SM clock (MHz)",
    "connections": "active connections per NIC per direction (QPs, or DCI-peer pairs)",
    "msg_rate_mps": "message rate (M msg/s)",
    "msg_rate_mps_per_rank": "message rate per rank (M msg/s)",
    "gbps": "goodput (GB/s)",
    "p50_us": "latency, p50 (µs)",
}
COUNTS = ("qps", "threads", "batch", "workers", "rings", "producers", "background",
          "connections")
COUNT_AXES = frozenset(AXES[c] for c in COUNTS)
# How a series' parameter reads in a legend.
_LEGEND = {
    "workers": "T={}",
    "rings": "R={}",
    "batch": "B={}",
    "producers": "P={}",
    "qps": "{} QP{s}",
    "threads": "{} thread{s}",
    "background": "{} bg producer{s}",
}
_FIT_NAMES = {"plateau": "plateau + power law", "clock": "C/f + B"}
_SHORT = {"qps": "QPs", "workers": "workers T", "rings": "rings R", "batch": "batch B",
          "producers": "producers P"}
_MODES = {"issue": "issue", "put_completion": "put + completion", "round_trip": "round trip"}
_WAYS = {  # completion-scope: (mode, scope) -> what the line is
    ("put_completion", "selected"): "selected-QP completion",
    ("put_completion", "all"): "all-QP quiet",
    ("round_trip", "selected"): "signal (round trip)",
}
MODELLED_NOTE = "modelled, not measured"


def save_figure(fig: Figure, out: Path, modelled: bool | str = False, caveat: str = "") -> Path:
    """Write one figure as a PNG and close it: the one place figures are saved. Drawn in memory,
    then written atomically beside `out` (safe_files: never through a link, never half-written).
    A figure drawn from a model rather than from measurements says so on its face
    (`modelled`: True, or the model's name, e.g. emu's NIC model), with `caveat` after it (where
    the engine, not the model, set the figures)."""
    if modelled:
        note = MODELLED_NOTE if modelled is True else f"modelled ({modelled}), not measured"
        note += f"; {caveat}" if caveat else ""
        fig.text(0.995, 0.005, note, ha="right", va="bottom", fontsize=8,
                 style="italic", color="0.3")
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=out.suffix.lstrip(".") or "png", dpi=DPI)
    finally:
        plt.close(fig)
    return safe_files.write_bytes(out, buf.getvalue(), "report plots directory")


def axis_label(col: str) -> str:
    if col in AXES:
        return AXES[col]
    unit = unit_of(col)
    return f"{col.replace('_', ' ')} ({unit})" if unit else col.replace("_", " ")


def quantity(col: str) -> str:
    """An axis label without its unit, for titles: "message size"."""
    return axis_label(col).split(" (")[0]


def size_label(value: float, _pos: object = None) -> str:
    """8, 64, 1K, 4K, 1M: the byte labels of the papers' size axes (the unit is the axis')."""
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if value >= div and value % div == 0:
            return f"{int(value // div)}{unit}"
    return f"{value:g}"


def size_text(value: float) -> str:
    """A size with its unit, for legends and tick labels: 8 B, 2 KiB, 1 MiB."""
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= div and value % div == 0:
            return f"{int(value // div)} {unit}"
    return f"{value:g} B"


def value_text(key: str, value: Any) -> str:
    """One parameter's value as a legend or tick reads it: "8 B", "B=16", "put + completion"."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if key == "size":
        return size_text(float(value))
    if key == "mode":
        return _MODES.get(str(value), str(value))
    if key == "metric":
        return METRIC_TITLES.get(str(value), str(value))
    if key == "queue":
        return f"{value} queue"
    if key in _LEGEND:
        return _LEGEND[key].format(value, s="" if value == 1 else "s")
    return f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"


def number_text(v: float) -> str:
    """A bar's value: three significant digits, thousands written out (7,150 not 7.15e+03)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def series_label(keys: Sequence[str], values: Sequence[Any]) -> str:
    return ", ".join(value_text(k, v) for k, v in zip(keys, values, strict=True)) or "all"


def _log_ticks(ax: plt.Axes, values: pd.Series) -> None:
    """Labelled ticks on a log y axis: denser when the data spans less than a decade, so a
    narrow range still gets numbers on it."""
    vals = values[values > 0].dropna()
    span = float(vals.max() / vals.min()) if len(vals) else 10.0
    subs = ((1.0,) if span > 1000 else (1.0, 2.0, 5.0) if span > 10 else
            (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0) if span > 4 else
            (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0))
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _base2_x(ax: plt.Axes, values: pd.Series, sizes: bool = False) -> None:
    """A base-2 x axis with every sampled value labelled (up to 12), as the papers' axes."""
    ax.set_xscale("log", base=2)
    xs = sorted(float(v) for v in values.dropna().unique())
    if len(xs) <= 12:
        ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(FuncFormatter(size_label if sizes else
                                               (lambda v, _p: f"{v:g}")))
    ax.xaxis.set_minor_formatter(NullFormatter())


def spaced(values: Sequence[float], factor: float = 2.5) -> set[float]:
    """The values kept for labels on a log axis: each at least `factor` times the last kept
    (the first and the largest always)."""
    kept: list[float] = []
    for v in sorted(values):
        if not kept or v >= kept[-1] * factor:
            kept.append(v)
    if values and max(values) not in kept:
        if len(kept) > 1 and max(values) < kept[-1] * factor:
            kept.pop()
        kept.append(max(values))
    return set(kept)


def _groups(table: pd.DataFrame, keys: Sequence[str]) -> list[tuple[tuple, pd.DataFrame]]:
    if not keys:
        return [((), table)]
    out = []
    for key, g in table.groupby(list(keys), dropna=False, sort=True):
        out.append((key if isinstance(key, tuple) else (key,), g))
    return out


def _name(key: Sequence[Any]) -> str:
    """A curve's identity whatever the scalar types (numpy or Python) of its key."""
    return repr(tuple(v.item() if isinstance(v, np.generic) else v for v in key))


def _legend_below(fig: Figure, axes: Sequence[plt.Axes]) -> None:
    """One legend under the panels with every line's label once."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    ncol = max(1, min(len(handles), 4))
    rows = -(-len(handles) // ncol)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=ncol,
               fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, min(0.5, 0.05 * rows + 0.02), 1, 1))


# ---- latency -----------------------------------------------------------------------------------


def latency_vs_size(table: pd.DataFrame, params: Sequence[str], title: str) -> Figure:
    """One panel per metric: p50 (solid) and p99 (dashed, same colour) against size, log-log.

    A line per curve (the parameters the user varied, tables.curve_keys); one colour per curve
    across all panels, explained once in a legend below them."""
    metrics = list(dict.fromkeys(table["metric"]))
    others = [p for p in params if p != "size"]
    keys = curve_keys(table, "size", others, also=("metric",))
    colour = {_name(k): f"C{i % 10}" for i, (k, _) in enumerate(_groups(table, keys))}
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        rows = table[table["metric"] == metric]
        for key, g in _groups(rows, keys):
            g = g.sort_values("size")
            c = colour[_name(key)]
            name = series_label(keys, key) + ", " if keys else ""
            ax.plot(g["size"], g["p50_us"], "o-", color=c, label=f"{name}p50")
            ax.plot(g["size"], g["p99_us"], "^--", color=c, alpha=0.6, label=f"{name}p99")
        _base2_x(ax, rows["size"], sizes=True)
        ax.set_yscale("log")
        _log_ticks(ax, pd.concat([rows["p50_us"], rows["p99_us"]]))
        ax.set_xlabel(AXES["size"])
        ax.set_ylabel("latency (µs)")
        ax.set_title(METRIC_TITLES.get(metric, metric))
        ax.grid(True, which="major", alpha=0.3)
    fig.suptitle(title)
    _legend_below(fig, axes[0])
    return fig


def latency_vs(table: pd.DataFrame, x: str, params: Sequence[str], title: str,
               names: dict[tuple, str] | None = None, series: Sequence[str] = ()) -> Figure:
    """p50 (solid) and p99 (dashed) latency against x (QPs, SM clock ...), one line per curve;
    `series` are columns every curve is split by (e.g. mode, scope) and `names` says what each
    of their combinations is ("all-QP quiet")."""
    keys = [*series, *[k for k in curve_keys(table, x, params, also=series) if k not in series]]
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    for i, (key, g) in enumerate(_groups(table, keys)):
        g = g.sort_values(x)
        head = tuple(key[: len(series)])
        name = (names or {}).get(head) or series_label(list(series), head)
        rest = series_label(keys[len(series):], key[len(series):]) if len(keys) > len(
            series) else ""
        label = ", ".join(t for t in (name if series else "", rest) if t) or "all"
        c = f"C{i % 10}"
        ax.plot(g[x], g["p50_us"], "o-", color=c, label=f"{label}, p50")
        ax.plot(g[x], g["p99_us"], "^--", color=c, alpha=0.6, label=f"{label}, p99")
    if x in ("qps", "threads", "batch", "size", "workers", "background"):
        _base2_x(ax, table[x], sizes=x == "size")
    ax.set_yscale("log")
    _log_ticks(ax, pd.concat([table["p50_us"], table["p99_us"]]))
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel("latency (µs)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def latency_bars(table: pd.DataFrame, title: str) -> Figure:
    """p50/p99/p99.9 per metric on a log axis, for a sweep with a single size."""
    metrics = list(dict.fromkeys(table["metric"]))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.8 * len(metrics) + 2), 4.2))
    width = 0.26
    for j, (stat, key, alpha) in enumerate((("p50", "p50_us", 1.0), ("p99", "p99_us", 0.7),
                                            ("p99.9", "p999_us", 0.45))):
        vals = [float(table.loc[table["metric"] == m, key].median()) for m in metrics]
        xs = [i + (j - 1) * width for i in range(len(metrics))]
        bars = ax.bar(xs, vals, width, color="C0", alpha=alpha, label=stat)
        ax.bar_label(bars, labels=[number_text(v) for v in vals], fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(metrics)), [METRIC_TITLES.get(m, m) for m in metrics])
    ax.set_xlabel("what was timed")
    ax.set_ylabel("latency (µs)")
    sizes = table["size"].dropna().unique() if "size" in table.columns else []
    ax.set_title(title + (f", {size_text(float(sizes[0]))} messages" if len(sizes) == 1 else ""))
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---- rates -------------------------------------------------------------------------------------


def rate_vs(table: pd.DataFrame, x: str, params: Sequence[str], y: str, title: str,
            log_y: bool = False) -> Figure:
    """y (e.g. M msg/s summed over ranks) against x (batch, QPs, workers ...) on a base-2 axis,
    one line per curve of the other parameters the user varied."""
    keys = curve_keys(table, x, [p for p in params if p != x])
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    for i, (key, g) in enumerate(_groups(table, keys)):
        g = g.drop_duplicates(subset=[x]).sort_values(x)
        ax.plot(g[x], g[y], "o-", color=f"C{i % 10}",
                label=series_label(keys, key) if keys else "sum over ranks")
    _base2_x(ax, table[x], sizes=x == "size")
    if log_y:
        ax.set_yscale("log")
        _log_ticks(ax, table[y])
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def rate_bars(table: pd.DataFrame, params: Sequence[str], y: str, title: str) -> Figure:
    """y per point, for a sweep where no rate axis varies (one bar per point)."""
    keys = [p for p in params if p in table.columns and table[p].nunique(dropna=False) > 1]
    keys = keys or [k for k in ("size", "qps", "threads", "batch") if k in table.columns]
    labels = [series_label(keys, [row[k] for k in keys]) for _, row in table.iterrows()]
    labels = [label.replace(", ", "\n") if len(keys) > 2 else label for label in labels]
    fig, ax = plt.subplots(figsize=(max(4.8, 1.3 * len(labels) + 2), 4.4))
    vals = table[y].astype(float)
    bars = ax.bar(range(len(labels)), vals, color="C0", width=0.5)
    ax.bar_label(bars, labels=[number_text(v) for v in vals], fontsize=8)
    ax.set_xticks(range(len(labels)), labels, rotation=20 if len(labels) > 4 else 0)
    ax.set_xlim(-0.8, len(labels) - 0.2)
    ax.set_xlabel("point (" + ", ".join(_SHORT.get(k, k) for k in keys) + ")")
    ax.set_ylabel(axis_label(y))
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def goodput_vs_size(table: pd.DataFrame, params: Sequence[str], outcomes: Sequence[FitOutcome],
                    title: str, y: str = "gbps") -> Figure:
    """Goodput against size, one line per curve; for each fitted crossover the reference
    (dash-dot), the threshold (dotted) and a star at the first sampled size reaching it, each in
    the legend with its value (arXiv 2610.01380, Fig. 8)."""
    keys = curve_keys(table, "size", [p for p in params if p != "size"])
    fig, ax = plt.subplots(figsize=(6.8, 4.8))
    colour: dict[tuple, str] = {}
    for i, (key, g) in enumerate(_groups(table, keys)):
        g = g.drop_duplicates(subset=["size"]).sort_values("size")
        colour[_name(key)] = c = f"C{i % 10}"
        ax.plot(g["size"], g[y], "o-", color=c, label=series_label(keys, key) if keys
                else "goodput, sum over ranks")
    drawn: set[tuple[float, float]] = set()
    for o in outcomes:
        if o.fit != "crossover" or o.error is not None:
            continue
        key = tuple(o.group.get(k) for k in keys)
        c = colour.get(_name(key), "0.3")
        name = series_label(keys, key) + ": " if keys else ""
        ref, thr = o.params["reference"].value, o.params["threshold"].value
        frac = o.params["fraction"].value or 0.0
        if ref is not None and thr is not None and (ref, thr) not in drawn:
            drawn.add((ref, thr))
            whence = ("largest measured" if any("largest" in f for f in o.flags)
                      else "--reference-gbps")
            ax.axhline(ref, color=c, ls="-.", lw=1, alpha=0.6,
                       label=f"{name}reference {ref:.3g} GB/s ({whence})")
            ax.axhline(thr, color=c, ls=":", lw=1.2, alpha=0.8,
                       label=f"{name}{frac:.0%} of it: {thr:.3g} GB/s")
        size = o.params["size"].value
        if size is not None:
            hit = table.loc[table["size"] == size, y]
            if keys:
                sel = np.logical_and.reduce([table[k] == v for k, v in zip(keys, key,
                                                                              strict=True)])
                hit = table.loc[(table["size"] == size) & sel, y]
            if len(hit):
                ax.plot([size], [float(hit.iloc[0])], "*", ms=15, color=c, mec="k", mew=0.6,
                        label=f"{name}first size at {frac:.0%}: {size_text(size)}")
    _base2_x(ax, table["size"], sizes=True)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(AXES["size"])
    ax.set_ylabel(axis_label(y))
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


# ---- loaded round trip -------------------------------------------------------------------------


def loaded_rtt(table: pd.DataFrame, params: Sequence[str], title: str) -> Figure:
    """The probe's round trip against the background load (or the probe size when the load is
    one value and the size is not), shared queue dashed and reserved solid, p50 and a lighter
    p99, log latency axis; each p50 point labelled with the background M msg/s it carried
    (arXiv 2610.01380, Fig. 6)."""
    x = "background"
    if ("background" not in table.columns or table["background"].nunique() < 2) and (
            "size" in table.columns and table["size"].nunique() > 1):
        x = "size"
    keys = ["queue", *[k for k in curve_keys(table, x, params, also=("queue",)) if k != "queue"]]
    keys = [k for k in keys if k in table.columns]
    fig, ax = plt.subplots(figsize=(6.8, 4.8))
    for i, (key, g) in enumerate(_groups(table, keys)):
        g = g.sort_values(x)
        queue = key[0] if keys and keys[0] == "queue" else ""
        ls, marker = ("--", "s") if queue == "shared" else ("-", "o")
        c = f"C{i % 10}"
        label = series_label(keys, key)
        ax.plot(g[x], g["p50_us"], marker=marker, ls=ls, color=c, label=f"{label}, p50")
        ax.plot(g[x], g["p99_us"], marker="^", ls=ls, color=c, alpha=0.35, lw=1,
                label=f"{label}, p99")
        if "background_mps" in g.columns:
            for xv, yv, bg in zip(g[x], g["p50_us"], g["background_mps"], strict=True):
                if pd.notna(bg) and pd.notna(yv):
                    ax.annotate(f"{bg:.3g}", (xv, yv), textcoords="offset points",
                                xytext=(6, 4), fontsize=7, color=c)
    _base2_x(ax, table[x], sizes=x == "size")
    if table[x].nunique() == 1:  # one load: room either side of the single column of points
        v = float(table[x].iloc[0])
        ax.set_xlim(v / 2, v * 2)
    ax.set_yscale("log")
    _log_ticks(ax, pd.concat([table["p50_us"], table["p99_us"]]))
    ax.set_xlabel(axis_label(x) if x != "size" else "probe size (B)")
    ax.set_ylabel("round trip (µs)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, title_fontsize=8, title="numbers: background M msg/s carried"
              if "background_mps" in table.columns else None)
    fig.tight_layout()
    return fig


# ---- fits --------------------------------------------------------------------------------------


def fit_curves(outcomes: Sequence[FitOutcome], title: str) -> Figure:
    """Data (markers) and the fitted curve (line) of each fitted group, one colour per group,
    both in the legend (the SM-clock and plateau fits)."""
    fitted = [o for o in outcomes if o.error is None and o.data is not None]
    if not fitted:
        raise ValueError("no fitted group to plot")
    first = fitted[0]
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    for i, o in enumerate(fitted):
        c = f"C{i % 10}"
        name = series_label(list(o.group), list(o.group.values())) if o.group else "measured"
        xs, ys = o.data  # type: ignore[misc]
        ax.plot(xs, ys, "o", color=c, label=name)
        if o.curve is not None:
            ax.plot(o.curve[0], o.curve[1], "-", color=c, alpha=0.8,
                    label=f"{name}: {_FIT_NAMES.get(first.fit, first.fit)} fit"
                    + (f", R² {o.r2:.3f}" if o.r2 is not None else ""))
    if first.fit == "plateau":
        xs_all = pd.Series([x for o in fitted for x in o.data[0]])  # type: ignore[index]
        ys_all = pd.Series([y for o in fitted for y in o.data[1]])  # type: ignore[index]
        _base2_x(ax, xs_all)
        ax.set_yscale("log")
        _log_ticks(ax, ys_all)
    ax.set_xlabel(axis_label(first.x))
    ax.set_ylabel(axis_label(first.y))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def clock_latency(table: pd.DataFrame, outcomes: Sequence[FitOutcome], title: str) -> Figure:
    """clock-sweep: p50 latency against the measured SM clock, one colour per timing, with the
    fitted T(f) = C/f + B of each (arXiv 2610.01380, Fig. 5)."""
    x = "sm_clock_mhz" if "sm_clock_mhz" in table.columns else "clock_mhz"
    fig, ax = plt.subplots(figsize=(6.6, 4.6))
    fits = {o.group.get("metric"): o for o in outcomes
            if o.fit == "clock" and o.error is None and o.curve is not None}
    for i, (metric, g) in enumerate(table.groupby("metric", sort=False)):
        c = f"C{i % 10}"
        name = METRIC_TITLES.get(str(metric), str(metric))
        g = g.sort_values(x)
        ax.plot(g[x], g["p50_us"], "o", color=c, label=f"{name}, p50")
        o = fits.get(metric) or (next(iter(fits.values())) if len(fits) == 1 and
                                 table["metric"].nunique() == 1 else None)
        if o is not None:
            ax.plot(o.curve[0], o.curve[1], "-", color=c, alpha=0.8,  # type: ignore[index]
                    label=f"{name}, fit C/f + B: C={o.params['C'].value:.4g} cycles, "
                          f"B={o.params['B'].value:.3g} µs")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel("latency, p50 (µs)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


# ---- active connections (Fig. 10) --------------------------------------------------------------

CONNECTIONS_AXIS = AXES["connections"]
_CONNECTION_LEGEND = {"nic_role": "{}", "writes_per_visit": "W={}", "transport": "{}",
                      "dcts": "{} DCTs"}


def _connections(x: float) -> str:
    """A fitted number of connections: whole numbers from 100 up, one decimal below (a step's
    onset sits mid-interval, e.g. 64.5 +- 0.5)."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.1f}"


def _connections_label(keys: Sequence[str], key: Sequence[Any]) -> str:
    parts = []
    for k, v in zip(keys, key, strict=True):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        parts.append(_CONNECTION_LEGEND[k].format(v) if k in _CONNECTION_LEGEND
                     else value_text(k, v))
    return ", ".join(parts)


def connections_curves(summary: pd.DataFrame, keys: Sequence[str], y: str, ylabel: str,
                       title: str, outcomes: Sequence[FitOutcome] = (),
                       common: str = "") -> Figure:
    """y (median over passes, bars from the smallest to the largest pass) against the active
    connections on a log axis, one line per curve; hollow markers where only one pass ran; each
    curve's control drawn apart (a square); with `outcomes`, each curve's plateau + power-law
    fit dashed and its onset dotted (arXiv 2610.01380, Fig. 10). `common`: what every curve
    shares (the role, transport, W), in each legend entry."""
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    fits = {_name(tuple(o.group.get(k) for k in keys)): o for o in outcomes
            if o.fit == "plateau" and o.error is None and o.curve is not None}
    xs_all = []
    for i, (key, g) in enumerate(_groups(summary, keys)):
        c = f"C{i % 10}"
        name = ", ".join(t for t in (common, _connections_label(keys, key) if keys else "")
                         if t) or "measured"
        control = g[g["control"].astype(bool)]
        grid = g[~g["control"].astype(bool)].sort_values("connections")
        single = grid["passes"] <= 1
        ax.plot(grid["connections"], grid[y], "-", color=c, lw=1.4, label=name)
        several = grid[~single]
        if len(several):
            ax.plot(several["connections"], several[y], "o", color=c, ms=5,
                    label=f"{name}: median over passes")
            ax.vlines(several["connections"], several[f"{y}_min"], several[f"{y}_max"],
                      color=c, lw=1.2, label=f"{name}: range over passes")
        if single.any():
            ax.plot(grid["connections"][single], grid[y][single], "o", mfc="none", color=c,
                    ms=6, label=f"{name}: one pass only")
        if len(control):
            ax.plot(control["connections"], control[y], "s", color=c, mfc="none", ms=8,
                    label=f"{name}: control ({int(control['connections'].iloc[0])} "
                          "connections)")
        xs_all += [*grid["connections"], *control["connections"]]
        o = fits.get(_name(tuple(key)))
        if o is not None:
            onset, exp = o.params["onset"], o.params["exponent"]
            text = "no decline found" if onset.value is None or not np.isfinite(
                onset.value) else (f"onset {_connections(onset.value)}"
                                   + (f" ± {_connections(onset.err)}" if onset.err is not None
                                      and np.isfinite(onset.err) else "")
                                   + f", exponent {exp.value:.2f}")
            ax.plot(o.curve[0], o.curve[1], "--", color=c, alpha=0.8,  # type: ignore[index]
                    label=f"{name}: plateau + power-law fit, {text}")
            if onset.value is not None and np.isfinite(onset.value):
                ax.axvline(onset.value, color=c, ls=":", lw=1, alpha=0.7,
                           label=f"{name}: fitted onset")
    ax.set_xscale("log", base=2)
    if 0 < len(set(xs_all)) <= 12:  # every sampled count marked, as the papers' axes
        ticks = sorted(set(xs_all))
        shown = spaced(ticks)  # labels that would overlap on a log axis (1,024, 1,536) left out
        ax.set_xticks(ticks, [f"{v:,.0f}" if v in shown else "" for v in ticks])
    else:
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if xs_all:
        ax.set_xlim(min(xs_all) / 1.4, max(xs_all) * 1.4)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(CONNECTIONS_AXIS)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


# ---- moe-dispatch heatmaps (arXiv 2611.12362, Figs. 5 and 6) ---------------------------------

MOE_BACKENDS = ("gdaki", "free-flow", "gpi", "gpi-mc")
MOE_NAMES = {"gdaki": "default GDAKI", "free-flow": "GDAKI Free Flow", "gpi": "GPI",
             "gpi-mc": "GPI-MC"}
_MOE_ROWS = {"ranks": "EP{}", "sm_cap": "cap {}", "tokens": "{} tok", "topk": "top-{}"}


def _int_text(v: Any) -> str:
    return str(int(v)) if isinstance(v, (int, np.integer)) or (
        isinstance(v, float) and v.is_integer()) else f"{v:g}"


def moe_grids(summary: pd.DataFrame, rows: Sequence[str], col: str,
              value: str = "figure_us", reference: str = "gdaki",
              ) -> dict[str, tuple[np.ndarray, list[tuple], list[Any]]]:
    """Per backend: (grid, row keys, column values) of one heatmap panel; the reference's
    cells hold `value` (µs), the others' the paired change (change_pct, %). NaN: not run."""
    rows = [r for r in rows if r in summary.columns]
    row_keys = sorted({tuple(r) for r in summary[rows].itertuples(index=False)}) if rows else [()]
    cols = sorted(summary[col].dropna().unique())
    out = {}
    present = [b for b in MOE_BACKENDS if b in set(summary["backend"])]
    present += sorted(set(summary["backend"]) - set(present))
    for b in present:
        g = summary[summary["backend"] == b]
        grid = np.full((len(row_keys), len(cols)), np.nan)
        field = value if b == reference else "change_pct"
        for rec in g.to_dict(orient="records"):
            i = row_keys.index(tuple(rec[r] for r in rows)) if rows else 0
            grid[i, cols.index(rec[col])] = rec[field]
        out[b] = (grid, row_keys, cols)
    return out


def _heat_panel(ax: plt.Axes, grid: np.ndarray, relative: bool, row_labels: list[str],
                col_labels: list[str], marks: np.ndarray | None = None) -> Any:
    """One heatmap: every cell printed with its unit; relative panels diverge around 0 and
    saturate at ±100% (printed values keep larger changes), absolute ones on a log colour
    scale."""
    from matplotlib.colors import LogNorm, Normalize

    finite = grid[np.isfinite(grid)]
    if relative:
        norm = Normalize(-100.0, 100.0)
        cmap = "RdBu_r"
    else:
        lo = float(finite.min()) if finite.size and finite.min() > 0 else 1.0
        hi = float(finite.max()) if finite.size else 10.0
        norm = LogNorm(lo, max(hi, lo * 1.01))
        cmap = "viridis"
    im = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap=cmap, norm=norm)
    for (i, j), v in np.ndenumerate(grid):
        if not np.isfinite(v):
            continue
        text = f"{v:+.0f}%" if relative else (f"{v:.0f}" if v >= 100 else f"{v:.1f}")
        dark = norm(np.clip(v, norm.vmin, norm.vmax))
        light = (abs(dark - 0.5) > 0.3) if relative else dark < 0.55
        ax.text(j, i, text if relative else text + "µs", ha="center", va="center",
                fontsize=6, color="white" if light else "black")
        if marks is not None and marks[i, j]:
            ax.add_patch(plt.Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, lw=2.0,
                                       ec="red"))
    ax.set_xticks(range(len(col_labels)), col_labels, fontsize=7)
    ax.set_yticks(range(len(row_labels)), row_labels, fontsize=7)
    return im


def _row_label(rows: Sequence[str], key: tuple) -> str:
    return " ".join(_MOE_ROWS.get(r, r + "={}").format(_int_text(v))
                    for r, v in zip(rows, key, strict=True))


def _plain_colorbar(cb: Any) -> None:
    """Colour-bar ticks as plain numbers (µs), not powers of ten."""
    cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    cb.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    cb.ax.tick_params(labelsize=7, which="both")


def _moe_title(fig: Figure, title: str, note: str) -> None:
    """The figure's title, and under the panels what produced the network side where it was
    not a NIC (`note`)."""
    fig.suptitle(title, fontsize=10)
    if note:
        fig.text(0.005, 0.005, note, ha="left", va="bottom", fontsize=7, color="0.3")
    fig.tight_layout(rect=(0, 0.03 if note else 0, 1, 1))


def moe_factor_heatmap(summary: pd.DataFrame, title: str, reference: str = "gdaki",
                       note: str = "") -> Figure:
    """Fig. 5-style: one panel per backend, rows EP × SM cap, columns tokens per rank; the
    reference in µs (the mean over rounds of the slowest rank's mean send), the others as the
    paired change against it (mean over rounds, %; negative = earlier GPU release)."""
    rows = [r for r in ("ranks", "sm_cap") if r in summary.columns]
    grids = moe_grids(summary, rows, "tokens", reference=reference)
    n = len(grids)
    ncol = 2 if n > 1 else 1
    nrow = -(-n // ncol)
    any_rows = len(next(iter(grids.values()))[1]) if grids else 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 1.0 + 0.42 * any_rows * nrow + 1.2),
                             squeeze=False)
    for ax, (b, (grid, keys, cols)) in zip(axes.flat, grids.items(), strict=False):
        rel = b != reference
        im = _heat_panel(ax, grid, rel, [_row_label(rows, k) for k in keys],
                         [_int_text(c) for c in cols])
        ax.set_title(f"{MOE_NAMES.get(b, b)}: " + (f"change vs {MOE_NAMES.get(reference)} (%)"
                                                   if rel else "dispatch send (µs)"), fontsize=9)
        ax.set_xlabel("tokens per rank", fontsize=8)
        _plain_colorbar(fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02))
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    _moe_title(fig, title, note)
    return fig


def moe_wait_heatmap(summary: pd.DataFrame, knees: pd.DataFrame, title: str,
                     note: str = "") -> Figure:
    """Fig. 6-style: one panel per backend, rows tokens per rank, columns the requested wait;
    every cell the exposed time T_send + T_receive (median over rounds of the slowest rank's
    mean, µs), the knee (the first wait within 5% of the row's floor) outlined."""
    grids = {}
    for b in [*[b for b in MOE_BACKENDS if b in set(summary["backend"])],
              *sorted(set(summary["backend"]) - set(MOE_BACKENDS))]:
        g = summary[summary["backend"] == b]
        toks = sorted(g["tokens"].unique())
        waits = sorted(summary["wait_us"].unique())
        grid = np.full((len(toks), len(waits)), np.nan)
        marks = np.zeros_like(grid, dtype=bool)
        for rec in g.to_dict(orient="records"):
            grid[toks.index(rec["tokens"]), waits.index(rec["wait_us"])] = rec["figure_us"]
        k = knees[knees["backend"] == b] if not knees.empty else knees
        for rec in k.to_dict(orient="records"):
            if rec["tokens"] in toks and rec.get("knee_us") in waits:
                marks[toks.index(rec["tokens"]), waits.index(rec["knee_us"])] = True
        grids[b] = (grid, toks, waits, marks)
    n = len(grids)
    ncol = 2 if n > 1 else 1
    nrow = -(-n // ncol)
    rows = max(len(v[1]) for v in grids.values()) if grids else 1
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.4 * ncol, 1.2 + 0.42 * rows * nrow + 1.0),
                             squeeze=False)
    for ax, (b, (grid, toks, waits, marks)) in zip(axes.flat, grids.items(), strict=False):
        im = _heat_panel(ax, grid, False, [_int_text(t) for t in toks],
                         [_int_text(w) for w in waits], marks)
        ax.set_title(f"{MOE_NAMES.get(b, b)}: exposed T_send + T_receive (µs)", fontsize=9)
        ax.set_xlabel("requested GPU wait (µs; 0: no delay kernel)", fontsize=8)
        ax.set_ylabel("tokens per rank", fontsize=8)
        _plain_colorbar(fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02))
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    _moe_title(fig, title + "\noutlined in red: the first wait within 5% of the row's floor",
               note)
    return fig


# ---- kernel-cost ---------------------------------------------------------------------------------
_KC_LABELS = {"code-only": "code only, no transfers", "send": "send, then compute",
              "send-wait": "send, wait, then compute"}  # fmt: skip


def kernel_cost_bars(bars: pd.DataFrame, title: str, path: str = "mini-gda") -> Figure:
    """Fig. 9 of the paper (arXiv 2610.01380): throughput loss against the kernel without
    communication code, one panel per caller and live values, an arm per build of the call,
    its bars code only / send / send-wait (not additive: each is against the reference)."""
    panels = list(dict.fromkeys(zip(bars["caller"], bars["live"], strict=True)))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.4 * len(panels) + 0.6, 4.4),
                             squeeze=False)  # fmt: skip
    width = 0.26
    variants = [v for v in _KC_LABELS if v in set(bars["variant"])]
    for ax, (caller, live) in zip(axes[0], panels, strict=True):
        g = bars[(bars["caller"] == caller) & (bars["live"] == live)]
        builds = [b for b in ("inline", "separate") if b in set(g["build"])]
        for j, v in enumerate(variants):
            vals = [float(g.loc[(g["build"] == b) & (g["variant"] == v), "loss_pct"].median())
                    for b in builds]  # fmt: skip
            xs = [i + (j - (len(variants) - 1) / 2) * width for i in range(len(builds))]
            drawn = ax.bar(xs, vals, width, color=f"C{j}", label=_KC_LABELS[v])
            ax.bar_label(drawn, labels=[number_text(x) for x in vals], fontsize=7)
        ax.set_xticks(range(len(builds)), [f"{path}, {b}" for b in builds])
        ax.set_xlabel("point (path, build of the call)")
        ax.set_ylabel("throughput loss (%)")
        ax.set_title(f"{caller} caller, {int(live)} live values")
        ax.grid(True, axis="y", alpha=0.3)
    _legend_below(fig, list(axes[0]))
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(top=0.84)  # the suptitle above the panels' titles
    return fig
