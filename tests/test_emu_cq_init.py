"""A new emu CQ ring holds what rdma-core's mlx5 provider writes into one (mlx5_alloc_cq_buf:
every CQE zero but op_own = MLX5_CQE_INVALID << 4 = 0xF0, owner 0), so a consumer that reads a
CQE (its wqe_counter, as collapsed-CQ and IBGDA-style polls do) before the first completion sees
an invalid CQE, never a completion of WQE 0."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from gicbench import _native, mlx5
from gicbench.fabric.base import Access
from gicbench.fabric.emu import EmuFabric, host_view
from gicbench.mlx5.constants import CqeOpcode

OP_OWN = mlx5.cqe.OFF_OP_OWN
RDMA_CORE_INIT = 0xF0  # MLX5_CQE_INVALID (15) << 4, owner bit 0


def ring(cq) -> np.ndarray:
    return host_view(cq.buf, cq.ncqe * 64).reshape(cq.ncqe, 64)


@pytest.fixture
def pair():
    job = "t-" + uuid.uuid4().hex[:8]
    fs = [EmuFabric(r, 2, job, progress="inline", segment_bytes=4 << 20) for r in range(2)]
    infos = [f.local_info() for f in fs]
    for f in fs:
        f.add_peers(infos)
    for f in fs:
        f.seal()
    yield fs
    for f in fs:
        f.close()


def test_the_invalid_opcode_is_rdma_core_s() -> None:
    assert CqeOpcode.INVALID == 15 and CqeOpcode.INVALID << 4 == RDMA_CORE_INIT
    assert _native.wire.cqe_init() == bytes(63) + bytes([RDMA_CORE_INIT])


@pytest.mark.parametrize("kw", [{}, {"collapsed": True}, {"overrun_ignore": True}])
@pytest.mark.parametrize("ncqe", [1, 16, 256])
def test_every_cqe_of_a_new_ring_is_invalid(pair, kw: dict, ncqe: int) -> None:
    cq = pair[0].create_cq(ncqe, **kw)
    entries = ring(cq)
    assert (entries[:, OP_OWN] == RDMA_CORE_INIT).all(), np.unique(entries[:, OP_OWN])
    assert not entries[:, :OP_OWN].any()  # wqe_counter, qpn, byte_cnt: all zero
    for ci in range(ncqe):
        c = mlx5.decode_cqe(entries[ci])
        assert c.opcode == CqeOpcode.INVALID and c.owner == 0 and c.wqe_counter == 0
        assert not mlx5.cqe_ready(entries[ci], ci, ncqe)


def test_a_consumer_before_and_after_the_first_completion(pair) -> None:
    f0, f1 = pair
    cqs = [f.create_cq(16) for f in pair]
    qps = [f.create_qp(cq, 16) for f, cq in zip(pair, cqs, strict=True)]
    f0.connect(qps[0], f1.endpoint(qps[1]))
    f1.connect(qps[1], f0.endpoint(qps[0]))
    mr = f1.register(4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    sq = mlx5.SqRing(host_view(qps[0].sq.buf, qps[0].sq.wqebb_cnt * 64), qps[0].sq.wqebb_cnt)
    n = sq.post_write(0, qps[0].qpn, mr.addr, mr.rkey, payload=b"12345678", signaled=True)
    entries = ring(cqs[0])
    # Posted, not yet executed: entry 0's wqe_counter reads 0, but the CQE says invalid.
    assert mlx5.decode_cqe(entries[0]).opcode == CqeOpcode.INVALID
    assert not mlx5.cqe_ready(entries[0], 0, 16)
    host_view(qps[0].sq.dbrec, 8)[4:] = np.frombuffer(mlx5.dbrec_value(n), np.uint8)
    host_view(qps[0].sq.doorbell, 8).view(np.uint64)[0] = mlx5.doorbell_value(sq.read(0, 0, 16))
    f0.quiesce()
    first = mlx5.decode_cqe(entries[0])
    assert mlx5.cqe_ready(entries[0], 0, 16)
    assert (first.opcode, first.owner, first.wqe_counter) == (CqeOpcode.REQ, 0, 0)
    assert (entries[1:, OP_OWN] == RDMA_CORE_INIT).all()  # the rest of the ring is untouched
    assert not mlx5.cqe_ready(entries[1], 1, 16)
