"""GICBENCH_CUDA_ENGINE_ARENA_MB: the CUDA engine reserves GPU memory before its launch and carves
device objects from it (so compute-sanitizer memcheck, which checks a kernel against the
allocations that existed at its launch, reports on the engine cleanly). The setting is checked
without a GPU; the carving needs one (marked gpu)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from gpu_helpers import cupy_or_skip

from gicbench.errors import ConfigError, UnsupportedError
from gicbench.fabric.emu import EmuFabric, segment_bytes_for
from gicbench.fabric.emu.cuda_engine import ARENA_ENV, arena_bytes


@pytest.mark.parametrize("raw", ["x", "-1", "1.5", ""])
def test_a_bad_arena_setting_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(ARENA_ENV, raw)
    with pytest.raises(ConfigError, match=ARENA_ENV):
        arena_bytes()


def test_arena_setting_in_mib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ARENA_ENV, raising=False)
    assert arena_bytes() == 0
    monkeypatch.setenv(ARENA_ENV, "3")
    assert arena_bytes() == 3 << 20


def test_a_bad_arena_setting_is_refused_before_any_gpu_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ARENA_ENV, "lots")
    with pytest.raises(ConfigError, match=ARENA_ENV):
        EmuFabric(0, 1, "ta-" + uuid.uuid4().hex[:8], progress="inline",
                  segment_bytes=segment_bytes_for(1, 2, 0, 64, 64, [4096]), max_qps=1, max_cqs=2,
                  max_mrs=1, max_dcts=0, engine="cuda", engine_ctas=1)  # fmt: skip


@pytest.fixture(scope="module")
def cp() -> Any:
    return cupy_or_skip()


@pytest.mark.gpu
def test_device_objects_come_from_the_arena_until_it_is_full(
    cp: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ARENA_ENV, "1")
    f = EmuFabric(0, 1, "ta-" + uuid.uuid4().hex[:8], progress="inline",
                  segment_bytes=segment_bytes_for(2, 3, 0, 64, 64, [1 << 21]), max_qps=2,
                  max_cqs=3, max_mrs=3, max_dcts=0, engine="cuda", engine_ctas=1,
                  queues="device")  # fmt: skip
    try:
        eng = f._cuda
        lo, hi = int(eng._arena.ptr), eng._arena_end
        cq = f.create_cq(64)
        qp = f.create_qp(cq, 64)
        mr = f.register(4096, domain="device")
        for a in (cq.device_buf, qp.sq.device_buf, qp.sq.device_dbrec, mr.addr):
            assert lo <= a < hi and a % 256 == 0
        assert lo <= qp.sq.device_doorbell < hi  # 64-byte slots of one doorbell page
        with pytest.raises(UnsupportedError, match=ARENA_ENV):
            f.register(1 << 21, domain="device")  # more than the 1 MiB arena holds
    finally:
        f.close()
