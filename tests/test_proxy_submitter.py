"""mini-proxy (the proxy submitter) against the emulated NIC in one process (no MPI): host
producers with both handoff protocols, T workers over R rings with chains of up to B WQEs, and
what a failure leaves behind (no ring mapped, no native thread left)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from host_world import SIZE, emu_world, proxy
from resources import sliced

from gicbench import _native
from gicbench.errors import CompletionError, CompletionTimeout, ConfigError, FabricError
from gicbench.fabric.base import host_view
from gicbench.submit.base import (
    Buffer,
    Lane,
    LatencyWork,
    LoadedWork,
    ProxyRateWork,
    RateWork,
    RespondWork,
)
from gicbench.submit.proxy.params import ProxyParams
from gicbench.submit.proxy.rings import ring_counts

PX = _native.proxy


def tasks() -> int:
    """Threads of this process (native ones included)."""
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def world():
    with emu_world(nqps=4, depth=64, timeout_s=2.0) as w:
        before = tasks()
        yield w
        assert PX.live_rings() == 0  # every engine unmapped its rings
        deadline = time.monotonic() + 2
        while tasks() > before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert tasks() <= before  # no worker or producer thread left behind


def sub_core(details: dict) -> int:
    core = int(details["worker_cores"])
    assert core in os.sched_getaffinity(0)
    return core


def latency(sub, w, mode: str, size: int = 64, iters: int = 100, lanes=None) -> np.ndarray:
    lanes = lanes if lanes is not None else w.lanes(1)
    return sub.latency(
        LatencyWork(lanes, 0, mode, size, True, False, iters, 5, Buffer.local(w.bufs[0][1]))
    )


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
@pytest.mark.parametrize("mode", ["issue", "put_completion"])
def test_single_op_writes_land(world, handoff, mode) -> None:
    w = world
    w.src(0)[:] = np.arange(SIZE, dtype=np.uint64).astype(np.uint8)
    before = w.fabrics[0].counters()
    sub = proxy(w, 0, handoff=handoff)
    ns = latency(sub, w, mode)
    assert ns.dtype == np.int64 and ns.size == 100 and (ns > 0).all()
    w.fabrics[0].check()
    assert w.fabrics[0].counters()["wqes"] - before["wqes"] == 105
    land = w.landing(1)
    assert np.array_equal(land[:56], w.src(0)[:56])
    assert land[56:64].view(np.uint64)[0] == 105  # the last sequence number
    assert [s["descriptors"] for s in sub.last_workers] == [105]
    # the harness records where the workers ran with the point, once (workers.py)
    details = sub.point_details()
    assert details["worker_cores"] == str(sub_core(details)) and details["precondition"] == "cold"
    assert sub.point_details() == {}


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_round_trip_through_two_proxies(world, handoff) -> None:
    w = world
    req, resp = proxy(w, 0, handoff=handoff), proxy(w, 1, handoff=handoff)
    err: list[BaseException] = []

    def answer() -> None:
        try:
            resp.respond(
                RespondWork(w.lanes(1, side=1)[0], Buffer.local(w.bufs[1][1]), 64, True, 105)
            )
        except BaseException as e:
            err.append(e)

    t = threading.Thread(target=answer)
    t.start()
    ns = latency(req, w, "round_trip")
    t.join()
    assert not err
    assert ns.size == 100 and (ns > 0).all()
    assert w.landing(0)[56:64].view(np.uint64)[0] == 105


@pytest.mark.parametrize(
    ("workers", "rings", "batch", "producers", "handoff"),
    [(1, 1, 1, 1, "tuned"), (2, 4, 16, 2, "tuned"), (2, 3, 4, 5, "baseline")],
)
def test_proxy_rate_counts_chains_and_payload(world, workers, rings, batch, producers, handoff):
    w = world
    w.src(0)[:] = (np.arange(SIZE) * 7).astype(np.uint8)
    before = w.fabrics[0].counters()
    sub = proxy(w, 0, handoff=handoff, workers=workers, rings=rings)
    size, per = 64, 3000
    # lane i: its own kilobyte of the source and of the landing buffer (16 slots of 64 B)
    lanes = sliced(w.lanes(), workers, 1024)
    res = sub.proxy_rate(
        ProxyRateWork(lanes, workers, rings, batch, producers, size, True, per, 50, 300)
    )
    total = (per + 50) * producers
    assert res.messages == per * producers
    assert w.fabrics[0].counters()["wqes"] - before["wqes"] == total
    assert sub.last_ring_messages == ring_counts(rings, producers, per + 50)
    assert res.doorbells >= total / batch and res.cqes == res.doorbells  # one CQE per chain
    assert res.windows_ns.size > 0 and (res.windows_ns > 0).all()
    # every lane's 16 slots hold the source's bytes from the same offset
    for i in range(workers):
        got = w.landing(1)[i * 1024 : (i + 1) * 1024]
        assert np.array_equal(got, w.src(0)[i * 1024 : (i + 1) * 1024])


def test_msg_rate_shape_runs_through_the_proxy(world) -> None:
    w = world
    sub = proxy(w, 0, workers=2, rings=2)
    r = sub.rate(RateWork(w.lanes(2), 2, 8, 64, False, 2000, 10, 200))
    assert r.messages == 4000 and r.doorbells > 0


@pytest.mark.parametrize(
    ("reserved", "handoff", "background"),
    [
        (False, "baseline", 2),
        (True, "baseline", 2),
        # the GPU bench's run that did not finish, on host producers: tuned, a reserved probe
        # ring, one background producer on each of the other rings (R - 1)
        (True, "tuned", 3),
    ],
)
def test_loaded_round_trip_shared_and_reserved(world, reserved, handoff, background) -> None:
    w = world
    kw = {"handoff": handoff, "workers": 2, "rings": 4}
    req, resp = proxy(w, 0, **kw), proxy(w, 1, **kw)
    out: dict[str, object] = {}

    def run(sub, side: int, key: str) -> None:
        try:
            out[key] = sub.loaded(
                LoadedWork(
                    w.lanes(2, side=side),
                    side == 0,
                    not reserved,
                    background,
                    16,
                    0.0,
                    64,
                    Buffer.local(w.bufs[side][1]),
                    50,
                    5,
                )
            )
        except BaseException as e:
            out[key] = e

    t = threading.Thread(target=run, args=(resp, 1, "resp"))
    t.start()
    run(req, 0, "req")
    t.join()
    for k in ("req", "resp"):
        assert not isinstance(out[k], BaseException), out[k]
    r = out["req"]
    assert r.rtt_ns.size == 50 and (r.rtt_ns > 0).all()
    if reserved:
        assert req.last_ring_messages[0] == 0  # nothing but the probe on its ring
    assert w.landing(0)[56:64].view(np.uint64)[0] == 55
    assert w.landing(1)[56:64].view(np.uint64)[0] == 55


def test_paced_background_runs(world) -> None:
    w = world
    kw = {"handoff": "tuned", "workers": 1, "rings": 3}
    req, resp = proxy(w, 0, **kw), proxy(w, 1, **kw)
    t = threading.Thread(
        target=lambda: resp.loaded(
            LoadedWork(
                w.lanes(1, side=1),
                False,
                False,
                2,
                4,
                0.05,
                64,
                Buffer.local(w.bufs[1][1]),
                20,
                2,
            )
        )
    )
    t.start()
    r = req.loaded(
        LoadedWork(w.lanes(1), True, False, 2, 4, 0.05, 64, Buffer.local(w.bufs[0][1]), 20, 2)
    )
    t.join()
    assert r.rtt_ns.size == 20


# ---- failures -------------------------------------------------------------------------------


def test_round_trip_without_responder_times_out_naming_the_probe(world) -> None:
    sub = proxy(world, 0, timeout_s=0.3)
    with pytest.raises(CompletionTimeout) as e:
        latency(sub, world, "round_trip", iters=5)
    msg = str(e.value)
    assert "rank 0" in msg and "probe" in msg and "ring 0" in msg and "polled word" in msg


def test_bad_rkey_fails_the_worker_with_the_error_cqe(world) -> None:
    w = world
    ln = w.lanes(1)[0]
    bad = Lane(ln.qp, ln.peer, ln.src, Buffer(ln.dst.addr, ln.dst.key ^ 0x5A5A, 4096))
    sub = proxy(w, 0)
    with pytest.raises(CompletionError) as e:
        latency(sub, w, "put_completion", lanes=(bad,))
    assert "worker 0" in str(e.value) and "REMOTE_ACCESS" in str(e.value)


def test_a_bad_descriptor_fails_the_worker_and_names_it(world) -> None:
    """A producer that writes garbage: the worker refuses it, the engine stops, the producer
    waiting on it reports the worker's failure."""
    w = world
    sub = proxy(w, 0)
    eng = sub.engine(w.lanes(1), 1, 1, 1, 64, True)
    with pytest.raises(FabricError) as e, eng:
        ring = host_view(eng.native.ring_addr(0), eng.native.ring_bytes()).view(np.uint64)
        w0, w1 = PX.desc_words(0, 7, 0, 64)  # lane 7: not a lane of this engine
        slot = PX.HEADER_BYTES // 8
        ring[slot + 1] = w1
        ring[slot] = w0
        ok, err = eng.native.wait_completed(0, 1, "test producer")
        eng.check("test", ok, err, {})
    msg = str(e.value)
    assert "worker 0" in msg and "bad_descriptor" in msg and "ring 0" in msg
    assert "lane 7" in msg


