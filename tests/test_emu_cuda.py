"""The CUDA engine on a GPU (marked gpu; skipped without one): GPU kernels post to queues in GPU
memory and in the rank's mapped shared memory and the engine executes them (payloads land,
CQEs arrive in order, counters add up); the warp batches of many QPs land every payload; the
CPU engine serves the same GPU submitter through host-mapped queues; residency is enforced; the
engine stops on close. The kernels are bench/cuda_engine.py's (cuda/emu_engine_bench.cu)."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from gpu_helpers import cupy_or_skip

from gicbench.errors import UnsupportedError
from gicbench.fabric.emu import EmuFabric, segment_bytes_for

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp() -> Any:
    return cupy_or_skip()


@pytest.fixture(scope="module")
def kernels(cp: Any) -> Any:
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "cuda_engine.py"
    spec = importlib.util.spec_from_file_location("bench_cuda_engine", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod, mod.Kernels(cp)


def fab(nqps: int = 4, **kw: Any) -> EmuFabric:
    kw.setdefault("engine", "cuda")
    kw.setdefault("engine_ctas", 2)
    return EmuFabric(0, 1, "tc-" + uuid.uuid4().hex[:8], progress="inline",
                     segment_bytes=segment_bytes_for(nqps, nqps + 1, 0, 256, 256, [1 << 16]),
                     max_qps=nqps, max_cqs=nqps + 1, max_mrs=2, max_dcts=0, **kw)  # fmt: skip


@pytest.mark.parametrize("queues", ["device", "host"])
def test_gpu_kernel_posts_and_the_engine_executes(cp: Any, kernels: Any, queues: str) -> None:
    bench, k = kernels
    f = fab(queues=queues)
    try:
        cq = f.create_cq(64)
        qp = f.create_qp(cq, 64)
        f.connect(qp, f.endpoint(qp))
        mr = f.register(4096, domain="device")
        assert qp.sq.domain.value == queues and qp.sq.device_doorbell and cq.device_buf
        v = bench.ping(cp, k, f, qp, mr.addr, mr.rkey, 100)
        assert v.size == 100  # every CQE arrived (none timed out)
        f.quiesce()
        c = f.counters()
        assert (c["wqes"], c["cqes"], c["bytes"], c["errors"]) == (100, 100, 800, 0)
        assert f.qp_counters(qp)["wqes"] == 100 and f.qp_counters(qp)["sq_ci"] == 100
        words = np.zeros(64, np.uint64)
        cp.cuda.runtime.memcpy(words.ctypes.data, mr.addr, 512, 2)
        assert sorted(words.tolist()) == list(range(36, 100))  # ping i writes i at slot i % 64
        assert f.cq_status(cq)["pi"] == 100
        f.check()
    finally:
        f.close()


def test_many_qps_every_payload_lands(cp: Any, kernels: Any) -> None:
    bench, k = kernels
    r = bench.engine_rate(cp, k, 8, 256, 256, 2)
    assert r["waiters_timed_out"] == 0
    assert r["counted_wqes"] == r["expected_wqes"] == 256 * 256 * 2
    assert r["cqes"] == 256 * 256 * 2 // 32


def test_qps_set_up_in_one_batch_are_served_after_it(cp: Any, kernels: Any) -> None:
    bench, k = kernels  # latency() creates and connects its 64 QPs in one setup_batch
    r = bench.latency(cp, k, "batch", 100, engine="cuda", queues="device", nqps=64, ctas=2)
    assert r["n"] == 100 and r["timed_out"] == 0


def test_an_error_inside_a_setup_batch_is_the_one_raised(cp: Any, kernels: Any) -> None:
    bench, k = kernels
    f = fab()
    try:
        with pytest.raises(RuntimeError, match="the block's own"), f.setup_batch():
            cq = f.create_cq(64)
            qp = f.create_qp(cq, 64)
            f.connect(qp, f.endpoint(qp))
            raise RuntimeError("the block's own error")  # the batch still ends: QP made known
        mr = f.register(4096, domain="device")
        assert bench.ping(cp, k, f, qp, mr.addr, mr.rkey, 10).size == 10
    finally:
        f.close()


def test_cpu_engine_serves_a_gpu_submitter(cp: Any, kernels: Any) -> None:
    bench, k = kernels
    r = bench.latency(cp, k, "cpu", 100, engine="cpu", queues="host")
    assert r["n"] == 100 and r["timed_out"] == 0


def test_device_objects_refused_with_the_cpu_engine_even_with_a_gpu(cp: Any) -> None:
    f = fab(engine="cpu", engine_ctas=None)
    try:
        with pytest.raises(UnsupportedError, match="CUDA engine"):
            f.create_cq(16, domain="device")
    finally:
        f.close()


def test_engine_ctas_beyond_residency_refused(cp: Any) -> None:
    with pytest.raises(UnsupportedError, match="resident"):
        fab(engine_ctas=4096)


def test_close_stops_the_kernel(cp: Any) -> None:
    f = fab()
    eng = f._cuda
    assert eng.running()
    f.close()
    assert not eng.running()
    f.close()  # twice is harmless
