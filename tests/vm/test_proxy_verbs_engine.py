"""mini-proxy's engine on rxe0 in one process (two RC QPs connected to each other): workers post
chains through ibv_post_send and retire them with ibv_poll_cq; every descriptor's write lands
and is counted; a bad rkey fails the worker with the verbs completion error naming the QP, and
every ring is unmapped and every thread joined whatever happened."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from gicbench import _native
from gicbench.fabric.base import Access
from gicbench.fabric.verbs import VerbsCompletionError, VerbsFabric
from gicbench.submit.base import Buffer, Lane, LatencyWork, ProxyRateWork
from gicbench.submit.proxy import ProxySubmitter
from gicbench.submit.proxy.params import ProxyParams

REGION = 64 * 1024


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def loop():
    f = VerbsFabric(rank=0, world_size=1, job="proxy-loop")
    qps, peers = [], []
    for _ in range(2):
        a = f.create_qp(f.create_cq(256), 256)
        b = f.create_qp(f.create_cq(256), 256)
        qps.append(a)
        peers.append(b)
    f.add_peers([f.local_info()])
    for a, b in zip(qps, peers, strict=True):
        f.connect(a, f.endpoint(b))
        f.connect(b, f.endpoint(a))
    src = f.register(REGION, Access.LOCAL_WRITE)
    dst = f.register(REGION, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    before = _tasks()
    yield f, qps, src, dst
    assert _native.proxy.live_rings() == 0
    deadline = time.monotonic() + 2
    while _tasks() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _tasks() <= before  # no worker left behind
    f.close()


def _sub(f, **kw) -> ProxySubmitter:
    return ProxySubmitter(
        rank=0, fabric=f, progress=f.progress_policy(), timeout_s=10.0,
        params=ProxyParams(precondition_s=0.0, **kw),
    )  # fmt: skip


def _lanes(qps, src, dst, rkey=None) -> tuple[Lane, ...]:
    half = REGION // 2
    return tuple(
        Lane(qp, 0, Buffer(src.addr + i * half, src.lkey, half),
             Buffer(dst.addr + i * half, dst.rkey if rkey is None else rkey, half))
        for i, qp in enumerate(qps)
    )  # fmt: skip


def test_rate_chains_land_and_count(loop) -> None:
    f, qps, src, dst = loop
    f.view(src)[:] = np.random.default_rng(3).integers(0, 256, REGION, dtype=np.uint8)
    before = f.counters()
    sub = _sub(f, workers=2, rings=4)
    r = sub.proxy_rate(ProxyRateWork(_lanes(qps, src, dst), 2, 4, 16, 4, 64, False, 3000, 10, 500))
    after = f.counters()
    total = (3000 + 10) * 4
    assert r.messages == 3000 * 4 and r.cqes == r.doorbells  # one completion per chain
    assert r.doorbells >= total / 16
    assert after["wqes"] - before["wqes"] == total and after["cqes"] - before["cqes"] == r.cqes
    assert after["bytes"] - before["bytes"] == total * 64
    assert sum(w["descriptors"] for w in sub.last_workers) == total
    # every slot a ring's messages reach was written with the source's bytes
    assert np.array_equal(f.view(dst), f.view(src))


def test_bad_rkey_fails_the_worker_naming_the_qp(loop) -> None:
    f, qps, src, dst = loop
    sub = _sub(f)
    lanes = _lanes(qps, src, dst, rkey=dst.rkey ^ 0x5A5A)
    with pytest.raises(VerbsCompletionError) as e:
        sub.latency(LatencyWork(lanes[:1], 0, "put_completion", 64, False, False, 10, 0))
    assert f"QP 0x{qps[0].qpn:06x}" in str(e.value)
    assert "worker 0" in "".join(getattr(e.value, "__notes__", []))
