"""Benchmark (not a test): the bare publication mechanism beside mini-gda's issue, per ordering.

The probe (cuda/gda/probe.cu): one thread writes a 64-byte WQE as four 16-byte stores, then the
doorbell record and the doorbell with the ordering's code (cuda/gda/ordering.cuh, the same
publish() mini-gda uses), single-shot (idle --idle-ns before each op) and pipelined (back to
back), with the queue in GPU memory and in host memory mapped into the GPU (where a run places
its queues: `--engine cuda --queues device` and the CPU engine's host queues). Then mini-gda's
single-op issue for each ordering (`mpiexec -n 2 gicbench run --submitter gpu --ordering X
single-op --modes issue`, 8 B inline, and 8 B pointer at gpu-fence: Fig. 3's inline cost) on
the placement of --queues, and a table of p50s with the ratio mini-gda / probe (single-shot,
same placement) and the paper's figures (arXiv 2610.01380, Table 4, P-IB).

    python bench/gda_probe.py                          # probe + mini-gda, GPU-memory queues
    python bench/gda_probe.py --queues host --json out.json
    python bench/gda_probe.py --probe-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from nic_model import MPI_ENV, TABLE4, _mpiexec  # the script's directory is on sys.path

ORDERINGS = tuple(TABLE4)
WQEBBS = 64  # the probe's SQ: 64 WQEBBs, never consumed (nothing reads it)
_PORTABLE_MAPPED = 0x01 | 0x02  # cudaHostAllocPortable | cudaHostAllocMapped


def _module(cp: Any, ordering: str) -> Any:
    from gicbench.cuda_host import cuda_dir
    from gicbench.submit.gpu.build import build_options

    root = cuda_dir()
    src = (root / "gda" / "probe.cu").read_text()
    mod = cp.RawModule(code=src, options=build_options(ordering, root))
    mod.compile()
    return mod.get_function("gda_probe")


class Placement:
    """The probe's SQ (WQEBBS x 64 B), doorbell record (8 B) and doorbell (8 B): GPU memory, or
    pinned host memory mapped into the GPU."""

    def __init__(self, cp: Any, where: str) -> None:
        self.cp, self.where = cp, where
        nbytes = WQEBBS * 64 + 4096
        if where == "gpu":
            self.mem = cp.zeros(nbytes, dtype=cp.uint8)
            base = int(self.mem.data.ptr)
        else:
            rt = cp.cuda.runtime
            self.host = rt.hostAlloc(nbytes, _PORTABLE_MAPPED)
            get = getattr(rt, "hostGetDevicePointer", None)
            base = int(get(self.host, 0)) if get else self.host
        self.sq, self.dbrec, self.doorbell = base, base + WQEBBS * 64, base + WQEBBS * 64 + 64

    def close(self) -> None:
        if self.where != "gpu":
            self.cp.cuda.runtime.freeHost(self.host)


def probe(cp: Any, fn: Any, place: Placement, iters: int, warmup: int, idle_ns: int) -> dict:
    samples = cp.zeros(iters, dtype=cp.int64)
    cycles = cp.zeros(iters, dtype=cp.int64)
    span = cp.zeros(2, dtype=cp.int64)
    args = (np.uint64(place.sq), np.uint32(WQEBBS), np.uint64(place.dbrec),
            np.uint64(place.doorbell), np.uint32(0x123), np.uint32(iters), np.uint32(warmup),
            np.uint64(idle_ns), samples, cycles, span)  # fmt: skip
    fn((1,), (1,), args)
    cp.cuda.get_current_stream().synchronize()
    ns, cyc, sp = samples.get(), cycles.get(), span.get()
    return {
        "p50_ns": float(np.median(ns)),
        "p99_ns": float(np.percentile(ns, 99)),
        "cycles_p50": float(np.median(cyc)),
        "mean_ns_per_op": float(sp[1] - sp[0]) / iters,  # pipelined: the rate's cost per op
    }


def run_probes(placements: list[str], iters: int, idle_ns: int) -> dict[str, dict[str, dict]]:
    import cupy as cp

    out: dict[str, dict[str, dict]] = {}
    places = {w: Placement(cp, w) for w in placements}
    try:
        for ordering in ORDERINGS:
            fn = _module(cp, ordering)
            for w, place in places.items():
                out.setdefault(ordering, {})[f"{w} single"] = probe(cp, fn, place, iters, 100,
                                                                    idle_ns)  # fmt: skip
                out[ordering][f"{w} pipelined"] = probe(cp, fn, place, iters, 100, 0)
    finally:
        for place in places.values():
            place.close()
    return out


def mini_gda(ordering: str, payload: str, queues: str, iters: int, timeout: float) -> dict:
    """One `gicbench run` of 2 ranks: single-op issue, 8 B; the sender's row."""
    out = Path(tempfile.gettempdir()) / f"gicbench-gda-probe-{uuid.uuid4().hex[:8]}"
    placement = ["--engine", "cuda", "--queues", "device"] if queues == "device" else []
    cmd = [_mpiexec(), "--bind-to", "none", "-n", "2", sys.executable, "-m", "gicbench", "run",
           "--submitter", "gpu", "--progress", "thread", "--timeout", "5", "--ordering", ordering,
           *placement, "single-op", "--modes", "issue", "-b", "8", "--payload", payload,
           "-n", str(iters), "-w", "200", "--json", "--quiet", "-o", str(out)]  # fmt: skip
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                           env={**os.environ, **MPI_ENV})  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:g} s"}
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if r.returncode != 0:
        return {"error": f"rc {r.returncode}: {r.stderr[-600:]}"}
    rows = [x for x in json.loads(r.stdout)["results"] if x.get("mode") == "issue"]
    if not rows:
        return {"error": "no issue row"}
    row = rows[0]
    return {"p50_us": float(row["p50_us"]), "cycles_p50": row.get("issue_cycles_p50")}


