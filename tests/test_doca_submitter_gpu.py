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
import uuid
from pathlib import Path

import numpy as np
import pytest
from gpu_helpers import cupy_or_skip, two_fabrics

from gicbench.fabric.base import Access, host_view
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.base import Buffer, Lane, LatencyWork, RateWork
from gicbench.submit.doca.params import EARLY_RING_HANDLERS, HANDLERS, DocaParams

pytestmark = pytest.mark.gpu
SLICE = 4096
DEPTH = 256


def _gpu() -> None:
    cupy_or_skip()
    from gicbench.submit.doca.headers import find, unavailable_reason

    if find() is None:
        pytest.skip(unavailable_reason())


@pytest.fixture
def world():
    _gpu()
    with two_fabrics("d") as fs:
        yield fs


def _setup(fs, params: DocaParams, n: int):
    from gicbench.submit.doca.submitter import DocaSubmitter

    qo = DocaSubmitter.queue_options(params, DEPTH)
    qps = []
    for _ in range(n):
        a = fs[0].create_qp(fs[0].create_cq(DEPTH, **qo.cq), DEPTH, **qo.qp)
        b = fs[1].create_qp(fs[1].create_cq(DEPTH), DEPTH)
        fs[0].connect(a, fs[1].endpoint(b))
        fs[1].connect(b, fs[0].endpoint(a))
        qps.append(a)
    src = fs[0].register(SLICE * n, Access.LOCAL_WRITE, domain="host-mapped")
    dst = fs[1].register(SLICE * n, Access.LOCAL_WRITE | Access.REMOTE_WRITE)
    host_view(src.addr, src.length)[:] = np.random.default_rng(3).integers(
        0, 256, src.length, dtype=np.uint8
    )
    lanes = tuple(
        Lane(qp, 1, Buffer.local(src, i * SLICE, SLICE),
             Buffer(dst.addr + i * SLICE, dst.rkey, SLICE))
        for i, qp in enumerate(qps)
    )  # fmt: skip
    sub = DocaSubmitter(rank=0, fabric=fs[0], progress=fs[0].progress_policy(), timeout_s=5.0,
                        params=params)  # fmt: skip
    sub.attach_queues(qps)
    return sub, lanes, src, dst


@pytest.mark.parametrize("handler", HANDLERS)
@pytest.mark.parametrize("sharing", ["exclusive", "gpu"])
def test_latency_lands_the_sequence_word(world, handler: str, sharing: str) -> None:
    fs = world
    sub, lanes, src, dst = _setup(fs, DocaParams(doca_handler=handler, doca_sharing=sharing), 4)
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
    fs = world
    params = DocaParams(doca_handler=handler, doca_sharing=sharing, doca_scope=scope)
    sub, lanes, src, dst = _setup(fs, params, nlanes)
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
    _gpu()
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
    job = "dc-" + uuid.uuid4().hex[:8]
    fs = [
        EmuFabric(r, 2, job, progress="inline", segment_bytes=64 << 20, engine="cuda",
                  engine_ctas=2, queues=request.param)
        for r in range(2)
    ]  # fmt: skip
    infos = [f.local_info() for f in fs]
    for f in fs:
        f.add_peers(infos)
    yield fs
    for f in fs:
        f.stop_engine()
    for f in fs:
        f.close()


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

    fs = cuda_world
    device = fs[0].queues == "device"
    params = DocaParams(doca_handler=handler, doca_sharing="gpu")
    if device and params.nic_handler.host_thread:
        with pytest.raises(UnsupportedError, match="a CPU store cannot reach it"):
            _setup(fs, params, 2)
        return
    sub, lanes, src, dst = _setup(fs, params, 2)
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


def _pair(fs, params: DocaParams):
    """A QP each way (rank 0 -> 1 requests, 1 -> 0 replies), sources and landing buffers in
    host-mapped memory (the kernels poll the landing buffers' sequence words), a submitter per
    rank. Both submitters take GPU 0: the in-process engines keep their queues there."""
    from gicbench.submit.doca.submitter import DocaSubmitter

    qo = DocaSubmitter.queue_options(params, DEPTH)
    q = [f.create_qp(f.create_cq(DEPTH, **qo.cq), DEPTH, **qo.qp) for f in fs]
    fs[0].connect(q[0], fs[1].endpoint(q[1]))
    fs[1].connect(q[1], fs[0].endpoint(q[0]))
    acc = Access.LOCAL_WRITE | Access.REMOTE_WRITE
    src = [f.register(SLICE, Access.LOCAL_WRITE, domain="host-mapped") for f in fs]
    land = [f.register(SLICE, acc, domain="host-mapped") for f in fs]
    for r, s in enumerate(src):
        host_view(s.addr, SLICE)[:] = np.random.default_rng(r).integers(0, 256, SLICE, np.uint8)
    lanes = [
        Lane(q[r], 1 - r, Buffer.local(src[r], 0, SLICE),
             Buffer(land[1 - r].addr, land[1 - r].rkey, SLICE))
        for r in range(2)
    ]  # fmt: skip
    subs = []
    for r in range(2):
        s = DocaSubmitter(rank=0, fabric=fs[r], progress=fs[r].progress_policy(), timeout_s=5.0,
                          params=params)  # fmt: skip
        s.attach_queues([q[r]])
        subs.append(s)
    return subs, lanes, src, land


def _round_trips(fs, handler: str) -> None:
    import threading

    from gicbench.submit.base import RespondWork

    params = DocaParams(doca_handler=handler)
    (req, resp), lanes, src, land = _pair(fs, params)
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
