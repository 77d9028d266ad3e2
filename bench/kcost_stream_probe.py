"""Benchmark (not a test): why kernel-cost's stream caller can run faster with the call compiled in.

kernel-cost's stream caller (cuda/kcost/kernel_cost.cu, KC_CALLER 1) reads
in[((s * live + i) * T + t) & mask] into `live` accumulators. This script builds the reference
(no communication code) and the code-only build (mini-gda's call compiled in, never taken) of one
live count with nvcc, counts each cubin's global loads (cuobjdump -sass), and times both side by
side over several input sizes (mask + 1 floats): where the input is small enough, or the launch's
footprint wraps it, loads hit the L2 and the two builds' different residency changes how often.
Prints one row per (input size, build): kernel µs (median of --launches), apparent GB/s (bytes the
loads name / time), registers; then each size's ratio reference / code-only.

    python bench/kcost_stream_probe.py --live 16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


def build(root: Path, work: Path, live: int, comm: bool, arch: str) -> tuple[Path, str, str]:
    """The stream caller's build as kernel-cost makes it on mini-gda (its -D options and nvcc
    step), inlined, without or with the call."""
    from gicbench.submit.kernel_cost_common import CallerBuild, find_nvcc, nvcc_steps

    out = work / f"stream_l{live}_c{int(comm)}.cubin"
    defines = CallerBuild("stream", live, comm).caller_defines("gda")
    (cmd,) = nvcc_steps(defines, False, root, work, find_nvcc() or "nvcc", arch, out)
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    sass = subprocess.run(
        ["cuobjdump", "-sass", "-fun", "kc_caller", str(out)], capture_output=True, text=True
    ).stdout
    return out, r.stderr, sass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--live", type=int, default=16)
    ap.add_argument(
        "--blocks",
        default="528,1056",
        help="launch sizes to time (528: kernel-cost's default, four per SM)",
    )
    ap.add_argument("--block-threads", type=int, default=256)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--launches", type=int, default=10)
    ap.add_argument(
        "--log2-sizes",
        default="22,26,28,32",
        help="input sizes as log2 of floats (26: kernel-cost's 256 MiB)",
    )
    ap.add_argument("--sass-dir", default=None, help="write both builds' SASS here")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import cupy as cp

    from gicbench.cuda_host import cuda_dir

    root = cuda_dir()
    cc = cp.cuda.Device().compute_capability
    arch = f"sm_{cc}"
    blocks_list = [int(x) for x in a.blocks.split(",")]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        fns = {}
        for comm in (False, True):
            cubin, log, sass = build(root, work, a.live, comm, arch)
            name = "code-only" if comm else "reference"
            regs = re.findall(r"Used (\d+) registers", log)
            ldg = len(re.findall(r"\bLDG\b", sass))
            if a.sass_dir:
                Path(a.sass_dir).mkdir(parents=True, exist_ok=True)
                (Path(a.sass_dir) / f"{name}.sass").write_text(sass)
                (Path(a.sass_dir) / f"{name}.ptxas.txt").write_text(log)
            print(f"# {name}: registers {regs}, LDG instructions in kc_caller {ldg}", flush=True)
            fns[name] = (cp.RawModule(path=str(cubin)).get_function("kc_caller"), regs, ldg)
        free = cp.cuda.runtime.memGetInfo()[0]
        grid = [(b, int(x)) for b in blocks_list for x in a.log2_sizes.split(",")]
        for blocks, lg in grid:
            T = blocks * a.block_threads
            total_bytes = a.steps * a.live * T * 4
            out = cp.zeros(T, dtype=cp.float32)
            n = 1 << lg
            if n * 4 > free * 0.8:
                print(f"# 2^{lg} floats: skipped (not enough free GPU memory)")
                continue
            inp = (cp.arange(n, dtype=cp.uint32) & 7).astype(cp.float32)
            for name, (fn, regs, ldg) in fns.items():
                args = (
                    inp,
                    np.uint64(n - 1),
                    out,
                    np.uint32(a.steps),
                    np.float32(1),
                    np.float32(1),
                    np.uint64(0),
                    np.int32(1),
                    np.uint32(16),
                )
                fn((blocks,), (a.block_threads,), args)  # warm-up
                cp.cuda.Device().synchronize()
                ts = []
                for _ in range(a.launches):
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    e0.record()
                    fn((blocks,), (a.block_threads,), args)
                    e1.record()
                    e1.synchronize()
                    ts.append(cp.cuda.get_elapsed_time(e0, e1) * 1e3)
                us = float(np.median(ts))
                row = {
                    "blocks": blocks,
                    "log2_floats": lg,
                    "input_MiB": n * 4 / 2**20,
                    "build": name,
                    "kernel_us": us,
                    "apparent_GBps": total_bytes / us / 1e3,
                    "footprint_over_input": total_bytes / (n * 4),
                    "registers": regs,
                    "ldg": ldg,
                }
                rows.append(row)
                print(
                    f"{blocks:5d} blocks 2^{lg:2d} ({row['input_MiB']:8.0f} MiB, footprint/input "
                    f"{row['footprint_over_input']:7.2f}) {name:9s} {us:9.1f} us "
                    f"{row['apparent_GBps']:8.0f} GB/s",
                    flush=True,
                )
            del inp
            cp.get_default_memory_pool().free_all_blocks()
    by = {(r["blocks"], r["log2_floats"], r["build"]): r["kernel_us"] for r in rows}
    for b, lg in sorted({(r["blocks"], r["log2_floats"]) for r in rows}):
        if (b, lg, "reference") in by and (b, lg, "code-only") in by:
            ratio = by[(b, lg, "reference")] / by[(b, lg, "code-only")]
            print(f"{b} blocks, 2^{lg}: reference / code-only = {ratio:.3f}")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                {
                    "blocks": blocks_list,
                    "block_threads": a.block_threads,
                    "live": a.live,
                    "steps": a.steps,
                    "rows": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
