"""What the gpu-marked tests share: CuPy and a usable CUDA GPU, or a skip that says which is
missing (CI has neither), and the worlds they build (tests/test_resources.py builds each of them
on the CPU and checks what it hands out)."""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest


def nvcc_or_skip(what: str = "cuda/*.cu") -> str:
    """nvcc's path (PATH, else /usr/local/cuda/bin), or skip the test naming what needs it."""
    found = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )
    if found is None:
        pytest.skip(f"nvcc not found (the CUDA compiler is needed to compile {what})")
    return found


def cupy_or_skip() -> Any:
    """CuPy with at least one usable CUDA GPU, else skip naming what is missing."""
    cupy = pytest.importorskip("cupy", reason="CuPy is needed for GPU tests")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA GPU")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA GPU: {e}")
    return cupy


def doca_or_skip() -> None:
    """DOCA GPUNetIO's device headers (make setup fetches them), else skip naming what is
    missing and how to get it."""
    from gicbench.submit.doca.headers import find, unavailable_reason

    if find() is None:
        pytest.skip(unavailable_reason())


def ranks_share_gpus_or_skip(cupy: Any, ranks: int) -> None:
    """`ranks` GPU ranks of a `gicbench run` on this node can run: a GPU each, or MPS running
    (the run refuses several GPU ranks on one GPU without it), else skip with the run's rule."""
    from gicbench.platform import probe_mps

    if cupy.cuda.runtime.getDeviceCount() >= ranks:
        return
    mps = probe_mps()
    if not mps.ok:
        pytest.skip(f"{ranks} GPU ranks on {cupy.cuda.runtime.getDeviceCount()} GPU(s): "
                    f"{mps.detail}")  # fmt: skip


# The in-process worlds of the gpu-marked tests (resources.EmuRanks keywords): two ranks with
# an engine thread each, 64 MiB segments, not sealed.
GPU_RANKS: dict[str, Any] = {"progress": "thread", "segment_bytes": 64 << 20, "seal": False}
# The same pair on emu's CUDA engine (two CTAs; it progresses itself); `queues` per test.
CUDA_RANKS: dict[str, Any] = {**GPU_RANKS, "progress": "inline", "engine": "cuda", "engine_ctas": 2}
# What the GPU submitters' tests send over (resources.Traffic keywords): rank 0 to rank 1, SQs
# and CQs of 256, lane i its own 4 KiB slice of rank 0's host-mapped source (which
# register_cuda() maps into the GPU) and of rank 1's landing.
SLICE = 4096
GPU_LANES: dict[str, Any] = {
    **GPU_RANKS,
    "depth": 256,
    "slice_bytes": SLICE,
    "both_ways": False,
    "src_domain": "host-mapped",
}
