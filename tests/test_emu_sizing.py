"""Segment sizing and the queue arena: segment_bytes_for is exact, the error when
a segment is too small names the counts and the sizing function, DEVICE memory is refused."""

from __future__ import annotations

import itertools
import uuid

import pytest

from gicbench.errors import ConfigError, FabricError, UnsupportedError
from gicbench.fabric.emu import EmuFabric, segment_bytes_for


def _job() -> str:
    return "sz-" + uuid.uuid4().hex[:8]


def _fill(f: EmuFabric, n_qps: int, sq: int, ncqe: int, mrs: list[int]) -> None:
    for n in mrs:
        f.register(n)
    for _ in range(n_qps):
        cq = f.create_cq(ncqe)
        f.create_qp(cq, sq)


@pytest.mark.parametrize(
    ("n_qps", "sq", "ncqe", "mrs"),
    [(1, 16, 16, [4096]), (64, 64, 128, [100, 8192, 1]), (1985, 16, 16, [1 << 16])],
)
def test_exact_size_fits_and_one_page_less_does_not(n_qps, sq, ncqe, mrs) -> None:
    need = segment_bytes_for(n_qps, n_qps, 0, sq, ncqe, mrs)
    lim = {"max_qps": n_qps, "max_cqs": n_qps, "max_dcts": 0, "max_mrs": len(mrs)}
    f = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=need, **lim)
    try:
        _fill(f, n_qps, sq, ncqe, mrs)  # every object fits exactly
    finally:
        f.close()
    g = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=need - 4096, **lim)
    try:
        with pytest.raises(FabricError) as e:
            _fill(g, n_qps, sq, ncqe, mrs)
        msg = str(e.value)
        # the old message pointed at a flag that does not exist
        assert "raise segment_bytes" not in msg
        assert "segment_bytes_for" in msg and "QPs" in msg and "left of" in msg
    finally:
        g.close()


def test_32_ranks_64_qps_per_peer_is_sized_by_counts() -> None:
    # the configuration that overflowed a fixed segment: 31 peers x 64 QPs + 1 DCI per rank
    n_qps = 31 * 64 + 1
    need = segment_bytes_for(n_qps, n_qps, 0, 16, 16, [1 << 20, 1 << 20])
    f = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=need,
                  max_qps=n_qps, max_cqs=n_qps, max_dcts=0, max_mrs=2)  # fmt: skip
    try:
        _fill(f, n_qps, 16, 16, [1 << 20, 1 << 20])
    finally:
        f.close()


def test_per_object_sequences_and_receive_queues() -> None:
    need = segment_bytes_for(2, 2, 1, [16, 1024], [16, 4096], [64], rq_wqes=[0, 256],
                             dct_rq_wqes=512)  # fmt: skip
    f = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=need,
                  max_qps=2, max_cqs=2, max_dcts=1, max_mrs=1)  # fmt: skip
    try:
        f.register(64)
        c1, c2 = f.create_cq(16), f.create_cq(4096)
        f.create_qp(c1, 16)
        f.create_qp(c2, 1024, c2, 256)
        f.create_dct(c1, 7, rq_wqes=512)
        assert need - 4096 < f._nic.used <= need  # exact up to the final page rounding
    finally:
        f.close()


@pytest.mark.parametrize(
    ("args", "field"),
    [((-1, 1, 0, 16, 16, 1), "n_qps"), ((1, 1, 0, [16, 16], 16, 1), "sq_wqebbs"),
     ((1, 1, 0, 16, 16, 0), "mr_bytes"), ((1, 1, 0, 16, 16, [1, 2]), "n_mrs")],
)  # fmt: skip
def test_bad_counts_name_the_field(args, field) -> None:
    kw = {"n_mrs": 1} if field == "n_mrs" else {}
    with pytest.raises(ConfigError) as e:
        segment_bytes_for(*args, **kw)
    assert field in str(e.value)


def test_queue_arena_is_page_aligned_and_apart_from_memory() -> None:
    need = segment_bytes_for(3, 3, 0, 64, 64, [4096])
    f = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=need,
                  max_qps=3, max_cqs=3, max_dcts=0, max_mrs=1)  # fmt: skip
    try:
        mr = f.register(4096)
        qps = []
        for _ in range(3):
            cq = f.create_cq(64)
            qps.append((f.create_qp(cq, 64), cq))
        addr, n = f.queue_arena()
        assert addr % 4096 == 0 and n % 4096 == 0
        for qp, cq in qps:
            for a in (qp.sq.buf, qp.sq.dbrec, qp.sq.doorbell, cq.buf, cq.dbrec):
                assert addr <= a < addr + n
        assert not addr <= mr.addr < addr + n
        dbs = sorted(qp.sq.doorbell for qp, _ in qps)
        assert all(b - a >= 64 for a, b in itertools.pairwise(dbs))  # BlueFlame size
    finally:
        f.close()


def test_domains() -> None:
    f = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=1 << 20)
    try:
        f.register(64, domain="host-mapped")
        cq = f.create_cq(16, domain="host")
        f.create_qp(cq, 16, domain="host-mapped")
        with pytest.raises(UnsupportedError, match="CUDA engine"):
            f.register(64, domain="device")
        with pytest.raises(UnsupportedError, match="CUDA engine"):
            f.create_cq(16, domain="device")
        with pytest.raises(ConfigError, match="domain"):
            f.create_qp(cq, 16, domain="gpu")
    finally:
        f.close()


def test_register_cuda_without_gpu_says_why() -> None:
    f = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=1 << 20)
    try:
        try:
            import cupy  # noqa: F401
            from cupy.cuda import runtime

            has_gpu = runtime.getDeviceCount() > 0
        except Exception:  # no CuPy or no driver: the refusal path is tested
            has_gpu = False
        if has_gpu:
            pytest.skip("a GPU is present: covered by the gpu-marked tests")
        with pytest.raises(UnsupportedError, match=r"CuPy|GPU"):
            f.register_cuda()
    finally:
        f.close()


@pytest.mark.gpu
def test_register_cuda_maps_queues_for_the_gpu() -> None:
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except cp.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA device: {e}")
    import numpy as np

    from gicbench.fabric.emu import host_view

    f = EmuFabric(0, 1, _job(), progress="inline", segment_bytes=1 << 20)
    try:
        mr = f.register(4096, domain="host-mapped")
        cq = f.create_cq(16)
        qp = f.create_qp(cq, 16)
        m = f.register_cuda()
        host, dev, n = m["queue_arena"]
        assert (host, n) == f.queue_arena() and dev != 0
        d = m["qps"][qp.qpn]
        # The GPU stores through the device addresses; the host reads the same bytes.
        for addr, dev_addr in ((qp.sq.doorbell, d["doorbell"]), (mr.addr, m["mrs"][mr.addr])):
            mem = cp.cuda.UnownedMemory(dev_addr, 8, None)
            arr = cp.ndarray((1,), dtype=cp.uint64, memptr=cp.cuda.MemoryPointer(mem, 0))
            arr[0] = 0x1122334455667788
            cp.cuda.runtime.deviceSynchronize()
            assert host_view(addr, 8).view(np.uint64)[0] == 0x1122334455667788
        assert m["cqs"][cq.cqn]["buf"] == dev + (cq.buf - host)
    finally:
        f.close()
