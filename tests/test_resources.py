"""The test resource classes (tests/resources.py) on the CPU: every configuration the gpu-marked
tests ask for, built here from the very dicts and classes those tests use, with what it hands
out checked (QP counts and states, CQs, MRs' sizes, keys and domains, lane slices and
addresses, DC address vectors, the pattern bytes) and the lanes carrying real writes through
the host submitter, so a mistake in a GPU test's set-up shows without a GPU. Plus the base
layer's promises: peered, sealed, closed however the test ends."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gpu_helpers import SLICE
from host_world import SIZE, emu_world
from resources import DC_KEY, EmuRanks, Traffic, factory, lane_of

from gicbench.errors import FabricError
from gicbench.fabric.base import Access, MemoryDomain, QpState, host_view
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.base import Buffer, DcAddress, LatencyWork
from gicbench.submit.host import HostSubmitter

HOST, MAPPED = MemoryDomain.HOST, MemoryDomain.HOST_MAPPED
LANDING = Access.LOCAL_WRITE | Access.REMOTE_WRITE


def closed(f: EmuFabric) -> bool:
    try:
        f.counters()
    except FabricError as e:
        assert "closed" in str(e)
        return True
    return False


def on_cpu(config: dict) -> dict:
    """A CUDA-engine configuration less its engine (the CPU engine, inline): what is left of it
    can be built here."""
    cfg = {k: v for k, v in config.items() if k not in ("engine", "engine_ctas", "queues")}
    return {**cfg, "progress": "inline"}


def pattern(seed: int, *lengths: int) -> list[np.ndarray]:
    """What a generator seeded `seed` draws for MRs of these lengths, in order."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, np.uint8) for n in lengths]


def check_rc(w: Traffic, n: int, depth: int, connected: bool = True) -> None:
    """n RC pairs, each QP on its own CQ of `depth` entries, SQs of `depth`, both ends in RTS
    (or RESET), QPNs unique."""
    assert len(w.rc) == n and all(len(p) == 2 for p in w.rc)
    want = QpState.RTS if connected else QpState.RESET
    for pair in w.rc:
        for r, qp in enumerate(pair):
            assert not qp.dci and qp.sq.wqebb_cnt == depth and qp.sq.cq.ncqe == depth
            assert w.fabrics[r].qp_state(qp) == want
    cqns = [(r, qp.sq.cq.cqn) for pair in w.rc for r, qp in enumerate(pair)]
    assert len(set(cqns)) == 2 * n  # no two QPs share a CQ
    assert len({qp.qpn for pair in w.rc for qp in pair}) == 2 * n


def check_mr(mr, length: int, access: Access, domain: MemoryDomain) -> None:
    assert mr.length >= length and mr.access == access and mr.domain == domain
    assert mr.lkey == mr.rkey != 0 and mr.device_addr == 0  # no GPU: nothing mapped


def check_sliced_lanes(lanes, qps, src, dst, peer: int, dc: DcAddress | None = None) -> None:
    """Lane i: QP i towards `peer`, slice i of the source (lkey) and of the peer's landing."""
    assert len(lanes) == len(qps)
    for i, (ln, qp) in enumerate(zip(lanes, qps, strict=True)):
        assert ln.qp is qp and ln.peer == peer and ln.dc == dc
        assert ln.src == Buffer(src.addr + i * SLICE, src.lkey, SLICE)
        assert ln.dst == Buffer(dst.addr + i * SLICE, dst.rkey, SLICE)


def lands(w: Traffic, side: int, lanes, picks=None) -> None:
    """Each picked lane carries a write: a put+completion through the host submitter reads the
    lane's source slice and lands it at the start of its landing slice (last word: the
    sequence number)."""
    f = w.fabrics[side]
    sub = HostSubmitter(rank=side, fabric=f, progress=f.progress_policy(), timeout_s=5.0)
    for i in picks if picks is not None else range(len(lanes)):
        ln = lanes[i]
        sub.latency(LatencyWork(lanes, i, "put_completion", 64, False, False, 3, 0))
        w.fabrics[1 - side].quiesce()
        got = bytes(host_view(ln.dst.addr, 64))
        assert got == bytes(host_view(ln.src.addr, 56)) + (3).to_bytes(8, "little"), i
    f.check()


