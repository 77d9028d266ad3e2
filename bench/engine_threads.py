"""The emulated NIC's capacity against its CPU engine threads (`--engine-threads`), side by side
in one run: the paper's Table 5 rows through mini-gda (`--submitter gpu`), mini-proxy's rate with
T = 1 and 4 workers (GPU producers, B = 16), and the host-rung doorbell (`--doorbell host`)
against the GPU-rung one at 16 QPs, each at 1 engine thread and at `--threads` of them, beside
the paper's P-IB figure. No NIC model: these are the engine's own speeds (a model charges one
thread's clock, so it refuses more threads).

Needs a GPU (and MPS for two ranks on one), and (1 + threads) free cores per rank:
    python bench/engine_threads.py --threads 4 --md report.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nic_model import GPU, TABLE5, run

PROXY_PAPER_SCALING = 2.5  # the target for T = 1 -> 4 workers (the paper's proxy scales with T)
HOST_RUNG_BAR = 0.9  # host-rung / GPU-rung at 16 QPs (the paper: 257 vs 260 M msg/s)


def _rate(args: list[str], threads: int, timeout: float = 600) -> float:
    rows = run([*args, "--engine-threads", str(threads)], "none", "thread", timeout)
    return sum(r["msg_rate_mps"] for r in rows) / len(rows)


def table5(threads: int, messages: str, ordering: str) -> list[dict[str, Any]]:
    out = []
    for t, q, batch, publish, paper, what in TABLE5:
        args = [*GPU, "--ordering", ordering, "--publish", publish, "msg-rate", "-t", str(t),
                "-q", str(q), "--batch", str(batch), "--messages", messages]  # fmt: skip
        row: dict[str, Any] = {"row": what, "paper": paper}
        for n in sorted({1, threads}):
            try:
                row[f"t{n}"] = _rate(args, n)
            except SystemExit as e:  # recorded, not hidden: the next row still runs
                row[f"t{n}"] = None
                print(f"{what}, {n} engine thread(s): {str(e)[-600:]}", file=sys.stderr)
        out.append(row)
    return out


def proxy(threads: int, messages: str) -> list[dict[str, Any]]:
    out = []
    for n in sorted({1, threads}):
        got = {}
        for workers in (1, 4):
            args = ["proxy-rate", "--submitter", "proxy", "--producer", "gpu", "--sweep-workers",
                    str(workers), "--sweep-rings", "32", "--sweep-batch", "16", "--messages",
                    messages]  # fmt: skip
            got[workers] = _rate(args, n)
        out.append({"engine_threads": n, "T1": got[1], "T4": got[4], "T4/T1": got[4] / got[1]})
    return out


def host_rung(threads: int, messages: str, ordering: str) -> list[dict[str, Any]]:
    out = []
    for n in sorted({1, threads}):
        rates = {}
        for db in ("gpu", "host"):
            args = [*GPU, "--ordering", ordering, "--doorbell", db, "msg-rate", "-t", "16", "-q",
                    "16", "--batch", "16", "--messages", messages]  # fmt: skip
            rates[db] = _rate(args, n)
        out.append({"engine_threads": n, **rates, "host/gpu": rates["host"] / rates["gpu"]})
    return out


def _f(v: float | None) -> str:
    return "failed" if v is None else f"{v:.2f}"


def report(threads: int, t5: list, px: list, hr: list) -> str:
    lines = [f"## Table 5 through mini-gda, M msg/s (1 vs {threads} engine threads per rank)", "",
             f"| row | the paper (P-IB) | 1 thread | {threads} threads | {threads} / 1 | "
             f"{threads} threads / paper |", "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in t5:
        a, b = r.get("t1"), r.get(f"t{threads}")
        ratio = f"{b / a:.2f}" if a and b else "-"
        vs = f"{b / r['paper']:.2f}" if b else "-"
        lines.append(f"| {r['row']} | {r['paper']} | {_f(a)} | {_f(b)} | {ratio} | {vs} |")
    lines += ["", "## mini-proxy, GPU producers, R = 32, B = 16, M msg/s", "",
              "| engine threads | T = 1 | T = 4 | T4 / T1 |", "|---:|---:|---:|---:|"]  # fmt: skip
    for r in px:
        lines.append(f"| {r['engine_threads']} | {r['T1']:.2f} | {r['T4']:.2f} | "
                     f"{r['T4/T1']:.2f} |")  # fmt: skip
    lines += ["", f"Bar: T4 / T1 >= {PROXY_PAPER_SCALING}.", "",
              "## Host-rung doorbell against GPU-rung, 16 QPs x 16 threads, batch 16, M msg/s", "",
              "| engine threads | GPU-rung | host-rung | host / GPU |",
              "|---:|---:|---:|---:|"]  # fmt: skip
    for r in hr:
        lines.append(f"| {r['engine_threads']} | {r['gpu']:.2f} | {r['host']:.2f} | "
                     f"{r['host/gpu']:.2f} |")  # fmt: skip
    lines += ["", f"Bar: host / GPU >= {HOST_RUNG_BAR} (the paper: 257 vs 260)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=4, help="engine threads beside 1")
    ap.add_argument("--messages", default="200000", help="--messages of each msg-rate")
    ap.add_argument("--ordering", default="gpu-fence", help="mini-gda's --ordering")
    ap.add_argument("--only", choices=("table5", "proxy", "host-rung"), action="append")
    ap.add_argument("--md", type=Path, help="also write the report here")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    a = ap.parse_args()
    only = set(a.only or ("table5", "proxy", "host-rung"))
    t5 = table5(a.threads, a.messages, a.ordering) if "table5" in only else []
    px = proxy(a.threads, a.messages) if "proxy" in only else []
    hr = host_rung(a.threads, a.messages, a.ordering) if "host-rung" in only else []
    text = report(a.threads, t5, px, hr)
    print(text)
    if a.md:
        a.md.write_text(text)
    if a.json:
        a.json.write_text(json.dumps({"table5": t5, "proxy": px, "host_rung": hr}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
