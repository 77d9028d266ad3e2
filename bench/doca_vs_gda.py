"""The side-by-side report of bench/doca_vs_gda.sh: DOCA GPUNetIO's NIC handlers against
mini-gda's orderings, from the runs' JSON output (one file per run, named
<run>_<submitter>_<ordering or handler>.json). Latencies are medians (p50, µs); rates are
M msg/s summed over sending ranks. Every figure is also given as a ratio to mini-gda with
gpu-fence and with sys-fence (ratio > 1: slower for latency, faster for rate).

    python3 bench/doca_vs_gda.py RUNS_DIR OUT_PREFIX   -> OUT_PREFIX.md, OUT_PREFIX.json

--session: the doca_ steps of bench/device_session.sh instead (runs doca_rt_<handler|gda>,
doca_share_<sharing|gda>_<scope>, doca_cudaeng_<handler>): issue, put+completion, round trip and
the 32-thread rate on one QP per handler, as ratios to mini-gda (gpu-fence, --publish thread) of
the same call; the shared-QP rate per sharing mode and scope against mini-gda's thread / warp
publication; the emu counters each point recorded.

    python3 bench/doca_vs_gda.py --session RUNS_DIR OUT_PREFIX
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


SESSION_FIGURES = (
    ("issue p50 (µs)", {"experiment": "single-op", "mode": "issue"}, "p50_us"),
    ("put+completion p50 (µs)", {"experiment": "single-op", "mode": "put_completion"}, "p50_us"),
    ("round trip p50 (µs)", {"experiment": "single-op", "mode": "round_trip"}, "p50_us"),
    ("rate 32 threads / 1 QP (M msg/s)", {"experiment": "msg-rate"}, "msg_rate_mps"),
)  # fmt: skip
COUNTERS = ("emu_stale_wqes", "emu_bad_doorbells", "emu_dbrec_lag")


def _counters(doc: dict[str, Any]) -> str:
    """The emu counters the run's points recorded, summed (stale/bad must be 0)."""
    tot = {k: 0 for k in COUNTERS}
    seen = False
    for row in doc.get("results", []):
        for k in COUNTERS:
            if row.get(k) is not None:
                tot[k] += int(row[k])
                seen = True
    return " ".join(f"{k[4:]}={v}" for k, v in tot.items()) if seen else "-"


def _validated(doc: dict[str, Any]) -> str:
    rows = doc.get("results", [])
    if "error" in doc or not rows:
        return "no"
    bad = sum(1 for r in rows if r.get("validated") is False)
    return "yes" if not bad else f"{bad} rows failed"


def session(runs: Path, prefix: Path) -> int:
    docs: dict[str, dict[str, Any]] = {}
    for f in sorted(runs.glob("doca_*.json")):
        try:
            docs[f.stem] = json.loads(f.read_text())
        except (json.JSONDecodeError, OSError) as e:
            err = f.with_suffix(".err")
            tail = err.read_text()[-300:] if err.exists() else ""
            docs[f.stem] = {"error": f"no JSON ({e}) {tail}".strip()}
    out: dict[str, Any] = {"handlers": {}, "sharing": {}}
    lines = ["| run | " + " | ".join(f"{c} | ×gda" for c, *_ in SESSION_FIGURES)
             + " | validated | emu counters |"]  # fmt: skip
    lines.append("|---" * (3 + 2 * len(SESSION_FIGURES)) + "|")
    base = docs.get("doca_rt_gda", {})
    names = sorted(n for n in docs if n.startswith(("doca_rt_", "doca_cudaeng_")))
    for n in sorted(names, key=lambda n: (n != "doca_rt_gda", n)):
        cells, row = [], {}
        for col, where, key in SESSION_FIGURES:
            x, b = pick(docs[n], where, key), pick(base, where, key)
            r = None if x is None or not b else x / b
            row[col], row[col + " ×gda"] = x, r
            cells += ["-" if x is None else f"{x:.3f}", "-" if r is None else f"{r:.2f}"]
        out["handlers"][n] = row
        lines.append(f"| {n} | " + " | ".join(cells)
                     + f" | {_validated(docs[n])} | {_counters(docs[n])} |")  # fmt: skip
    lines += ["", "| shared QP, 32 threads | M msg/s | ×gda (same scope) | validated | emu "
              "counters |", "|---|---|---|---|---|"]  # fmt: skip
    for n in sorted(n for n in docs if n.startswith("doca_share_")):
        scope = n.rsplit("_", 1)[-1]
        x = pick(docs[n], {"experiment": "msg-rate"}, "msg_rate_mps")
        b = pick(docs.get(f"doca_share_gda_{scope}", {}), {"experiment": "msg-rate"},
                 "msg_rate_mps")  # fmt: skip
        r = None if x is None or not b else x / b
        out["sharing"][n] = {"mps": x, "x_gda": r}
        lines.append(f"| {n[len('doca_share_'):]} | {'-' if x is None else f'{x:.3f}'} | "
                     f"{'-' if r is None else f'{r:.2f}'} | {_validated(docs[n])} | "
                     f"{_counters(docs[n])} |")  # fmt: skip
    failed = [f"{n}: {d['error']}" for n, d in docs.items() if "error" in d]
    text = "\n".join(lines) + ("\n\nruns without results:\n" + "\n".join(failed) if failed else "")
    print(text)
    prefix.with_suffix(".md").write_text(text + "\n")
    prefix.with_suffix(".json").write_text(json.dumps({**out, "failed": failed}, indent=2))
    return 0 if not failed else 1


if __name__ == "__main__":
    if sys.argv[1] == "--session":
        raise SystemExit(session(Path(sys.argv[2]), Path(sys.argv[3])))
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2])))
