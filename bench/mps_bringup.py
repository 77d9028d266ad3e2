"""Diagnose two ranks' CUDA engines on ONE GPU under MPS: which CUDA call of bring-up blocks while
the other client's persistent engine kernel runs.

Run under MPS with both ranks on one GPU:
    CUDA_VISIBLE_DEVICES=0 mpiexec -n 2 python3 bench/mps_bringup.py --out DIR
Rank 0 opens an EmuFabric with the CUDA engine (its persistent kernel runs); then, one probe per
round, rank 1 makes one CUDA call (context creation, cudaMalloc, cudaFree, cudaHostAlloc,
cudaHostRegister, a copy, a module load, a kernel launch, cudaIpcOpenMemHandle, a whole
EmuFabric with its engine). A call still running after --block-s is reported as blocked; rank 1
then asks rank 0 (through a file, not MPI: rank 0 must not sit in a CUDA or MPI call) to stop
its engine, and reports whether the call then completed (it waited for the other client's
kernel) or not. Every rank prints one JSON line per probe; faulthandler dumps every thread's
stack if a rank is stuck past --dump-s (and exits), so the call always returns.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import mmap
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

PROBES = ("context", "malloc", "free", "host_alloc", "host_register", "memcpy", "module_load",
          "launch", "ipc_open", "engine")  # fmt: skip


def log(rank: int, **kw: Any) -> None:
    print(json.dumps({"rank": rank, "t": round(time.time(), 3), **kw}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/mps_bringup")
    ap.add_argument("--block-s", type=float, default=4.0)
    ap.add_argument("--dump-s", type=float, default=40.0)
    ap.add_argument("--ctas", type=int, default=16)
    a = ap.parse_args()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.rank
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    faulthandler.dump_traceback_later(a.dump_s, exit=True, file=sys.stderr)
    if comm.size != 2:
        log(rank, error="needs mpiexec -n 2")
        return 2
    import cupy as cp

    from gicbench.fabric.emu import EmuFabric
    from gicbench.fabric.emu.cuda_engine import compile_engine

    job = comm.bcast(f"mps{os.getpid() % 100000}" if rank == 0 else None)
    state: dict[str, Any] = {}
    if rank == 0:
        cp.cuda.Device(0).use()
        cubin = str(compile_engine(f"sm_{cp.cuda.Device().compute_capability}"))
        buf = cp.cuda.memory.Memory(1 << 20)
        handle = bytes(cp.cuda.runtime.ipcGetMemHandle(buf.ptr))
    cubin, handle = comm.bcast((cubin, handle) if rank == 0 else None)
    for n, probe in enumerate(PROBES):
        flag = out / f"{job}.{probe}.release"
        if rank == 0:
            t0 = time.monotonic()
            f = EmuFabric(0, 1, f"{job}r0{n}", progress="inline", engine="cuda",
                          engine_ctas=a.ctas, segment_bytes=16 << 20, max_qps=4, max_cqs=4,
                          max_mrs=2, max_dcts=0)  # fmt: skip
            log(rank, probe=probe, engine_up_s=round(time.monotonic() - t0, 3))
        comm.Barrier()
        if rank == 0:
            # Wait for rank 1's verdict without a CUDA or MPI call: a file.
            while not flag.exists():
                time.sleep(0.01)
            t0 = time.monotonic()
            f.stop_engine()
            f.close()
            log(rank, probe=probe, engine_stopped_s=round(time.monotonic() - t0, 3))
        else:
            done = threading.Event()
            err: list[str] = []

            def call(p: str = probe, done: threading.Event = done, err: list[str] = err) -> None:
                try:
                    run_probe(cp, p, state, cubin, handle, job)
                except Exception as e:  # reported, not raised: the next probe still runs
                    err.append(f"{type(e).__name__}: {e}")
                done.set()

            t0 = time.monotonic()
            th = threading.Thread(target=call, daemon=True)
            th.start()
            blocked = not done.wait(a.block_s)
            flag.touch()  # rank 0 stops its engine now
            if blocked:
                done.wait(a.block_s * 3)
            log(rank, probe=probe, blocked=blocked, completed=done.is_set(),
                seconds=round(time.monotonic() - t0, 3), error=err[0] if err else None)  # fmt: skip
            if not done.is_set():
                faulthandler.dump_traceback(file=sys.stderr)
                log(rank, probe=probe, verdict="still blocked after the other engine stopped")
                comm.Abort(3)
        comm.Barrier()
        flag.unlink(missing_ok=True)
    if rank == 1 and "fabric" in state:
        state["fabric"].close()
    faulthandler.cancel_dump_traceback_later()
    return 0


def run_probe(cp: Any, probe: str, st: dict[str, Any], cubin: str, handle: bytes, job: str) -> None:
    rt = cp.cuda.runtime
    if probe == "context":
        cp.cuda.Device(0).use()
        rt.free(rt.malloc(256))  # the context is made by the first call
        st["pre"] = rt.malloc(1 << 20)  # freed by the "free" probe
    elif probe == "malloc":
        st["m"] = rt.malloc(64 << 20)
    elif probe == "free":
        rt.free(st.pop("pre"))
    elif probe == "host_alloc":
        st["pinned"] = cp.cuda.alloc_pinned_memory(1 << 20)
    elif probe == "host_register":
        st["mm"] = mm = mmap.mmap(-1, 1 << 20)
        import ctypes

        addr = ctypes.addressof(ctypes.c_char.from_buffer(mm))
        rt.hostRegister(addr, 1 << 20, 3)
    elif probe == "memcpy":
        import numpy as np

        s = cp.cuda.Stream(non_blocking=True)
        h = np.ones(1 << 16, np.uint8)
        rt.memcpyAsync(st["m"], h.ctypes.data, h.nbytes, 1, s.ptr)
        s.synchronize()
    elif probe == "module_load":
        st["mod"] = cp.RawModule(path=cubin)
        st["fn"] = st["mod"].get_function("gicbench_emu_engine_sizes")
    elif probe == "launch":
        s = cp.cuda.Stream(non_blocking=True)
        out = cp.zeros(8, dtype=cp.uint64)
        with s:
            st["fn"]((1,), (1,), (out,))
        s.synchronize()
    elif probe == "ipc_open":
        st["ipc"] = rt.ipcOpenMemHandle(handle, 1)
    elif probe == "engine":
        from gicbench.fabric.emu import EmuFabric

        st["fabric"] = EmuFabric(0, 1, f"{job}r1", progress="inline", engine="cuda",
                                 engine_ctas=16, segment_bytes=16 << 20, max_qps=4, max_cqs=4,
                                 max_mrs=2, max_dcts=0)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
