"""mini-proxy's GPU producer kernels, built for the CPU (tests/proxy_gpu_cpu.py), land exactly
what the host producers (proxy_host.cpp, validated by the harness) land for the same work:
single-op issue and put+completion, proxy-rate, msg-rate/payload through the generic rate loop,
loaded-rtt's probe and background, and active-connections' cycle. gpu.py computes the kernels'
arguments as on a GPU; only the five PTX helpers and the launch differ. The first device run of
single-op through the harness failed validation because px_latency did not stamp the sequence
(fixed on main before this test): this is the test that would have caught it on the CPU."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from host_world import SIZE, emu_world, proxy
from proxy_gpu_cpu import compiler, cpu_producers
from resources import sliced

from gicbench import _native
from gicbench.submit.base import (
    Buffer,
    CycleWork,
    LatencyWork,
    LoadedWork,
    ProxyRateWork,
    RateWork,
    RespondWork,
)
from gicbench.submit.proxy import ProxySubmitter
from gicbench.submit.proxy.params import ProxyParams
from gicbench.submit.proxy.rings import lane_counts, ring_counts
from gicbench.submit.work import cycle_lane_writes

pytestmark = pytest.mark.skipif(compiler() is None, reason="needs a C++ compiler")
PX = _native.proxy


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("px_cpu")


def submitter(w, rank: int, gpu: bool, build_dir: Path, **kw) -> ProxySubmitter:
    sub = proxy(w, rank, 5.0, **kw)
    if gpu:
        sub.gpu = cpu_producers(sub.params, build_dir)
    return sub


def pattern(w, rank: int = 0, seed: int = 7) -> np.ndarray:
    src = np.random.default_rng(seed).integers(0, 256, SIZE, dtype=np.uint8)
    w.src(rank)[:] = src
    return src


def landing_of(run, build_dir: Path, **kw) -> dict[str, object]:
    """Run `run(sub, w)` with host producers and then with the CPU-built GPU kernels, each in
    a fresh world with the same source pattern; what each left in the peer's landing buffer
    and the source (stamps), and what run returned."""
    out: dict[str, object] = {}
    for gpu in (False, True):
        with emu_world(nqps=4, depth=64, timeout_s=5.0) as w:
            pattern(w)
            sub = submitter(w, 0, gpu, build_dir, **kw)
            try:
                res = run(sub, w)
            finally:
                sub.close()
            w.fabrics[0].check()
            key = "gpu" if gpu else "host"
            out[key] = (np.array(w.landing(1)), np.array(w.src(0)), res, sub)
        assert PX.live_rings() == 0
    return out


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
@pytest.mark.parametrize(
    ("mode", "size", "inline"),
    [("issue", 64, True), ("put_completion", 64, True), ("put_completion", 8, False)],
)
def test_single_op_lands_as_host_producers(build_dir, handoff, mode, size, inline) -> None:
    iters, warmup = 20, 5

    def run(sub, w):
        lanes = w.lanes(2)  # the selected lane is 0; lane 1 is configured, not written
        work = LatencyWork(lanes, 0, mode, size, inline, False, iters, warmup, None)
        return sub.latency(work)

    out = landing_of(run, build_dir, handoff=handoff)
    (h_land, h_src, h_ns, _), (g_land, g_src, g_ns, _) = out["host"], out["gpu"]
    assert h_ns.size == g_ns.size == iters
    # single-op's expected_landing: the source's pattern, the final sequence in the last word
    src = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8)
    seq = np.frombuffer(np.uint64(iters + warmup).tobytes(), np.uint8)
    want = np.concatenate([src[: size - 8], seq])
    assert np.array_equal(h_land[:size], want)
    assert np.array_equal(g_land[:size], want), "GPU producers: not single-op's model"
    assert np.array_equal(g_land, h_land) and np.array_equal(g_src, h_src)


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_single_op_scope_all_lands_as_host_producers(build_dir, handoff) -> None:
    """--scope all (completion-scope's quiet): a ring per configured QP, the operations on the
    selected one, every other ring's counter read; GPU producers were refused it."""
    size, iters, warmup = 64, 20, 5

    def run(sub, w):
        work = LatencyWork(w.lanes(3), 0, "put_completion", size, True, True, iters, warmup, None)
        return sub.latency(work), list(sub.gpu.fn["px_latency"].launches) if sub.gpu else []

    out = landing_of(run, build_dir, handoff=handoff)
    (h_land, _, (h_ns, _), _), (g_land, _, (g_ns, launches), _) = out["host"], out["gpu"]
    assert h_ns.size == g_ns.size == iters
    assert np.array_equal(g_land, h_land)
    ((_grid, args),) = launches
    others, nothers = args[8], int(args[9])
    assert nothers == 2 and others.size == 2 and len(set(others.tolist())) == 2


@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
@pytest.mark.parametrize("gpu_side", [(True, True), (True, False), (False, True)])
def test_round_trip_lands_as_host_producers(build_dir, handoff, gpu_side) -> None:
    """single-op's round trip with GPU producers (px_probe without background) on either or
    both ends: each side's landing is the peer's pattern with the final sequence, as single-op's
    expected_landing says (GPU producers were refused the round trip)."""
    size, iters, warmup = 32, 20, 5
    with emu_world(nqps=2, depth=64, timeout_s=5.0) as w:
        srcs = [pattern(w, 0, 7), pattern(w, 1, 8)]
        subs = [submitter(w, r, gpu_side[r], build_dir, handoff=handoff) for r in (0, 1)]
        err: list[BaseException] = []

        def answer() -> None:
            try:
                work = RespondWork(w.lanes(1, side=1)[0], Buffer.local(w.bufs[1][1]), size, True,
                                   iters + warmup)  # fmt: skip
                subs[1].respond(work)
            except BaseException as e:
                err.append(e)

        t = threading.Thread(target=answer)
        t.start()
        work = LatencyWork(w.lanes(1), 0, "round_trip", size, True, False, iters, warmup,
                           Buffer.local(w.bufs[0][1]))  # fmt: skip
        try:
            ns = subs[0].latency(work)
        finally:
            t.join(timeout=30)
        assert not t.is_alive() and not err, err
        for s in subs:
            s.close()
        assert ns.size == iters and (ns > 0).all()
        seq = np.frombuffer(np.uint64(iters + warmup).tobytes(), np.uint8)
        for side in (0, 1):  # rank side's writes land in the other rank's landing buffer
            land = np.array(w.landing(1 - side))
            want = np.concatenate([srcs[side][: size - 8], seq])
            assert np.array_equal(land[:size], want), side
            assert not land[size:].any()
    assert PX.live_rings() == 0


@pytest.mark.parametrize(
    ("workers", "rings", "batch", "producers", "handoff"),
    [
        (1, 1, 1, 1, "tuned"),
        (2, 4, 4, 4, "tuned"),
        (2, 4, 16, 2, "tuned"),
        (2, 3, 4, 5, "baseline"),
    ],
)
def test_proxy_rate_lands_as_host_producers(build_dir, workers, rings, batch, producers, handoff):
    size, per, warm, region = 8, 40, 3, 1024  # 128 slots per lane: the landing shows the counts

    def run(sub, w):
        lanes = sliced(w.lanes(), workers, region)
        res = sub.proxy_rate(
            ProxyRateWork(lanes, workers, rings, batch, producers, size, True, per, warm, 4)
        )
        return res, list(sub.last_ring_messages)

    out = landing_of(run, build_dir, handoff=handoff, workers=workers, rings=rings)
    (h_land, _, (h_res, h_rings), _), (g_land, _, (g_res, g_rings), _) = out["host"], out["gpu"]
    assert h_rings == g_rings == ring_counts(rings, producers, per + warm)
    # timed as the host loop: the warm-up out of messages and elapsed, windows of `window`
    # descriptors per producer, the last closed by the drain (was: one sample, the whole
    # stream with its warm-up and the launch, recorded as a window_ns sample)
    assert h_res.messages == g_res.messages == per * producers
    assert g_res.windows_ns.size == h_res.windows_ns.size == producers * (per // 4)
    assert (g_res.windows_ns > 0).all() and g_res.elapsed_ns > 0
    assert g_res.windows_ns.max() <= g_res.elapsed_ns
    # proxy-rate's expected_landing: lane l's slots up to its busiest ring's count
    src = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8)
    counts = ring_counts(rings, producers, per + warm)
    for lane in range(workers):
        n = max(c for r, c in enumerate(counts) if r % workers == lane)
        lo, hi = lane * region, lane * region + min(region // size, n) * size
        assert np.array_equal(g_land[lo:hi], src[lo:hi]), f"lane {lane}"
        assert not g_land[hi : (lane + 1) * region].any(), f"lane {lane}: written past its count"
    assert np.array_equal(g_land, h_land)


@pytest.mark.parametrize(
    ("lanes", "threads", "workers", "rings", "producers", "handoff", "size"),
    [
        (2, 1, 2, 2, 0, "tuned", 8),
        (4, 2, 2, 4, 0, "tuned", 8),
        (3, 1, 1, 4, 3, "baseline", 8),
        (2, 1, 2, 2, 5, "baseline", 8),  # more producers than rings: shared rings
        (2, 2, 2, 2, 0, "tuned", 256),  # payload-like: 4 slots a lane, written round and round
    ],
)
def test_msg_rate_lands_as_host_producers(
    build_dir, lanes, threads, workers, rings, producers, handoff, size
) -> None:
    per, warm, region = 60, 5, 1024
    knobs = {"workers": workers, "rings": rings, "producers": producers, "handoff": handoff}

    def run(sub, w):
        work = RateWork(sliced(w.lanes(), lanes, region), threads, 1, size, False, per, warm, 3)
        return sub.rate(work)

    out = landing_of(run, build_dir, **knobs)
    h_land, g_land = out["host"][0], out["gpu"][0]
    # msg-rate/payload's expected_landing through ProxySubmitter.rate_lane_messages
    src = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8)
    counts = lane_counts(ProxyParams(**knobs), lanes, threads, per + warm)
    assert counts == out["gpu"][3].rate_lane_messages(lanes, threads, 1, per + warm)
    for lane in range(lanes):
        lo = lane * region
        hi = lo + min(region // size, counts[lane]) * size
        assert np.array_equal(g_land[lo:hi], src[lo:hi]), f"lane {lane}"
        assert not g_land[hi : lo + region].any(), f"lane {lane}: written past its count"
    assert np.array_equal(g_land, h_land)


@pytest.mark.parametrize(
    ("units", "workers", "w", "visits", "handoff"),
    [(1, 1, 1, 9, "tuned"), (2, 2, 3, 7, "tuned"), (3, 2, 2, 10, "baseline"),
     (4, 1, 5, 6, "baseline")],
)  # fmt: skip
def test_cycle_lands_as_host_producers(build_dir, units, workers, w, visits, handoff) -> None:
    """px_cycle (block u on ring u, W writes a visit on its lanes in turn) lands what the host
    producers' cycle lands, and what the experiment validates against (cycle_lane_writes)."""
    size, warm, region, nlanes = 8, 2, 128, 4  # 16 slots a lane: laps wrap over them

    def run(sub, world):
        lanes = sliced(world.lanes(), nlanes, region)
        res = sub.cycle(CycleWork(lanes, units, w, 2, size, True, visits, warm, 4))
        return res, list(sub.last_ring_messages)

    out = landing_of(run, build_dir, handoff=handoff, workers=workers)
    (h_land, _, (h_res, h_rings), _), (g_land, _, (g_res, g_rings), _) = out["host"], out["gpu"]
    assert h_rings == g_rings == [(visits + warm) * w] * units
    assert h_res.messages == g_res.messages == visits * w * units
    assert g_res.windows_ns.size == h_res.windows_ns.size
    assert (g_res.windows_ns > 0).all() and g_res.windows_ns.max() <= g_res.elapsed_ns
    src = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8)
    counts = cycle_lane_writes(list(range(nlanes)), units, w, visits + warm)
    for lane, n in enumerate(counts):
        lo = lane * region
        hi = lo + min(region // size, n) * size
        assert np.array_equal(g_land[lo:hi], src[lo:hi]), f"lane {lane}"
        assert not g_land[hi : lo + region].any(), f"lane {lane}: written past its count"
    assert np.array_equal(g_land, h_land)


@pytest.mark.parametrize(("reserved", "handoff"), [(True, "tuned"), (False, "baseline")])
def test_loaded_probe_and_background_land_as_host_producers(build_dir, reserved, handoff):
    """Both endpoints GPU (CPU-built kernels): slot 0 of lane 0 carries the last probe (the
    pattern, the final sequence in the last word) each way; background slots hold the source
    bytes of the same offset, never slot 0."""
    size, iters, warmup, region = 16, 30, 3, 512
    with emu_world(nqps=4, depth=64, timeout_s=5.0) as w:
        srcs = [pattern(w, 0, 7), pattern(w, 1, 8)]
        kw = {"handoff": handoff, "workers": 2, "rings": 4}
        subs = [submitter(w, r, True, build_dir, **kw) for r in (0, 1)]
        out: dict[int, object] = {}

        def run(side: int) -> None:
            reply = Buffer.local(w.bufs[side][1], 0, region)
            lanes = sliced(w.lanes(side=side), 2, region)
            work = LoadedWork(lanes, side == 0, not reserved, 3 if reserved else 2, 4, 0.0, size,
                              reply, iters, warmup)  # fmt: skip
            try:
                out[side] = subs[side].loaded(work)
            except BaseException as e:
                out[side] = e

        t = threading.Thread(target=run, args=(1,))
        t.start()
        run(0)
        t.join(timeout=60)
        assert not t.is_alive()
        for s in subs:
            s.close()
        for side in (0, 1):
            assert not isinstance(out[side], BaseException), out[side]
        seq = np.frombuffer(np.uint64(iters + warmup).tobytes(), np.uint8)
        for side in (0, 1):
            land, src = np.array(w.landing(1 - side)), srcs[side]
            assert np.array_equal(land[:size], np.concatenate([src[: size - 8], seq])), side
            for lane in range(2):  # background: slots 1.. hold the source's same bytes
                for k in range(1, region // size):
                    lo = lane * region + k * size
                    got = land[lo : lo + size]
                    assert not got.any() or np.array_equal(got, src[lo : lo + size]), (side, lo)
            assert land[2 * region :].sum() == 0
    assert PX.live_rings() == 0
