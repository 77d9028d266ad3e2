"""The CPU side of --submitter nvshmem: what it refuses in pre-flight (each with the field and the
allowed values), its refusal by name on a machine without a GPU, and the device state it builds
for a rank of a run (rank_state.py) read back through NVSHMEM's own structures: the QP table by
peer and slot, idle records for the PEs a pattern does not connect, the one-chunk heap whose
lookups return the lanes' own keys and addresses, and rkeys past constant memory."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
from test_nvshmem_layout import program  # noqa: F401  (the compiled layout program, a fixture)
from test_nvshmem_runtime import BASES, OFF, _check_generic, _read

from gicbench.errors import ConfigError, UnsupportedError
from gicbench.submit.nvshmem import layout, rank_state, runtime
from gicbench.submit.nvshmem.params import NvshmemParams
from gicbench.submit.nvshmem.submitter import NvshmemSubmitter, op_for, refusal

P = NvshmemParams()
SINGLE = {"size": 8, "payload": "inline", "transport": "rc", "mode": "issue"}
RATE = {"size": 8, "payload": "inline", "transport": "rc", "batch": 1, "threads": 32, "qps": 1}


@pytest.mark.parametrize(
    ("exp", "point", "needle"),
    [
        ("single-op", {**SINGLE, "transport": "dc"}, "transport (--transport) dc"),
        ("single-op", {**SINGLE, "size": 64}, "-b/-e 64 with --payload inline"),
        ("single-op", {**SINGLE, "payload": "pointer", "size": 12}, "whole 8-byte words"),
        ("single-op", {**SINGLE, "payload": "pointer", "mode": "round_trip"}, "-b >= 16"),
        ("msg-rate", {**RATE, "batch": 16}, "--batch 16"),
        ("msg-rate", {**RATE, "size": 4096}, "-b/-e 4096 with --payload inline"),
        ("msg-rate", {**RATE, "threads": 24, "qps": 16}, "-t 24 over -q 16 QPs"),
        ("payload", {**RATE, "batch": 16}, "--batch 16"),  # a rate experiment of another name
    ],
)
def test_points_it_cannot_run_are_refused_with_the_reason(exp, point, needle) -> None:
    why = refusal(P, exp, point)
    assert why is not None and needle in why
    with pytest.raises(UnsupportedError, match="with --submitter nvshmem"):
        NvshmemSubmitter.check_points(P, [(exp, point)])


@pytest.mark.parametrize(
    ("exp", "point"),
    [
        ("single-op", SINGLE),
        ("single-op", {**SINGLE, "mode": "round_trip"}),
        ("single-op", {**SINGLE, "payload": "pointer", "size": 16, "mode": "round_trip"}),
        ("single-op", {**SINGLE, "payload": "pointer", "size": 8, "mode": "put_completion"}),
        ("msg-rate", {**RATE, "payload": "pointer", "size": 4096}),
    ],
)
def test_points_it_runs_pass(exp, point) -> None:
    assert refusal(P, exp, point) is None
    NvshmemSubmitter.check_points(P, [(exp, point)])


def test_the_call_each_write_becomes() -> None:
    assert op_for(inline=True, round_trip=False) == op_for(inline=True, round_trip=True) == "p"
    assert op_for(inline=False, round_trip=False) == "put"
    assert op_for(inline=False, round_trip=True) == "put_signal"


def test_knobs_refused_before_any_resource() -> None:
    with pytest.raises(ConfigError, match=r"nvshmem_batch \(--nvshmem-batch\).*power of two"):
        NvshmemSubmitter.check_points(NvshmemParams(nvshmem_batch=24), [])
    with pytest.raises(ConfigError, match="sq_wqebbs"):  # NVSHMEM's depth bounds
        NvshmemSubmitter.queue_options(P, 64)
    opts = NvshmemSubmitter.queue_options(P, 256)
    assert opts.cq == {"collapsed": True, "overrun_ignore": True} and opts.qp == {"dbr": True}
    assert opts.scratch_per_qp == 2 * layout.IBUF_SLOT  # the ibuf region bring-up sizes for

    class Host:
        queues = "host"

    gpumem = NvshmemParams(nvshmem_build="gpumem-only")
    with pytest.raises(UnsupportedError, match="gpumem-only with --provider emu --queues host"):
        NvshmemSubmitter.check_provider(gpumem, [], "emu", None, Host())
    NvshmemSubmitter.check_provider(P, [], "emu", None, Host())


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is importable")
def test_refused_by_name_without_a_gpu(tmp_path) -> None:
    r = subprocess.run([sys.executable, "-m", "gicbench", "run", "single-op", "--submitter",
                        "nvshmem", "-n", "10", "-o", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
    assert r.returncode == 2, r.stdout + r.stderr
    assert "submitter nvshmem is not available here" in r.stderr
    assert not (tmp_path / "run").exists()


# ---- the device state of one rank ----------------------------------------------------------------
NPES, MYPE, PEER = 3, 1, 2  # rank 1 of 3 with QPs to rank 2 only (PE 0 not connected)


@pytest.fixture(params=[2, 16], ids=["2qp", "16qp"])
def world(request):
    with runtime.Loopback(request.param, progress="inline", segment_bytes=16 << 20) as w:
        yield w


def _rank(world: runtime.Loopback, npes: int = NPES, bases: runtime.Bases = BASES,
          rkeys: list[int] | None = None) -> runtime.States:  # fmt: skip
    q = rank_state.RankQueues(MYPE, npes, {PEER: world.qps}, world.ibuf)
    rk = rkeys if rkeys is not None else [0x1000 + p for p in range(npes)]
    st = rank_state.rank_states(
        q, bases, sq_dev=lambda qp: (qp.sq.buf + OFF, qp.sq.dbrec + OFF, qp.sq.doorbell + OFF),
        cq_dev=lambda c: (c.buf + OFF, c.dbrec + OFF), src_lkey=0x77, rkey_of_pe=rk,
        requests_in_batch=32, nic_buf_on_gpumem=False, heap_in_sysmem=True,
    )  # fmt: skip
    return st


@pytest.mark.nvcc
def test_a_ranks_records_read_back_through_nvshmems_structs(program, world) -> None:  # noqa: F811
    st = _rank(world)
    rc = world.rc_per_pe
    be = layout.be32
    qsize, csize = layout.QP_DTYPE.itemsize, layout.CQ_DTYPE.itemsize
    for slot, qp in enumerate(world.qps):  # slot s of the peer: the harness's QP s
        i = layout.rc_index(slot, PEER, NPES, rc)
        assert st.index[qp.qpn] == i
        got = _read(program, st.qps[i], st.cqs[i], st)
        _check_generic(got, {"qp": st.qps[i], "cq": st.cqs[i], "ibgda": st.ibgda,
                             "state": st.device})  # fmt: skip
        assert got["qp.qpn"] == qp.qpn and got["qp.tx_wq.wqe"] == qp.sq.buf + OFF
        assert got["qp.tx_wq.cq"] == BASES.cqs + i * csize
        assert got["qp.ibuf.buf"] == world.ibuf.addr + slot * 2 * layout.IBUF_SLOT
        assert got["cq.cqn"] == qp.sq.cq.cqn
    # PE 0 is not connected: idle records whose CQ points at their own, zeroed, bookkeeping
    for slot in range(rc):
        i = layout.rc_index(slot, 0, NPES, rc)
        got = _read(program, st.qps[i], st.cqs[i], st)
        mv = BASES.rcs + i * qsize + layout.MVARS_OFFSET
        assert got["qp.qp_type"] == got["cq.qp_type"] == layout.QP_TYPE_RC and got["qp.qpn"] == 0
        assert got["qp.tx_wq.cq"] == BASES.cqs + i * csize
        assert (got["cq.cons_idx"], got["cq.prod_idx"], got["cq.ready_head"]) == (
            mv + 32, mv + 24, mv + 16)  # fmt: skip
        assert got["qp.tx_wq.wqe"] == 0 and got["qp.mvars.tx_wq.ready_head"] == 0
        # this PE's own entries stay zero (NVSHMEM skips them)
        j = layout.rc_index(slot, MYPE, NPES, rc)
        assert not st.qps[j].tobytes().strip(b"\0") and not st.cqs[j].tobytes().strip(b"\0")
    # the one-chunk heap: every address below 2**48 in chunk 0, no offset added
    end = 1 << rank_state.WHOLE_SPACE_LOG2
    assert (got["state.heap_base"], got["state.heap_size"], got["state.mype"],
            got["state.npes"]) == (0, end, MYPE, NPES)  # fmt: skip
    assert got["ibgda.log2_cumem_granularity"] == rank_state.WHOLE_SPACE_LOG2
    assert got["ibgda.constmem.lkeys[0].key"] == be(0x77)
    assert got["ibgda.constmem.lkeys[0].next_addr"] == end
    for pe in range(NPES):
        rk = st.ibgda["constmem.rkeys"][pe]
        assert int(rk["key"]) == be(0x1000 + pe) and int(rk["next_addr"]) == end
    assert (got["ibgda.num_rc_per_pe"], got["ibgda.num_default_rc_per_pe"]) == (rc, rc)
    assert not st.remote.any()  # every peer_heap_base_remote 0: raddr = the lane's address


def test_rkeys_past_constant_memory_need_their_array(world) -> None:
    npes = layout.MAX_CONST_KEYS + 6
    with pytest.raises(ConfigError, match="lkeys_rest/rkeys_rest"):
        _rank(world, npes)
    bases = runtime.Bases(**{**BASES.__dict__, "rkeys_rest": 0x7E00_0060_0000})
    rk = [0x2000 + p for p in range(npes)]
    st = _rank(world, npes, bases, rk)
    assert int(st.ibgda["globalmem.rkeys"]) == bases.rkeys_rest
    rest = rank_state.rkeys_rest(rk)
    assert len(rest) == 6 and [int(k) for k in rest["key"]] == [layout.be32(k) for k in rk[64:]]
    sizes = runtime.array_bytes(world.rc_per_pe, npes, npes)
    assert sizes["rkeys_rest"] == 6 * layout.KEY_DTYPE.itemsize


def test_a_rank_table_refuses_what_nvshmem_cannot_hold(world) -> None:
    with pytest.raises(ConfigError, match="peer"):
        rank_state.RankQueues(MYPE, NPES, {MYPE: world.qps}, world.ibuf)  # a QP to itself
    with pytest.raises(ConfigError, match="peer"):
        rank_state.RankQueues(MYPE, NPES, {NPES: world.qps}, world.ibuf)
    with pytest.raises(ConfigError, match="rkey_of_pe"):
        _rank(world, rkeys=[1, 2])
    small = type(world.ibuf)(world.ibuf.addr, 16, world.ibuf.lkey, world.ibuf.rkey,
                             world.ibuf.access)  # fmt: skip
    with pytest.raises(ConfigError, match="ibuf"):
        rank_state.RankQueues(MYPE, NPES, {PEER: world.qps}, small)
    assert np.array_equal(rank_state.rkeys_rest([1, 2]), np.zeros(0, layout.KEY_DTYPE))


# ---- the bounded launch, with stand-ins for CuPy (the host's rule, no GPU) ---------------------
class _Stream:
    """A stream whose kernel ends when `ends()` says so."""

    def __init__(self, ends) -> None:
        self.ends, self.ptr = ends, 0

    @property
    def done(self) -> bool:
        return self.ends()

    def synchronize(self) -> None:
        return None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None


def _device(ends, aborted: list[int] | None = None):
    """An NvshmemDevice with a fake module and stream; `aborted` collects the abort word's
    values as the kernel would see them."""
    import types

    dev = object.__new__(runtime.NvshmemDevice)
    dev.module = types.SimpleNamespace(get_function=lambda name: lambda grid, block, args: None)
    rt = types.SimpleNamespace(streamQuery=lambda ptr: 600)
    dev.cp = types.SimpleNamespace(cuda=types.SimpleNamespace(
        get_current_stream=lambda: _Stream(lambda: True), runtime=rt))  # fmt: skip
    dev.stream = _Stream(ends)
    dev.abort = np.zeros(1, np.uint32)
    return dev


def test_a_launch_that_keeps_moving_outlives_its_bound() -> None:
    import time

    t0 = time.monotonic()
    dev = _device(lambda: time.monotonic() - t0 > 0.6)  # a 0.6 s launch under a 0.2 s bound
    ticks = iter(range(10**6))
    dev.launch("k", 1, 32, (), timeout_s=0.2, what="w", diagnose=lambda: "",
               progress=lambda: next(ticks))  # fmt: skip
    assert dev.abort[0] == 0


def test_a_launch_that_stops_moving_times_out_and_is_aborted(monkeypatch) -> None:
    stuck: list[str] = []
    monkeypatch.setattr(runtime, "note_stuck_kernel", stuck.append)
    monkeypatch.setattr(runtime, "ABORT_WAIT_S", 0.05)
    dev = _device(lambda: False)
    with pytest.raises(TimeoutError, match=r"w still running, no progress for 0.1 s .*600.*\n"
                       r"the account"):  # fmt: skip
        dev.launch("k", 1, 32, (), timeout_s=0.1, what="w", diagnose=lambda: "the account",
                   progress=lambda: (7, 7))  # fmt: skip
    assert dev.abort[0] == 1 and stuck == ["NVSHMEM k"]  # the loops told to end; recorded


def test_a_signal_during_a_launch_sets_the_abort_word(monkeypatch) -> None:
    monkeypatch.setattr(runtime, "ABORT_WAIT_S", 0.5)
    seen: list[int] = []
    dev = _device(lambda: False)

    def ends() -> bool:  # the kernel sees the abort word and ends
        seen.append(int(dev.abort[0]))
        return bool(dev.abort[0])

    dev.stream = _Stream(ends)

    def interrupted() -> object:
        raise KeyboardInterrupt  # what the harness's handler raises in this thread

    with pytest.raises(KeyboardInterrupt):
        dev.launch("k", 1, 32, (), timeout_s=0.0, what="w", diagnose=lambda: "",
                   progress=interrupted)  # fmt: skip
    assert dev.abort[0] == 1 and seen[-1] == 1
