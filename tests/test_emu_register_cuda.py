"""The emulated NIC maps its host-mapped memory regions into the GPU page by page: regions are
64-byte aligned, so neighbours share pages, and CUDA refuses a registration overlapping another
(cudaErrorHostMemoryAlreadyRegistered: loaded-rtt --submitter gpu met it on the H200 with 65
lanes). A fake CUDA runtime that refuses overlaps as CUDA does stands in for the GPU here."""

from __future__ import annotations

import itertools
import sys
import types
import uuid

import pytest

from gicbench.fabric.base import Access
from gicbench.fabric.emu import EmuFabric
from gicbench.fabric.emu.fabric import page_spans

OFFSET = 1 << 44  # the fake device address of host address a is a + OFFSET


class FakeRuntime:
    class CUDARuntimeError(RuntimeError):
        pass

    def __init__(self) -> None:
        self.spans: list[tuple[int, int]] = []

    def getDeviceCount(self) -> int:
        return 1

    def hostRegister(self, addr: int, n: int, flags: int) -> None:
        for lo, hi in self.spans:
            if addr < hi and lo < addr + n:
                raise self.CUDARuntimeError("cudaErrorHostMemoryAlreadyRegistered")
        self.spans.append((addr, addr + n))

    def hostUnregister(self, addr: int) -> None:
        self.spans = [s for s in self.spans if s[0] != addr]

    def hostGetDevicePointer(self, addr: int, flags: int) -> int:
        assert any(lo <= addr < hi for lo, hi in self.spans), "pointer of unregistered memory"
        return addr + OFFSET


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> FakeRuntime:
    rt = FakeRuntime()
    cuda = types.ModuleType("cupy.cuda")
    cuda.runtime = rt  # type: ignore[attr-defined]
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    return rt


def test_page_spans_merge_regions_sharing_a_page() -> None:
    assert page_spans([(4096 + 2560, 2560), (4096, 2560)]) == [(4096, 3 * 4096)]
    assert page_spans([(0, 4096), (4096, 64)]) == [(0, 8192)]  # touching: one span
    assert page_spans([(0, 64), (3 * 4096, 64)]) == [(0, 4096), (3 * 4096, 4 * 4096)]


def test_neighbouring_host_mapped_regions_are_registered_once_each_page(fake_cuda) -> None:
    f = EmuFabric(0, 1, "rc-" + uuid.uuid4().hex[:8], segment_bytes=8 << 20)
    try:
        f.create_qp(f.create_cq(64), 64)
        mrs = [f.register(n, Access.LOCAL_WRITE, domain="host-mapped") for n in (2560, 2560, 33280)]
        host_only = f.register(512, Access.LOCAL_WRITE)
        out = f.register_cuda()
        for mr in mrs:
            assert out["mrs"][mr.addr] == mr.addr + OFFSET
        assert host_only.addr not in out["mrs"]
        spans = sorted(fake_cuda.spans)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    finally:
        f.close()
    assert fake_cuda.spans == []  # close() unregistered every span


def test_a_gpi_queue_created_after_register_cuda_is_mapped_too(fake_cuda) -> None:
    """MoE dispatch creates its GPI queue when its first point runs, after bring-up mapped the
    queue arena: the arena's new pages are registered then, so a kernel can reach the queue
    (on the H200 an unmapped queue left the send kernel unable to stop)."""
    f = EmuFabric(0, 1, "rc-" + uuid.uuid4().hex[:8], segment_bytes=8 << 20)
    try:
        f.create_qp(f.create_cq(64), 64)
        out = f.register_cuda()
        host, dev, _ = out["queue_arena"]
        q = f.create_gpi(4096, ncounters=1, nwindows=16)
        for addr in (q.base, q.ring, q.ring + 4096 * 64 - 1):
            assert fake_cuda.hostGetDevicePointer(addr, 0) == dev + (addr - host)
        spans = sorted(fake_cuda.spans)
        assert len(spans) == 2 and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
        f.create_gpi(16, ncounters=1, nwindows=1)  # fits in pages mapped already, or maps more
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(sorted(fake_cuda.spans)))
    finally:
        f.close()
    assert fake_cuda.spans == []
