"""EmuFabric's control surface: argument checks, bring-up, state machine, errors, progress."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
import pytest
from resources import EmuRanks, assert_executed_once, bench_lanes

from gicbench import mlx5
from gicbench.errors import CompletionError, ConfigError, FabricError, UnsupportedError
from gicbench.fabric import make_fabric
from gicbench.fabric.base import Access, Fabric, QpState
from gicbench.fabric.emu import EmuFabric, host_view, segment_name

SMALL = 2 << 20


def _job() -> str:
    return "t-" + uuid.uuid4().hex[:8]


@pytest.fixture
def pair():
    with EmuRanks(segment_bytes=SMALL) as w:
        yield w.fabrics


def _rc(fs):
    cqs = [f.create_cq(16) for f in fs]
    qps = [f.create_qp(cq, 16) for f, cq in zip(fs, cqs, strict=True)]
    fs[0].connect(qps[0], fs[1].endpoint(qps[1]))
    fs[1].connect(qps[1], fs[0].endpoint(qps[0]))
    return cqs, qps


def _post_ring(f: EmuFabric, qp, raddr: int, rkey: int, payload: bytes, pi: int = 0) -> None:
    ring = mlx5.SqRing(host_view(qp.sq.buf, qp.sq.wqebb_cnt * 64), qp.sq.wqebb_cnt)
    n = ring.post_write(pi, qp.qpn, raddr, rkey, payload=payload, signaled=True)
    host_view(qp.sq.dbrec, 8)[4:] = np.frombuffer(mlx5.dbrec_value(pi + n), np.uint8)
    host_view(qp.sq.doorbell, 8).view(np.uint64)[0] = mlx5.doorbell_value(ring.read(pi, 0, 16))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"rank": 2, "world_size": 2}, "rank"),
        ({"world_size": 0}, "world_size"),
        ({"world_size": 300}, "world_size"),
        ({"job": "bad/job"}, "job"),
        ({"job": ""}, "job"),
        ({"progress": "polling"}, "progress"),
        ({"segment_bytes": 1000}, "segment_bytes"),
        ({"max_qps": 0}, "max_qps"),
        ({"max_qps": 1 << 15}, "max_qps"),
    ],
)
def test_bad_arguments_raise_config_error_before_creating(kwargs, field) -> None:
    args = {"rank": 0, "world_size": 2, "job": _job(), "segment_bytes": SMALL, **kwargs}
    with pytest.raises(ConfigError) as e:
        EmuFabric(**args)
    assert e.value.field == field
    job = args["job"]
    if isinstance(job, str) and job and "/" not in job:
        assert not any(job in n for n in os.listdir("/dev/shm"))


def test_make_fabric_and_interface() -> None:
    f = make_fabric("emu", rank=0, world_size=1, job=_job(), progress="inline", segment_bytes=SMALL)
    try:
        assert isinstance(f, Fabric) and f.name == "emu"
    finally:
        f.close()
    with pytest.raises(ConfigError):
        make_fabric("nosuch")


def test_segment_lifecycle() -> None:
    job = _job()
    f = EmuFabric(0, 1, job, progress="inline", segment_bytes=SMALL)
    path = Path("/dev/shm") / f.shm_name.lstrip("/")  # (a random name: see janitor.py)
    assert f.shm_name.startswith(segment_name(job, os.getpid(), 0, ""))
    assert path.exists() and f.local_info()["shm"] == "/" + path.name
    f.seal()
    assert not path.exists()
    f.close()
    f.close()  # idempotent
    with pytest.raises(FabricError):
        f.register(64)
    g = EmuFabric(0, 1, _job(), progress="thread", segment_bytes=SMALL)
    gpath = Path("/dev/shm") / g.shm_name.lstrip("/")
    g.close()  # unlinks when seal never happened
    assert not gpath.exists()


def test_objects_and_numbers(pair) -> None:
    f0, f1 = pair
    mr = f0.register(100, Access.LOCAL_WRITE)
    assert mr.lkey == mr.rkey and mr.length == 100 and mr.addr % 64 == 0
    assert f0.view(mr).size == 100
    cq = f1.create_cq(8)
    qp = f1.create_qp(cq, 8, cq, 4)
    dct = f1.create_dct(cq, 0xABC, rq_wqes=2)
    assert qp.qpn >> 16 == 1 and dct.dctn >> 16 == 1 and dct.lid == 2
    assert qp.qpn != dct.dctn and qp.rq is not None and dct.rq is not None
    assert f1.qp_state(qp) == QpState.RESET
    with pytest.raises(ConfigError):
        f0.create_cq(3)
    with pytest.raises(ConfigError):
        f0.create_qp(cq, 8)  # rank 1's CQ
    with pytest.raises(ConfigError):
        f1.create_qp(cq, 12)
    with pytest.raises(ConfigError):
        f0.register(0)


def test_state_machine(pair) -> None:
    f0, f1 = pair
    cq = f0.create_cq(4)
    qp = f0.create_qp(cq, 4)
    with pytest.raises(FabricError, match="RESET->RTS"):
        f0.modify_qp(qp, QpState.RTS)
    f0.modify_qp(qp, QpState.INIT)
    with pytest.raises(ConfigError):
        f0.modify_qp(qp, QpState.RTR)  # an RC QP needs its remote
    f0.modify_qp(qp, QpState.ERR)
    assert f0.qp_state(qp) == QpState.ERR
    f0.modify_qp(qp, QpState.RESET)
    rcq = f1.create_cq(4)
    peer = f1.create_qp(rcq, 4)
    f0.connect(qp, f1.endpoint(peer))
    assert f0.qp_state(qp) == QpState.RTS


def test_add_peers_checks(pair) -> None:
    f0, _ = pair
    infos = [f0.local_info(), dict(f0.local_info(), rank=1)]
    with pytest.raises(ConfigError):
        f0.add_peers(infos[:1])
    other = dict(infos[1], host="elsewhere")
    with pytest.raises(UnsupportedError, match="one node only"):
        f0.add_peers([infos[0], other])
    with pytest.raises(ConfigError):
        f0.add_peers([infos[0], dict(infos[1], job="other")])


def test_error_cqe_surfaces_as_completion_error(pair) -> None:
    f0, f1 = pair
    _, (qp0, _) = _rc(pair)
    mr = f1.register(64)
    _post_ring(f0, qp0, mr.addr, mr.rkey ^ 0x100, b"12345678")
    f0.quiesce()
    with pytest.raises(CompletionError) as e:
        f0.check()
    assert e.value.syndrome == mlx5.Syndrome.REMOTE_ACCESS
    assert e.value.qpn == qp0.qpn and e.value.wqe_counter == 0
    f0.check()  # reported once
    assert f0.qp_state(qp0) == QpState.ERR
    assert f0.qp_counters(qp0)["errors"] == 1


def test_not_rts_surfaces_as_fabric_error(pair) -> None:
    f0, f1 = pair
    cq = f0.create_cq(4)
    qp = f0.create_qp(cq, 4)
    mr = f1.register(64)
    _post_ring(f0, qp, mr.addr, mr.rkey, b"12345678")
    f0.quiesce()
    with pytest.raises(FabricError, match="not in RTS") as e:
        f0.check()
    assert e.value.records[0].qpn == qp.qpn
    assert f0.counters()["not_rts"] == 1


def test_counters_names(pair) -> None:
    want = {
        "wqes",
        "doorbells",
        "bytes",
        "messages",
        "errors",
        "stale_wqes",
        "flushed",
        "cq_overruns",
        "cqes",
    }
    assert want <= pair[0].counters().keys()


def test_progress_hook_drives_native_polling(pair) -> None:
    """Inline mode: a native loop that calls the hook while it waits completes its writes."""
    from gicbench._native import emu as native

    f0, f1 = pair
    (cq0, _), (qp0, _) = _rc(pair)
    mr = f1.register(64)
    hook, ctx = f0.progress_hook(), f0.progress_ctx()
    assert hook and ctx
    sq = (qp0.sq.buf, qp0.sq.wqebb_cnt, qp0.sq.dbrec, qp0.sq.doorbell, qp0.qpn)
    samples = native.bench_latency(
        sq, (cq0.buf, cq0.ncqe, cq0.dbrec), mr.addr, mr.rkey, 100, hook=hook, ctx=ctx
    )
    assert len(samples) == 100
    assert f0.counters()["wqes"] == 100
    assert bytes(f1.view(mr)[:8]) == (42).to_bytes(8, "little")


def test_thread_mode_has_no_hook() -> None:
    f = EmuFabric(0, 1, _job(), progress="thread", segment_bytes=SMALL)
    try:
        assert f.progress_hook() == 0 and f.progress_ctx() == 0
    finally:
        f.close()


def test_thread_mode_executes_without_polling() -> None:
    with EmuRanks(progress="thread", segment_bytes=SMALL, seal=False) as w:
        fs = w.fabrics
        (cq0, _), (qp0, _) = _rc(fs)
        mr = fs[1].register(64)
        _post_ring(fs[0], qp0, mr.addr, mr.rkey, b"threaded")
        buf = host_view(cq0.buf, 64)
        while not mlx5.cqe_ready(buf, 0, cq0.ncqe):
            pass  # no progress call: the engine thread does the work
        assert bytes(fs[1].view(mr)[:8]) == b"threaded"


@pytest.mark.parametrize("progress", ["thread", "inline"])
def test_native_posting_under_concurrency_is_exact(progress: str) -> None:
    """A native poster against a live engine: every WQE executed once, none stale, no errors,
    one CQE per doorbell batch (the release/acquire pairing of doorbell and WQE stores)."""
    from gicbench._native import emu as native

    with EmuRanks(progress=progress, segment_bytes=8 << 20, seal=False) as w:
        fs = w.fabrics
        dst = fs[1].register(64)
        rcq = fs[1].create_cq(16)
        sqs, cqs, _ = bench_lanes(fs, 4, rcq)
        before = fs[0].counters()
        total = 64_000
        _, n = native.bench_rate(
            sqs,
            cqs,
            dst.addr,
            dst.rkey,
            total,
            16,
            hook=fs[0].progress_hook(),
            ctx=fs[0].progress_ctx(),
        )
        assert_executed_once(fs[0], before, n, total, 16)
        assert bytes(fs[1].view(dst)[:8]) == (0x0123456789ABCDEF).to_bytes(8, "little")


def test_responder_cq_lock_of_a_dead_process_is_taken_over(pair) -> None:
    """A rank killed inside a responder CQE leaves the CQ lock held: the next writer waits a
    bounded time, sees the owner is dead, takes the lock over and reports it (no endless spin)."""
    fs = pair
    cq1 = fs[1].create_cq(16)
    cq0 = fs[0].create_cq(16)
    qp0 = fs[0].create_qp(cq0, 16)
    qp1 = fs[1].create_qp(cq1, 16, cq1, 4)
    fs[0].connect(qp0, fs[1].endpoint(qp1))
    fs[1].connect(qp1, fs[0].endpoint(qp0))
    mr = fs[1].register(64)
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that no longer exists
    lock = host_view(fs[1].cq_status(cq1)["lock_addr"], 4).view(np.uint32)
    lock[0] = pid
    host_view(qp1.rq.buf, 16)[:] = mlx5.data_seg(0, 0, 0)
    host_view(qp1.rq.dbrec, 4)[:] = np.frombuffer((1).to_bytes(4, "big"), np.uint8)
    ring = mlx5.SqRing(host_view(qp0.sq.buf, 16 * 64), 16)
    n = ring.post_write(0, qp0.qpn, mr.addr, mr.rkey, payload=b"12345678", signaled=True, imm=5)
    host_view(qp0.sq.dbrec, 8)[4:] = np.frombuffer(mlx5.dbrec_value(n), np.uint8)
    host_view(qp0.sq.doorbell, 8).view(np.uint64)[0] = mlx5.doorbell_value(ring.read(0, 0, 16))
    fs[0].quiesce()
    assert lock[0] == 0
    assert fs[1].counters()["lock_steals"] == 1
    recs = fs[1].errors()
    assert [r.kind for r in recs] == ["dead_owner"] and recs[0].found == pid
    assert mlx5.cqe_ready(host_view(cq1.buf, 64), 0, 16)  # the responder CQE was written
