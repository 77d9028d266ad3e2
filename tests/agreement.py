"""Check that the rows rank 0 printed live equal what `gicbench analyze` computes from the traces.

Call assert_live_matches_offline(run_dir, live_rows) with the rows of a run: Printer.rows, or the
"results" list of `gicbench run --json`. Rows are matched per experiment in run order (points in
sweep order, metrics in the order the point recorded them); every key either side has must agree
(numbers to 1e-9 relative: the same code computes both, only the trace round trip differs).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from gicbench.analysis.load import aggregate_ranks, load_run
from gicbench.analysis.tables import records

# Columns only the offline side has: where the row sits in the trace and the NIC counters.
OFFLINE_ONLY = ("experiment", "point", "closed")


def offline_rows(run_dir: Path | str, allow_incomplete: bool = False) -> list[dict[str, Any]]:
    """The aggregated rows analyze computes, as JSON-safe records in run order."""
    agg = aggregate_ranks(load_run(run_dir, allow_incomplete=allow_incomplete))
    return records(agg) if not agg.empty else []


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _same(a: Any, b: Any) -> bool:
    if _missing(a) or _missing(b):
        return _missing(a) and _missing(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) == bool(b) and type(a) is type(b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, list | dict | tuple) or isinstance(b, list | dict | tuple):
        def canon(v: Any) -> str:
            return v if isinstance(v, str) else json.dumps(v, sort_keys=True)
        return canon(a) == canon(b)
    return a == b


def differences(live: Sequence[dict[str, Any]], offline: Sequence[dict[str, Any]]) -> list[str]:
    """Every disagreement between live and offline rows (empty: they agree)."""
    problems: list[str] = []
    by_exp: dict[str, tuple[list[dict], list[dict]]] = {}
    for row in live:
        by_exp.setdefault(str(row.get("experiment")), ([], []))[0].append(row)
    for row in offline:
        by_exp.setdefault(str(row.get("experiment")), ([], []))[1].append(row)
    for exp, (lv, off) in by_exp.items():
        if len(lv) != len(off):
            problems.append(f"{exp}: {len(lv)} live rows, {len(off)} from the traces")
            continue
        for i, (a, b) in enumerate(zip(lv, off, strict=True)):
            where = f"{exp} row {i} (point {b.get('point')}, metric {b.get('metric')!r})"
            keys = dict.fromkeys([*a, *b])
            for k in keys:
                if k in OFFLINE_ONLY or k.startswith("counter_"):
                    continue
                va, vb = a.get(k), b.get(k)
                if not _same(va, vb):
                    problems.append(f"{where}: {k} live={va!r} traces={vb!r}")
    return problems


def assert_live_matches_offline(run_dir: Path | str, live_rows: Iterable[dict[str, Any]],
                                allow_incomplete: bool = False) -> None:
    """Raise AssertionError listing every live number that differs from analyze's."""
    problems = differences(list(live_rows), offline_rows(run_dir, allow_incomplete))
    if problems:
        shown = "\n  ".join(problems[:30])
        more = f"\n  ... and {len(problems) - 30} more" if len(problems) > 30 else ""
        raise AssertionError(f"live table and analyze of {run_dir} disagree:\n  {shown}{more}")
