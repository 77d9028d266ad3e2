"""Time the offline analysis of a large synthetic run: load_run + aggregate_ranks.

Default: 128 rank files x 10^6 samples each (10 single-op points x 10^5 samples), written
through TraceWriter into a temporary directory by child processes (so their memory does not
count), then loaded in this process. Prints wall times and this process's peak RSS
(resource.getrusage), next to the size all samples would take in memory at once.

    .venv/bin/python bench/analysis_scale.py [--ranks 128] [--samples 1000000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _write_rank(args: tuple[Path, int, int, int, int]) -> int:
    from gicbench.trace import TraceWriter

    run_dir, rank, world, samples, points = args
    rng = np.random.default_rng(rank)
    per_point = samples // points
    meta = {"experiments": ["single-op"], "provider": "synthetic", "host": "bench",
            "local_rank": rank % 8, "config": {"iterations": per_point}}
    with TraceWriter(run_dir, rank, world, meta) as w:
        for i in range(points):
            size = 8 << i
            with w.begin_point("single-op", {"size": size, "payload": "pointer",
                                             "transport": "rc", "scope": "selected",
                                             "mode": "round_trip"}) as p:
                center = 5000.0 + 0.1 * size + 20.0 * rank
                p.add_samples("rtt_ns", (center * rng.lognormal(0, 0.05, per_point)).astype(
                    np.int64))
                p.set_counters({"wqes": 0}, {"wqes": per_point})
                p.set_results({"validated": True})
    return rank


def generate(run_dir: Path, ranks: int, samples: int, points: int, workers: int) -> None:
    from gicbench.trace import write_manifest

    manifest = {"world_size": ranks, "experiments": ["single-op"], "provider": "synthetic",
                "submitter": "host", "hosts": ["bench"]}
    write_manifest(run_dir, {**manifest, "status": "running"})
    jobs = [(run_dir, r, ranks, samples, points) for r in range(ranks)]
    with mp.get_context("spawn").Pool(workers) as pool:
        for _ in pool.imap_unordered(_write_rank, jobs):
            pass
    write_manifest(run_dir, {**manifest, "status": "complete"})


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=128)
    parser.add_argument("--samples", type=int, default=1_000_000, help="samples per rank file")
    parser.add_argument("--points", type=int, default=10, help="points per rank file")
    parser.add_argument("--workers", type=int, default=max(1, (mp.cpu_count() or 1)))
    parser.add_argument("--jobs", "-j", type=int, default=1,
                        help="load_run workers (parallel rank files)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="generate into (or reuse) this directory and keep it")
    args = parser.parse_args()

    from gicbench.analysis.load import aggregate_ranks, load_run

    tmp = None
    if args.keep is not None:
        run_dir = args.keep
    else:
        tmp = tempfile.mkdtemp(prefix="gicbench-scale-")
        run_dir = Path(tmp) / "run"
    try:
        if not (run_dir / "run.json").exists():
            t0 = time.perf_counter()
            generate(run_dir, args.ranks, args.samples, args.points, args.workers)
            print(f"generated {args.ranks} rank files x {args.samples:,} samples in "
                  f"{time.perf_counter() - t0:.1f} s with {args.workers} writer processes")
        disk = sum(p.stat().st_size for p in run_dir.glob("rank-*.h5"))
        rss_before = _rss_mib()
        t0 = time.perf_counter()
        df = load_run(run_dir, workers=args.jobs)
        t1 = time.perf_counter()
        agg = aggregate_ranks(df)
        t2 = time.perf_counter()
        total = int(df["count"].sum())
        in_memory = total * 8 / 2**20
        print(f"ranks {df['rank'].nunique()}, points {agg['point'].nunique()}, "
              f"samples {total:,} ({in_memory:,.0f} MiB as int64), "
              f"files {disk / 2**20:,.0f} MiB on disk (gzip-1 + shuffle)")
        rate = total / (t1 - t0) / 1e6
        print(f"load_run -j {args.jobs:<3} {t1 - t0:8.2f} s  ({rate:,.1f} M samples/s)")
        print(f"aggregate_ranks {t2 - t1:8.3f} s  ({len(df)} rows -> {len(agg)} rows)")
        print(f"peak RSS {_rss_mib():,.0f} MiB (before loading {rss_before:,.0f} MiB); "
              f"all samples at once would need {in_memory:,.0f} MiB")
        if args.jobs > 1:
            kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
            print(f"peak RSS of the largest child process {kids:,.0f} MiB")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
