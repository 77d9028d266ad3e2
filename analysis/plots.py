"""PNG plots for the report (matplotlib, Agg backend: no display needed).

Latency against size is log-log with sizes on a base-2 axis, as in the papers' figures; rates
against batch or QPs use a base-2 x axis and a linear rate axis.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from gicbench import safe_files

from .fits.apply import FitOutcome
from .tables import header

DPI = 120


def _save(fig: plt.Figure, out: Path) -> Path:
    """Every figure is saved here: drawn in memory, then written atomically beside `out`
    (safe_files: never through a link, never half-written)."""
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=out.suffix.lstrip(".") or "png", dpi=DPI)
    finally:
        plt.close(fig)
    return safe_files.write_bytes(out, buf.getvalue(), "report plots directory")


def size_label(value: float, _pos: object = None) -> str:
    """8, 64, 1K, 4K, 1M: the byte labels of the papers' size axes."""
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if value >= div and value % div == 0:
            return f"{int(value // div)}{unit}"
    return f"{value:g}"


def _series_label(keys: Sequence[str], values: Sequence[object]) -> str:
    def show(v: object) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)
    return ", ".join(f"{k}={show(v)}" for k, v in zip(keys, values, strict=True)) or "all"


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


def _varying(table: pd.DataFrame, cols: Sequence[str]) -> list[str]:
    return [c for c in cols if c in table.columns and table[c].nunique(dropna=False) > 1]


