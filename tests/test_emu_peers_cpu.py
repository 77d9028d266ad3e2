"""The peer-exchange calls of the emulated NIC without CUDA (any machine): local_info() carries
no CUDA IPC handles with the CPU engine, update_peers() needs add_peers() first and maps nothing,
unexchanged() is empty; a CUDA engine's module loading mode reads "unknown" without a driver."""

from __future__ import annotations

import uuid

import pytest

from gicbench.errors import ConfigError, FabricError
from gicbench.fabric.emu import EmuFabric


def pair() -> list[EmuFabric]:
    job = "pc-" + uuid.uuid4().hex[:8]
    return [EmuFabric(r, 2, job, progress="inline", segment_bytes=1 << 20, max_qps=2, max_cqs=2,
                      max_mrs=2, max_dcts=0) for r in range(2)]  # fmt: skip


def test_update_peers_needs_add_peers_and_maps_nothing_on_the_cpu_engine() -> None:
    fs = pair()
    try:
        infos = [f.local_info() for f in fs]
        assert all("ipc" not in i and "gpu" not in i for i in infos)
        with pytest.raises(FabricError, match="before add_peers"):
            fs[0].update_peers(infos)
        for f in fs:
            f.add_peers(infos)
        fs[1].register(4096)  # a region after the exchange: host memory, peers reach it anyway
        assert fs[0].update_peers([f.local_info() for f in fs]) == 0
        assert fs[1].unexchanged() == []
        with pytest.raises(ConfigError, match="one per rank"):
            fs[0].update_peers(infos[:1])
    finally:
        for f in fs:
            f.close()


def test_module_loading_mode_without_a_driver_is_unknown() -> None:
    import ctypes.util

    from gicbench.fabric.emu.cuda_engine import module_loading

    if ctypes.util.find_library("cuda"):
        pytest.skip("a CUDA driver is here: the mode is read from it")
    assert module_loading() == "unknown"
