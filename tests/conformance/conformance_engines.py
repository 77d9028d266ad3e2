"""Engines the conformance cases run against, built by name.

An engine here is a world of `n` ranks of one NIC implementation in this process plus the few
operations the runner needs beyond the Fabric interface: numpy views of NIC memory, "wait until
every rung doorbell is handled", and the out-of-band reports (error records, CQ status, DCT key
violations). "cuda" is the CUDA engine (cuda/emu_engine.cu) with the queues in the rank's
segment, mapped into the GPU (the runner writes them with numpy, as a CPU submitter would); it
needs a GPU and skips without one.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from resources import EmuRanks

from gicbench.fabric.base import CompletionQueue
from gicbench.fabric.emu import host_view

# cpu-threads3: three engine threads per rank (each QP served by one of them), the sharding's
# results against the one-thread engine's
ENGINES = ["cpu-inline", "cpu-thread", "cpu-threads3", "cuda"]
GPU_ENGINES = {"cuda"}  # marked gpu


def cuda_unavailable() -> str | None:
    """Why the CUDA engine cannot run here (None when it can)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except ImportError as e:
        return f"CuPy not importable ({e})"
    except Exception as e:
        return f"no usable CUDA device: {e}"
    return None


class CpuWorld(EmuRanks):
    """`world` EmuFabric ranks of one job, small tables, peered and sealed (resources.EmuRanks);
    progress 'inline' or 'thread', or the CUDA engine (engine='cuda', one CTA per rank). The
    cases make their own objects: the runner creates each one the case declares."""

    def __init__(
        self, world: int, progress: str, engine: str = "cpu", engine_threads: int | None = None
    ) -> None:
        super().__init__(
            world,
            progress=progress,
            segment_bytes=4 << 20,
            engine=engine,
            prefix="conf",
            max_qps=16,
            max_cqs=16,
            max_mrs=16,
            max_dcts=4,
            engine_ctas=1 if engine == "cuda" else None,
            engine_threads=engine_threads,
        )
        self.start()

    def view(self, addr: int, nbytes: int) -> np.ndarray:
        return host_view(addr, nbytes)

    def drain(self) -> None:
        """Every doorbell rung so far is handled, on every rank, engines running concurrently."""
        if len(self.fabrics) == 1:
            self.fabrics[0].quiesce()
            return
        threads = [threading.Thread(target=f.quiesce) for f in self.fabrics]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def errors(self, rank: int) -> list[Any]:
        return self.fabrics[rank].errors()

    def cq_status(self, rank: int, cq: CompletionQueue) -> int:
        return self.fabrics[rank].cq_status(cq)["status"]

    def dct_key_violations(self, rank: int, dct: Any) -> int:
        return self.fabrics[rank].dct_counters(dct)["key_violations"]


def make_world(engine: str, world: int) -> CpuWorld:
    if engine in ("cpu-inline", "cpu-thread"):
        return CpuWorld(world, engine.removeprefix("cpu-"))
    if engine == "cpu-threads3":
        return CpuWorld(world, "thread", engine_threads=3)
    if engine == "cuda":
        why = cuda_unavailable()
        if why:
            pytest.skip(f"the CUDA engine needs a GPU: {why}")
        return CpuWorld(world, "inline", engine="cuda")
    raise ValueError(f"unknown engine {engine!r}: known {ENGINES}")
