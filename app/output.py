"""Rank 0's output: perftest/OMB-style tables, valid JSON or CSV, and the sweep progress bar."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from contextlib import AbstractContextManager
from typing import Any, TextIO

import numpy as np

from .aggregate import header
from .experiments.registry import Column


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
            print("  ".join(f"{_header(c):>{_width(c)}}" for c in columns), file=self.out)

    def row(self, experiment: str, row: dict[str, Any]) -> None:
        self.rows.append({"experiment": experiment, **row})
        if self.fmt == "table":
            cols = self._cols[experiment]
            print("  ".join(_cell(c, row) for c in cols), file=self.out, flush=True)

    def finish(self, footer: dict[str, Any]) -> None:
        if self.fmt == "json":
            doc = {**self.header, **footer, "results": self.rows}
            print(json.dumps(_clean(doc), indent=2, default=_json_default, allow_nan=False),
                  file=self.out)
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


def _header(c: Column) -> str:
    """The header gicbench.aggregate gives the key (the one analyze prints), else the column's."""
    known = header(c.key)
    return c.header if known == c.key else known


def _width(c: Column) -> int:
    return max(len(_header(c)), c.width)


def _cell(c: Column, row: dict[str, Any]) -> str:
    v = row.get(c.key)
    missing = v is None or (isinstance(v, float) and math.isnan(v))
    text = "-" if missing else c.fmt.format(v)
    return f"{text:>{_width(c)}}"


def _clean(o: Any) -> Any:
    """NaN/inf (a statistic nobody measured) as null: JSON has no NaN."""
    if isinstance(o, float | np.floating) and not math.isfinite(float(o)):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_clean(v) for v in o]
    return o


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