class Capture:
    """A fixture's maker that keeps every world it made (to check what a test's helper returns
    against the world it built)."""

    def __init__(self, make) -> None:
        self.make, self.made = make, []

    def __call__(self, *args, **kw):
        w = self.make(*args, **kw)
        self.made.append(w)
        return w


# ---- the base layer -----------------------------------------------------------------------------
@pytest.mark.parametrize("seal", [True, False])
def test_ranks_are_one_job_peered_and_sealed(seal: bool) -> None:
    with EmuRanks(3, seal=seal, segment_bytes=2 << 20, prefix="rs") as w:
        fs = w.fabrics
        assert [(f.rank, f.world_size, f.job) for f in fs] == [(r, 3, w.job) for r in range(3)]
        assert w.job.startswith("rs-")
        # sealing unlinks each segment's name (every rank attached)
        assert [os.path.exists(f"/dev/shm/{f.shm_name}") for f in fs] == [not seal] * 3
        # peered: rank 2 writes into rank 0
        a = fs[2].create_qp(fs[2].create_cq(16), 16)
        b = fs[0].create_qp(fs[0].create_cq(16), 16)
        fs[2].connect(a, fs[0].endpoint(b))
        fs[0].connect(b, fs[2].endpoint(a))
        src, dst = fs[2].register(64, Access.LOCAL_WRITE), fs[0].register(64, LANDING)
        fs[2].view(src)[:] = 7
        lane = lane_of(a, src, dst, 0)
        sub = HostSubmitter(rank=2, fabric=fs[2], progress=fs[2].progress_policy(), timeout_s=5)
        sub.latency(LatencyWork((lane,), 0, "put_completion", 64, False, False, 1, 0))
        assert bytes(fs[0].view(dst)[:56]) == bytes([7] * 56)
    assert all(closed(f) for f in w.fabrics)


def test_everything_closes_however_the_test_ends() -> None:
    order: list[str] = []
    with pytest.raises(RuntimeError, match="test failed"), EmuRanks() as w:
        w.on_close(lambda: order.append(f"first, ranks open: {not closed(w.fabrics[0])}"))
        w.on_close(lambda: order.append("last registered"))
        raise RuntimeError("test failed")
    assert order == ["last registered", "first, ranks open: True"]
    assert all(closed(f) for f in w.fabrics)
    w.close()  # twice is harmless


def test_a_rank_that_fails_to_stop_leaves_none_open() -> None:
    w = EmuRanks(3).start()

    def refuse() -> None:
        raise RuntimeError("engine did not stop")

    w.fabrics[1].stop_engine = refuse  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="engine did not stop"):
        w.close()
    assert all(closed(f) for f in w.fabrics)


def test_a_failing_step_closes_what_was_made_before_it() -> None:
    made: list[EmuFabric] = []

    class Broken(Traffic):
        def create_mrs(self):
            made.extend(self.fabrics)
            raise RuntimeError("no memory")

    with pytest.raises(RuntimeError, match="no memory"), Broken(2):
        pass
    assert len(made) == 2 and all(closed(f) for f in made)


def test_factory_makes_worlds_on_demand_and_closes_them_all() -> None:
    with factory(Traffic, depth=32, prefix="fa") as make:
        a, b = make(1), make(2, seed=5)
        assert (len(a.rc), len(b.rc)) == (1, 2) and a.job != b.job
        assert a.rc[0][0].sq.wqebb_cnt == b.rc[1][1].sq.wqebb_cnt == 32
        assert np.array_equal(b.src(0), pattern(5, 4096)[0])
    assert all(closed(f) for f in a.fabrics + b.fabrics)


