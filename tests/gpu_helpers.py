"""What the gpu-marked tests share: CuPy and a usable CUDA GPU, or a skip that says which is
missing (CI has neither)."""

from __future__ import annotations

from typing import Any

import pytest


def cupy_or_skip() -> Any:
    """CuPy with at least one usable CUDA GPU, else skip naming what is missing."""
    cupy = pytest.importorskip("cupy", reason="CuPy is needed for GPU tests")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA GPU")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA GPU: {e}")
    return cupy
