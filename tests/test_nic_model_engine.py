"""The CPU engine charging a NIC model: nothing visible before its modelled time, the modelled
times the mechanisms give, both progress modes, held work drained, a saturated engine flagged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from resources import EmuRanks

from gicbench import mlx5
from gicbench._native import emu as native
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.fabric.base import QpState
from gicbench.fabric.emu import EmuFabric, host_view
from gicbench.fabric.emu import nic_model as nm

PRESET = "cx7-200g-ib-hopper"
MODES = ("inline", "thread")


def model(name: str = PRESET, **changes: float) -> nm.NicModel:
    """The preset, or the preset with some parameters (ns, GB/s, ...) changed."""
    m = nm.load(name)
    assert m is not None
    late = changes.pop("late_slack_ns", m.late_slack_ns)
    consts = {k: (dataclasses.replace(c, value=changes[k]) if k in changes else c)
              for k, c in m.constants.items()}  # fmt: skip
    return dataclasses.replace(m, constants=consts, late_slack_ns=late)


class Loop:
    """One rank whose RC QP writes into its own memory (the engine plays both ends)."""

    def __init__(self, fabric: EmuFabric, depth: int = 64) -> None:
        self.f = fabric
        self.cq = fabric.create_cq(depth)
        self.qp = fabric.create_qp(self.cq, depth)
        fabric.connect(self.qp, fabric.endpoint(self.qp))
        self.src, self.dst = fabric.register(1 << 16), fabric.register(1 << 16)
        self.ring = mlx5.SqRing(host_view(self.qp.sq.buf, depth * 64), depth)
        self.pi = self.ci = 0
        self.depth = depth

    def post(self, n: int = 1, *, inline: bool = True, size: int = 8, signaled: bool = True,
             offset: int = 0) -> None:
        """n writes announced by one doorbell (record, then register)."""
        first = self.pi
        for k in range(n):
            at = offset + k * size
            if inline:
                body = bytes((self.pi + b) & 0xFF for b in range(size))
                used = self.ring.post_write(self.pi, self.qp.qpn, self.dst.addr + at,
                                            self.dst.rkey, payload=body, signaled=signaled)
            else:
                used = self.ring.post_write(self.pi, self.qp.qpn, self.dst.addr + at,
                                            self.dst.rkey, lkey=self.src.lkey,
                                            addr=self.src.addr + at, length=size,
                                            signaled=signaled)
            self.pi += used
        last = self.pi - used if n else first
        host_view(self.qp.sq.dbrec, 8)[4:] = np.frombuffer(mlx5.dbrec_value(self.pi), np.uint8)
        host_view(self.qp.sq.doorbell, 8).view(np.uint64)[0] = mlx5.doorbell_value(
            self.ring.read(last, 0, 16))

    def cqes(self) -> list[mlx5.Cqe]:
        """The CQEs written so far (consumed: the consumer index is published)."""
        out = []
        buf = host_view(self.cq.buf, self.cq.ncqe * 64)
        while True:
            b = buf[(self.ci % self.cq.ncqe) * 64:][:64]
            if not mlx5.cqe_ready(b, self.ci, self.cq.ncqe):
                break
            out.append(mlx5.decode_cqe(b))
            self.ci += 1
        host_view(self.cq.dbrec, 4)[:] = np.frombuffer(
            (self.ci & 0xFFFFFF).to_bytes(4, "big"), np.uint8)
        return out


@pytest.fixture(params=MODES)
def loop(request):
    with EmuRanks(1, progress=request.param, segment_bytes=4 << 20, nic_model=model()) as w:
        yield Loop(w.fabrics[0])


def _log(f: EmuFabric) -> list[dict[str, int]]:
    cols = f.model_log()
    return [{k: int(v[i]) for k, v in cols.items()} for i in range(len(cols["qpn"]))]


def test_nothing_is_visible_before_its_modelled_time(loop: Loop) -> None:
    # (CQE index, the model's clock when this test saw it). Inline mode: the test's progress
    # call is the only writer, so the clock read before the CQ bounds the write from above;
    # thread mode: the engine may write while the CQ is read, so the clock is read after.
    seen: list[tuple[int, int]] = []
    inline = loop.f.mode == "inline"
    for k in range(24):
        loop.post(1 + k % 3, inline=k % 2 == 0, size=8 + 8 * (k % 5), offset=512 * k)
        want = len(seen) + 1 + k % 3
        while len(seen) < want:
            loop.f.progress()
            before = native.model_now_ps()
            got = loop.cqes()
            now = before if inline else native.model_now_ps()
            seen += [(c.wqe_counter, now) for c in got]
    log = _log(loop.f)
    assert len(log) == sum(1 + k % 3 for k in range(24))
    by_idx = {e["idx"]: e for e in log}
    for e in log:
        assert e["exec_at"] >= e["t_exec"] > e["t_seen"]  # landed no earlier than modelled
        assert e["cqe_at"] >= e["t_cqe"] >= e["t_exec"]  # the CQE no earlier than modelled
    for idx, observed in seen:
        assert observed >= by_idx[idx]["t_cqe"]  # and no poller saw it earlier
    # every byte landed as without a model
    for k in range(24):
        got = loop.f.view(loop.dst)[512 * k:][: (8 + 8 * (k % 5)) * (1 + k % 3)]
        assert got.any() or k % 2 == 1


def test_a_pointer_write_completes_later_by_the_modelled_payload_read(loop: Loop) -> None:
    m = model()
    loop.post(inline=True)  # warm the context cache: both sides are hits from here on
    loop.f.quiesce()
    for inline in (True, False, True, False):
        loop.post(inline=inline)
        loop.f.quiesce()
    entries = _log(loop.f)[1:]
    assert all(e["flags"] & 6 == 0 for e in entries)  # no context misses
    took = [e["t_cqe"] - e["t_seen"] for e in entries]
    p = m.native_params()
    read = p["dma_read_ps"] + round(8 * p["dma_fs_per_byte"] / 1000)
    assert took[1] - took[0] == took[3] - took[2] == read
    # the calibration: 3.30 µs from doorbell to CQE for the 8 B inline write
    assert took[0] == pytest.approx(3_300_000, abs=1_000)


def test_quiesce_waits_for_held_writes_and_their_cqes() -> None:
    slow = model(wire_ns=200_000.0)  # 0.4 ms of wire per write
    for mode in MODES:
        with EmuRanks(1, progress=mode, segment_bytes=4 << 20, nic_model=slow) as w:
            lp = Loop(w.fabrics[0])
            lp.post(4, inline=False, size=64)
            lp.f.quiesce()
            assert len(lp.cqes()) == 4
            assert lp.f.counters()["nic_model_cqes"] == 4
            np.testing.assert_array_equal(lp.f.view(lp.dst)[:256], lp.f.view(lp.src)[:256])


def test_a_reset_writes_the_cqes_the_nic_had_produced() -> None:
    # 0.5 s of wire each way: the writes land after 0.5 s, their CQEs would come after 1 s.
    slow = model(wire_ns=500e6)
    with EmuRanks(1, progress="inline", segment_bytes=4 << 20, nic_model=slow) as w:
        lp = Loop(w.fabrics[0])
        lp.post(2)
        f = lp.f
        deadline = native.model_now_ps() + 30_000_000_000_000  # 30 s: a diagnostic, not a bound
        while f.counters()["nic_model_cqes"] < 2:  # both landed, both CQEs queued
            assert native.model_now_ps() < deadline, f"writes never landed: {f.counters()}"
            f.progress()
        assert lp.cqes() == []
        f.modify_qp(lp.qp, QpState.RESET)
        got = lp.cqes()
        assert [c.wqe_counter for c in got] == [0, 1] and not any(c.is_error for c in got)
        log = _log(f)
        assert all(0 < e["cqe_at"] < e["t_cqe"] for e in log)  # written by the reset, early


def test_an_engine_slower_than_the_model_is_flagged_saturated() -> None:
    # A NIC without costs: thousands of writes due at once, which the engine executes one by
    # one: nearly all become visible later than modelled.
    free = model(**{k: 0.0 for k in nm.SPECS if k.endswith("_ns")},
                 port_msg_rate_mps=1e6, recv_msg_rate_mps=1e6, late_slack_ns=2_000.0)
    with EmuRanks(1, progress="inline", segment_bytes=8 << 20, nic_model=free) as w:
        lp = Loop(w.fabrics[0], depth=4096)
        before = lp.f.counters()
        lp.post(4000, signaled=False)
        lp.f.quiesce()
        res = lp.f.point_results(before, lp.f.counters())
        assert res["nic_model"] == PRESET and res["nic_model_saturated"] is True
        assert res["nic_model_late_fraction"] > 0.5


def test_an_engine_that_keeps_up_is_not_flagged() -> None:
    slow = model(port_msg_rate_mps=0.01, late_slack_ns=50e6)  # 100 µs a message, 50 ms slack
    with EmuRanks(1, progress="inline", segment_bytes=4 << 20, nic_model=slow) as w:
        lp = Loop(w.fabrics[0])
        before = lp.f.counters()
        lp.post(20)
        lp.f.quiesce()
        res = lp.f.point_results(before, lp.f.counters())
        assert res["nic_model_saturated"] is False and res["nic_model_late_fraction"] == 0


def test_without_a_model_nothing_changes() -> None:
    with EmuRanks(1, progress="inline", segment_bytes=4 << 20) as w:
        lp = Loop(w.fabrics[0])
        lp.post(3)
        lp.f.quiesce()
        assert len(lp.cqes()) == 3
        assert not any(k.startswith("nic_model") for k in lp.f.counters())
        assert lp.f.point_results({}, {}) == {} and lp.f.model_log() == {}


def test_the_model_needs_the_cpu_engine_and_a_model_object() -> None:
    with pytest.raises(UnsupportedError, match="CPU engine"):
        EmuFabric(0, 1, "t-nm", progress="inline", segment_bytes=4 << 20, engine="cuda",
                  nic_model=model())  # fmt: skip
    with pytest.raises(ConfigError, match="nic_model"):
        EmuFabric(0, 1, "t-nm", progress="inline", segment_bytes=4 << 20, nic_model=PRESET)


def test_a_receiver_on_another_rank_is_charged_on_its_own_nic() -> None:
    """Rank 0 writes into rank 1: the receive-side context is rank 1's (its counters)."""
    with EmuRanks(2, progress="inline", segment_bytes=4 << 20, nic_model=model()) as w:
        f0, f1 = w.fabrics
        cq0, cq1 = f0.create_cq(16), f1.create_cq(16)
        q0, q1 = f0.create_qp(cq0, 16), f1.create_qp(cq1, 16)
        f0.connect(q0, f1.endpoint(q1))
        f1.connect(q1, f0.endpoint(q0))
        dst = f1.register(4096)
        ring = mlx5.SqRing(host_view(q0.sq.buf, 16 * 64), 16)
        n = ring.post_write(0, q0.qpn, dst.addr, dst.rkey, payload=b"12345678", signaled=True)
        host_view(q0.sq.dbrec, 8)[4:] = np.frombuffer(mlx5.dbrec_value(n), np.uint8)
        host_view(q0.sq.doorbell, 8).view(np.uint64)[0] = mlx5.doorbell_value(ring.read(0, 0, 16))
        f0.quiesce()
        assert bytes(f1.view(dst)[:8]) == b"12345678"
        assert f0.counters()["nic_model_send_misses"] == 1
        assert f1.counters()["nic_model_recv_misses"] == 1
        assert f0.counters()["nic_model_recv_misses"] == 0


