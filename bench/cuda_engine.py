"""Benchmark of the emulated NIC's CUDA engine on one GPU (not a test; needs a GPU, CuPy, nvcc).
Everything below runs side by side in one process, one run:

throughput  aggregate 8-byte inline RDMA WRITE WQE/s of the engine (queues and target MR in GPU
            memory, loopback RC QPs, one CQ per QP, every 32nd WQE signaled) against engine CTAs
            and QPs. A producer kernel prefills `depth` WQEs per QP (not timed); the ringer
            stamps %globaltimer and rings every QP once (record, then doorbell); the waiter stamps
            when every QP's last CQE is there. So the figure is the engine's alone, on prefilled
            WQEs with one doorbell per QP per lap (no producer in the timed window). Median of
            `laps` laps. --variants compares engine builds in the same run: "rN" is this source
            with N warp rounds of 32 WQEBBs per serve (-DGICBENCH_ENGINE_ROUNDS), a path is
            another engine source (e.g. an earlier commit's cuda/emu_engine.cu).
bare        the bare-bones kernel of the issue on the same WQE layout and QP counts (one warp per
            QP takes 32 prefilled WQEs, checks each index, decodes the raddr, stores the 8-byte
            payload, one CQE per 32; targets in GPU memory), timed with CUDA events, run before
            any engine exists; ratio = engine / bare at the same QPs.
latency     doorbell store to CQE for one signaled 8-byte write posted by a one-thread GPU kernel,
            p50/p99 of `pings`: the CUDA engine with GPU-resident queues, with host-resident
            queues (the rank's shared memory, mapped), the CPU engine (thread) with host-resident
            queues, and the CUDA engine with 16,384 QPs configured and one active.
stamps      (--stamps) where the GPU-resident one-QP latency goes: the engine built with
            GICBENCH_ENGINE_STAMPS=1 stamps each stage of every serve of the pinged QP (doorbell
            seen, core doorbell step, record read, payload stores, CQEs, core serve, pass end);
            p50 of each stage beside the floor of the same hand-off (bench_echo: one warp polls
            the doorbell, stores the payload and the CQE, no checks) measured in the same run.

--json writes the figures (the README's table comes from it).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import re
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from gicbench.fabric.emu import EmuFabric, segment_bytes_for
from gicbench.fabric.emu import cuda_engine as ce
from gicbench.fabric.emu.cuda_engine import compile_engine

NCQE = 256


def _pct(v: np.ndarray, p: float) -> float:
    return float(np.percentile(v, p)) / 1000.0  # ns -> µs


class Kernels:
    def __init__(self, cp: Any) -> None:
        cc = cp.cuda.Device().compute_capability
        mod = cp.RawModule(path=str(compile_engine(f"sm_{cc}", "emu_engine_bench.cu")))
        self.fill, self.ring, self.wait, self.bare, self.ping, self.echo = (
            mod.get_function(n)
            for n in (
                "bench_fill",
                "bench_ring",
                "bench_wait",
                "bench_bare",
                "bench_ping",
                "bench_echo",
            )
        )


def variant_defines(spec: str) -> list[str] | None:
    """The #defines of a --variants SPEC "rN" (this engine, N rounds) with optional
    "@MACRO=INTEGER" switches (e.g. r4@IDLE_PACE_NS=400; the GICBENCH_ENGINE_ prefix may be left
    out), or None for a path (another engine source). ValueError names what is wrong: a switch
    the engine does not read, a value that is not an integer, a path that is not a file."""
    head, *defs = spec.split("@")
    if not (head[:1] == "r" and head[1:].isdigit()):
        if defs or not Path(spec).is_file():
            raise ValueError(f"--variants: {spec!r} is neither rN[@MACRO=INTEGER...] nor an "
                             "engine source file")  # fmt: skip
        return None
    lines = [f"#define GICBENCH_ENGINE_ROUNDS {head[1:]}"]
    known = ce.engine_macros() - {"GICBENCH_ENGINE_ROUNDS"}
    for d in defs:
        name, _, value = d.partition("=")
        if name and not name.startswith("GICBENCH_ENGINE_"):
            name = "GICBENCH_ENGINE_" + name
        if name not in known:
            raise ValueError(f"--variants: {name} in {spec!r} is not an engine switch; one of "
                             f"{sorted(known)} (rounds: rN)")  # fmt: skip
        if not value.isdigit():
            raise ValueError(f"--variants: {d!r} in {spec!r}: the value must be an integer")
        lines.append(f"#define {name} {value}")
    return lines


def variant_source(spec: str, tmp: Path) -> str:
    """The engine source of a --variants SPEC (variant_defines says which): a file in `tmp`
    that defines the switches and includes cuda/emu_engine.cu, or the path given."""
    lines = variant_defines(spec)
    if lines is None:
        return str(Path(spec).resolve())
    text = "\n".join(lines) + '\n#include "emu_engine.cu"\n'
    # Named by its content: compile_engine's cache (keyed by name and content) then serves the
    # same variant to every run, e.g. the throughput and the latency steps of one session.
    p = tmp / f"emu_engine_v{hashlib.sha256(text.encode()).hexdigest()[:12]}.cu"
    p.write_text(text)
    return str(p)


def default_rounds() -> int:
    """GICBENCH_ENGINE_ROUNDS as cuda/emu_engine.cu defines it (the stamp build keeps it)."""
    text = (ce.cuda_dir() / "emu_engine.cu").read_text()
    m = re.search(r"^#define GICBENCH_ENGINE_ROUNDS (\d+)$", text, re.M)
    if m is None:
        raise RuntimeError("cuda/emu_engine.cu defines no GICBENCH_ENGINE_ROUNDS")
    return int(m.group(1))


def use_engine(cp: Any, cubin: Path) -> None:
    """Fabrics created from now on run the engine built in `cubin` (engines already running
    keep theirs)."""
    cc = cp.cuda.Device().compute_capability
    module = cp.RawModule(path=str(cubin))
    sizes = cp.zeros(8, dtype=cp.uint64)
    module.get_function(ce.SIZES)((1,), (1,), (sizes,))
    ce.CudaEngine._modules[cc] = (module, module.get_function(ce.KERNEL), sizes.get())


def u64(cp: Any, vals: list[int]) -> Any:
    return cp.asarray(np.array(vals, np.uint64))


def u32(cp: Any, vals: list[int]) -> Any:
    return cp.asarray(np.array(vals, np.uint32))


def fill(cp: Any, k: Kernels, rings: Any, qpns: Any, nq: int, depth: int, lap: int, raddr: int,
         rkey: int) -> None:  # fmt: skip
    n = nq * depth
    args = (rings, qpns, np.uint32(nq), np.uint32(depth), np.uint32(lap), np.uint64(raddr),
            np.uint32(rkey))  # fmt: skip
    k.fill(((n + 255) // 256,), (256,), args)
    # Never deviceSynchronize: the engine kernel runs until stopped.
    cp.cuda.Stream.null.synchronize()


def bare(cp: Any, k: Kernels, nq: int, depth: int, laps: int) -> dict[str, Any]:
    rings = cp.zeros(nq * depth * 64, dtype=cp.uint8)
    cqs = cp.zeros(nq * NCQE * 64, dtype=cp.uint8)
    cqs.reshape(-1, 64)[:, 63] = 0xF0  # INVALID << 4: as a driver initialises a CQ
    region = cp.zeros(nq * depth, dtype=cp.uint64)
    ring_ptrs = u64(cp, [rings.data.ptr + q * depth * 64 for q in range(nq)])
    cq_ptrs = u64(cp, [cqs.data.ptr + q * NCQE * 64 for q in range(nq)])
    qpns = u32(cp, [0x10000 | (q + 1) for q in range(nq)])
    bad = cp.zeros(1, dtype=cp.uint32)
    rates = []
    for lap in range(laps):
        fill(cp, k, ring_ptrs, qpns, nq, depth, lap, region.data.ptr, 0)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        e0.record()
        k.bare(((nq * 32 + 255) // 256,), (256,), (ring_ptrs, cq_ptrs, qpns, np.uint32(nq),
                                                    np.uint32(depth), np.uint32(lap),
                                                    np.uint32(NCQE), bad))  # fmt: skip
        e1.record()
        e1.synchronize()
        rates.append(nq * depth / (cp.cuda.get_elapsed_time(e0, e1) * 1e-3))
    ok = int(bad.get()[0]) == 0 and bool((region.get() != 0).all())
    return {"qps": nq, "wqes_per_s": float(np.median(rates)), "checked": ok}


def engine_rate(cp: Any, k: Kernels, ctas: int, nq: int, depth: int, laps: int) -> dict[str, Any]:
    seg = segment_bytes_for(nq, nq, 0, depth, NCQE, [nq * depth * 8])  # reg_mr takes it too
    t0 = time.monotonic()
    f = EmuFabric(0, 1, "cb-" + uuid.uuid4().hex[:8], progress="inline", segment_bytes=seg,
                  max_qps=nq, max_cqs=nq, max_mrs=1, max_dcts=0, engine="cuda",
                  engine_ctas=ctas, queues="device")  # fmt: skip
    try:
        mr = f.register(nq * depth * 8, domain="device")
        qps = []
        with f.setup_batch():  # one handshake with the engine for all of them
            for _ in range(nq):
                cq = f.create_cq(NCQE, overrun_ignore=True)
                qp = f.create_qp(cq, depth)
                f.connect(qp, f.endpoint(qp))  # loopback RC: the target is this rank's MR
                qps.append(qp)
        setup_s = time.monotonic() - t0
        rings = u64(cp, [q.sq.device_buf for q in qps])
        dbrecs = u64(cp, [q.sq.device_dbrec for q in qps])
        dbs = u64(cp, [q.sq.device_doorbell for q in qps])
        cqs = u64(cp, [q.sq.cq.device_buf for q in qps])
        qpns = u32(cp, [q.qpn for q in qps])
        t = cp.zeros(2, dtype=cp.uint64)
        failed = cp.zeros(1, dtype=cp.uint32)
        rates = []
        for lap in range(laps):
            fill(cp, k, rings, qpns, nq, depth, lap, mr.addr, mr.rkey)
            t.fill(0)
            pi = (lap + 1) * depth
            grid = ((nq + 255) // 256,)
            k.ring(grid, (256,), (dbrecs, dbs, qpns, np.uint32(nq), np.uint32(pi), t[0:1]))
            last = (np.uint32(pi // 32 - 1), np.uint32(pi - 1))  # its CQ index and WQE index
            k.wait(grid, (256,), (cqs, np.uint32(nq), np.uint32(NCQE), *last, t[1:2], failed))
            cp.cuda.Stream.null.synchronize()
            ts = t.get()
            rates.append(nq * depth / ((int(ts[1]) - int(ts[0])) * 1e-9))
        nfail = int(failed.get()[0])
        f.quiesce()
        c = f.counters()
        f.check()
        return {"ctas": ctas, "qps": nq, "depth": depth, "wqes_per_s": float(np.median(rates)),
                "laps": laps, "waiters_timed_out": nfail, "setup_s": round(setup_s, 2),
                "counted_wqes": c["wqes"], "expected_wqes": nq * depth * laps,
                "cqes": c["cqes"]}  # fmt: skip
    finally:
        f.close()


def ping(cp: Any, k: Kernels, f: EmuFabric, qp: Any, mr_dev: int, rkey: int, pings: int,
         start: int = 0, t0: Any = None) -> Any:  # fmt: skip
    """`pings` one-at-a-time signaled writes from WQE (and CQE) index `start`; ns each (and
    each doorbell's %globaltimer into `t0`, a GPU array, when given)."""
    sq, cq = qp.sq, qp.sq.cq
    out = cp.zeros(pings, dtype=cp.uint64)
    k.ping((1,), (1,), (np.uint64(sq.device_buf), np.uint32(sq.wqebb_cnt),
                        np.uint64(sq.device_dbrec), np.uint64(sq.device_doorbell),
                        np.uint64(cq.device_buf), np.uint64(cq.device_dbrec), np.uint32(cq.ncqe),
                        np.uint32(qp.qpn), np.uint64(mr_dev), np.uint32(rkey), np.uint32(pings),
                        np.uint32(start), np.uint32(start), out,
                        np.uint64(0) if t0 is None else t0))  # fmt: skip
    cp.cuda.Stream.null.synchronize()
    v = out.get()
    return v[v > 0]


# The engine's stamp stages (cuda/emu_engine.cu, kSt*), in order, and what each delta measures.
STAMP_RECORDS, STAMP_WORDS = 4096, 8  # cuda/emu_engine.cu kStampRecords, kStampWords
STAGES = ("scan", "entry", "doorbell", "record", "stored", "cqe", "core", "pass_end")
STAGE_DELTAS = (  # (name, from, to): "t0" is the pinger's doorbell store, "seen" its CQE read
    ("doorbell store -> pass sees it", "t0", "scan"),
    ("pass -> serve entry", "scan", "entry"),
    ("core doorbell step", "entry", "doorbell"),
    ("record read + responder", "doorbell", "record"),
    ("WQE reads + checks + payload stores", "record", "stored"),
    ("fence + CQ lock + CQE + unlock", "stored", "cqe"),
    ("CQE written -> pinger sees it", "cqe", "seen"),
    ("core serve after the batch", "cqe", "core"),
    ("rest of the pass (flushes)", "core", "pass_end"),
    ("pass end -> next doorbell store", "pass_end", "next_t0"),
)


def stamp_breakdown(records: np.ndarray, t0: np.ndarray, lat: np.ndarray) -> dict[str, Any]:
    """p50 (ns) of each stage of STAGE_DELTAS over the pings whose one stamp record matches
    (record i = ping i: its scan stamp between the ping's doorbell and its CQE)."""
    n = min(len(records), len(t0), len(lat))
    rec, t0, lat = records[:n].astype(np.int64), t0[:n].astype(np.int64), lat[:n].astype(np.int64)
    cols = {name: rec[:, i] for i, name in enumerate(STAGES)}
    cols["t0"], cols["seen"] = t0, t0 + lat
    cols["next_t0"] = np.append(t0[1:], -1)
    ok = (cols["scan"] >= t0) & (cols["scan"] <= t0 + lat) & (cols["cqe"] > 0)
    ok[-1] = False  # no next ping
    out: dict[str, Any] = {"pings": int(n), "matched": int(ok.sum()),
                           "total_p50_ns": float(np.median(lat[ok])) if ok.any() else None,
                           "stages_p50_ns": {}}  # fmt: skip
    for name, a, b in STAGE_DELTAS:
        d = cols[b][ok] - cols[a][ok]
        out["stages_p50_ns"][name] = float(np.median(d)) if d.size else None
    return out


def engine_stamps(cp: Any) -> tuple[Any, Any]:
    """The running engine's stamp records (one per serve of QP slot 1 a doorbell began; the
    engine built with GICBENCH_ENGINE_STAMPS=1): mark() -> the records written so far,
    read(since) -> those written after `since` (the engine never waits for these copies)."""
    module = ce.CudaEngine._modules[cp.cuda.Device().compute_capability][0]
    count = cp.ndarray((1,), cp.uint32, module.get_global("gicbench_engine_stamp_n"))
    # a module global's size is not kept by CuPy: the engine's own (kStampRecords x kStampWords)
    words = cp.ndarray((STAMP_RECORDS * STAMP_WORDS,), cp.uint64,
                       module.get_global("gicbench_engine_stamps"))  # fmt: skip

    def mark() -> int:
        return min(int(count.get()[0]), STAMP_RECORDS)

    def read(since: int) -> np.ndarray:
        n = mark()
        return words[since * STAMP_WORDS : n * STAMP_WORDS].get().reshape(n - since, STAMP_WORDS)

    return mark, read


def echo_floor(cp: Any, k: Kernels, pings: int) -> dict[str, Any]:
    """The pinger against bench_echo (one warp: poll the doorbell, store the payload, fence, the
    CQE) on GPU-memory queues of the same shapes: the hand-off's floor on this GPU."""
    depth, ncqe = 64, 64
    ring = cp.zeros(depth * 64, dtype=cp.uint8)
    dbrec = cp.zeros(2, dtype=cp.uint32)
    doorbell = cp.zeros(1, dtype=cp.uint64)
    cq = cp.zeros(ncqe * 64, dtype=cp.uint8)
    cq[63::64] = 0xF0  # every CQE invalid (opcode 15, owner 0)
    cq_dbrec = cp.zeros(2, dtype=cp.uint32)
    target = cp.zeros(512, dtype=cp.uint64)
    failed = cp.zeros(1, dtype=cp.uint32)
    warm = min(200, pings)
    total = warm + pings
    s_echo = cp.cuda.Stream(non_blocking=True)
    with s_echo:
        k.echo((1,), (32,), (doorbell, ring, np.uint32(depth), cq, np.uint32(ncqe),
                             np.uint32(total), np.uint32(0), failed))  # fmt: skip
    out = cp.zeros(total, dtype=cp.uint64)
    k.ping((1,), (1,), (ring, np.uint32(depth), dbrec, doorbell, cq, cq_dbrec, np.uint32(ncqe),
                        np.uint32(1), np.uint64(target.data.ptr), np.uint32(0), np.uint32(total),
                        np.uint32(0), np.uint32(0), out, np.uint64(0)))  # fmt: skip
    cp.cuda.Stream.null.synchronize()
    s_echo.synchronize()
    v = out.get()[warm:]
    got = target.get()
    # the last 64 pings' payloads (ping i writes its WQE index at raddr + 8 * (i % 64))
    want = np.array([max(i for i in range(total) if i % 64 == j) for j in range(64)], np.uint64)
    v = v[v > 0]
    return {"case": "floor: pinger against bench_echo, GPU memory", "p50_us": _pct(v, 50),
            "p99_us": _pct(v, 99), "n": int(v.size), "timed_out": pings - int(v.size),
            "echo_failed": int(failed.get()[0]),
            "payloads_ok": bool((got[:64] == want).all())}  # fmt: skip


def latency(cp: Any, k: Kernels, label: str, pings: int, *, engine: str, queues: str,
            nqps: int = 1, ctas: int | None = None,
            stamps: bool = False) -> dict[str, Any]:  # fmt: skip
    seg = segment_bytes_for(nqps, 2, 0, 64, 64, [4096])
    f = EmuFabric(0, 1, "cl-" + uuid.uuid4().hex[:8],
                  progress="thread" if engine == "cpu" else "inline", segment_bytes=seg,
                  max_qps=nqps, max_cqs=2, max_mrs=1, max_dcts=0, engine=engine,
                  engine_ctas=ctas if engine == "cuda" else None, queues=queues)  # fmt: skip
    t0 = time.monotonic()
    try:
        with f.setup_batch():  # one handshake with the engine for all of them
            idle_cq = f.create_cq(64, overrun_ignore=True)
            for _ in range(nqps - 1):  # configured, never rung
                q = f.create_qp(idle_cq, 64)
                f.connect(q, f.endpoint(q))
            cq = f.create_cq(64)
            qp = f.create_qp(cq, 64)
            f.connect(qp, f.endpoint(qp))
        if engine == "cuda":
            mr = f.register(4096, domain="device")
            dev = mr.addr
        else:  # the CPU engine writes host memory: a host-mapped MR, queues mapped for the GPU
            mr = f.register(4096, domain="host-mapped")
            addrs = f.register_cuda()
            dev = addrs["mrs"][mr.addr]
            qp = _mapped(qp, addrs)
        setup_s = time.monotonic() - t0
        warm = min(200, pings)
        ping(cp, k, f, qp, dev, mr.rkey, warm)  # warm-up
        mark = read = None
        if stamps:
            mark, read = engine_stamps(cp)
        since = mark() if mark is not None else 0
        t0 = cp.zeros(pings, dtype=cp.uint64) if stamps else None
        v = ping(cp, k, f, qp, dev, mr.rkey, pings, start=warm, t0=t0)
        records = read(since) if read is not None else None
        f.quiesce()
        f.check()
        r = {"case": label, "engine": engine, "queues": queues, "qps_configured": nqps,
             "p50_us": _pct(v, 50), "p99_us": _pct(v, 99), "n": int(v.size),
             "timed_out": pings - int(v.size), "setup_s": round(setup_s, 2)}  # fmt: skip
        if records is not None and v.size == pings:
            r["stamps"] = stamp_breakdown(records, t0.get(), v)
        return r
    finally:
        f.close()


def _mapped(qp: Any, addrs: dict[str, Any]) -> Any:
    """The QP with the GPU addresses register_cuda() gave (CPU engine: queues mapped)."""
    import dataclasses

    a, c = addrs["qps"][qp.qpn], addrs["cqs"][qp.sq.cq.cqn]
    cq = dataclasses.replace(qp.sq.cq, device_buf=c["buf"], device_dbrec=c["dbrec"])
    sq = dataclasses.replace(qp.sq, device_buf=a["buf"], device_dbrec=a["dbrec"],
                             device_doorbell=a["doorbell"], cq=cq)  # fmt: skip
    return dataclasses.replace(qp, sq=sq)


def _ints(text: str, sep: str) -> list[int]:
    return [int(x) for x in text.split(sep) if x]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ctas", default="8,16,64,131", help="engine CTAs to sweep (<= SMs - 1)")
    ap.add_argument("--qps", default="16,64,132,1024,2048", help="QPs to sweep")
    ap.add_argument("--depth", type=int, default=2048, help="WQEs per QP per lap (<=1024 QPs)")
    ap.add_argument("--laps", type=int, default=4)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--many-qps", type=int, default=16384, help="QPs configured, one active")
    ap.add_argument("--skip", default="", help="comma list of parts to skip: latency,bare,rate")
    ap.add_argument("--variants", nargs="*", default=[],
                    help="engine builds to compare, each SPEC[:CTAS[:QPS]] (lists joined by +):\n"
                         "SPEC rN = this engine with N rounds, or an engine source path; the\n"
                         "first one also gives the latency figures (default: the installed\n"
                         "engine, swept over --ctas and --qps)")  # fmt: skip
    ap.add_argument("--latency-variants", choices=("first", "all"), default="first",
                    help="which --variants give the CUDA engine's GPU-resident latency\n"
                         "cases (1 QP; --many-qps configured): the first, or each in turn\n"
                         "(host-resident and CPU-engine cases: once, with the first)")  # fmt: skip
    ap.add_argument(
        "--stamps",
        action="store_true",
        help="first: the GPU-resident one-QP latency stage by stage (an engine built\n"
        "with GICBENCH_ENGINE_STAMPS=1) beside the hand-off's floor (bench_echo)",
    )
    ap.add_argument("--json", help="write the figures here (rewritten after every row)")
    a = ap.parse_args(argv)
    for v in a.variants:  # refused before anything is compiled or created
        try:
            variant_defines(v.split(":")[0])
        except ValueError as e:
            ap.error(str(e))
    import cupy as cp

    skip = set(filter(None, a.skip.split(",")))
    k = Kernels(cp)
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    out: dict[str, Any] = {"device": dev["name"].decode(), "sms": dev["multiProcessorCount"],
                           "bare": [], "engine": [], "latency": [],
                           "method": "prefilled WQEs, one doorbell per QP per lap"}  # fmt: skip

    def log(msg: str) -> None:
        print(msg, flush=True)

    ctas_all, qps_all = _ints(a.ctas, ","), _ints(a.qps, ",")
    # (name, cubin or None for the installed engine, ctas, qps)
    variants: list[tuple[str, Path | None, list[int], list[int]]] = []
    if a.variants:
        arch = f"sm_{cp.cuda.Device().compute_capability}"
        tmp = Path(tempfile.mkdtemp(prefix="cuda-engine-variants-"))
        parts = [v.split(":") for v in a.variants]
        srcs = [variant_source(p[0], tmp) for p in parts]
        t0 = time.monotonic()
        unique = list(dict.fromkeys(srcs))  # one compile per source (the same file at once races)
        with concurrent.futures.ThreadPoolExecutor(len(unique)) as ex:
            built = dict(
                zip(unique, ex.map(lambda s: compile_engine(arch, s), unique), strict=True)
            )
        cubins = [built[src] for src in srcs]
        log(f"compiled {len(cubins)} engine variants in {time.monotonic() - t0:.1f} s")
        for p, cubin in zip(parts, cubins, strict=True):
            c = _ints(p[1], "+") if len(p) > 1 and p[1] else ctas_all
            q = _ints(p[2], "+") if len(p) > 2 and p[2] else qps_all
            name = p[0] if p[0][:1] == "r" else Path(p[0]).parent.name or p[0]
            name = name.replace("GICBENCH_ENGINE_", "")
            variants.append((name, cubin, c, q))
    else:
        variants.append(("installed", None, ctas_all, qps_all))
    qps = sorted({q for v in variants for q in v[3]})
    depth_of = {nq: a.depth if nq <= 1024 else max(256, a.depth * 1024 // nq) for nq in qps}

    def save() -> None:  # after every row: a step cut off by its deadline keeps what ran
        if a.json:
            with open(a.json, "w") as fh:
                json.dump(out, fh, indent=2)

    if a.stamps:
        r = echo_floor(cp, k, a.pings)
        out["floor"] = r
        save()
        log(
            f"floor {r['case']}: p50 {r['p50_us']:.2f} us p99 {r['p99_us']:.2f} us "
            f"(n={r['n']}, payloads ok {r['payloads_ok']}, echo failed {r['echo_failed']})"
        )
        arch = f"sm_{cp.cuda.Device().compute_capability}"
        tmp = Path(tempfile.mkdtemp(prefix="cuda-engine-stamps-"))
        use_engine(cp, compile_engine(arch, variant_source(f"r{default_rounds()}@STAMPS=1", tmp)))
        r = latency(cp, k, "cuda, GPU-resident queues, stamped engine", a.pings, engine="cuda",
                    queues="device", stamps=True)  # fmt: skip
        r["variant"] = "stamps"
        out["latency"].append(r)
        save()
        st = r.get("stamps")
        log(
            f"stamped engine: p50 {r['p50_us']:.2f} us (n={r['n']}); "
            f"{st['matched'] if st else 0} pings matched to stamp records"
        )
        for name, ns in (st or {}).get("stages_p50_ns", {}).items():
            log(f"  {name:40s} {ns if ns is not None else float('nan'):9.0f} ns")
        ce.CudaEngine._modules.clear()  # the next parts build the installed engine again
    if "latency" not in skip:
        cases = [("cuda, GPU-resident queues", "cuda", "device", 1),
                 ("cuda, host-resident queues", "cuda", "host", 1),
                 ("cpu engine (thread), host-resident queues", "cpu", "host", 1),
                 (f"cuda, GPU-resident, {a.many_qps} QPs configured, 1 active", "cuda", "device",
                  a.many_qps)]  # fmt: skip
        one, many = cases[0][0], cases[3][0]
        out["latency_ratios"] = {}
        for vi, (vname, cubin, _, _) in enumerate(
            variants if a.latency_variants == "all" else variants[:1]
        ):
            if cubin is not None:
                use_engine(cp, cubin)
            for label, engine, queues, n in cases:
                if vi and queues == "host":  # host-resident and CPU cases: with the first only
                    continue
                try:
                    r = latency(cp, k, label, a.pings, engine=engine, queues=queues, nqps=n)
                except Exception as e:
                    r = {"case": label, "error": f"{type(e).__name__}: {e}"}
                    log(f"latency {vname} {label}: {r['error']}")
                    r["variant"] = vname if engine == "cuda" else None
                    out["latency"].append(r)
                    save()
                    continue
                r["variant"] = vname if engine == "cuda" else None
                out["latency"].append(r)
                save()
                log(f"latency {vname if engine == 'cuda' else '-'} {label:55s} p50 "
                    f"{r['p50_us']:7.2f} us  p99 {r['p99_us']:7.2f} us  (n={r['n']}, timeouts "
                    f"{r['timed_out']}, setup {r['setup_s']} s)")  # fmt: skip
            lat = {r["case"]: r for r in out["latency"] if "p50_us" in r and r["variant"] == vname}
            if one in lat and many in lat:
                ratio = lat[many]["p50_us"] / lat[one]["p50_us"]
                out["latency_ratios"][vname] = ratio
                if vi == 0:
                    out["latency_ratio_many_to_1qp"] = ratio
                log(f"{vname}: {a.many_qps}-configured / 1-QP p50 ratio: {ratio:.2f}")
                save()
    if "bare" not in skip:
        for nq in qps:
            r = bare(cp, k, nq, depth_of[nq], a.laps)
            out["bare"].append(r)
            save()
            log(f"bare  qps={nq:5d}  {r['wqes_per_s'] / 1e9:7.2f} G WQE/s  checked={r['checked']}")
    bare_of = {r["qps"]: r["wqes_per_s"] for r in out["bare"]}
    if "rate" not in skip:
        for name, cubin, ctas_list, qps_list in variants:
            if cubin is not None:
                use_engine(cp, cubin)
            for ctas in ctas_list:
                for nq in qps_list:
                    try:
                        r = engine_rate(cp, k, ctas, nq, depth_of[nq], a.laps)
                    except Exception as e:  # report and go on with the sweep
                        r = {"variant": name, "ctas": ctas, "qps": nq,
                             "error": f"{type(e).__name__}: {e}"}  # fmt: skip
                        log(f"engine {name} ctas={ctas} qps={nq}: {r['error']}")
                        out["engine"].append(r)
                        save()
                        continue
                    r["variant"] = name
                    if nq in bare_of:
                        r["ratio_to_bare"] = r["wqes_per_s"] / bare_of[nq]
                    out["engine"].append(r)
                    save()
                    log(f"engine {name} ctas={ctas:4d} qps={nq:5d}  "
                        f"{r['wqes_per_s'] / 1e6:9.1f} M WQE/s  ratio "
                        f"{r.get('ratio_to_bare', float('nan')):.3f}  counted "
                        f"{r['counted_wqes']}/{r['expected_wqes']}  timeouts "
                        f"{r['waiters_timed_out']}  setup {r['setup_s']} s")  # fmt: skip
    save()
    _table(out, log)
    return 0


def _table(out: dict[str, Any], log: Any) -> None:
    """The summary, last (what a cut-off log shows)."""
    bare_of = {r["qps"]: r["wqes_per_s"] for r in out["bare"]}
    w = max([9] + [len(r["variant"] or "-") for r in out["engine"] + out["latency"]])
    log(f"\n{'variant':{w}s}  CTAs    QPs   engine M WQE/s   bare G WQE/s   ratio  counted ok")
    for r in out["engine"]:
        if "error" in r:
            log(f"{r['variant']:{w}s} {r['ctas']:5d} {r['qps']:6d}   error: {r['error'][:60]}")
            continue
        ok = r["counted_wqes"] == r["expected_wqes"] and r["waiters_timed_out"] == 0
        log(f"{r['variant']:{w}s} {r['ctas']:5d} {r['qps']:6d}   {r['wqes_per_s'] / 1e6:14.1f}   "
            f"{bare_of.get(r['qps'], float('nan')) / 1e9:12.2f}   "
            f"{r.get('ratio_to_bare', float('nan')):5.3f}  {ok}")  # fmt: skip
    for r in out["latency"]:
        if "p50_us" in r:
            log(f"latency {r['variant'] or '-':{w}s} {r['case']:55s} p50 {r['p50_us']:6.2f} us "
                f"p99 {r['p99_us']:6.2f} us")  # fmt: skip
    for name, ratio in out.get("latency_ratios", {}).items():
        log(f"{name:{w}s} configured-QPs / 1-QP p50 ratio: {ratio:.2f}")


if __name__ == "__main__":
    sys.exit(main())
