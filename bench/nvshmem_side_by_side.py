"""NVSHMEM's IBGDA device path beside mini-gda and DOCA GPUNetIO on emu's queues, in one process
and one call (the first paper, arXiv 2610.01380: Table 3's issue, put+completion and round-trip
rows, Fig. 4's completion scope against QPs per peer). GPU only.

Every path runs through its own submitter's loops (the same loops `gicbench run` drives) on an
in-process emu pair (CPU engine, one engine thread per rank, host-memory queues, every QP made
with that submitter's queue options): rank 0 posts to rank 1 one op at a time from one GPU
thread; in a round trip rank 1 answers through its own submitter of the same kind:
  - mini-gda (`--submitter gpu`, `--ordering` as given);
  - DOCA GPUNetIO (`--submitter doca`, gpu-sm-db, exclusive);
  - NVSHMEM's internal calls and its public API (`--submitter nvshmem`: NVSHMEM's own device
    code, its device state filled from the emu objects).
Issue and put+completion at 8 B (mini-gda inline; DOCA's and NVSHMEM's put, a pointer payload),
with the selected QP's completion and every QP's (scope all: NVSHMEM's PE-wide quiet); round trips
at 8 B inline (mini-gda inline, DOCA's p, NVSHMEM's p) and 16 B pointer (NVSHMEM's
put-with-signal). Every payload is checked where the experiments' validation looks, the
emulated NIC's fidelity counters stay zero, or the script fails. The round trips run through
`gicbench run` on two ranks (two ranks' kernels in one process would share the legacy stream):
with one GPU, MPS must run.

    python bench/nvshmem_side_by_side.py [--qps 1,2,4,8,16] [--iters 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from gicbench.fabric.base import ACCESS_ALL, host_view
from gicbench.submit.base import Submitter
from gicbench.submit.nvshmem import runtime
from gicbench.submit.work import Buffer, Lane, LatencyWork

SLICE = 4096
DEPTH = 256


@contextmanager
def emu_pair(nqps: int, sub_cls: type[Submitter], params: Any) -> Iterator[tuple[Any, ...]]:
    """Two emu ranks in this process: rank 0's `nqps` RC QPs to rank 1 and rank 1's one QP back,
    each made with the submitter's queue options; lane i of rank 0 writes slice i of its source to
    slice i of rank 1's landing, rank 1's lane its slice 0 to rank 0's. Yields (fabrics,
    submitters, lanes per rank, sources, landings), indexed by rank."""
    from gicbench.fabric.emu.loopback import close_pair, open_pair, rc_pairs

    fabrics = open_pair("sbs", progress="thread", segment_bytes=64 << 20)
    subs: list[Submitter] = []
    try:
        opts = sub_cls.queue_options(params, DEPTH)
        fwd = [q0 for q0, _ in rc_pairs(fabrics, nqps, DEPTH, qp=opts.qp, cq=opts.cq)]
        back = [q1 for q1, _ in rc_pairs(fabrics[::-1], 1, DEPTH, qp=opts.qp, cq=opts.cq)]
        src = [f.register(SLICE * nqps, ACCESS_ALL, domain="host-mapped") for f in fabrics]
        land = [f.register(SLICE * nqps, ACCESS_ALL, domain="host-mapped") for f in fabrics]
        rng = np.random.default_rng(3)
        for m in src:
            host_view(m.addr, m.length)[:] = rng.integers(0, 256, m.length, np.uint8)
        lanes = [tuple(Lane(q, 1, Buffer.local(src[0], i * SLICE, SLICE),
                            Buffer(land[1].addr + i * SLICE, land[1].rkey, SLICE))
                       for i, q in enumerate(fwd)),
                 (Lane(back[0], 0, Buffer.local(src[1], 0, SLICE),
                       Buffer(land[0].addr, land[0].rkey, SLICE)),)]  # fmt: skip
        for rank, (f, qps) in enumerate(zip(fabrics, (fwd, back), strict=True)):
            sub = sub_cls(rank=rank, fabric=f, progress=f.progress_policy(), timeout_s=10.0,
                          params=params)  # fmt: skip
            subs.append(sub)
            sub.attach_queues(qps)
            sub.attach_peers({1 - rank: qps}, 2)
        yield fabrics, subs, lanes, src, land
    finally:
        for sub in subs:
            sub.close()
        close_pair(fabrics)


def _clean(label: str, sub: Submitter) -> None:
    bad = {k: v for k, v in sub.point_details().items()
           if k.startswith("emu_") and k[4:] in runtime.CLEAN_COUNTERS and v
           and k != "emu_dbrec_lag"}  # fmt: skip
    if bad:
        raise SystemExit(f"{label}: the emulated NIC counted {bad}")


def round_trip(label: str, submitter: list[str], size: int, inline: bool, iters: int,
               warm: int, out: Path) -> float:  # fmt: skip
    """p50 ns of `gicbench run single-op --modes round_trip` on two ranks (the responder: the
    same submitter on rank 1), emu's CPU engine; the harness validates both landings. A run of
    its own: two ranks' GPU kernels in one process would share the legacy stream."""
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        raise SystemExit("mpiexec not found (the round trips run on two ranks)")
    cmd = [exe, "--bind-to", "none", "-n", "2", sys.executable, "-m", "gicbench", "run",
           "single-op", "--modes", "round_trip", "-b", str(size), "-e", str(size), "--payload",
           "inline" if inline else "pointer", "-n", str(iters), "-w", str(warm), "--progress",
           "thread", "--timeout", "10", "--json", "--quiet", *submitter, "-o",
           str(out / f"rtt-{label.replace(' ', '_')}-{size}")]  # fmt: skip
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{label}: the round trip at {size} B failed:\n{r.stderr[-3000:]}")
    doc = json.loads(r.stdout)
    rows = [x for x in doc["results"] if x.get("mode") == "round_trip" and x.get("p50_us")]
    if not rows or not all(x.get("validated", True) for x in doc["results"]):
        raise SystemExit(f"{label}: the round trip at {size} B was not validated")
    return float(rows[0]["p50_us"]) * 1e3


