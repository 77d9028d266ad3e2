"""Rank 0's output: perftest/OMB-style tables, valid JSON or CSV, and the sweep progress bar."""

from __future__ import annotations

import csv
import io
import json
import sys
from contextlib import AbstractContextManager
from typing import Any, TextIO

import numpy as np

from .experiments.registry import Column


def latency_summary(ns: np.ndarray) -> dict[str, float]:
    """p50/p99/p99.9/mean/min/max of nanosecond samples, in µs."""
    if ns.size == 0:
        return {}
    us = ns.astype(np.float64) / 1e3
    p50, p99, p999 = np.percentile(us, [50, 99, 99.9])
    return {
        "p50_us": float(p50),
        "p99_us": float(p99),
        "p999_us": float(p999),
        "mean_us": float(us.mean()),
        "min_us": float(us.min()),
        "max_us": float(us.max()),
        "count": int(us.size),
    }


def aggregate_senders(params: dict[str, Any], summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One table row from the sender ranks' summaries, aggregated as the seeds report ranks and
    as `gicbench analyze` does: each statistic is the median over ranks of that rank's value; the
    slowest rank is the one with the largest mean. Rates: per pair (median) and summed."""
    row: dict[str, Any] = dict(params)
    senders = [s for s in summaries if s.get("role") in ("sender", "both")]
    row["senders"] = len(senders)
    with_lat = [s for s in senders if "p50_us" in s]
    if with_lat:
        for k in ("p50_us", "p99_us", "p999_us", "mean_us", "min_us", "max_us", "count"):
            row[k] = float(np.median([s[k] for s in with_lat]))
        row["count"] = int(row["count"])
        slowest = max(with_lat, key=lambda s: s["mean_us"])
        row["slowest_p50_us"] = slowest["p50_us"]
        row["slowest_rank"] = slowest["rank"]
    rates = [s["msg_rate_mps"] for s in senders if "msg_rate_mps" in s]
    if rates:
        row["msg_rate_mps"] = float(np.median(rates))
        row["sum_msg_rate_mps"] = float(np.sum(rates))
        row["gbps"] = float(np.median([s["gbps"] for s in senders]))
    return row


class Printer:
    """Prints as rows arrive (table) or all at the end (JSON/CSV, stdout stays machine-readable)."""

    def __init__(self, fmt: str, out: TextIO | None = None) -> None:
        self.fmt, self.out = fmt, out or sys.stdout
        self.rows: list[dict[str, Any]] = []
        self._cols: dict[str, list[Column]] = {}
        self.header: dict[str, Any] = {}

    def preamble(self, lines: list[str], header: dict[str, Any]) -> None:
        self.header = header
        if self.fmt == "table":
            for ln in lines:
                print(f"# {ln}", file=self.out)

    def begin_experiment(self, name: str, columns: list[Column]) -> None:
        self._cols[name] = columns
        if self.fmt == "table":
            print(f"\n# {name}", file=self.out)
            print("  ".join(f"{c.header:>{_width(c)}}" for c in columns), file=self.out)

    def row(self, experiment: str, row: dict[str, Any]) -> None:
        self.rows.append({"experiment": experiment, **row})
        if self.fmt == "table":
            cols = self._cols[experiment]
            print("  ".join(_cell(c, row) for c in cols), file=self.out, flush=True)

    def finish(self, footer: dict[str, Any]) -> None:
        if self.fmt == "json":
            doc = {**self.header, **footer, "results": self.rows}
            print(json.dumps(doc, indent=2, default=_json_default), file=self.out)
        elif self.fmt == "csv":
            keys: list[str] = []
            for r in self.rows:
                keys += [k for k in r if k not in keys]
            buf = io.StringIO()
            w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
            w.writeheader()
            w.writerows(self.rows)
            print(buf.getvalue(), end="", file=self.out)
        else:
            for k, v in footer.items():
                print(f"# {k}: {v}", file=self.out)


def _width(c: Column) -> int:
    return max(len(c.header), c.width)


def _cell(c: Column, row: dict[str, Any]) -> str:
    v = row.get(c.key)
    text = "-" if v is None else c.fmt.format(v)
    return f"{text:>{_width(c)}}"


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer | np.floating):
        return o.item()
    return str(o)


class SweepProgress(AbstractContextManager):
    """A rich progress bar on rank 0's stderr when it is a terminal; silent otherwise."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.total = total
        self._bar = None

    def __enter__(self) -> SweepProgress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._bar = Progress(
                "{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task("sweep", total=self.total)
        return self

    def advance(self, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=description)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)
