"""mini-proxy's GPU producers: the kernels compile (nvcc, where the toolkit is, no GPU needed),
and on a GPU both handoffs enqueue, complete and load rings (marked gpu: skipped without one)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from host_world import emu_world, proxy

from gicbench import _native
from gicbench.submit.base import Buffer, CycleWork, LatencyWork, ProxyRateWork
from gicbench.submit.proxy.gpu_kernels import options, source


def test_kernels_compile_for_hopper(tmp_path: Path) -> None:
    nvcc = shutil.which("nvcc") or (
        "/usr/local/bin/nvcc" if Path("/usr/local/bin/nvcc").exists() else None
    )
    if nvcc is None:
        pytest.skip("no nvcc")
    cu = tmp_path / "px.cu"
    cu.write_text(source())
    flags = [*options(_native.proxy), "-arch=sm_90", "-cubin"]
    r = subprocess.run(
        [nvcc, *flags, str(cu), "-o", str(tmp_path / "px.cubin")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr


def _gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU and CuPy")
@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_gpu_producers_enqueue_and_load(handoff) -> None:

    with emu_world(nqps=2, depth=64) as w:
        f = w.fabrics[0]
        sub = proxy(w, 0, 5.0, producer="gpu", handoff=handoff, rings=2)
        try:
            for mode in ("issue", "put_completion"):
                ns = sub.latency(
                    LatencyWork(
                        w.lanes(1), 0, mode, 8, True, False, 50, 5, Buffer.local(w.bufs[0][1])
                    )
                )
                assert ns.size == 50 and (ns > 0).all()
            before = f.counters()["wqes"]
            r = sub.proxy_rate(ProxyRateWork(w.lanes(2), 2, 2, 4, 2, 8, True, 500, 0, 50))
            assert f.counters()["wqes"] - before == 1000 and r.messages == 1000
        finally:
            sub.close()
        assert _native.proxy.live_rings() == 0
        assert np.asarray(w.landing(1)).size


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU and CuPy")
@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_gpu_producers_cycle_connections(handoff) -> None:
    """px_cycle on the GPU: 2 blocks (units) cycling 4 QPs, 3 writes a visit, every write
    executed and the counts per ring the cycle's."""
    with emu_world(nqps=4, depth=64) as w:
        f = w.fabrics[0]
        sub = proxy(w, 0, 5.0, producer="gpu", handoff=handoff, workers=2)
        try:
            before = f.counters()["wqes"]
            r = sub.cycle(CycleWork(w.lanes(4), 2, 3, 2, 8, True, 40, 4, 10))
            assert f.counters()["wqes"] - before == 2 * 44 * 3 and r.messages == 2 * 40 * 3
            assert sub.last_ring_messages == [44 * 3, 44 * 3]
            assert r.windows_ns.size == 2 * 12 and (r.windows_ns > 0).all()
        finally:
            sub.close()
        assert _native.proxy.live_rings() == 0


class _Event:
    """A stand-in CUDA event over the control word: done once the kernel would have seen the
    bit it obeys (`obeys`: STOP, ABORT, or 0 for never)."""

    def __init__(self, ctl: np.ndarray, obeys: int) -> None:
        self.ctl, self.obeys = ctl, obeys

    def record(self, stream) -> None:
        pass

    @property
    def done(self) -> bool:
        return bool(self.obeys and int(self.ctl[0]) & self.obeys)

    def synchronize(self) -> None:
        assert self.done, "a wait that cannot end"


def _producers(ctl: np.ndarray, obeys: int):
    from types import SimpleNamespace

    from gicbench.submit.proxy import gpu

    p = object.__new__(gpu.GpuProducers)
    p.cp = SimpleNamespace(cuda=SimpleNamespace(Event=lambda: _Event(ctl, obeys)))
    p.consts = _native.proxy
    p.host = SimpleNamespace(interrupted=lambda: False)
    eng = SimpleNamespace(
        sub=SimpleNamespace(rank=1, timeout_ns=50_000_000),
        native=SimpleNamespace(rings=lambda: 0, failed=lambda: False),
    )
    return p, eng