def test_a_full_ring_times_out_naming_the_producer(world) -> None:
    """A producer facing a ring its worker never drains (the worker's QP lost its peer's
    answers: here, an SQ stuck behind an erroring write) gives up at the deadline."""
    w = world
    sub = proxy(w, 0, timeout_s=0.3, ring_depth=4)
    eng = sub.engine(w.lanes(1), 1, 1, 1, 64, True)
    with pytest.raises(CompletionTimeout) as e, eng:
        eng.native.stop()  # the worker is gone: nothing consumes the ring any more
        ok, _ws, _st, err = eng.native.rate(1, 1, 64, 100, 0, 10)
        eng.check("test rate", ok, err, {})
    assert "producer 0" in str(e.value) and "no room on ring 0" in str(e.value)


# ---- refusals -------------------------------------------------------------------------------


def test_gpu_producers_refused_without_a_gpu() -> None:
    with pytest.raises(ConfigError) as e:
        ProxyParams(producer="gpu")
    assert "producer (--producer)" in str(e.value) and "GPU" in str(e.value)


def test_fewer_rings_than_workers_refused() -> None:
    with pytest.raises(ConfigError, match="rings"):
        ProxyParams(workers=4, rings=2)


def test_cores_outside_the_cpu_set_refused() -> None:
    with pytest.raises(ConfigError, match="proxy_cores"):
        ProxyParams(proxy_cores="4096")


