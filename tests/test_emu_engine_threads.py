"""The CPU engine's threads (`--engine-threads`): QP slot i is served by shard (i - 1) mod n,
every WQE still executed exactly once and in its QP's order; what is refused, and when."""

from __future__ import annotations

import os
import uuid

import pytest
from resources import EmuRanks, assert_executed_once, bench_lanes

from gicbench.errors import ConfigError, UnsupportedError
from gicbench.fabric.emu import EmuFabric, nic_model
from gicbench.fabric.emu.provider import resolve_progress

SMALL = 2 << 20
FIELD = "engine_threads (--engine-threads)"


def _job() -> str:
    return "t-" + uuid.uuid4().hex[:8]


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.parametrize(
    ("kwargs", "allowed"),
    [
        ({"engine_threads": 0}, "an int in 1..64"),
        ({"engine_threads": 65}, "an int in 1..64"),
        ({"engine_threads": "2"}, "an int in 1..64"),
        ({"engine_threads": 2, "progress": "inline"}, "inline progress is one thread"),
        ({"engine_threads": 2, "engine": "cuda"}, "engine_ctas"),
    ],
)
def test_bad_engine_threads_refused_before_creating(kwargs, allowed) -> None:
    job = _job()
    args = {"rank": 0, "world_size": 1, "job": job, "segment_bytes": SMALL, "progress": "thread"}
    with pytest.raises(ConfigError) as e:
        EmuFabric(**{**args, **kwargs})
    assert e.value.field == FIELD and allowed in str(e.value)
    assert not any(job in n for n in os.listdir("/dev/shm"))


def test_engine_threads_with_a_nic_model_refused() -> None:
    model = nic_model.load("cx7-200g-ib-hopper")
    with pytest.raises(ConfigError) as e:
        EmuFabric(0, 1, _job(), "thread", SMALL, engine_threads=2, nic_model=model)
    assert e.value.field == FIELD and "NIC model" in str(e.value)


def test_each_engine_thread_runs_and_stops() -> None:
    before = _threads()
    f = EmuFabric(0, 1, _job(), "thread", SMALL, engine_threads=3)
    try:
        assert f.engine_threads == 3 and f._nic.engine_threads == 3
        assert _threads() == before + 3
    finally:
        f.close()
    assert _threads() == before


def test_native_engine_threads_only_before_the_first_qp() -> None:
    f = EmuFabric(0, 1, _job(), "inline", SMALL)
    try:
        f._nic.set_engine_threads(2)  # nothing exists yet: allowed
        cq = f.create_cq(16)
        f.create_qp(cq, 16)
        with pytest.raises(RuntimeError, match="before any QP"):
            f._nic.set_engine_threads(3)
        assert f._nic.engine_threads == 2
    finally:
        f.close()


@pytest.mark.parametrize("threads", [2, 3])
def test_sharded_engine_executes_every_wqe_once(threads: int) -> None:
    """A native poster on 7 QPs (slots spread over every shard, 3 is uneven) against engine
    threads: every WQE executed once, one CQE per doorbell batch, none stale, no errors, on
    every QP (two threads serving one QP would execute a WQE twice or see a stale one)."""
    from gicbench._native import emu as native

    with EmuRanks(progress="thread", segment_bytes=8 << 20, seal=False,
                  engine_threads=threads) as w:  # fmt: skip
        fs = w.fabrics
        dst = fs[1].register(64)
        rcq = fs[1].create_cq(16)
        sqs, cqs, qps = bench_lanes(fs, 7, rcq)
        before = fs[0].counters()
        total = 7 * 16 * 1000
        _, n = native.bench_rate(sqs, cqs, dst.addr, dst.rkey, total, 16)
        fs[0].quiesce()
        assert_executed_once(fs[0], before, n, total, 16)
        per_qp = [fs[0].qp_counters(q) for q in qps]
        assert sum(c["wqes"] for c in per_qp) == total
        assert all(c["wqes"] > 0 and c["errors"] == c["stale_wqes"] == 0 for c in per_qp)
        # each thread executed exactly its own QPs' WQEs: slot i on thread (i - 1) mod n
        owned = [0] * threads
        for q, c in zip(qps, per_qp, strict=True):
            owned[((q.qpn & 0xFFFF) - 1) % threads] += c["wqes"]
        assert list(fs[0]._nic.shard_wqes()) == owned


def test_more_engine_threads_than_cores_refused(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert resolve_progress("thread", 1, 0, False, engine_threads=3) == "thread"
    for requested in ("thread", "auto"):
        with pytest.raises(UnsupportedError, match="engine"):
            resolve_progress(requested, 1, 0, False, engine_threads=4)
    with pytest.raises(UnsupportedError, match="--progress thread"):
        resolve_progress("inline", 1, 0, False, engine_threads=2)
    assert resolve_progress("auto", 2, 0, False, engine_threads=1) == "thread"
