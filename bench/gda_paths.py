"""mini-gda's completion and doorbell paths side by side, from the JSON output of
bench/device_session.sh's gda_* steps (one file per run: gda_<variant>.json, e.g. gda_scan,
gda_expected, gda_host): issue, put+completion, the 4-QP all-QP quiet (p50, µs) and the rate of
4 threads on 4 QPs (M msg/s), each with its ratio to the `scan` run (the first mini-gda's
completion path; ratio < 1 is faster for latency, > 1 faster for rate).

    python3 bench/gda_paths.py RUNS_DIR OUT_PREFIX   -> OUT_PREFIX.md, OUT_PREFIX.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from doca_vs_gda import FIGURES, pick

BASE = "scan"
COLUMNS = [f for f in FIGURES if f[1] == "main"]


def main(runs: Path, prefix: Path) -> int:
    docs: dict[str, dict[str, Any]] = {}
    for f in sorted(runs.glob("gda_*.json")):
        try:
            docs[f.stem[len("gda_") :]] = json.loads(f.read_text())
        except (json.JSONDecodeError, OSError) as e:
            err = f.with_suffix(".err")
            docs[f.stem[len("gda_") :]] = {
                "error": f"no JSON ({e}) {err.read_text()[-300:] if err.exists() else ''}"
            }
    table = {v: {c: pick(d, where, key) for c, _, where, key in COLUMNS} for v, d in docs.items()}
    lines = ["| variant | " + " | ".join(f"{c} | ×{BASE}" for c, *_ in COLUMNS) + " |"]
    lines.append("|---" * (1 + 2 * len(COLUMNS)) + "|")
    for v, row in table.items():
        cells = []
        for c, *_ in COLUMNS:
            x, base = row[c], table.get(BASE, {}).get(c)
            cells += [
                "-" if x is None else f"{x:.3f}",
                "-" if x is None or not base else f"{x / base:.2f}",
            ]
        lines.append(f"| {v} | " + " | ".join(cells) + " |")
    failed = [f"{v}: {d['error']}" for v, d in docs.items() if "error" in d]
    text = "\n".join(lines) + ("\n\nruns without results:\n" + "\n".join(failed) if failed else "")
    print(text)
    prefix.with_suffix(".md").write_text(text + "\n")
    prefix.with_suffix(".json").write_text(
        json.dumps({"figures": table, "failed": failed}, indent=2)
    )
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2])))
