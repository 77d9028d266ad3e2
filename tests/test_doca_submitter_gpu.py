"""--submitter doca on a GPU (marked gpu; skipped without one): two emulated NICs in one process
(engine threads), rank 0's queues created as DOCA needs them (the submitter's queue options),
DOCA's device verbs posting through the submitter's loops for every NIC handler; payloads land
where the experiments' validation looks, the engine's stale/lag/bad-doorbell counters stay zero;
and, end to end, `mpiexec -n 2 gicbench run ... --submitter doca` for every handler."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from doca_helpers import DocaQueues
from gpu_helpers import (
    CUDA_RANKS,
    GPU_LANES,
    SLICE,
    cupy_or_skip,
    doca_or_skip,
    ranks_share_gpus_or_skip,
)
from resources import factory

from gicbench.fabric.base import host_view
from gicbench.submit.base import Buffer, LatencyWork, RateWork
from gicbench.submit.doca.params import EARLY_RING_HANDLERS, HANDLERS, DocaParams

pytestmark = pytest.mark.gpu
DEPTH = 256


def _gpu() -> Any:
    cp = cupy_or_skip()
    doca_or_skip()
    return cp


class DocaLanes(DocaQueues):
    """The DOCA submitter's world: rank 0's queues made with its queue options (with
    `both_ways`, rank 1's too: the responder's), and submitter() for a rank."""

    def __init__(self, params: DocaParams, qps: int, **kw) -> None:
        from gicbench.submit.doca.submitter import DocaSubmitter

        ranks = (0, 1) if kw.get("both_ways") else (0,)
        options = DocaSubmitter.queue_options(params, DEPTH)
        super().__init__(options, qps, option_ranks=ranks, **kw)
        self.params = params

    def submitter(self, rank: int = 0):
        """A DocaSubmitter on `rank`'s fabric driving its RC QPs. Every rank's takes GPU 0:
        the in-process engines keep their queues there."""
        from gicbench.submit.doca.submitter import DocaSubmitter

        f = self.fabrics[rank]
        sub = DocaSubmitter(rank=0, fabric=f, progress=f.progress_policy(), timeout_s=5.0,
                            params=self.params)  # fmt: skip
        sub.attach_queues([pair[rank] for pair in self.rc])
        return sub


# Rank 0 sends to rank 1 over `n` RC lanes; the source filled from seed 3.
SETUP = {**GPU_LANES, "depth": DEPTH, "seed": 3, "prefix": "d"}
# A QP each way (rank 0 -> 1 requests, 1 -> 0 replies), one slice each, sources and landing
# buffers in host-mapped memory (the kernels poll the landing buffers' sequence words), each
# rank's source from its own seed.
PAIR = {"both_ways": True, "landing_domain": "host-mapped", "seed": (0, 1)}


@pytest.fixture
def world():
    """`world(params, n, **kw)`: a DocaLanes pair with `n` RC lanes."""
    _gpu()
    with factory(DocaLanes, **SETUP) as make:
        yield make


def _setup(world, params: DocaParams, n: int):
    w = world(params, n)
    return (w.fabrics, w.submitter(), *w.one_way())


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("sharing", ["exclusive", "gpu"])
def test_latency_lands_the_sequence_word(world, handler: str, sharing: str) -> None:
    params = DocaParams(doca_handler=handler, doca_sharing=sharing)
    fs, sub, lanes, src, dst = _setup(world, params, 4)
    try:
        for mode in ("issue", "put_completion"):
            for size, inline in ((8, True), (64, False)):
                for scope_all in (False, True):
                    w = LatencyWork(lanes, 0, mode, size, inline, scope_all, 40, 5)
                    ns = sub.latency(w)
                    assert ns.shape == (40,) and (ns > 0).all()
                    fs[1].quiesce()
                    got = bytes(host_view(dst.addr, size))
                    want = bytes(host_view(src.addr, size))[: size - 8] + (45).to_bytes(8, "little")
                    assert got == want, (mode, size, inline, scope_all)
                    d = sub.point_details()
                    assert d["emu_stale_wqes"] == d["emu_bad_doorbells"] == 0
                    if handler not in EARLY_RING_HANDLERS:
                        assert d["emu_dbrec_lag"] == 0
                    assert d["doca_handler"] == handler and d["doca_version"].startswith("4.")
    finally:
        sub.close()


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize(
    ("sharing", "scope", "threads", "nlanes", "inline"),
    [("exclusive", "thread", 2, 2, True), ("gpu", "thread", 64, 2, True),
     ("cta", "thread", 64, 2, False), ("exclusive", "warp", 64, 2, False),
     ("gpu", "warp", 128, 2, False)],
)  # fmt: skip
def test_rate_lands_every_slot(world, handler, sharing, scope, threads, nlanes, inline) -> None:
    params = DocaParams(doca_handler=handler, doca_sharing=sharing, doca_scope=scope)
    fs, sub, lanes, src, dst = _setup(world, params, nlanes)
    try:
        size, per_thread, warm = 8, 200, 10
        res = sub.rate(RateWork(lanes, threads, 1, size, inline, per_thread, warm, 20))
        assert res.messages == per_thread * threads and res.elapsed_ns > 0
        assert res.windows_ns.size >= threads // (32 if scope == "warp" else 1)
        fs[1].quiesce()
        counts = sub.rate_lane_messages(nlanes, threads, 1, per_thread + warm)
        for i, n in enumerate(counts):
            k = min(n, SLICE // size) * size
            assert bytes(host_view(dst.addr + i * SLICE, k)) == bytes(
                host_view(src.addr + i * SLICE, k)
            ), f"lane {i}"
        c = fs[0].counters()
        assert c["stale_wqes"] == c["bad_doorbells"] == 0
        if handler not in EARLY_RING_HANDLERS:
            assert c["dbrec_lag"] == 0
        res = sub.rate(RateWork(lanes, threads, 1, size, inline, 50, 0, 10))  # state carries over
        assert res.messages == 50 * threads
    finally:
        sub.close()


def _mpiexec() -> list[str]:
    exe = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if exe is None:
        pytest.skip("mpiexec not found")
    return [exe, "--bind-to", "none", "-n", "2", sys.executable, "-m", "gicbench", "run"]


@pytest.mark.parametrize("handler", HANDLERS)
def test_gicbench_run_every_handler_end_to_end(tmp_path: Path, handler: str) -> None:
    ranks_share_gpus_or_skip(_gpu(), 2)
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}  # fmt: skip
    common = ["--submitter", "doca", "--doca-handler", handler, "--progress", "thread",
              "--timeout", "5", "--json"]  # fmt: skip
    for name, extra in (
        ("single-op", ["--modes", "issue,put_completion", "-n", "200", "-w", "20"]),
        ("msg-rate", ["-t", "1", "-q", "1", "--messages", "5000"]),
        ("completion-scope", ["-q", "4", "-n", "100", "-w", "10", "--pattern", "fan-out"]),
    ):
        out = tmp_path / f"{name}-{handler}"
        r = subprocess.run([*_mpiexec(), name, *common, *extra, "-o", str(out)],
                           capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "incomplete" not in r.stdout and '"validated": true' in r.stdout, r.stdout[-2000:]


# ---- the CUDA engine (queues in GPU memory or the segment) and round trips --------------------
# SETUP on emu's CUDA engine; `queues` per test.
CUDA_SETUP = {**SETUP, **CUDA_RANKS, "prefix": "dc"}


@pytest.fixture(params=["device", "host"])
def cuda_world(request):
    """The same pair on emu's CUDA engine: --queues device (rings, records, doorbells and CQs in
    GPU memory) or --queues host (the segment, mapped). Both engines stop before either fabric
    closes (one process, two ranks)."""
    _gpu()
    from gicbench.submit.doca.submitter import DocaSubmitter

    # Every kernel loaded before the engines start (lazy loading under a running engine kernel
    # may wait for a context synchronisation that never comes), as the harness does.
    DocaSubmitter.preload(DocaParams(), 0)
    with factory(DocaLanes, **CUDA_SETUP, queues=request.param) as make:
        yield make


def _clean(fab, handler: str) -> None:
    fab.quiesce()  # the CUDA engine adds its warps' counts at quiesce
    c = fab.counters()
    assert c["stale_wqes"] == c["bad_doorbells"] == 0, c
    if handler not in EARLY_RING_HANDLERS:
        assert c["dbrec_lag"] == 0, c


@pytest.mark.parametrize("handler", HANDLERS)
def test_doca_cuda_engine_every_handler_lands(cuda_world, handler: str) -> None:
    """DOCA's structures filled from the CUDA engine's objects (GPU-memory CQs initialised on
    the GPU, never a device-wide synchronise while the engine kernel runs): latency and a
    32-thread shared-QP rate land every payload; the host-thread handlers need host-visible
    records and doorbells and are refused with GPU-resident queues."""
    from gicbench.errors import UnsupportedError

    params = DocaParams(doca_handler=handler, doca_sharing="gpu")
    w = cuda_world(params, 2)
    fs = w.fabrics
    device = fs[0].queues == "device"
    if device and params.nic_handler.host_thread:
        with pytest.raises(UnsupportedError, match="a CPU store cannot reach it"):
            w.submitter()
        return
    sub, (lanes, src, dst) = w.submitter(), w.one_way()
    try:
        assert sub.qps is not None
        for mode in ("issue", "put_completion"):
            for size, inline in ((8, True), (64, False)):
                ns = sub.latency(LatencyWork(lanes, 0, mode, size, inline, True, 30, 5))
                assert ns.shape == (30,) and (ns > 0).all()
                fs[1].quiesce()
                got = bytes(host_view(dst.addr, size))
                want = bytes(host_view(src.addr, size))[: size - 8] + (35).to_bytes(8, "little")
                assert got == want, (mode, size)
        res = sub.rate(RateWork(lanes, 64, 1, 8, True, 100, 10, 20))
        assert res.messages == 6400
        fs[1].quiesce()
        for i, n in enumerate(sub.rate_lane_messages(2, 64, 1, 110)):
            k = min(n, SLICE // 8) * 8
            assert bytes(host_view(dst.addr + i * SLICE, k)) == bytes(
                host_view(src.addr + i * SLICE, k)
            ), f"lane {i}"
        _clean(fs[0], handler)
        assert sub.point_details()["emu_stale_wqes"] == 0
    finally:
        sub.close()


def _pair(world, params: DocaParams):
    """A QP each way (PAIR), a submitter per rank: (fabrics, submitters, lanes, sources,
    landings), each list indexed by rank."""
    w = world(params, 1, **PAIR)
    lanes = [w.lanes(side=r)[0] for r in range(2)]
    src, land = [w.src_mr(r) for r in range(2)], [w.landing_mr(r) for r in range(2)]
    return w.fabrics, [w.submitter(r) for r in range(2)], lanes, src, land


def _round_trips(world, handler: str) -> None:
    import threading

    from gicbench.submit.base import RespondWork

    params = DocaParams(doca_handler=handler)
    fs, (req, resp), lanes, src, land = _pair(world, params)
    try:
        for size, inline in ((8, True), (64, False)):
            total = 40 + 5
            err: list[BaseException] = []

            def answer(size=size, inline=inline, total=total, err=err) -> None:
                try:
                    resp.respond(RespondWork(lanes[1], Buffer.local(land[1], 0, SLICE), size,
                                             inline, total))  # fmt: skip
                except BaseException as e:  # reported by the main thread
                    err.append(e)

            t = threading.Thread(target=answer)
            t.start()
            try:
                ns = req.latency(LatencyWork((lanes[0],), 0, "round_trip", size, inline, False, 40,
                                             5, reply=Buffer.local(land[0], 0, SLICE)))  # fmt: skip
            finally:
                t.join(30)
            assert not t.is_alive() and not err, err
            assert ns.shape == (40,) and (ns > 0).all()
            for f in fs:
                f.quiesce()
            seq = total.to_bytes(8, "little")
            for r in range(2):  # the request landed at rank 1, the reply at rank 0
                got = bytes(host_view(land[1 - r].addr, size))
                assert got == bytes(host_view(src[r].addr, size))[: size - 8] + seq, (r, size)
        for f in fs:
            _clean(f, handler)
    finally:
        for s in (req, resp):
            s.close()


@pytest.mark.parametrize("handler", HANDLERS)
def test_round_trip_with_a_doca_responder(world, handler: str) -> None:
    _round_trips(world, handler)


@pytest.mark.parametrize("handler", ["gpu-sm-db", "gpu-sm-no-dbr", "gpu-sm-bf"])
def test_doca_cuda_engine_round_trip(cuda_world, handler: str) -> None:
    _round_trips(cuda_world, handler)
