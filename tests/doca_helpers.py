"""What the DOCA tests share: the headers (or why the test cannot run) and the nvcc flags.

Where nvcc exists, set-up (make setup) fetches the headers; a test that finds none then fails,
naming the fix, unless set-up recorded that no package index was reachable (the OFFLINE mark),
in which case it skips with that reason. Without nvcc the compile tests skip, as every nvcc
test does."""

from __future__ import annotations

import pytest

from gicbench.submit.doca import build, headers


def nvcc_or_skip() -> str:
    exe = build.nvcc()
    if exe is None:
        pytest.skip("nvcc not found (the CUDA compiler is needed to compile cuda/doca)")
    return exe


def headers_or_fail() -> headers.Gpunetio:
    found = headers.find()
    if found is not None:
        return found
    offline = headers.offline_reason()
    if offline:
        pytest.skip(f"DOCA GPUNetIO headers absent and set-up was offline: {offline}")
    pytest.fail(headers.unavailable_reason())
