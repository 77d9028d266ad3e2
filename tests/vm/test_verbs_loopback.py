"""The verbs provider on rxe0 in one process: two RC QPs connected to each other (loopback, as
rdma-core's own tests do). Writes, write-with-immediate, reads, a bad rkey, device selection."""

from __future__ import annotations

import numpy as np
import pytest

from gicbench.errors import CompletionTimeout, ConfigError, UnsupportedError
from gicbench.fabric.base import Access, QpState, RemoteBuffer
from gicbench.fabric.verbs import Posting, VerbsCompletionError, VerbsFabric
from gicbench.fabric.verbs.device import list_ports, select

TIMEOUT = 10.0


@pytest.fixture
def pair():
    f = VerbsFabric(rank=0, world_size=1, job="loop")
    cq_a, cq_b = f.create_cq(64), f.create_cq(64)
    a = f.create_qp(cq_a, 64, rq_wqes=16)
    b = f.create_qp(cq_b, 64, rq_wqes=16)
    f.add_peers([f.local_info()])
    f.connect(a, f.endpoint(b))
    f.connect(b, f.endpoint(a))
    yield f, a, b
    f.close()


def remote(mr, rank=0):
    return RemoteBuffer(rank, mr.addr, mr.length, mr.rkey)


def test_selection_defaults_to_ipv4_mapped_rocev2(rxe_device):
    sel = select()
    assert sel.device == rxe_device
    assert sel.port.link_layer == "Ethernet" and sel.port.active
    assert sel.gid.type == "RoCEv2" and sel.gid.ipv4 == "10.200.0.1"


def test_selection_flags_and_env(rxe_device):
    assert select(ib_dev=f"={rxe_device}:1").device == rxe_device
    assert select(env={"GICBENCH_IB_HCA": "rxe"}).device == rxe_device
    with pytest.raises(ConfigError, match="ib_dev"):
        select(ib_dev="mlx5_0")
    with pytest.raises(ConfigError, match="GICBENCH_IB_HCA"):
        select(env={"GICBENCH_IB_HCA": f"^{rxe_device}"})
    port = next(p for p in list_ports() if p.device == rxe_device)
    other = next(g for g in port.gids if g.index != select().gid.index)
    assert select(gid_index=other.index).gid == other
    with pytest.raises(ConfigError, match="gid_index"):
        select(gid_index=port.gids[-1].index + 100)


def test_bring_up_reaches_rts(pair):
    f, a, b = pair
    assert f.qp_state(a) == QpState.RTS and f.qp_state(b) == QpState.RTS
    assert f.mlx5_queues is False and f.post_send is True


@pytest.mark.parametrize("inline", [False, True])
def test_write_payload(pair, inline):
    f, a, _ = pair
    src = f.register(4096, Access.LOCAL_WRITE)
    dst = f.register(4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    data = np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)
    f.view(src)[:] = data
    p = Posting(f)
    size = 48 if inline else 4096
    p.post_write(a, src, remote(dst), size, inline=inline, wr_id=7)
    (c,) = p.poll_cq(a.sq.cq, 1, TIMEOUT, a)
    assert c.wr_id == 7 and c.qpn == a.qpn
    assert np.array_equal(f.view(dst)[:size], data[:size])
    assert not f.view(dst)[size:].any()


def test_write_chain_lands_every_slot(pair):
    f, a, _ = pair
    src = f.register(64 * 16, Access.LOCAL_WRITE)
    dst = f.register(64 * 16, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    f.view(src)[:] = np.arange(64 * 16, dtype=np.uint8)
    p = Posting(f)
    ops = [(src, 64 * i, remote(dst), 64 * i, 64, i == 15, None, i) for i in range(16)]
    before = f.counters()
    p.post_writes(a, ops)
    (c,) = p.poll_cq(a.sq.cq, 1, TIMEOUT, a)
    assert c.wr_id == 15
    assert np.array_equal(f.view(dst), f.view(src))
    after = f.counters()
    assert after["doorbells"] - before["doorbells"] == 1
    assert after["wqes"] - before["wqes"] == 16


def test_write_with_immediate(pair):
    f, a, b = pair
    src = f.register(256, Access.LOCAL_WRITE)
    dst = f.register(256, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    f.view(src)[:] = 0x5A
    p = Posting(f)
    p.post_recv(b, 1)
    p.post_write(a, src, remote(dst), 256, imm=0xC0FFEE)
    (sent,) = p.poll_cq(a.sq.cq, 1, TIMEOUT, a)
    assert sent.imm is None  # the immediate belongs to the receiver's completion only
    (r,) = p.poll_cq(b.sq.cq, 1, TIMEOUT, b)  # b's receive CQ is its send CQ
    assert r.imm == 0xC0FFEE and r.qpn == b.qpn
    assert (f.view(dst) == 0x5A).all()


def test_read(pair):
    f, a, _ = pair
    src = f.register(512, Access.LOCAL_WRITE | Access.REMOTE_READ)
    dst = f.register(512, Access.LOCAL_WRITE)
    f.view(src)[:] = np.arange(512, dtype=np.uint16).astype(np.uint8)
    p = Posting(f)
    p.post_read(a, dst, remote(src), 512)
    p.poll_cq(a.sq.cq, 1, TIMEOUT, a)
    assert np.array_equal(f.view(dst), f.view(src))


def test_bad_rkey_is_a_remote_access_error_naming_rank_and_qp(pair):
    f, a, _ = pair
    src = f.register(64, Access.LOCAL_WRITE)
    dst = f.register(64, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    p = Posting(f)
    bad = RemoteBuffer(0, dst.addr, 64, dst.rkey ^ 0x5500)
    p.post_write(a, src, bad, 8, wr_id=3)
    with pytest.raises(VerbsCompletionError) as ei:
        p.poll_cq(a.sq.cq, 1, TIMEOUT, a)
    msg = str(ei.value)
    assert "IBV_WC_REM_ACCESS_ERR" in msg and f"QP 0x{a.qpn:06x}" in msg and "rank 0" in msg
    assert ei.value.status == 10 and ei.value.wr_id == 3
    assert f.qp_state(a) == QpState.ERR


def test_missing_completion_times_out_with_count(pair):
    f, a, _ = pair
    with pytest.raises(CompletionTimeout, match="1 of 1 completion"):
        Posting(f).poll_cq(a.sq.cq, 1, 0.2, a)


def test_no_dc_on_verbs(pair):
    f, _, _ = pair
    cq = f.create_cq(4)
    with pytest.raises(UnsupportedError, match="mlx5 provider"):
        f.create_qp(cq, 4, dci=True)
