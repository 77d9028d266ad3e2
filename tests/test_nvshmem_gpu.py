"""NVSHMEM's own IBGDA device code on emu queues, on a GPU (marked gpu; skipped, naming what is
missing, without CuPy, a GPU, NVSHMEM's headers, or nvcc/mlx5dv.h and a prebuilt cubin): two emu
ranks in this process (CPU engine, a thread each), NVSHMEM's device states filled from them
(gicbench.submit.nvshmem.runtime), then the internal put + quiet (the op's QP, and the PE-wide
quiet over every QP) for 1 and 16 QPs per peer and the public nvshmem_putmem_nbi +
nvshmem_quiet, 8 B and 4 KiB: every payload lands, the NIC's counters stay clean, each op timed
(globaltimer) in the kernel. A launch still running 10 s after it started fails the test with
the QPs' indices and CQ entry 0 read back."""

from __future__ import annotations

import pytest
from gpu_helpers import cupy_or_skip

from gicbench.errors import UnsupportedError
from gicbench.submit.nvshmem import headers, runtime

pytestmark = pytest.mark.gpu
ITERS = 64


def _device() -> runtime.NvshmemDevice:
    cupy_or_skip()
    if headers.find() is None:
        pytest.skip(headers.unavailable_reason())
    try:
        return runtime.NvshmemDevice()
    except UnsupportedError as e:  # nvcc or mlx5dv.h missing and no prebuilt cubin
        pytest.skip(str(e))


@pytest.fixture(params=[1, 16], ids=["1qp", "16qp"])
def setup(request):
    dev = _device()
    with runtime.Loopback(request.param) as w:
        dev.install(w)
        yield dev, w


def test_device_states_found_by_name() -> None:
    dev = _device()
    with runtime.Loopback(2) as w:
        dev.install(w)  # writes both states, reads them back through the module's code
        print(dev.symbols)


@pytest.mark.parametrize("path", [k for _, k in runtime.PATHS])
@pytest.mark.parametrize("size", [8, 4096])
def test_put_lands_and_is_timed(setup, path: str, size: int) -> None:
    dev, w = setup
    for rep in range(2):  # the second launch continues the QPs' indices (wraps past depth 256)
        r = dev.run(w, path, size=size, iters=ITERS * (1 + 2 * rep), seed=rep)
        assert r.valid, f"{r.mismatch} bytes differ ({path}, {size} B)"
        d = r.delta()
        for k in runtime.CLEAN_COUNTERS:
            assert r.after.get(k, 0) == 0, (k, r.after)
        n = ITERS * (1 + 2 * rep)
        assert d["wqes"] >= n and d["bytes"] >= n * size and d["cqes"] >= 1, d
        s = r.samples
        assert len(s) == ITERS * (1 + 2 * rep)
        assert (s["issue_ns"] > 0).all() and (s["complete_ns"] >= s["issue_ns"]).all()
        print(path, w.rc_per_pe, size, "issue p50", r.p50("issue_ns", 8), "ns; put+completion p50",
              r.p50("complete_ns", 8), "ns;", {k: v for k, v in d.items() if v})