def test_background_stop_is_bounded(monkeypatch) -> None:
    """The loaded loop used to wait for the background kernel with an unbounded
    stream.synchronize() after setting the stop bit: blocks that never obeyed it kept the host
    waiting forever. Now: stop, wait up to the timeout, then abort and name it."""
    from gicbench.errors import CompletionTimeout
    from gicbench.submit.proxy.gpu import ABORT, STOP

    ctl = np.zeros(1, dtype=np.uint64)
    p, eng = _producers(ctl, STOP)
    p._stop_background(eng, None, ctl)  # obeys the stop bit: returns
    assert int(ctl[0]) == STOP
    ctl[0] = 0
    p, eng = _producers(ctl, ABORT)  # ignores stop: aborted at the deadline, and named
    with pytest.raises(CompletionTimeout, match="background producers did not stop"):
        p._stop_background(eng, None, ctl)
    assert int(ctl[0]) == STOP | ABORT
    # a signal (or a failed engine) aborts at once, without waiting out the timeout
    ctl[0] = 0
    p, eng = _producers(ctl, ABORT)
    p.host.interrupted = lambda: True
    eng.sub.timeout_ns = 60_000_000_000
    monkeypatch.setattr(time, "sleep", lambda s: pytest.fail("waited after a signal"))
    with pytest.raises(CompletionTimeout):
        p._stop_background(eng, None, ctl)
    assert int(ctl[0]) == STOP | ABORT


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu(), reason="needs an NVIDIA GPU and CuPy")
@pytest.mark.parametrize("handoff", ["baseline", "tuned"])
def test_gpu_loaded_reserved_two_ranks(handoff) -> None:
    """bench/proxy_gpu.py's tuned reserved loaded run that did not finish (two in-process ranks,
    a GPU background CTA on each non-probe ring, the probe's round trip on ring 0), small: it
    ends, the probe's answers carry its sequence numbers, nothing is left mapped."""
    import threading
    import traceback

    from gicbench.submit.base import LoadedWork

    with emu_world(nqps=4, depth=64, timeout_s=5.0) as w:
        kw = {"producer": "gpu", "handoff": handoff, "workers": 2, "rings": 4}
        subs = [proxy(w, rank, 5.0, **kw) for rank in (0, 1)]
        out: dict = {}

        def run(side: int) -> None:
            reply = Buffer.local(w.bufs[side][1])
            work = LoadedWork(w.lanes(2, side=side), side == 0, False, 3, 16, 0.0, 8, reply,
                              100, 10)  # fmt: skip
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
        for side in (0, 1):  # which side failed, and where
            err = out[side]
            assert not isinstance(err, BaseException), f"side {side}: " + "".join(
                traceback.format_exception(err)
            )
        assert out[0].rtt_ns.size == 100 and (out[0].rtt_ns > 0).all()
        assert subs[0].last_ring_messages[0] == 0 and out[0].background > 0
        assert w.landing(0)[0:8].view(np.uint64)[0] == 110  # the last answer's sequence
        assert w.landing(1)[0:8].view(np.uint64)[0] == 110
    assert _native.proxy.live_rings() == 0


def test_gpu_loaded_refuses_before_launch_what_px_background_cannot_do() -> None:
    """px_background writes slot (1 + index mod (slots - 1)): one slot per lane divided by zero
    on the GPU; two tuned CTAs on one ring published the same indices. Both are refused before
    anything is mapped or launched (the host loop refuses them the same way)."""
    from types import SimpleNamespace

    from gicbench.errors import ConfigError
    from gicbench.submit.base import Lane, LoadedWork

    p, eng = _producers(np.zeros(1, dtype=np.uint64), 0)
    eng.native = SimpleNamespace(rings=lambda: 2, ring_lane=lambda r: 0)
    p._ring_range = lambda e: range(2)

    def work(region: int, background: int) -> LoadedWork:
        lane = Lane(None, 1, Buffer(0x1000, 1, region), Buffer(0x2000, 2, region))  # type: ignore[arg-type]
        return LoadedWork((lane,), True, False, background, 16, 0.0, 8, Buffer(0x3000, 3, 8),
                          10, 1)  # fmt: skip

    with pytest.raises(ConfigError) as e:
        p.loaded(eng, work(8, 1), 1)
    assert e.value.field == "size"
    with pytest.raises(ConfigError) as e:
        p.loaded(eng, work(4096, 2), 1)  # tuned: 2 CTAs for the one non-probe ring
    assert e.value.field == "background (--background)"


def test_every_producer_kernel_is_loaded_once_before_any_launch(monkeypatch) -> None:
    """Under lazy module loading px_probe, first loaded at its launch while px_background runs,
    could wait for a context synchronisation px_background never allows (it stops after the
    probe): every kernel is loaded when the module is, once per process and device, and
    ProxySubmitter.preload does it before the NIC opens."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from gicbench.submit.proxy import gpu
    from gicbench.submit.proxy.submitter import ProxySubmitter

    loaded: list[str] = []
    launched: list[str] = []

    class Fn:
        def __init__(self, name: str) -> None:
            self.name = name

        @property
        def num_regs(self) -> int:
            loaded.append(self.name)
            return 32

        def __call__(self, grid, block, args) -> None:
            assert self.name in loaded, f"{self.name} launched before it was loaded"
            launched.append(self.name)
            args[1][:] = [2_000_000, 1_000_000]  # px_clock: cycles, ns

    class Module:
        def __init__(self, code: str, options: tuple) -> None:
            assert "px_background" in code

        def get_function(self, name: str) -> Fn:
            return Fn(name)

    device = {"id": 0}
    monkeypatch.setattr(gpu, "_CU_FUNC_LOAD", False)
    monkeypatch.setattr(gpu, "_LOADED", {})
    monkeypatch.setattr(gpu, "_measure_clock", lambda cp, fn: fn((1,), (1,), (0, [0, 0])) or 1.5e9)

    class Cp:
        RawModule = Module

        class cuda:
            @staticmethod
            def Device(i=None):
                if i is not None:
                    device["id"] = i
                    return nullcontext()
                return SimpleNamespace(id=device["id"])

            runtime = SimpleNamespace(getDeviceCount=lambda: 2)

    _mod, fns, hz = gpu.load_kernels(Cp, _native.proxy)
    assert sorted(loaded) == sorted(gpu.KERNELS) and launched == ["px_clock"] and hz == 1.5e9
    assert gpu.load_kernels(Cp, _native.proxy)[1] is fns  # once per device
    assert len(loaded) == len(gpu.KERNELS)
    import sys

    monkeypatch.setitem(sys.modules, "cupy", Cp)
    ProxySubmitter.preload(SimpleNamespace(producer="gpu"), 3)  # local rank 3: GPU 1 of 2
    assert device["id"] == 1 and len(loaded) == 2 * len(gpu.KERNELS)
    ProxySubmitter.preload(SimpleNamespace(producer="host"), 0)  # nothing for host producers
    assert len(loaded) == 2 * len(gpu.KERNELS)
