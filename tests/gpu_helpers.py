"""What the gpu-marked tests share: CuPy and a usable CUDA GPU, or a skip that says which is
missing (CI has neither)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def two_fabrics(prefix: str, **kw: Any) -> Iterator[list[Any]]:
    """Two emu ranks in this process, peered (64 MiB segments, an engine thread each unless
    `kw` says otherwise); closed however the test ends."""
    from gicbench.fabric.emu import EmuFabric

    kw = {"progress": "thread", "segment_bytes": 64 << 20, **kw}
    job = f"{prefix}-{uuid.uuid4().hex[:8]}"
    fs = [EmuFabric(r, 2, job, **kw) for r in range(2)]
    try:
        infos = [f.local_info() for f in fs]
        for f in fs:
            f.add_peers(infos)
        yield fs
    finally:
        for f in fs:
            f.close()
