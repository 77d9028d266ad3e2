"""PNG plots for the report (matplotlib, Agg backend: no display needed).

Latency against size is log-log with sizes on a base-2 axis, as in the seeds' figures; rates
against batch or QPs use a base-2 x axis and a linear rate axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from .tables import header

DPI = 120


def size_label(value: float, _pos: object = None) -> str:
    """8, 64, 1K, 4K, 1M: the byte labels of the seeds' size axes."""
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if value >= div and value % div == 0:
            return f"{int(value // div)}{unit}"
    return f"{value:g}"


def _series_label(keys: Sequence[str], values: Sequence[object]) -> str:
    def show(v: object) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)
    return ", ".join(f"{k}={show(v)}" for k, v in zip(keys, values, strict=True)) or "all"


def _varying(table: pd.DataFrame, cols: Sequence[str]) -> list[str]:
    return [c for c in cols if c in table.columns and table[c].nunique(dropna=False) > 1]


def latency_vs_size(table: pd.DataFrame, params: Sequence[str], title: str,
                    out: Path) -> Path:
    """One panel per metric: p50 (solid) and p99 (dashed, same colour) against size, log-log."""
    metrics = list(dict.fromkeys(table["metric"]))
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.2 * len(metrics), 4.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        rows = table[table["metric"] == metric]
        # Lines for what varies within this panel only (mode is constant per metric, say).
        series_keys = _varying(rows, [p for p in params if p != "size"])
        groups = rows.groupby(series_keys, dropna=False, sort=True) if series_keys else [
            ((), rows)]
        for i, (key, g) in enumerate(groups):
            key = key if isinstance(key, tuple) else (key,)
            g = g.sort_values("size")
            color = f"C{i % 10}"
            label = _series_label(series_keys, key)
            ax.plot(g["size"], g["p50_us"], "o-", color=color, label=f"{label} p50")
            ax.plot(g["size"], g["p99_us"], "^--", color=color, alpha=0.6, label=f"{label} p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        sizes = sorted(rows["size"].dropna().unique())
        if len(sizes) <= 12:  # label every sampled size, as the seeds' size axes do
            ax.set_xticks([float(v) for v in sizes])
        ax.xaxis.set_major_formatter(FuncFormatter(size_label))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("message size (B)")
        ax.set_ylabel("latency (µs)")
        ax.set_title(metric)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out


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
    ax.set_ylabel(header(y) + " (sum over ranks)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out
