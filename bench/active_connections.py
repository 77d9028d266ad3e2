"""active-connections at scale on one node: bring-up time, peak RSS per rank and wall time of
an all-to-all sweep at 64 and 128 ranks on the emulated NIC (inline progress, small points).

Each rank count runs `gicbench run active-connections --pattern all-to-all` with the active set
at 1 and 2 QPs per peer (the control first, one pass), every rank under GNU time. On a 2-core
machine the ranks take turns on the cores: the times say what bring-up and the sweep cost the
job at that scale (and that they finish), not what a NIC would do.

    python bench/active_connections.py [--ranks 64 128] [--messages 2000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from scale import run_ranks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--messages", type=int, default=2000, help="timed writes per unit")
    ap.add_argument("--timeout", type=float, default=600.0, help="--timeout of each run (s)")
    args = ap.parse_args()
    print(f"{'ranks':>5} {'QPs/rank':>8} {'bring-up(s)':>11} {'create':>7} {'exchange':>8} "
          f"{'connect':>7} {'RSS/rank MiB (median, max)':>27} {'points(s)':>9} "
          f"{'run wall(s)':>11} {'M msg/s per rank':>17}")
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            peers = ranks - 1
            run = ["active-connections", "--pattern", "all-to-all", "--active",
                   f"{peers},{2 * peers}", "--messages", str(args.messages), "--passes", "1",
                   "--warmup-laps", "0", "--sq-depth", "64", "--progress", "inline",
                   "--timeout", str(args.timeout), "--json"]  # fmt: skip
            doc, rss, wall = run_ranks(ranks, run, Path(tmp) / f"r{ranks}")
            b = doc["bringup"]
            rows = [r for r in doc["results"] if r.get("experiment") == "active-connections"]
            points_s = sum(float(r.get("wall_s") or 0) for r in rows)
            rates = " ".join(f"{float(r.get('msg_rate_mps_per_rank') or 0):.2f}" for r in rows)
            print(f"{ranks:>5} {b['rc_qps']:>8} {b['seconds']:>11.2f} {b['create_s']:>7.2f} "
                  f"{b['exchange_s']:>8.2f} {b['connect_s']:>7.2f} "
                  f"{statistics.median(rss) / 1024:>13.1f}, {max(rss) / 1024:>11.1f} "
                  f"{points_s:>9.1f} {wall:>11.1f} {rates:>17}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