@pytest.mark.parametrize("qps", [8, 40])
def test_a_cycle_over_more_contexts_than_the_cache_misses_on_every_visit(qps: int) -> None:
    """QPs writing into their own NIC's memory (a send-side and a receive-side context each,
    2 x qps contexts in qps lines), visited in a cycle, one write per visit, all posted before
    the engine runs: the modelled NIC meets them in the order they were posted, so LRU evicts
    every context before its next visit and each write misses on both sides, however the engine
    walks its queues (QP by QP). 40 QPs: the engine finds 16 new ones a pass, and the QPs it has
    found cycle among themselves meanwhile (hits while they fit), as do the last ones left at the
    end; the third and fourth of six laps miss on every visit."""
    small = model(cache_lines=qps, send_context_lines=1, recv_context_lines=1)
    with EmuRanks(1, progress="inline", segment_bytes=16 << 20, nic_model=small) as w:
        f = w.fabrics[0]
        loops = [Loop(f, depth=16) for _ in range(qps)]
        before = f.counters()
        for _ in range(6):
            for lp in loops:
                lp.post(1)
        f.quiesce()
        got = {k: v - before[k] for k, v in f.counters().items() if k.startswith("nic_model")}
        assert got["nic_model_wqes"] == 6 * qps
        middle = [e for e in _log(f) if 2 <= e["idx"] <= 3]
        assert len(middle) == 2 * qps
        assert all(e["flags"] & 6 == 6 for e in middle), got  # both sides missed
        if qps <= 16:  # found in one pass: every visit misses
            assert got["nic_model_send_misses"] == got["nic_model_recv_misses"] == 6 * qps, got
        assert all(len(lp.cqes()) == 6 for lp in loops)
