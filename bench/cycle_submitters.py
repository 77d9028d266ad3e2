"""active-connections through each submitter that cycles connections, side by side in one
invocation: the same send-only sweep (2 ranks, RC, 8 B inline, one pass) through the host
submitter's native loop and through mini-proxy (host producers, a ring per unit, --workers
workers), each point's rate and the proxy/host ratio, at W writes per visit.

    python bench/cycle_submitters.py [--active 16,256,2048,8192] [--writes-per-visit 32 1]

On the emulated NIC without a NIC model the rates are those of CPU threads doing the NIC's work
(and, on a small machine, sharing its cores with the submitters): the ratio says what the proxy
hop costs beside the host loop on the same machine, not what a NIC would do.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from scale import run_ranks


def sweep(submitter: str, args: argparse.Namespace, w: int, out: Path) -> dict[int, float]:
    """M msg/s of each point (connections -> rate; the control as 2)."""
    run = ["active-connections", "--pattern", "pairs", "--active", args.active,
           "--writes-per-visit", str(w), "--batch", str(min(16, w)), "--messages",
           str(args.messages), "--passes", "1", "--threads", str(args.threads), "--sq-depth",
           "64", "--progress", "inline", "--submitter", submitter, "--json"]  # fmt: skip
    if submitter == "proxy":
        run += ["--workers", str(args.workers), "--precondition-s", "0"]
    doc, _rss, _wall = run_ranks(2, run, out)
    rows = [r for r in doc["results"] if r.get("experiment") == "active-connections"
            and r.get("role") == "sender"]  # fmt: skip
    return {int(r["connections"]): float(r["msg_rate_mps"]) for r in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--active", default="16,256,2048,8192")
    ap.add_argument("--writes-per-visit", type=int, nargs="+", default=[32, 1])
    ap.add_argument("--messages", type=int, default=100000, help="timed writes per unit")
    ap.add_argument("--threads", type=int, default=2, help="submitting units per rank")
    ap.add_argument("--workers", type=int, default=2, help="mini-proxy's workers")
    args = ap.parse_args()
    print(f"{'W':>5} {'connections':>11} {'host M msg/s':>12} {'proxy M msg/s':>13} "
          f"{'proxy/host':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for w in args.writes_per_visit:
            host = sweep("host", args, w, Path(tmp) / f"host{w}")
            proxy = sweep("proxy", args, w, Path(tmp) / f"proxy{w}")
            for x in sorted(host):
                h, p = host[x], proxy.get(x, float("nan"))
                print(f"{w:>5} {x:>11} {h:>12.2f} {p:>13.2f} {p / h:>10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
