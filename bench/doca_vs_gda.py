"""The side-by-side report of bench/doca_vs_gda.sh: DOCA GPUNetIO's NIC handlers against
mini-gda's orderings, from the runs' JSON output (one file per run, named
<run>_<submitter>_<ordering or handler>.json). Latencies are medians (p50, µs); rates are
M msg/s summed over sending ranks. Every figure is also given as a ratio to mini-gda with
gpu-fence and with sys-fence (ratio > 1: slower for latency, faster for rate).

    python3 bench/doca_vs_gda.py RUNS_DIR OUT_PREFIX   -> OUT_PREFIX.md, OUT_PREFIX.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BASELINES = ("gpu-fence", "sys-fence")
# (column, run, row filter, value key); runs: main (single-op, msg-rate and completion-scope with
# 4 QPs, 4 threads), r32 (msg-rate, 32 threads on one QP)
FIGURES = (
    ("issue p50 (µs)", "main", {"experiment": "single-op", "mode": "issue"}, "p50_us"),
    ("put+completion p50 (µs)", "main", {"experiment": "single-op", "mode": "put_completion"},
     "p50_us"),
    ("quiet 4 QPs p50 (µs)", "main",
     {"experiment": "completion-scope", "qps": 4, "scope": "all"}, "p50_us"),
    ("rate 4 threads / 4 QPs (M msg/s)", "main", {"experiment": "msg-rate"}, "msg_rate_mps"),
    ("rate 32 threads / 1 QP (M msg/s)", "r32", {"experiment": "msg-rate"}, "msg_rate_mps"),
)  # fmt: skip


def load(runs: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(run, variant) -> the run's JSON document (or {"error": why})."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for f in sorted(runs.glob("*.json")):
        parts = f.stem.split("_", 2)
        if len(parts) != 3:
            continue
        exp, sub, variant = parts
        key = (exp, f"{sub}:{variant}")
        try:
            out[key] = json.loads(f.read_text())
        except (json.JSONDecodeError, OSError) as e:
            err = f.with_suffix(".err")
            tail = err.read_text()[-300:] if err.exists() else ""
            out[key] = {"error": f"no JSON ({e}) {tail}".strip()}
    return out


def pick(doc: dict[str, Any], where: dict[str, Any], key: str) -> float | None:
    for row in doc.get("results", []):
        if all(row.get(k) == v for k, v in where.items()) and row.get(key) is not None:
            if row.get("validated") is False:
                return None
            return float(row[key])
    return None


def main(runs: Path, prefix: Path) -> int:
    docs = load(runs)
    variants = sorted({v for _, v in docs}, key=lambda v: (not v.startswith("gpu:"), v))
    table: dict[str, dict[str, float | None]] = {}
    for v in variants:
        table[v] = {col: pick(docs.get((exp, v), {}), where, key)
                    for col, exp, where, key in FIGURES}  # fmt: skip
    head = [f"{c} | ×gda {BASELINES[0]} | ×gda {BASELINES[1]}" for c, *_ in FIGURES]
    lines = ["| submitter:variant | " + " | ".join(head) + " |"]
    lines.append("|---" * (1 + 3 * len(FIGURES)) + "|")
    ratios: dict[str, dict[str, Any]] = {}
    for v in variants:
        cells, ratios[v] = [], {}
        for col, *_ in FIGURES:
            x = table[v][col]
            cells.append("-" if x is None else f"{x:.3f}")
            for b in BASELINES:
                base = table.get(f"gpu:{b}", {}).get(col)
                r = None if x is None or not base else x / base
                ratios[v][f"{col} ×gda {b}"] = r
                cells.append("-" if r is None else f"{r:.2f}")
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    failed = [f"{e} {v}: {d['error']}" for (e, v), d in docs.items() if "error" in d]
    text = "\n".join(lines)
    if failed:
        text += "\n\nruns without results:\n" + "\n".join(failed)
    print(text)
    prefix.with_suffix(".md").write_text(text + "\n")
    prefix.with_suffix(".json").write_text(
        json.dumps({"figures": table, "ratios": ratios, "failed": failed}, indent=2)
    )
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2])))
