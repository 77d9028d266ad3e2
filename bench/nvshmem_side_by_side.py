"""NVSHMEM's IBGDA device path beside mini-gda and DOCA GPUNetIO on emu's queues, in one process
and one call (the first paper, arXiv 2610.01380: Table 3's issue and put+completion rows, Fig. 4's
completion scope against QPs per peer). GPU only.

Every path posts 8-byte writes from rank 0 to rank 1 of an in-process emu pair (CPU engine, one
engine thread per rank, host-memory queues), one op at a time from one GPU thread:
  - mini-gda (`--submitter gpu`, `--ordering` as given, inline 8 B) and DOCA GPUNetIO
    (`--submitter doca`, gpu-sm-db, exclusive: a pointer payload, DOCA's put) through their
    submitters' latency loops, with the selected QP's completion and with every QP's (scope all);
  - NVSHMEM's internal put with its op's-QP quiet and with the PE-wide quiet, and the public
    nvshmem_putmem_nbi + nvshmem_quiet (app/submit/nvshmem/runtime.py: NVSHMEM's own device code,
    its device state filled from the emu objects).
Every payload is checked at the target and the emulated NIC's error counters stay zero, or the
script fails. The round trip is not measured here (NVSHMEM has no responder loop yet).

    python bench/nvshmem_side_by_side.py [--qps 1,2,4,8,16] [--iters 2000]
        [--nvshmem-builds default,gpumem-only] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from gicbench.errors import UnsupportedError
from gicbench.fabric.base import ACCESS_ALL, host_view
from gicbench.submit.base import Submitter
from gicbench.submit.nvshmem import runtime
from gicbench.submit.work import Buffer, Lane, LatencyWork

SLICE = 4096
DEPTH = 256


@contextmanager
def emu_pair(nqps: int, sub_cls: type[Submitter], params: Any) -> Iterator[tuple[Any, ...]]:
    """Two emu ranks in this process; rank 0's `nqps` RC QPs made with the submitter's queue
    options, lane i writing its slice i of rank 0's source to slice i of rank 1's landing. Yields
    (fabrics, submitter, lanes, src MR, landing MR)."""
    from gicbench.fabric.emu.loopback import close_pair, open_pair, rc_pairs

    fabrics = open_pair("sbs", progress="thread", segment_bytes=64 << 20)
    sub = None
    try:
        f0, f1 = fabrics
        opts = sub_cls.queue_options(params, DEPTH)
        qps = [q0 for q0, _ in rc_pairs(fabrics, nqps, DEPTH, qp=opts.qp, cq=opts.cq)]
        src = f0.register(SLICE * nqps, ACCESS_ALL, domain="host-mapped")
        land = f1.register(SLICE * nqps, ACCESS_ALL)
        host_view(src.addr, src.length)[:] = np.random.default_rng(3).integers(
            0, 256, src.length, np.uint8)  # fmt: skip
        lanes = tuple(Lane(q, 1, Buffer.local(src, i * SLICE, SLICE),
                           Buffer(land.addr + i * SLICE, land.rkey, SLICE))
                      for i, q in enumerate(qps))  # fmt: skip
        sub = sub_cls(rank=0, fabric=f0, progress=f0.progress_policy(), timeout_s=10.0,
                      params=params)  # fmt: skip
        sub.attach_queues(qps)
        yield fabrics, sub, lanes, src, land
    finally:
        if sub is not None:
            sub.close()
        close_pair(fabrics)


def submitter_rows(label: str, sub_cls: type[Submitter], params: Any, nqps: int, iters: int,
                   warm: int, inline: bool) -> list[dict[str, Any]]:  # fmt: skip
    """Issue and put+completion p50 (ns) with the selected QP's and every QP's completion."""
    rows = []
    with emu_pair(nqps, sub_cls, params) as (fabrics, sub, lanes, _src, land):
        for scope_all in (False, True):
            scope = "all" if scope_all else "qp"
            row: dict[str, Any] = {"path": label, "qps": nqps, "scope": scope}
            for mode in ("issue", "put_completion"):
                ns = sub.latency(LatencyWork(lanes, 0, mode, 8, inline, scope_all, iters, warm))
                row[f"{mode}_p50_ns"] = float(np.median(ns))
                fabrics[1].quiesce()
                want = (iters + warm).to_bytes(8, "little")
                if bytes(host_view(land.addr, 8)) != want:
                    raise SystemExit(f"{label}: the last op's sequence word did not land")
            bad = {k: v for k, v in sub.point_details().items()
                   if k.startswith("emu_") and k[4:] in runtime.CLEAN_COUNTERS and v
                   and k != "emu_dbrec_lag"}  # fmt: skip
            if bad:
                raise SystemExit(f"{label}: the emulated NIC counted {bad}")
            rows.append(row)
    return rows


def nvshmem_rows(dev: Any, variant: str, nqps: int, iters: int, warm: int
                 ) -> list[dict[str, Any]]:  # fmt: skip
    """NVSHMEM's three paths; `variant` gpumem-only is its GPU-memory-only build (release stores,
    no system-scope fences): on these host-memory queues it is under-ordered, so it is timed to
    show what the default build's fences cost, its rows marked, its payload check reported."""
    rows = []
    tag = "" if variant == "default" else f" [{variant}: under-ordered here]"
    with runtime.Loopback(nqps) as w:
        dev.install(w)
        for label, kernel in runtime.PATHS:
            r = dev.run(w, kernel, size=8, iters=iters + warm, timeout_s=30.0)
            bad = {k: r.after.get(k, 0) - r.before.get(k, 0) for k in runtime.CLEAN_COUNTERS
                   if r.after.get(k, 0) - r.before.get(k, 0)}  # fmt: skip
            if (not r.valid or bad) and variant == "default":
                raise SystemExit(f"NVSHMEM {label}: {r.mismatch} bytes wrong, counters {bad}")
            wrong = "" if r.valid else f" ({r.mismatch} payload bytes wrong)"
            rows.append({"path": f"NVSHMEM {label}{tag}{wrong}", "qps": nqps,
                         "scope": "all" if kernel.endswith("_all") else "qp",
                         "issue_p50_ns": r.p50("issue_ns", warm),
                         "put_completion_p50_ns": r.p50("complete_ns", warm),
                         "variant": variant, "valid": r.valid, "counters": bad})  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]], base: Callable[[dict[str, Any]], dict[str, Any] | None]
          ) -> str:  # fmt: skip
    out = ["| path | QPs per peer | completion scope | issue (µs) | x mini-gda | put+completion "
           "(µs) | x mini-gda |", "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for r in rows:
        b = base(r)
        ri = r["issue_p50_ns"] / b["issue_p50_ns"] if b else float("nan")
        rc = r["put_completion_p50_ns"] / b["put_completion_p50_ns"] if b else float("nan")
        out.append(f"| {r['path']} | {r['qps']} | {r['scope']} | {r['issue_p50_ns'] / 1e3:.2f} "
                   f"| {ri:.2f} | {r['put_completion_p50_ns'] / 1e3:.2f} | {rc:.2f} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", default="1,2,4,8,16", help="QPs per peer (Fig. 4's x axis)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--ordering", default="sys-fence",
                    help="mini-gda's ordering (on emu's CPU engine a GPU-scope fence does not "
                         "order the WQE before the doorbell for the CPU reader)")  # fmt: skip
    ap.add_argument("--nvshmem-builds", default="default",
                    help="NVSHMEM builds, comma-separated: default, gpumem-only (its "
                         "GPU-memory-only build: timed beside the default to show its fences' "
                         "cost; under-ordered on these host-memory queues)")  # fmt: skip
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    try:
        counts = [int(x) for x in a.qps.split(",")]
    except ValueError:
        counts = []
    if not counts or not all(1 <= n <= 64 for n in counts):
        ap.error(f"--qps {a.qps!r}: allowed a comma-separated list of QPs per peer, each 1-64")
    if a.iters < 1 or a.warm < 0 or a.iters + a.warm > runtime.HEAP_BYTES // 2 // 8:
        ap.error(f"--iters {a.iters} --warm {a.warm}: allowed iters >= 1, warm >= 0, and "
                 f"iters + warm <= {runtime.HEAP_BYTES // 2 // 8} (8-byte ops in half the heap)")
    builds = a.nvshmem_builds.split(",")
    if not set(builds) <= {"default", "gpumem-only"}:
        ap.error(f"--nvshmem-builds {a.nvshmem_builds!r}: allowed default, gpumem-only")
    from gicbench.submit.doca.params import DocaParams
    from gicbench.submit.doca.submitter import DocaSubmitter
    from gicbench.submit.gpu import GpuSubmitter
    from gicbench.submit.gpu.params import GpuParams

    try:  # CuPy, a GPU, nvcc and NVSHMEM's headers (make setup) before anything is made
        devs = {b: runtime.NvshmemDevice(variant=b) for b in builds}
    except UnsupportedError as e:
        print(f"nvshmem_side_by_side: {e}", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    for n in counts:
        rows += submitter_rows(f"mini-gda {a.ordering}", GpuSubmitter,
                               GpuParams(ordering=a.ordering), n, a.iters, a.warm, True)
        rows += submitter_rows("DOCA GPUNetIO gpu-sm-db", DocaSubmitter, DocaParams(), n, a.iters,
                               a.warm, False)  # fmt: skip
        for b, dev in devs.items():
            rows += nvshmem_rows(dev, b, n, a.iters, a.warm)
        print(f"{n} QPs per peer done", file=sys.stderr, flush=True)
    gda = {(r["qps"], r["scope"]): r for r in rows if r["path"].startswith("mini-gda")}
    print("# NVSHMEM, DOCA GPUNetIO and mini-gda on emu's CPU engine (8 B, one thread, p50)\n")
    print(table(rows, lambda r: gda.get((r["qps"], r["scope"]))))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"symbols": {b: d.symbols for b, d in devs.items()}, "rows": rows,
                       "iters": a.iters}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