def latency_vs_size(table: pd.DataFrame, params: Sequence[str], title: str,
                    out: Path) -> Path:
    """One panel per metric: p50 (solid) and p99 (dashed, same colour) against size, log-log.

    A line per combination of the parameters that vary within a panel; one colour per
    combination across all panels, explained once in a legend below them."""
    metrics = list(dict.fromkeys(table["metric"]))
    others = [p for p in params if p != "size"]
    keys = [p for p in others
            if any(p in _varying(table[table["metric"] == m], others) for m in metrics)]
    combos = list(dict.fromkeys(_combo(row, keys) for _, row in table.iterrows()))
    colour = {c: f"C{i % 10}" for i, c in enumerate(sorted(combos, key=str))}
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.0), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        rows = table[table["metric"] == metric]
        groups = rows.groupby(keys, dropna=False, sort=True) if keys else [((), rows)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            g = g.sort_values("size")
            c = colour[tuple(key)]
            ax.plot(g["size"], g["p50_us"], "o-", color=c)
            ax.plot(g["size"], g["p99_us"], "^--", color=c, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sizes = sorted(rows["size"].dropna().unique())
        if len(sizes) <= 12:  # label every sampled size, as the papers' size axes do
            ax.set_xticks([float(v) for v in sizes])
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        _log_ticks(ax, pd.concat([rows["p50_us"], rows["p99_us"]]))
        ax.set_xlabel("message size (B)")
        ax.set_ylabel("latency (µs)")
        ax.set_title(metric)
        ax.grid(True, which="major", alpha=0.3)
    handles = [Line2D([], [], color="0.3", marker="o", ls="-", label="p50"),
               Line2D([], [], color="0.3", marker="^", ls="--", alpha=0.6, label="p99")]
    if keys:
        handles += [Line2D([], [], color=colour[c], lw=3, label=_series_label(keys, c))
                    for c in sorted(combos, key=str)]
    ncol = min(len(handles), 2 + 3 * len(metrics) // 2)
    rows_of_legend = -(-len(handles) // ncol)
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0.045 * rows_of_legend + 0.02, 1, 1))
    return _save(fig, out)


def _combo(row: pd.Series, keys: Sequence[str]) -> tuple:
    return tuple(row[k] for k in keys)


def rate_vs(table: pd.DataFrame, x: str, params: Sequence[str], y: str, title: str,
            out: Path) -> Path:
    """y (e.g. M msg/s summed over ranks) against x (batch, QPs ...) on a base-2 axis, one line
    per combination of the other varying parameters."""
    series_keys = _varying(table, [p for p in params if p != x])
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    groups = table.groupby(series_keys, dropna=False, sort=True) if series_keys else [
        ((), table)]
    for i, (key, g) in enumerate(groups):
        key = key if isinstance(key, tuple) else (key,)
        g = g.drop_duplicates(subset=[x]).sort_values(x)
        ax.plot(g[x], g[y], "o-", color=f"C{i % 10}", label=_series_label(series_keys, key))
    ax.set_xscale("log", base=2)
    xs = sorted(table[x].dropna().unique())
    if len(xs) <= 12:
        ax.set_xticks([float(v) for v in xs])
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_ylim(bottom=0)
    ax.set_xlabel(x)
    ax.set_ylabel(header(y))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def latency_bars(table: pd.DataFrame, title: str, out: Path) -> Path:
    """p50/p99/p99.9 per metric on a log axis, for a sweep with a single size."""
    metrics = list(dict.fromkeys(table["metric"]))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(metrics) + 2), 4.2))
    width = 0.26
    for j, (stat, key, alpha) in enumerate((("p50", "p50_us", 1.0), ("p99", "p99_us", 0.7),
                                            ("p99.9", "p999_us", 0.45))):
        vals = [float(table.loc[table["metric"] == m, key].median()) for m in metrics]
        xs = [i + (j - 1) * width for i in range(len(metrics))]
        bars = ax.bar(xs, vals, width, color="C0", alpha=alpha, label=stat)
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in vals], fontsize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(metrics)), metrics)
    ax.set_ylabel("latency (µs)")
    sizes = table["size"].dropna().unique() if "size" in table.columns else []
    ax.set_title(title + (f", size {size_label(float(sizes[0]))} B" if len(sizes) == 1 else ""))
    ax.grid(True, axis="y", which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def rate_bars(table: pd.DataFrame, params: Sequence[str], y: str, title: str,
              out: Path) -> Path:
    """y per point, for a sweep where no rate axis varies (one bar per point)."""
    keys = _varying(table, params) or [
        k for k in ("size", "qps", "threads", "batch") if k in table.columns]
    labels = [_series_label(keys, [row[k] for k in keys]) for _, row in table.iterrows()]
    labels = [label.replace(", ", "\n") if len(keys) > 2 else label for label in labels]
    fig, ax = plt.subplots(figsize=(max(4.5, 1.2 * len(labels) + 2), 4.2))
    bars = ax.bar(range(len(labels)), table[y].astype(float), color="C0", width=0.5)
    ax.bar_label(bars, labels=[f"{v:.3g}" for v in table[y].astype(float)], fontsize=8)
    ax.set_xticks(range(len(labels)), labels, rotation=20 if len(labels) > 4 else 0)
    ax.set_xlim(-0.8, len(labels) - 0.2)
    ax.set_ylabel(header(y))
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, out)


def fit_curves(outcomes: Sequence[FitOutcome], title: str, out: Path) -> Path:
    """Data (markers) and the fitted curve (line) of each fitted group, one colour per group;
    a crossover marks its threshold and crossing instead of a curve."""
    fitted = [o for o in outcomes if o.error is None and o.data is not None]
    if not fitted:
        raise ValueError("no fitted group to plot")
    first = fitted[0]
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for i, o in enumerate(fitted):
        c = f"C{i % 10}"
        label = ", ".join(f"{k}={v}" for k, v in o.group.items()) or "data"
        xs, ys = o.data  # type: ignore[misc]
        ax.plot(xs, ys, "o", color=c, label=label)
        if o.curve is not None:
            ax.plot(o.curve[0], o.curve[1], "-", color=c, alpha=0.8)
        if o.fit == "crossover":
            ax.axhline(o.params["threshold"].value, color=c, ls=":", alpha=0.7)
            size = o.params["size"].value
            if size is not None:
                ax.axvline(size, color=c, ls="--", alpha=0.7)
    if first.fit in ("plateau", "crossover"):
        ax.set_xscale("log", base=2)
    if first.fit == "plateau":
        ax.set_yscale("log")
    ax.set_xlabel(first.x)
    ax.set_ylabel(header(first.y))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)
