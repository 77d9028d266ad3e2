"""A kernel still running past its launcher's deadline: the emulated NIC's close must not wait
for it in cudaHostUnregister (which waits for the device to go idle) nor unmap the memory the
kernel still reads. Without a GPU the registration is simulated: close must not touch CUDA."""

from __future__ import annotations

import sys
import uuid
from types import ModuleType

import pytest

from gicbench import cuda_host
from gicbench.fabric.emu import EmuFabric
from gicbench.fabric.emu import fabric as emu_fabric


@pytest.fixture
def stuck(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cuda_host, "_STUCK_KERNELS", [])
    monkeypatch.setattr(emu_fabric, "_PARKED", [])
    # a CuPy whose hostUnregister records its calls (none may come)
    calls: list[int] = []
    runtime = ModuleType("cupy.cuda.runtime")
    runtime.hostUnregister = calls.append  # type: ignore[attr-defined]
    cuda = ModuleType("cupy.cuda")
    cuda.runtime = runtime  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.runtime", runtime)
    return calls


def _fabric() -> EmuFabric:
    f = EmuFabric(0, 1, "stuck-" + uuid.uuid4().hex[:8], progress="thread", segment_bytes=2 << 20)
    f.add_peers([f.local_info()])
    f.seal()
    return f


def test_close_with_a_stuck_kernel_keeps_the_memory_registered(stuck, capsys) -> None:
    f = _fabric()
    f._cuda_ranges = [f.queue_arena()[0]]  # as register_cuda leaves it
    cuda_host.note_stuck_kernel("DOCA post_x: still running")
    f.close()
    assert stuck == []  # no cudaHostUnregister: it would wait for the kernel forever
    assert emu_fabric._PARKED  # the segment stays mapped for the process's life
    assert "a kernel is still running (DOCA post_x" in capsys.readouterr().err


def test_close_without_a_stuck_kernel_unregisters(stuck) -> None:
    f = _fabric()
    arena = f.queue_arena()[0]
    f._cuda_ranges = [arena]
    f.close()
    assert stuck == [arena]
    assert not emu_fabric._PARKED