# ---- the host loops' world ----------------------------------------------------------------------
def test_host_world_hands_out_both_directions_dc_and_drivers() -> None:
    with emu_world(nqps=3, depth=64, dcis=2) as w:
        check_rc(w, 3, 64)
        assert len(w.dcis) == 2 and all(q.dci for q in w.dcis)
        assert all(w.fabrics[0].qp_state(q) == QpState.RTS for q in w.dcis)
        assert w.dct is not None and (w.dct.dc_key, w.dct.lid) == (DC_KEY, 2)
        for r in range(2):
            check_mr(w.src_mr(r), SIZE, Access.LOCAL_WRITE, HOST)
            check_mr(w.landing_mr(r), SIZE, LANDING, HOST)
            assert not w.src(r).any() and w.landing(r).size == SIZE  # no pattern: zeros
        for side in (0, 1):  # every lane: the whole source towards the whole peer landing
            for ln, pair in zip(w.lanes(side=side), w.rc, strict=True):
                assert ln.qp is pair[side] and ln.peer == 1 - side and ln.dc is None
                assert ln.src == Buffer.local(w.src_mr(side))
                dst = w.landing_mr(1 - side)
                assert ln.dst == Buffer(dst.addr, dst.rkey, dst.length)
        av = DcAddress(w.dct.dctn, DC_KEY, w.dct.lid)
        assert [ln.dc for ln in w.dc_lanes()] == [av, av]
        assert len(w.lanes(2)) == 2 and len(w.dc_lanes(1)) == 1
        assert [d.landing for d in w.subs] == [w.landing_mr(0), w.landing_mr(1)]
    with emu_world(nqps=1) as w:  # the DCT exists without DCIs too
        assert w.dct is not None and w.dcis == [] and w.dc_lanes() == ()


