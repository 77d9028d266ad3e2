"""Benchmark (not a test): the paper's Table 5 rows through mini-gda on both emu engines, one run.

Each row (threads, QPs, WQEs per doorbell, publication; arXiv 2610.01380, Table 5, P-IB) runs as
`mpiexec -n 2 gicbench run --submitter gpu msg-rate ...` (pairs, 8 B inline, --ordering) on emu's
CPU engine (one engine thread a rank, queues in host memory mapped into the GPU) and on its CUDA
engine (--engine cuda --queues device: queues, CQs and regions in GPU memory, --engine-ctas
CTAs), and the table gives each beside the paper's figure, with the better one over the paper.
The CPU engine executes every WQE of a rank on one thread; the CUDA engine's rate per QP is
bounded by its SQ over its doorbell-to-CQE time (bench/cuda_engine.py), hence --sq-depth.

    python bench/table5.py --md t5.md --json t5.json
    python bench/table5.py --engines cuda --sq-depth 4096
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nic_model import GPU, TABLE5, run

ENGINES = ("cpu", "cuda")


def engine_args(engine: str, sq_depth: int, ctas: int) -> list[str]:
    if engine == "cpu":
        return ["--sq-depth", str(sq_depth)]
    return ["--engine", "cuda", "--queues", "device", "--engine-ctas", str(ctas),
            "--sq-depth", str(sq_depth)]  # fmt: skip


def measure(engines: list[str], messages: str, ordering: str, sq_depth: int,
            ctas: int) -> list[dict[str, Any]]:  # fmt: skip
    out = []
    for t, q, batch, publish, paper, what in TABLE5:
        row: dict[str, Any] = {"row": what, "threads": t, "qps": q, "batch": batch,
                               "publish": publish, "paper": paper}  # fmt: skip
        for e in engines:
            args = [*GPU, *engine_args(e, sq_depth, ctas), "--ordering", ordering, "--publish",
                    publish, "-b", "8", "msg-rate", "-t", str(t), "-q", str(q), "--batch",
                    str(batch), "--messages", messages]  # fmt: skip
            try:
                rows = run(args, "none", "thread", 300)
                row[e] = sum(r["msg_rate_mps"] for r in rows) / len(rows)
            except SystemExit as err:  # recorded, not hidden: the next row still runs
                row[e] = None
                print(f"{what}, {e} engine: {str(err)[-800:]}", file=sys.stderr)
        out.append(row)
    return out


def report(rows: list[dict[str, Any]], engines: list[str], ordering: str, sq: int) -> str:
    head = " | ".join(f"{e} engine" for e in engines)
    lines = [f"## Table 5 through mini-gda, M msg/s ({ordering}, 8 B inline, SQ {sq} WQEBBs)", "",
             f"| row | the paper (P-IB) | {head} | best / paper |",
             "|---|---:|" + "---:|" * len(engines) + "---:|"]  # fmt: skip
    for r in rows:
        got = [r.get(e) for e in engines]
        best = max((g for g in got if g is not None), default=None)
        cells = " | ".join("failed" if g is None else f"{g:.2f}" for g in got)
        ratio = "–" if best is None else f"{best / r['paper']:.2f}"
        lines.append(f"| {r['row']} | {r['paper']} | {cells} | {ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="cpu,cuda", help="cpu,cuda (either or both)")
    ap.add_argument("--messages", default="200000", help="--messages of each msg-rate")
    ap.add_argument("--ordering", default="gpu-fence", help="mini-gda's --ordering")
    ap.add_argument("--sq-depth", type=int, default=1024, help="--sq-depth of every run")
    ap.add_argument("--engine-ctas", type=int, default=32, help="the CUDA engine's CTAs")
    ap.add_argument("--md", type=Path, help="also write the report here")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    a = ap.parse_args(argv)
    engines = [e for e in a.engines.split(",") if e]
    if not engines or any(e not in ENGINES for e in engines):
        ap.error(f"--engines {a.engines!r}: a comma list of {', '.join(ENGINES)}")
    rows = measure(engines, a.messages, a.ordering, a.sq_depth, a.engine_ctas)
    text = report(rows, engines, a.ordering, a.sq_depth)
    print(text)
    if a.md:
        a.md.write_text(text)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