def test_tuned_needs_a_producer_per_ring(world) -> None:
    sub = proxy(world, 0, rings=2)
    with pytest.raises(ConfigError, match="producers"):
        sub.proxy_rate(ProxyRateWork(world.lanes(1), 1, 2, 1, 3, 64, True, 10, 0, 10))


def test_rate_needs_a_ring_per_lane(world) -> None:
    sub = proxy(world, 0, rings=1)
    with pytest.raises(ConfigError, match="rings"):
        sub.rate(RateWork(world.lanes(2), 1, 1, 64, True, 10, 0, 10))


def test_chain_limit_refused(world) -> None:
    sub = proxy(world, 0)
    with pytest.raises(ConfigError, match="batch"):
        sub.rate(RateWork(world.lanes(1), 1, 17, 64, True, 10, 0, 10))


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"experiments": ["msg-rate"], "batch": 20}, "batch (--batch)"),
        ({"experiments": ["msg-rate"], "qps": 4, "rings": 2}, "rings (--rings)"),
        ({"experiments": ["single-op"], "scope": "all", "qps": 40}, "qps (-q)"),
        # refused by the engine after bring-up (exit 1, an incomplete trace) until now
        (
            {"experiments": ["payload"], "min_size": 1 << 22, "max_size": 1 << 22},
            "size (-b/-e)",
        ),
    ],
)
def test_what_the_engine_would_refuse_is_refused_in_pre_flight(values, field: str) -> None:
    """These used to pass pre-flight and fail at the first point, after the NIC and the run
    directory existed: make_plan (no MPI, nothing created) refuses them now."""
    from gicbench.config import RunConfig
    from gicbench.errors import ConfigError
    from gicbench.plan import make_plan

    with pytest.raises(ConfigError) as e:
        make_plan(RunConfig.build(submitter="proxy", **values))
    assert e.value.field == field


def test_background_geometry_the_gpu_loaded_loop_checks() -> None:
    """px_background gives block b rings first+b, first+b+P, ... (or one shared ring when P
    exceeds them): with tuned two blocks on one ring would publish the same indices and the
    drain would wait for descriptors that never complete; refused before any launch."""
    from gicbench.submit.proxy.rings import check_background, rings_of

    check_background(True, 31, 32, True)  # the bench's tuned reserved run: a ring per block
    assert sorted(r for b in range(31) for r in rings_of(b, 31, 32, 1)) == list(range(1, 32))
    with pytest.raises(ConfigError) as e:
        check_background(True, 32, 32, True)
    assert e.value.field == "background (--background)"
    assert rings_of(0, 32, 32, 1) == rings_of(31, 32, 32, 1)  # what it would have shared
    with pytest.raises(ConfigError):
        check_background(True, 4, 32, False)
    check_background(False, 64, 32, False)  # baseline: atomic reservation, rings may be shared


@pytest.mark.parametrize(
    "values",
    [
        {"experiments": ["single-op"]},  # round_trip is a default mode
        {"experiments": ["single-op"], "modes": ["put_completion"], "scope": "all"},
        {"experiments": ["completion-scope"], "pattern": "pairs"},
    ],
)
def test_gpu_producers_take_every_single_op_mode_in_pre_flight(monkeypatch, values) -> None:
    """GPU producers were refused the round trip and --scope all (so completion-scope as a
    whole, naming flags it does not have); px_probe and px_latency's quiet take them now
    (tests/test_proxy_gpu_cpu.py runs them). A GPU machine: the CuPy probe is stood in for."""
    from types import SimpleNamespace

    import gicbench.platform as platform
    from gicbench.config import RunConfig
    from gicbench.plan import make_plan

    monkeypatch.setattr(platform, "probe_cupy", lambda: SimpleNamespace(ok=True, detail=""))
    make_plan(RunConfig.build(submitter="proxy", producer="gpu", **values), here=False)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"workers": 9}, "workers"),  # used to name --rings (">= --workers 9")
        ({"workers": 9, "rings": 4}, "workers"),
        ({"rings": 40, "workers": 2}, "rings"),
        ({"producers": 65, "handoff": "baseline"}, "producers"),
    ],
)
def test_out_of_range_knobs_are_named_before_cross_checks(values, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        ProxyParams(**values)
    assert e.value.field.split()[0] == field
