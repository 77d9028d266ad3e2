"""The host submitter's native loops against the emulated NIC, in one process (no MPI).

Two emu ranks of one job share this process: rank 0 submits, rank 1 is the target (and the
round-trip responder, driven from a Python thread while the native loop runs without the GIL).
Checks what the loops promise: samples per iteration, payloads where they belong, every WQE
executed, state resumed between calls, and failures raised with rank, QP and queue indices.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from host_world import SIZE, emu_world
from resources import lane_of

from gicbench.errors import CompletionError, CompletionTimeout
from gicbench.fabric.base import RemoteBuffer, host_view


@pytest.fixture
def world():
    with emu_world(nqps=4, depth=64, timeout_s=2.0) as w:
        yield w.fabrics, w.rc, w.bufs, w.subs, w


def lanes(w, side: int, n: int = 1):
    return w.lanes(n, side)


def params(**kw):
    p = {
        "size": 64,
        "payload": "inline",
        "scope": "selected",
        "iters": 200,
        "warmup": 10,
        "mode": "issue",
    }
    p.update(kw)
    return p


@pytest.mark.parametrize("payload", ["inline", "pointer"])
@pytest.mark.parametrize("mode", [0, 1])
def test_issue_and_put_completion(world, payload, mode) -> None:
    fs, _qps, bufs, subs, w = world
    src = host_view(bufs[0][0].addr, SIZE)
    src[:] = np.arange(SIZE, dtype=np.uint64).astype(np.uint8)
    before = fs[0].counters()
    for _ in range(2):  # a second call resumes the queue where the first left it
        ns = subs[0].single_op(lanes(w, 0), params(payload=payload), mode)
        assert ns.dtype == np.int64 and ns.size == 200 and (ns > 0).all()
    fs[0].check()
    after = fs[0].counters()
    assert after["wqes"] - before["wqes"] == 2 * 210
    landing = host_view(bufs[1][1].addr, SIZE)
    # the last 8 bytes carry the final sequence number, the rest is the source pattern
    assert np.array_equal(landing[:56], src[:56])
    assert landing[56:64].view(np.uint64)[0] == 210


def test_round_trip_with_responder(world) -> None:
    _, _qps, _, subs, w = world
    p = params(mode="round_trip", iters=300)
    t = threading.Thread(target=subs[1].respond, args=(lanes(w, 1), p))
    t.start()
    ns = subs[0].single_op(lanes(w, 0), p, 2)
    t.join(timeout=10)
    assert not t.is_alive()
    assert ns.size == 300 and (ns > 0).all()


def test_round_trip_without_responder_times_out_with_diagnostic(world) -> None:
    _, qps, _, subs, w = world
    with pytest.raises(CompletionTimeout) as e:
        subs[0].single_op(lanes(w, 0), params(mode="round_trip", iters=5, warmup=0), 2)
    msg = str(e.value)
    assert "rank 0" in msg and f"QP 0x{qps[0][0].qpn:06x}" in msg
    assert "SQ producer index" in msg and "CQ consumer index" in msg
    assert "polled word holds 0, waiting for 1" in msg


def test_bad_rkey_raises_the_error_cqe(world) -> None:
    _, qps, bufs, subs, _w = world
    landing = bufs[1][1]
    bad = RemoteBuffer(1, landing.addr, landing.length, landing.rkey ^ 0x100)
    with pytest.raises(CompletionError) as e:
        subs[0].single_op((lane_of(qps[0][0], bufs[0][0], bad),), params(iters=3, warmup=0), 1)
    assert e.value.syndrome == 0x13  # REMOTE_ACCESS
    assert "REMOTE_ACCESS" in str(e.value) and "WQE 0" in str(e.value)


@pytest.mark.parametrize(("threads", "batch"), [(1, 1), (2, 16), (4, 7)])
def test_msg_rate_counts_and_payload(world, threads, batch) -> None:
    fs, _qps, bufs, subs, w = world
    src = host_view(bufs[0][0].addr, SIZE)
    src[:] = np.random.default_rng(threads).integers(0, 256, SIZE, dtype=np.uint8)
    host_view(bufs[1][1].addr, SIZE)[:] = 0
    p = {
        "size": 32,
        "payload": "pointer",
        "threads": threads,
        "batch": batch,
        "messages_per_thread": 3000,
        "warmup_per_thread": 50,
        "window": 150,
    }
    before = fs[0].counters()
    windows, stats = subs[0].msg_rate(lanes(w, 0, n=4), p)
    fs[0].check()
    after = fs[0].counters()
    assert stats["messages"] == threads * 3000
    assert after["wqes"] - before["wqes"] == threads * 3050
    assert stats["doorbells"] == threads * -(-3050 // batch)
    assert windows.size == threads * 20 and (windows > 0).all()
    assert stats["cqes"] > 0 and stats["elapsed_ns"] > 0
    # every slot written holds the source bytes of that slot
    assert np.array_equal(host_view(bufs[1][1].addr, SIZE), src)