# ---- what the gpu-marked tests build ------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 3, 4, 8, 528])
def test_gpu_device_rc_lanes(n: int) -> None:
    """test_gpu_device's and test_gpu_paths_device's `_lanes(world, n)`."""
    from test_gpu_device import RC_LANES

    with Traffic(n, **RC_LANES) as w:
        check_rc(w, n, 256)
        lanes, src, dst = w.one_way()
        check_mr(src, SLICE * n, Access.LOCAL_WRITE, MAPPED)
        check_mr(dst, SLICE * n, LANDING, HOST)
        assert w.bufs == [(src, None), (None, dst)]  # one way: nothing else registered
        check_sliced_lanes(lanes, [p[0] for p in w.rc], src, dst, 1)
        assert np.array_equal(w.src(0), pattern(7, src.length)[0])
        assert not host_view(dst.addr, dst.length).any()
        with pytest.raises(ValueError, match="rank 1 sends nothing"):
            w.lanes(side=1)
        lands(w, 0, lanes, picks=range(n) if n < 16 else (0, n // 2, n - 1))


@pytest.mark.parametrize("connect", [True, False])
def test_gpu_device_lanes_helper(connect: bool) -> None:
    """`_lanes(world, n, connect)` as the GPU tests call it: (fabrics, lanes, source, landing)
    of the world it made; connect=False leaves the QPs in RESET (the QP that cannot send)."""
    from test_gpu_device import RC_LANES, _lanes

    with factory(Traffic, **RC_LANES) as make:
        world = Capture(make)
        fs, lanes, src, dst = _lanes(world, 2, connect=connect)
        (w,) = world.made
        assert fs is w.fabrics and lanes == w.lanes()
        assert (src, dst) == (w.src_mr(0), w.landing_mr(1))
        check_rc(w, 2, 256, connected=connect)


def test_gpu_device_cuda_configuration_less_its_engine() -> None:
    """cuda_world's pair (the CUDA engine needs a GPU: the rest of its configuration here)."""
    from test_gpu_device import CUDA_LANES, RC_LANES

    assert CUDA_LANES["engine"] == "cuda" and CUDA_LANES["queues"] == "device"
    assert {k: CUDA_LANES[k] for k in ("depth", "slice_bytes", "src_domain", "seed")} == {
        k: RC_LANES[k] for k in ("depth", "slice_bytes", "src_domain", "seed")
    }
    with Traffic(2, **on_cpu(CUDA_LANES)) as w:
        check_rc(w, 2, 256)
        lanes, src, dst = w.one_way()
        check_sliced_lanes(lanes, [p[0] for p in w.rc], src, dst, 1)
        lands(w, 0, lanes)


@pytest.mark.parametrize("n", [1, 2, 5])
def test_gpu_paths_dc_lanes(n: int) -> None:
    """test_gpu_paths_device's `_dc_lanes(world, n)`: DCIs of rank 0 to one DCT of rank 1."""
    from test_gpu_paths_device import DC_KEY as PATHS_KEY
    from test_gpu_paths_device import DC_LANES, RC_LANES, _dc_lanes

    with Traffic(0, dcis=n, **DC_LANES) as w:
        assert w.rc == [] and w.lanes() == () and len(w.dcis) == n
        for q in w.dcis:
            assert q.dci and q.sq.wqebb_cnt == 256 and q.sq.cq.ncqe == 256
            assert w.fabrics[0].qp_state(q) == QpState.RTS
        assert len({q.sq.cq.cqn for q in w.dcis}) == n
        assert w.dct is not None and w.dct.dc_key == PATHS_KEY == 0x5EED and w.dct.lid == 2
        assert w.dct.cq.ncqe == 256
        src, dst = w.src_mr(0), w.landing_mr(1)
        check_mr(src, SLICE * n, Access.LOCAL_WRITE, MAPPED)
        check_mr(dst, SLICE * n, LANDING, HOST)
        av = DcAddress(w.dct.dctn, 0x5EED, w.dct.lid)
        check_sliced_lanes(w.dc_lanes(), w.dcis, src, dst, 1, av)
        assert np.array_equal(w.src(0), pattern(3, src.length)[0])
        lands(w, 0, w.dc_lanes())
    with factory(Traffic, **RC_LANES) as make:  # the helper the GPU tests call
        world = Capture(make)
        fs, lanes, src, dst = _dc_lanes(world, n)
        (w,) = world.made
        assert (fs, lanes, src, dst) == (w.fabrics, w.dc_lanes(), w.src_mr(0), w.landing_mr(1))
        assert len(lanes) == n and w.rc == []
        assert np.array_equal(w.src(0), pattern(3, src.length)[0])


def test_gpu_loaded_pair_both_ways() -> None:
    """test_gpu_loaded_device's `pair`: CTAS + 1 RC pairs, every MR host-mapped, lanes each way,
    both sources from one generator seeded 11 (rank 0's first)."""
    from test_gpu_loaded_device import CTAS, PAIR
    from test_gpu_loaded_device import SLICE as LOADED_SLICE

    n = CTAS + 1
    with Traffic(n, **PAIR) as w:
        check_rc(w, n, 256)
        src0, src1 = w.src_mr(0), w.src_mr(1)
        for r in range(2):
            check_mr(w.src_mr(r), LOADED_SLICE * n, Access.LOCAL_WRITE, MAPPED)
            check_mr(w.landing_mr(r), LOADED_SLICE * n, LANDING, MAPPED)
        want0, want1 = pattern(11, src0.length, src1.length)
        assert np.array_equal(w.src(0), want0) and np.array_equal(w.src(1), want1)
        for side in (0, 1):
            lanes = w.lanes(side=side)
            src, dst = w.src_mr(side), w.landing_mr(1 - side)
            for i, ln in enumerate(lanes):
                assert ln.qp is w.rc[i][side] and ln.peer == 1 - side
                assert ln.src == Buffer(src.addr + i * LOADED_SLICE, src.lkey, LOADED_SLICE)
                assert ln.dst == Buffer(dst.addr + i * LOADED_SLICE, dst.rkey, LOADED_SLICE)
            lands(w, side, lanes)


class Spy:
    """Records the keyword arguments each rank's create_cq / create_qp were called with (but
    create_qp's dci, always False here)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.cq: list[tuple[int, dict]] = []
        self.qp: list[tuple[int, dict]] = []
        cq, qp = EmuFabric.create_cq, EmuFabric.create_qp

        def create_cq(f, ncqe, **kw):
            self.cq.append((f.rank, kw))
            return cq(f, ncqe, **kw)

        def create_qp(f, send_cq, sq_wqebbs, *a, **kw):
            assert not a and not kw.get("dci")
            self.qp.append((f.rank, {k: v for k, v in kw.items() if k != "dci"}))
            return qp(f, send_cq, sq_wqebbs, *a, **kw)

        monkeypatch.setattr(EmuFabric, "create_cq", create_cq)
        monkeypatch.setattr(EmuFabric, "create_qp", create_qp)


def _handlers() -> list[str]:
    from gicbench.submit.doca.params import HANDLERS

    return list(HANDLERS)


def stub_submitters(monkeypatch: pytest.MonkeyPatch) -> None:
    """DocaLanes.submitter needs a GPU: a stand-in naming its world and rank."""
    from test_doca_submitter_gpu import DocaLanes

    monkeypatch.setattr(DocaLanes, "submitter", lambda self, rank=0: ("submitter", self, rank))


@pytest.mark.parametrize("handler", _handlers())
def test_doca_submitter_setup_takes_its_queue_options_on_rank_0(monkeypatch, handler) -> None:
    """test_doca_submitter_gpu's `_setup(world, params, n)`: (fabrics, submitter, lanes,
    source, landing) of a world whose rank 0 made its queues with the submitter's options."""
    from test_doca_submitter_gpu import DEPTH, SETUP, DocaLanes, _setup

    from gicbench.submit.doca.params import DocaParams
    from gicbench.submit.doca.submitter import DocaSubmitter

    params = DocaParams(doca_handler=handler, doca_sharing="gpu")
    qo = DocaSubmitter.queue_options(params, DEPTH)
    spy = Spy(monkeypatch)
    stub_submitters(monkeypatch)
    with factory(DocaLanes, **SETUP) as make:
        world = Capture(make)
        fs, sub, lanes, src, dst = _setup(world, params, 4)
        (w,) = world.made
        assert fs is w.fabrics and sub == ("submitter", w, 0) and w.params is params
        check_rc(w, 4, DEPTH)
        opts = {0: (dict(qo.cq), dict(qo.qp)), 1: ({}, {})}
        assert spy.cq == [(r, opts[r][0]) for _ in range(4) for r in (0, 1)]
        assert spy.qp == [(r, opts[r][1]) for _ in range(4) for r in (0, 1)]
        check_mr(src, SLICE * 4, Access.LOCAL_WRITE, MAPPED)
        check_mr(dst, SLICE * 4, LANDING, HOST)
        assert (src, dst) == (w.src_mr(0), w.landing_mr(1))
        check_sliced_lanes(lanes, [p[0] for p in w.rc], src, dst, 1)
        assert np.array_equal(w.src(0), pattern(3, src.length)[0])


@pytest.mark.parametrize("handler", _handlers())
def test_doca_pair_queues_both_ways(monkeypatch, handler) -> None:
    """test_doca_submitter_gpu's `_pair(world, params)`: the options on both ranks, every MR
    host-mapped, each rank's source from its own seed, one lane each way, a submitter per
    rank."""
    from test_doca_submitter_gpu import DEPTH, SETUP, DocaLanes, _pair

    from gicbench.submit.doca.params import DocaParams
    from gicbench.submit.doca.submitter import DocaSubmitter

    params = DocaParams(doca_handler=handler)
    qo = DocaSubmitter.queue_options(params, DEPTH)
    spy = Spy(monkeypatch)
    stub_submitters(monkeypatch)
    with factory(DocaLanes, **SETUP) as make:
        world = Capture(make)
        fs, subs, lanes, src, land = _pair(world, params)
        (w,) = world.made
        assert fs is w.fabrics and subs == [("submitter", w, 0), ("submitter", w, 1)]
        check_rc(w, 1, DEPTH)
        assert spy.cq == [(0, dict(qo.cq)), (1, dict(qo.cq))]
        assert spy.qp == [(0, dict(qo.qp)), (1, dict(qo.qp))]
        for r in range(2):
            assert (src[r], land[r]) == (w.src_mr(r), w.landing_mr(r))
            check_mr(src[r], SLICE, Access.LOCAL_WRITE, MAPPED)
            check_mr(land[r], SLICE, LANDING, MAPPED)
            assert np.array_equal(w.src(r), pattern(r, SLICE)[0])
            assert lanes[r].qp is w.rc[0][r] and lanes[r].peer == 1 - r
            assert lanes[r].src == Buffer.local(src[r], 0, SLICE)
            assert lanes[r].dst == Buffer(land[1 - r].addr, land[1 - r].rkey, SLICE)


def test_doca_cuda_setup_less_its_engine() -> None:
    from test_doca_submitter_gpu import CUDA_SETUP, SETUP, DocaLanes

    from gicbench.submit.doca.params import DocaParams

    assert CUDA_SETUP["engine"] == "cuda" and "queues" not in CUDA_SETUP  # per test
    with DocaLanes(DocaParams(), 2, **on_cpu(CUDA_SETUP)) as w:
        check_rc(w, 2, SETUP["depth"])
        lanes, src, dst = w.one_way()
        check_sliced_lanes(lanes, [p[0] for p in w.rc], src, dst, 1)


def _handler_cq() -> list:
    from test_doca_device import HANDLER_CQ

    return HANDLER_CQ


@pytest.mark.parametrize(("handler", "cq_type"), _handler_cq(), ids=lambda v: v.name.lower())
def test_doca_device_queues(monkeypatch, handler, cq_type) -> None:
    """test_doca_device's `world`, up to register_cuda(): rank 0's queues as DOCA's layout asks,
    its CQs initialised for DOCA's poll, the source, fetch, landing, signal and proxy MRs."""
    from test_doca_device import ACCESS_SIG, DEPTH, NQPS, REGION, DeviceQueues

    from gicbench.submit.doca.layout import proxy_bytes, queue_kwargs

    a = queue_kwargs(handler, cq_type, DEPTH)
    spy = Spy(monkeypatch)
    with DeviceQueues(handler, cq_type) as w:
        check_rc(w, NQPS, DEPTH)
        assert a.ncqe == DEPTH
        assert spy.cq == [(r, dict(a.cq) if r == 0 else {}) for _ in range(NQPS) for r in (0, 1)]
        assert spy.qp == [(r, dict(a.qp) if r == 0 else {}) for _ in range(NQPS) for r in (0, 1)]
        for pair in w.rc:  # rank 0's CQEs read as empty (owner 1) for DOCA; rank 1's untouched
            rings = [host_view(q.sq.cq.buf, DEPTH * 64).reshape(DEPTH, 64)[:, 63] for q in pair]
            assert (rings[0] == 0xF1).all() and not (rings[1] == 0xF1).any()
        check_mr(w.src_mr(0), NQPS * REGION, Access.LOCAL_WRITE, HOST)
        check_mr(w.landing_mr(1), NQPS * REGION, LANDING, HOST)
        check_mr(w.fetched, NQPS * 8, Access.LOCAL_WRITE, HOST)
        check_mr(w.signal, NQPS * 8, ACCESS_SIG, HOST)
        assert Access.REMOTE_ATOMIC in w.signal.access
        nb = proxy_bytes(handler, DEPTH)
        assert w.proxy_bytes == nb
        if nb:
            check_mr(w.words, NQPS * nb, Access.LOCAL_WRITE, MAPPED)
        else:
            assert w.words is None
        for i, ln in enumerate(w.lanes()):  # the REGIONs the lane records name
            assert ln.src.addr == w.src_mr(0).addr + i * REGION
            assert ln.dst.addr == w.landing_mr(1).addr + i * REGION and ln.dst.length == REGION
