"""What the NVSHMEM tests share: nvcc (or why the test skips) and the headers (or why it cannot
run), the same rules as the DOCA tests' (tests/doca_helpers.py): headers missing after an
online set-up fail the test, naming the fix; after an offline set-up they skip."""

from __future__ import annotations

import pytest
from doca_helpers import vendor_headers_or_fail

from gicbench.submit.nvshmem import build, headers


def nvcc_or_skip() -> str:
    why = build.missing_prerequisite()
    if why:
        pytest.skip(why)
    exe = build.nvcc()
    assert exe is not None
    return exe


def headers_or_fail() -> headers.Nvshmem:
    return vendor_headers_or_fail(headers, "NVSHMEM headers")