def _f(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def report(probes: dict, gda: dict, queues: str, placements: list[str]) -> str:
    place = "gpu" if queues == "device" else "host"
    lines = [
        "# mini-gda's issue against the bare mechanism (p50)",
        "",
        f"Probe: one thread, 64 B WQE as four 16 B stores + record + doorbell; single-shot and "
        f"pipelined; mini-gda: single-op issue, 8 B inline, queues `{queues}` (probe placement "
        f"`{place}`). Paper: Table 4, P-IB, mini-gda on ConnectX-7.",
        "",
        "| ordering | "
        + " | ".join(f"probe {w} single (ns) | probe {w} pipelined (ns/op)" for w in placements)
        + " | mini-gda issue (ns) | mini-gda / probe | mini-gda / none"
        + " | paper (ns) | paper / none |",
        "|---" * (6 + 2 * len(placements)) + "|",
    ]
    none = gda.get(("none", "inline"), {}).get("p50_us")
    for o in ORDERINGS:
        cells = []
        for w in placements:
            p = probes.get(o, {})
            cells += [_f(p.get(f"{w} single", {}).get("p50_ns"), ".0f"),
                      _f(p.get(f"{w} pipelined", {}).get("mean_ns_per_op"), ".0f")]  # fmt: skip
        g = gda.get((o, "inline"), {})
        g_ns = g["p50_us"] * 1e3 if "p50_us" in g else None
        base = probes.get(o, {}).get(f"{place} single", {}).get("p50_ns")
        ratio = g_ns / base if g_ns is not None and base else None
        paper = TABLE4[o][0] * 1e3
        vs_none = g_ns / (none * 1e3) if g_ns is not None and none else None
        cells += [_f(g_ns, ".0f") if "error" not in g else "failed", _f(ratio, ".2f"),
                  _f(vs_none, ".2f"), f"{paper:.0f}",
                  f"{paper / (TABLE4['none'][0] * 1e3):.2f}"]  # fmt: skip
        lines.append(f"| {o} | " + " | ".join(cells) + " |")
    inl, ptr = gda.get(("gpu-fence", "inline"), {}), gda.get(("gpu-fence", "pointer"), {})
    if "p50_us" in inl and "p50_us" in ptr:
        lines += ["", f"Fig. 3: gpu-fence issue, 8 B inline {inl['p50_us'] * 1e3:.0f} ns, 8 B "
                      f"pointer {ptr['p50_us'] * 1e3:.0f} ns: inline - pointer "
                      f"{(inl['p50_us'] - ptr['p50_us']) * 1e3:+.0f} ns (paper: no extra cost at "
                      "8 B)."]  # fmt: skip
    failed = [f"{k}: {v['error']}" for k, v in gda.items() if "error" in v]
    if failed:
        lines += ["", "mini-gda runs without results:", *failed]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queues", choices=("device", "host"), default="device",
                    help="mini-gda's queues: device (--engine cuda --queues device, GPU memory) "
                    "or host (the CPU engine's host-mapped queues)")  # fmt: skip
    ap.add_argument("--placements", default="gpu,host", help="probe placements: gpu,host")
    ap.add_argument("-n", "--iters", type=int, default=2000, help="timed ops per point")
    ap.add_argument("--idle-ns", type=int, default=4000, help="idle before each single-shot op")
    ap.add_argument("--probe-only", action="store_true", help="the probe alone, no mini-gda runs")
    ap.add_argument("--run-timeout", type=float, default=60.0, help="seconds per mini-gda run")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--md", type=Path, help="write the Markdown report here too")
    a = ap.parse_args()
    placements = [p for p in a.placements.split(",") if p]
    bad = [p for p in placements if p not in ("gpu", "host")]
    if bad or not placements:
        ap.error(f"--placements: gpu and/or host, not {a.placements!r}")
    if a.iters < 1 or a.idle_ns < 0:
        ap.error("--iters >= 1 and --idle-ns >= 0")
    probes = run_probes(placements, a.iters, a.idle_ns)
    gda: dict[tuple[str, str], dict] = {}
    if not a.probe_only:
        for o in ORDERINGS:
            gda[(o, "inline")] = mini_gda(o, "inline", a.queues, a.iters, a.run_timeout)
            print(f"mini-gda {o}: {gda[(o, 'inline')]}", file=sys.stderr, flush=True)
        gda[("gpu-fence", "pointer")] = mini_gda("gpu-fence", "pointer", a.queues, a.iters,
                                                 a.run_timeout)  # fmt: skip
    text = report(probes, gda, a.queues, placements)
    print(text)
    if a.md:
        a.md.write_text(text + "\n")
    if a.json:
        a.json.write_text(json.dumps({
            "probe": probes,
            "mini_gda": {f"{o} {p}": v for (o, p), v in gda.items()},
            "queues": a.queues,
        }, indent=2))  # fmt: skip
    return 1 if any("error" in v for v in gda.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
