"""app/cuda_host.py: the one place that maps registered host memory to a GPU address (emu's
queue arena and MRs, mini-proxy's GPU producers), checked against a stand-in runtime."""

from __future__ import annotations

import pytest

from gicbench.cuda_host import CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, device_pointer
from gicbench.errors import UnsupportedError


class Runtime:
    def __init__(self, has_get: bool, can_use: int) -> None:
        if has_get:
            self.hostGetDevicePointer = lambda host, flags: host + 0x1000
        self.can_use = can_use

    def getDevice(self) -> int:
        return 3

    def deviceGetAttribute(self, attr: int, dev: int) -> int:
        assert attr == CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM and dev == 3
        return self.can_use


def test_device_pointer_paths() -> None:
    assert device_pointer(Runtime(True, 0), 0x5000) == 0x6000
    assert device_pointer(Runtime(False, 1), 0x5000) == 0x5000
    with pytest.raises(UnsupportedError, match="GPU 3 cannot use host pointers"):
        device_pointer(Runtime(False, 0), 0x5000)


def test_one_place() -> None:
    from gicbench.fabric.emu import fabric
    from gicbench.submit.proxy import gpu

    assert fabric.device_pointer is device_pointer and gpu.device_pointer is device_pointer
    assert not hasattr(fabric, "_device_pointer")
