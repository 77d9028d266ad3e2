"""GPI queues through EmuFabric: input refused before anything is created, the table and segment
limits, sizing, the counters and error records, and a producer that posts with credits against a
running engine thread (docs/gpi.md). The engine's semantics are the conformance cases'
(tests/conformance/conformance_gpi_cases.py)."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest
from resources import EmuRanks

from gicbench.errors import ConfigError, FabricError, UnsupportedError
from gicbench.fabric.base import host_view
from gicbench.fabric.emu import EmuFabric, segment_bytes_for
from gicbench.fabric.emu import gpi_format as gf
from gicbench.fabric.emu.gpi import GpiQueue, GpiWindow


def _job() -> str:
    return "gpi-" + uuid.uuid4().hex[:8]


@pytest.fixture
def fabric() -> EmuFabric:
    f = EmuFabric(0, 2, _job(), progress="inline", segment_bytes=4 << 20)
    yield f
    f.close()


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"depth": 6}, "depth"),
        ({"depth": 0}, "depth"),
        ({"depth": 65536}, "depth"),
        ({"depth": True}, "depth"),
        ({"depth": 8, "ncounters": 0}, "ncounters"),
        ({"depth": 8, "ncounters": 1 << 17}, "ncounters"),
        ({"depth": 8, "nwindows": 257}, "nwindows"),
        ({"depth": 8, "pd": -1}, "pd"),
        ({"depth": 8, "domain": "gpu"}, "domain"),
    ],
)
def test_create_refuses_bad_input_before_creating_anything(fabric, kw, field) -> None:
    used = fabric._nic.used
    with pytest.raises(ConfigError, match=field):
        fabric.create_gpi(**kw)
    assert fabric._nic.used == used
    assert fabric.create_gpi(8).num & 0xFFFF == 1  # nothing took the first slot


def test_device_domain_and_the_cuda_engine_are_refused(fabric) -> None:
    with pytest.raises(UnsupportedError, match="CUDA engine"):
        fabric.create_gpi(8, domain="device")
    fabric._cuda = object()  # as if the CUDA engine ran this rank: it serves no GPI queue
    try:
        with pytest.raises(UnsupportedError, match="does not serve GPI queues"):
            fabric.create_gpi(8)
    finally:
        fabric._cuda = None


def test_window_refusals_name_the_field(fabric) -> None:
    q = fabric.create_gpi(4, nwindows=2)
    mr = fabric.register(4096)
    w = GpiWindow.of(mr)
    for args, field in (((2, 0, w), "handle"), ((0, 2, w), "rank"), ((0, 0, (1, 2, 3)), "window")):
        with pytest.raises(ConfigError, match=field):
            fabric.set_gpi_window(q, *args)
    with pytest.raises(ConfigError, match="gpi"):
        fabric.set_gpi_window(GpiQueue(q.num + 1, 4, 1, 1, 1, 1, 0), 0, 0, w)
    with pytest.raises(ConfigError, match="offset"):
        GpiWindow.of(mr, 4097)
    with pytest.raises(ConfigError, match="length"):
        GpiWindow.of(mr, 4000, 97)
    assert GpiWindow.of(mr, 96, 4000) == GpiWindow(mr.addr + 96, 4000, mr.rkey)


def test_table_full(fabric) -> None:
    for _ in range(15):
        fabric.create_gpi(1)
    with pytest.raises(FabricError, match="GPI table full"):
        fabric.create_gpi(1)


@pytest.mark.parametrize("gpis", [((8, 2, 3),), ((1, 1, 1), (32768, 65536, 256), (64, 4, 2))])
def test_sizing_is_exact(gpis) -> None:
    need = segment_bytes_for(1, 1, 0, 16, 16, [4096], gpis=gpis, world=4)
    for size, fits in ((need, True), (need - 4096, False)):
        f = EmuFabric(0, 4, _job(), progress="inline", segment_bytes=size, max_qps=1, max_cqs=1,
                      max_dcts=0, max_mrs=1)  # fmt: skip
        try:
            f.register(4096)
            f.create_qp(f.create_cq(16), 16)
            if fits:
                for g in gpis:
                    f.create_gpi(g[0], ncounters=g[1], nwindows=g[2])
            else:
                with pytest.raises(FabricError, match="GPI queue needs"):
                    for g in gpis:
                        f.create_gpi(g[0], ncounters=g[1], nwindows=g[2])
        finally:
            f.close()
    with pytest.raises(ConfigError, match="gpis"):
        segment_bytes_for(1, 1, 0, 16, 16, [1], gpis=[(8, 1)])
    with pytest.raises(ConfigError, match="depth"):
        segment_bytes_for(1, 1, 0, 16, 16, [1], gpis=[(6, 1, 1)])


def test_counters_and_error_records() -> None:
    with EmuRanks(2, progress="inline") as w:
        f0, f1 = w.fabrics
        assert {k for k in f0.counters() if k.startswith("gpi_")} == {
            "gpi_descriptors", "gpi_writes", "gpi_signals", "gpi_bytes", "gpi_torn_waits",
            "gpi_errors",
        }  # fmt: skip
        src, dst = f0.register(4096), f1.register(4096)
        q = f0.create_gpi(4, nwindows=2)
        f0.set_gpi_window(q, 0, 0, GpiWindow.of(src))
        f0.set_gpi_window(q, 1, 1, GpiWindow.of(dst))
        ring = f0.gpi_ring(q)
        ring.post(0, gf.write(counter=0, size=8, dst_rank=1, src=(0, 0), dst=(1, 4095)))
        f0.quiesce()
        recs = f0.errors()
        assert [(r.kind, r.qpn, r.expected, r.found, r.cqn) for r in recs] == [
            ("gpi_error", q.num, 0x13, 0, 0)
        ]
        assert "GPI queue" in str(recs[0]) and "syndrome 0x13" in str(recs[0])
        ring.post(1, gf.nop(counter=0))
        f0.quiesce()
        st = f0.gpi_status(q)
        assert (st["ci"], st["errors"], st["counters"]) == (2, 1, [(1, True)])
        ring.post(2, gf.write(counter=0, size=8, dst_rank=1, src=(0, 0), dst=(1, 4095)))
        f0.quiesce()
        with pytest.raises(FabricError, match="GPI descriptor 2 failed"):
            f0.check()


def test_producer_with_credits_against_the_engine_thread() -> None:
    """A CPU producer reserves indices on pi, waits for credits on ci and writes; the engine
    thread consumes meanwhile: every token lands and every signal counts, over many laps."""
    n, depth = 600, 8
    with EmuRanks(2, progress="thread") as w:
        f0, f1 = w.fabrics
        src, dst, sig = f0.register(8 * n), f1.register(8 * n), f1.register(64)
        f0.view(src, np.uint64)[:] = np.arange(n, dtype=np.uint64) * 3 + 1
        q = f0.create_gpi(depth, nwindows=3)
        for h, (rank, mr) in enumerate(((0, src), (1, dst), (1, sig))):
            f0.set_gpi_window(q, h, rank, GpiWindow.of(mr))
        ring = f0.gpi_ring(q)
        pi, ci = host_view(q.pi, 8, np.uint64), host_view(q.ci, 8, np.uint64)
        errors: list[BaseException] = []

        def produce() -> None:
            try:
                for _ in range(n):
                    i = int(pi[0])
                    pi[0] = i + 1  # the only producer: a plain store is its fetch-add
                    deadline = time.monotonic() + 30
                    while i - int(ci[0]) >= depth:  # no credit: the slot is not consumed yet
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"no credit for descriptor {i}: ci={int(ci[0])}")
                        time.sleep(0)
                    d = gf.write(counter=0, size=8, dst_rank=1, src=(0, 8 * i), dst=(1, 8 * i),
                                 signal=(2, 0, 1))  # fmt: skip
                    ring.post(i, d)
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        t = threading.Thread(target=produce)
        t.start()
        t.join(60)
        assert not t.is_alive() and not errors, errors or "the producer did not finish in 60 s"
        deadline = time.monotonic() + 30
        while int(ci[0]) < n:
            assert time.monotonic() < deadline, f"engine consumed {int(ci[0])} of {n}"
            time.sleep(0.001)
        assert (f1.view(dst, np.uint64) == np.arange(n, dtype=np.uint64) * 3 + 1).all()
        assert int(f1.view(sig, np.uint64)[0]) == n
        st = f0.gpi_status(q)
        assert (st["ci"], st["errors"], st["counters"]) == (n, 0, [(n, False)])
        c = f0.counters()
        assert (c["gpi_descriptors"], c["gpi_writes"], c["gpi_signals"]) == (n, n, n)
        f0.check()