def submitter_rows(label: str, sub_cls: type[Submitter], params: Any, nqps: int, iters: int,
                   warm: int, inline: bool) -> list[dict[str, Any]]:  # fmt: skip
    """Issue and put+completion p50 (ns) at 8 B with the selected QP's and every QP's
    completion."""
    rows = []
    with emu_pair(nqps, sub_cls, params) as (fabrics, subs, lanes, _src, land):
        sub = subs[0]
        for scope_all in (False, True):
            scope = "all" if scope_all else "qp"
            row: dict[str, Any] = {"path": label, "qps": nqps, "scope": scope}
            for mode in ("issue", "put_completion"):
                ns = sub.latency(LatencyWork(lanes[0], 0, mode, 8, inline, scope_all, iters,
                                             warm))  # fmt: skip
                row[f"{mode}_p50_ns"] = float(np.median(ns))
                fabrics[1].quiesce()
                want = (iters + warm).to_bytes(8, "little")
                if bytes(host_view(land[1].addr, 8)) != want:
                    raise SystemExit(f"{label}: the last op's sequence word did not land")
            _clean(label, sub)
            rows.append(row)
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


def rtt_table(rows: list[dict[str, Any]]) -> str:
    out = ["| path | round trip 8 B inline (µs) | x mini-gda | round trip 16 B pointer (µs) | "
           "x mini-gda |", "|---|---:|---:|---:|---:|"]  # fmt: skip
    one = [r for r in rows if r["qps"] == 1 and r["scope"] == "qp"]
    base = next((r for r in one if r["path"].startswith("mini-gda")), {})
    for r in one:
        cells = []
        for k in ("rtt_8i_p50_ns", "rtt_16p_p50_ns"):
            v, b = r.get(k), base.get(k)
            cells += [f"{v / 1e3:.2f}" if v else "–", f"{v / b:.2f}" if v and b else "–"]
        out.append(f"| {r['path']} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--qps", default="1,2,4,8,16", help="QPs per peer (Fig. 4's x axis)")
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--ordering", default="sys-fence",
                    help="mini-gda's ordering (on emu's CPU engine a GPU-scope fence does not "
                         "order the WQE before the doorbell for the CPU reader)")  # fmt: skip
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    try:
        counts = [int(x) for x in a.qps.split(",")]
    except ValueError:
        counts = []
    if not counts or not all(1 <= n <= 64 for n in counts) or 1 not in counts:
        ap.error(f"--qps {a.qps!r}: allowed a comma-separated list of QPs per peer, each 1-64, "
                 "with 1 among them (the round trips' row)")
    if a.iters < 1 or a.warm < 0:
        ap.error(f"--iters {a.iters} --warm {a.warm}: allowed iters >= 1, warm >= 0")
    from gicbench.platform import probe_all
    from gicbench.submit.doca.params import DocaParams
    from gicbench.submit.doca.submitter import DocaSubmitter
    from gicbench.submit.gpu import GpuSubmitter
    from gicbench.submit.gpu.params import GpuParams
    from gicbench.submit.nvshmem.params import NvshmemParams
    from gicbench.submit.nvshmem.submitter import NvshmemSubmitter

    probes = probe_all()
    for cls in (GpuSubmitter, DocaSubmitter, NvshmemSubmitter):  # before anything is made
        why = cls.availability(probes)
        if why:
            print(f"nvshmem_side_by_side: --submitter {cls.name}: {why}", file=sys.stderr)
            return 2
    paths = [  # label, class, knobs, inline at 8 B, the CLI's flags for the same knobs
        (f"mini-gda {a.ordering}", GpuSubmitter, GpuParams(ordering=a.ordering), True,
         ["--submitter", "gpu", "--ordering", a.ordering]),
        ("DOCA GPUNetIO gpu-sm-db", DocaSubmitter, DocaParams(), False, ["--submitter", "doca"]),
        ("NVSHMEM internal", NvshmemSubmitter, NvshmemParams(), False,
         ["--submitter", "nvshmem"]),
        ("NVSHMEM public", NvshmemSubmitter, NvshmemParams(nvshmem_path="public"), False,
         ["--submitter", "nvshmem", "--nvshmem-path", "public"]),
    ]  # fmt: skip
    rows: list[dict[str, Any]] = []
    for n in counts:
        for label, cls, params, inline, _ in paths:
            rows += submitter_rows(label, cls, params, n, a.iters, a.warm, inline)
        print(f"{n} QPs per peer done", file=sys.stderr, flush=True)
    out = Path(tempfile.mkdtemp(prefix="sbs-rtt-"))
    for label, _, _, _, flags in paths:
        row = next((r for r in rows if r["path"] == label and r["qps"] == 1
                    and r["scope"] == "qp"), None)  # fmt: skip
        if row is None:
            row = {"path": label, "qps": 1, "scope": "qp"}
            rows.append(row)
        for size, inline in ((8, True), (16, False)):
            row[f"rtt_{size}{'i' if inline else 'p'}_p50_ns"] = round_trip(
                label, flags, size, inline, a.iters, a.warm, out)
        print(f"{label} round trips done", file=sys.stderr, flush=True)
    gda = {(r["qps"], r["scope"]): r for r in rows if r["path"].startswith("mini-gda")}
    print("# NVSHMEM, DOCA GPUNetIO and mini-gda on emu's CPU engine (8 B, one thread, p50)\n")
    print(table(rows, lambda r: gda.get((r["qps"], r["scope"]))))
    print("\n# Round trips at one QP per peer (the responder: the same submitter on rank 1)\n")
    print(rtt_table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "iters": a.iters, "warm": a.warm}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
