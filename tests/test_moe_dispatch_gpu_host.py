"""mini-gda's MoE dispatch launcher, its host side (no GPU): which backends it refuses where,
the tables it hands the kernels (lane order, each expert's lane, the receive kernel's rows),
gpi-mc's fan-out window, and the knobs it refuses before anything is launched."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from gicbench.errors import ConfigError, UnsupportedError
from gicbench.moe import routing as rt
from gicbench.submit.gpu import GpuSubmitter
from gicbench.submit.gpu import dispatch as gd
from gicbench.submit.work import Buffer, DcAddress, DispatchPlan, DispatchWork, Lane

SB = 128  # a token of H = 64
T_MAX = 16
PITCH = (T_MAX + 1) * SB  # a slice: T_max slots and the count word, padded to whole tokens
COFF = T_MAX * SB


def _plan(world=2, tokens=8, topk=2, experts=8, backend="gdaki", seed=3) -> DispatchPlan:
    routing = rt.draw_routing(seed, world, tokens, topk, experts)
    return DispatchPlan(
        backend=backend, tokens=tokens, hidden=SB // 2, topk=topk, experts=experts, sm_cap=4,
        wait_us=None, iters=3, warmup=1, routing=routing, slots=rt.slots_of(routing, experts),
        counts=rt.counts_of(routing, experts),
    )  # fmt: skip


def _work(plan: DispatchPlan, rank=0, world=2, pitch=PITCH, staging=None, **over) -> DispatchWork:
    el = plan.experts // world
    peers = [d for d in range(world) if d != rank]
    # peer d's landing: one slice per (source, local expert), source-major, `pitch` apart
    lanes = {
        d: tuple(
            Lane(None, d, Buffer(0x1000, 1, SB), Buffer(0x10_0000 * (d + 1) + (rank * el + e)
                 * pitch, 7 + d, COFF + 8))  # type: ignore[arg-type]
            for e in range(el)
        )
        for d in peers
    }  # fmt: skip
    recv = {s: tuple(Buffer(0x900_0000 + (s * el + e) * pitch, 2, COFF + 8) for e in range(el))
            for s in peers}  # fmt: skip
    kw = dict(
        plan=plan, rank=rank, world=world, tokens_src=Buffer(0x2000, 3, plan.tokens * SB),
        staging=staging or Buffer(0x2000 + plan.tokens * SB, 3, plan.tokens * SB), lanes=lanes,
        recv=recv, slot_bytes=SB, counter_offset=COFF,
        self_recv=tuple(Buffer(0x800_0000 + e * pitch, 3, COFF + 8) for e in range(el)),
    )  # fmt: skip
    kw.update(over)
    return DispatchWork(**kw)  # type: ignore[arg-type]


def test_backends_refused_where_they_cannot_run() -> None:
    cpu = SimpleNamespace(engine="cpu", queues="host")
    assert gd.refusals("emu", cpu) == dict.fromkeys(gd.BACKENDS)
    assert GpuSubmitter.dispatch_backends(None, "emu", cpu) == dict.fromkeys(gd.BACKENDS)
    cuda = gd.refusals("emu", SimpleNamespace(engine="cuda", queues="device"))
    assert cuda["gdaki"] is None
    assert "--queues device" in cuda["free-flow"]
    assert "CUDA engine" in cuda["gpi"] and "CUDA engine" in cuda["gpi-mc"]
    other = gd.refusals("verbs", SimpleNamespace())
    assert other["gdaki"] is None and other["free-flow"] is None
    assert "emulated NIC" in other["gpi"] and "verbs" in other["gpi-mc"]


@pytest.mark.parametrize(("world", "rank"), [(2, 0), (2, 1), (4, 2)])
def test_lanes_rows_and_room(world: int, rank: int) -> None:
    plan = _plan(world=world, experts=4 * world)
    lay = gd.layout(_work(plan, rank, world))
    el = 4
    assert lay.order == tuple((d, e) for d in range(world) if d != rank for e in range(el))
    for x in range(plan.experts):
        d, e = divmod(x, el)
        want = -1 if d == rank else lay.order.index((d, e))
        assert lay.lane_of[x] == want
    assert lay.rows.tolist() == rt.expert_major_rows(plan.counts, rank, world).ravel().tolist()
    assert lay.room.tolist() == rt.expected_received(plan.counts, rank, world).ravel().tolist()
    assert lay.total_rows == int(plan.counts[:, rank * el : (rank + 1) * el].sum())
    assert lay.fan is None


def test_gpi_mc_window_covers_every_local_expert_at_one_pitch() -> None:
    plan = _plan(backend="gpi-mc")
    lay = gd.layout(_work(plan))
    fan = lay.fan
    assert fan is not None and fan.groups == 1 and fan.group == 4
    assert (fan.stride, fan.pitch_slots, fan.token_slots) == (SB, T_MAX + 1, 1)
    assert fan.windows[(1, 0)] == (0x20_0000, 3 * PITCH + COFF + 8, 8)
    # a pitch that is not whole tokens: slots of the common divisor
    odd = gd.layout(_work(plan, pitch=COFF + 8)).fan
    assert odd is not None and odd.stride == 8 and odd.token_slots == SB // 8 and odd.groups == 1
    assert (
        gd.descriptors(plan, 0, 2, fan.group) == int((plan.routing[0] >= 4).any(axis=1).sum()) + 4
    )


def test_gpi_mc_windows_split_where_slots_run_out() -> None:
    """Slices 1 MiB apart in slots of 8 bytes: one expert a window, a token a descriptor per
    window group it has remote experts in."""
    plan = _plan(backend="gpi-mc", topk=3)
    pitch = COFF + 8 + 2**20
    fan = gd.layout(_work(plan, pitch=pitch)).fan
    assert fan is not None and fan.group == 1 and fan.groups == 4
    for g in range(4):
        assert fan.windows[(1, g)] == (0x20_0000 + g * pitch, COFF + 8, 8)
    want = int((plan.routing[0] >= 4).sum()) + 4
    assert gd.descriptors(plan, 0, 2, fan.group) == want


def test_gpi_mc_refuses_what_a_fan_out_cannot_address() -> None:
    plan = _plan(backend="gpi-mc")
    w = _work(plan)
    ls = list(w.lanes[1])
    ls[2] = Lane(None, 1, ls[2].src, Buffer(ls[2].dst.addr + 64, 8, COFF + 8))  # type: ignore[arg-type]
    with pytest.raises(UnsupportedError, match="one pitch"):
        gd.layout(_work(plan, lanes={1: tuple(ls)}))
    with pytest.raises(ConfigError, match="topk"):
        gd.layout(_work(_plan(backend="gpi-mc", topk=9, experts=16)))
    with pytest.raises(ConfigError, match="experts"):
        gd.layout(_work(_plan(backend="gpi", experts=2 * 255)))


def test_knobs_the_kernels_cannot_take_are_refused() -> None:
    plan = _plan()
    with pytest.raises(ConfigError, match="topk"):
        gd.layout(_work(_plan(topk=33, experts=64)))
    with pytest.raises(ConfigError, match="staging"):
        gd.layout(_work(plan, staging=Buffer(0x2000, 3, plan.tokens * SB - 1)))
    with pytest.raises(ConfigError, match="counter_offset"):
        gd.layout(_work(plan, counter_offset=plan.tokens * SB - 8))
    with pytest.raises(ConfigError, match=r"lanes\[1\]"):
        gd.layout(_work(plan, lanes={1: _work(plan).lanes[1][:3]}))
    with pytest.raises(ConfigError, match=r"recv\[1\]"):
        gd.layout(_work(plan, recv={}))
    with pytest.raises(ConfigError, match="self_recv"):
        gd.layout(_work(plan, self_recv=()))
    with pytest.raises(ConfigError, match="slot_bytes"):
        gd.layout(_work(plan, slot_bytes=SB * 2))
    dc = tuple(
        Lane(ln.qp, ln.peer, ln.src, ln.dst, DcAddress(1, 2, 3)) for ln in _work(plan).lanes[1]
    )
    with pytest.raises(ConfigError, match="RC lanes"):
        gd.layout(_work(plan, lanes={1: dc}))
    with pytest.raises(ConfigError, match="backend"):
        gd.layout(_work(_plan(backend="nccl")))


@pytest.mark.parametrize(("depth", "every"), [(1, 1), (4, 1), (6, 1), (64, 16), (256, 64)])
def test_signal_every_is_a_power_of_two_within_a_quarter_sq(depth: int, every: int) -> None:
    assert gd.signal_every(depth) == every


def test_wqes_and_descriptors_per_call() -> None:
    plan = _plan(tokens=12, topk=3, experts=8)
    lay = gd.layout(_work(plan))
    got = gd.lane_wqebbs(plan, 0, lay.order, 4)
    assert got == [4 * (int(plan.counts[0, 4 + e]) + 1) for e in range(4)]
    remote = plan.routing[0] >= 4
    gpi = _plan(tokens=12, topk=3, experts=8, backend="gpi")
    mc = _plan(tokens=12, topk=3, experts=8, backend="gpi-mc")
    assert gd.descriptors(gpi, 0, 2) == int(remote.sum()) + 4
    assert gd.descriptors(mc, 0, 2) == int(remote.any(axis=1).sum()) + 4
    assert np.array_equal(plan.routing, gpi.routing)
