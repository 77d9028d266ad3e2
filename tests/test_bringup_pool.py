"""Bring-up of a pool of RC QPs: the batch paths (Fabric.create_qps, endpoints, connect_rc)
make the same objects as the per-QP calls, carry traffic, refuse what is not theirs, and bring
32,766 QPs (emu's table) up in bounded memory."""

from __future__ import annotations

import dataclasses
import resource
import uuid

import pytest
from resources import EmuRanks

from gicbench.errors import ConfigError
from gicbench.fabric.base import QpState
from gicbench.fabric.emu import EmuFabric
from gicbench.fabric.emu.sizing import segment_bytes_for


def _pair(n: int, depth: int = 64) -> EmuRanks:
    seg = segment_bytes_for(n, n, 0, depth, depth, [4096, 4096])
    return EmuRanks(2, segment_bytes=seg, max_qps=n, max_cqs=n, max_mrs=2, max_dcts=0)


def _fields(qp) -> dict:
    d = dataclasses.asdict(qp)
    for key in ("qpn",):
        d.pop(key)
    d["sq"].pop("qpn")
    for k in ("buf", "dbrec", "doorbell"):
        d["sq"].pop(k)
    for k in ("cqn", "buf", "dbrec"):
        d["sq"]["cq"].pop(k)
    return d


def test_batch_objects_are_those_of_the_single_calls() -> None:
    with _pair(8) as w:
        f = w.fabrics[0]
        one = f.create_qp(f.create_cq(64, collapsed=True), 64, dbr=False)
        many = f.create_qps(3, 64, {"collapsed": True}, {"dbr": False})
        assert len(many) == 3 and len({q.qpn for q in [one, *many]}) == 4
        for q in many:  # every field but the numbers and addresses as the per-QP call makes
            assert _fields(q) == _fields(one)
            assert f.qp_state(q) == QpState.RESET
            assert f.endpoint(q)["qpn"] == q.qpn  # the fabric knows it as its own


def test_batch_dcis_are_dcis() -> None:
    with _pair(4) as w:
        f = w.fabrics[0]
        one = f.create_qp(f.create_cq(64), 64, dci=True)
        many = f.create_qps(2, 64, {}, {"dci": True})
        assert [q.dci for q in many] == [True, True] and _fields(many[1]) == _fields(one)
        for q in many:
            f.connect(q, {})
            assert f.qp_state(q) == QpState.RTS


def test_batch_refuses_bad_options_before_creating() -> None:
    with _pair(4) as w:
        f = w.fabrics[0]
        with pytest.raises(ConfigError, match="sq_wqebbs"):
            f.create_qps(2, 48, {}, {})
        with pytest.raises(ConfigError, match="count"):
            f.create_qps(0, 64, {}, {})
        assert f.create_qps(4, 64, {}, {})  # nothing was taken from the tables


def test_connect_rc_moves_to_rts_and_carries_writes() -> None:
    from gicbench.fabric.base import Access, host_view

    with _pair(16) as w:
        a, b = w.fabrics
        qa, qb = a.create_qps(16, 64, {}, {}), b.create_qps(16, 64, {}, {})
        a.connect_rc(qa, b.endpoints(qb))
        b.connect_rc(qb, a.endpoints(qa))
        assert {a.qp_state(q) for q in qa} == {QpState.RTS}
        assert {b.qp_state(q) for q in qb} == {QpState.RTS}
        # a write on the last QP lands: the peer QP numbers travelled in order
        from gicbench.submit.base import Buffer, Lane
        from gicbench.submit.host.submitter import HostSubmitter
        from gicbench.submit.work import CycleWork

        src = a.register(4096, Access.LOCAL_WRITE)
        dst = b.register(4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
        host_view(src.addr, 4096)[:] = 7
        lanes = tuple(Lane(q, 1, Buffer.local(src, 64 * i, 64), Buffer(dst.addr + 64 * i,
                                                                       dst.rkey, 64))
                      for i, q in enumerate(qa))
        sub = HostSubmitter(rank=0, fabric=a, progress=a.progress_policy(), timeout_s=2.0)
        sub.cycle(CycleWork(lanes, 1, 1, 1, 8, True, 16, 0, 4))
        landed = host_view(dst.addr, 4096).reshape(-1, 64)[:16, :8]
        assert (landed == 7).all()


def test_connect_rc_refuses_foreign_qps_and_short_endpoints() -> None:
    with _pair(8) as w:
        a, b = w.fabrics
        qa, qb = a.create_qps(2, 64, {}, {}), b.create_qps(2, 64, {}, {})
        with pytest.raises(ConfigError, match="qp"):
            a.connect_rc(qb, a.endpoints(qa))  # b's QPs are not a's
        with pytest.raises(ConfigError, match="remote"):
            a.connect_rc(qa, b.endpoints(qb[:1]))  # fewer peer QPs than ours
        assert {a.qp_state(q) for q in qa} == {QpState.RESET}  # refused before any change


MAX_QPS = 32_766  # emu's QP table (bit 15 of a number's index marks a DCT; slot 0 reserved)
# What one QP of the pool may cost: its CQ ring's page (4 KiB, initialised at creation), its SQ
# ring's page (4 KiB, once written) and its share of the tables and Python objects. Time is the
# benchmark's (bench/bringup.py --pool), not a test's.
RSS_PER_QP = 9 << 10


def test_a_full_table_comes_up_in_bounded_memory() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    with _pair(MAX_QPS) as w:
        a, b = w.fabrics
        qa = a.create_qps(MAX_QPS, 64, {}, {})
        qb = b.create_qps(MAX_QPS, 64, {}, {})
        a.connect_rc(qa, b.endpoints(qb))
        b.connect_rc(qb, a.endpoints(qa))
        assert a.qp_state(qa[-1]) == b.qp_state(qb[-1]) == QpState.RTS
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
    assert grown < 2 * MAX_QPS * RSS_PER_QP, f"peak RSS grew {grown >> 20} MiB"


def test_a_table_larger_than_emu_holds_is_refused() -> None:
    with pytest.raises(ConfigError, match="max_qps"):
        EmuFabric(0, 1, "t-" + uuid.uuid4().hex[:6], progress="inline", max_qps=MAX_QPS + 1,
                  max_cqs=MAX_QPS + 1)
