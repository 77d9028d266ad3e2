"""Rank 0's output: perftest/OMB-style tables, valid JSON or CSV, and the sweep progress bar.

With -J/--output-file the same JSON or CSV (by the file's suffix) is also written to a file,
beside whatever stdout shows, as nccl-tests' -J does."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from . import safe_files
from .aggregate import header
from .config import OUTPUT_FORMATS
from .experiments.registry import Column


class Printer:
    """Prints as rows arrive (table) or all at the end (JSON/CSV, stdout stays machine-readable).

    `file`: also write the results there at the end (JSON or CSV by suffix)."""

    def __init__(self, fmt: str, out: TextIO | None = None, file: Path | None = None) -> None:
        self.fmt, self.out = fmt, out or sys.stdout
        self.file = None if file is None else Path(file)
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
            print("  ".join(_cell(c, row) for c in cols) + model_mark(row), file=self.out,
                  flush=True)

    def finish(self, footer: dict[str, Any]) -> None:
        if self.fmt in ("json", "csv"):
            print(self.document(self.fmt, footer), end="", file=self.out)
        else:
            for k, v in footer.items():
                print(f"# {k}: {v}", file=self.out)
        self.write_file(footer)

    def document(self, fmt: str, footer: dict[str, Any]) -> str:
        """The results as one JSON document (header, footer, rows) or CSV (one line per row)."""
        if fmt == "json":
            doc = {**self.header, **footer, "results": self.rows}
            return json.dumps(_clean(doc), indent=2, default=_json_default, allow_nan=False) + "\n"
        keys: list[str] = []
        for r in self.rows:
            keys += [k for k in r if k not in keys]
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows(self.rows)
        return buf.getvalue()

    def write_file(self, footer: dict[str, Any]) -> None:
        """-J: the document, in the format of the file's suffix, written whole under a new name
        and linked into place (safe_files: never through a link, never over an existing file),
        so a reader never sees half a file and nothing is overwritten."""
        if self.file is None:
            return
        text = self.document(OUTPUT_FORMATS[self.file.suffix.lower()], footer)
        try:
            safe_files.write_bytes(self.file, text.encode(), "output_file (-J)", exclusive=True)
        except FileExistsError:
            print(f"gicbench: {self.file} appeared during the run; results not written there",
                  file=sys.stderr)
            return
        print(f"# results: {self.file}", file=sys.stderr if self.fmt != "table" else self.out)


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


def model_mark(row: dict[str, Any]) -> str:
    """A row that emu's NIC model produced says so, and says when the engine was slower than
    the model (its numbers are then the engine's, not the model's)."""
    name = row.get("nic_model")
    if not name or name == "none":
        return ""
    if row.get("nic_model_saturated"):
        return f"  [modelled: {name}; saturated: the engine fell behind the model]"
    return f"  [modelled: {name}]"


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
