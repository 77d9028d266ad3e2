"""NVSHMEM's IBGDA device code on emu queues (CPU engine, two ranks in one process): per path
(internal put + the op's-QP quiet, internal put + PE-wide quiet, public nvshmem_putmem_nbi +
nvshmem_quiet) and QPs per peer (1, 16), the median issue (globaltimer around the put call) and
put+completion (around put + quiet), 8-byte puts, every payload checked. GPU only.

    python bench/nvshmem_probe.py [--iters 2000] [--warm 200] [--size 8] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys

from gicbench.submit.nvshmem import runtime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--qps", default="1,16")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    dev = runtime.NvshmemDevice()
    rows, ok = [], True
    print(f"{'path':28} {'QPs/peer':>8} {'issue p50 ns':>13} {'put+compl p50 ns':>17} valid")
    for rc in (int(x) for x in a.qps.split(",")):
        with runtime.Loopback(rc) as w:
            dev.install(w)
            for label, kernel in runtime.PATHS:
                r = dev.run(w, kernel, size=a.size, iters=a.iters + a.warm,
                            timeout_s=a.timeout)  # fmt: skip
                bad = {k: r.after.get(k, 0) for k in runtime.CLEAN_COUNTERS if r.after.get(k, 0)}
                ok &= r.valid and not bad
                row = {"path": label, "kernel": kernel, "rc_per_pe": rc, "size": a.size,
                       "iters": a.iters, "issue_p50_ns": r.p50("issue_ns", a.warm),
                       "complete_p50_ns": r.p50("complete_ns", a.warm),
                       "issue_p50_cycles": r.p50("issue", a.warm),
                       "complete_p50_cycles": r.p50("complete", a.warm), "valid": r.valid,
                       "counters": r.delta(), "dirty": bad}  # fmt: skip
                rows.append(row)
                print(f"{label:28} {rc:8d} {row['issue_p50_ns']:13.0f} "
                      f"{row['complete_p50_ns']:17.0f} {r.valid}{' ' + str(bad) if bad else ''}",
                      flush=True)  # fmt: skip
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"symbols": dev.symbols, "rows": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
