"""active-connections before and around the run: bad input refused in pre-flight naming the
field (exit 2, no QP, no run directory), the sweep's order (each pass starts with its control),
how the active set is spread over peers and units, and the cycle's landing rule checked against
what the native loop really writes (RC QPs, and DCIs changing destination)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from launching import launch
from resources import Traffic

from gicbench.cli.main import build_parser
from gicbench.cli.run import config_from_args
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.experiments.active_connections import ROLE_PATTERN, shares
from gicbench.patterns import traffic
from gicbench.plan import make_plan
from gicbench.submit.base import Lane, Shape
from gicbench.submit.host.submitter import HostSubmitter
from gicbench.submit.work import CycleWork, cycle_lane_writes, cycle_unit_lanes


def plan_of(*args: str, ranks: int = 2):
    """make_plan of `gicbench run active-connections ARGS`, then every rank's check_rank."""
    cfg = config_from_args(build_parser().parse_args(["run", "active-connections", *args]))
    plan = make_plan(cfg)
    for rank in range(ranks):
        for exp in plan.experiments:
            exp.check_rank(traffic(cfg.pattern, rank, ranks))
    return plan


@pytest.mark.parametrize(
    ("args", "ranks", "field"),
    [
        (["--active", "64,512", "--pool", "256"], 2, "active (--active)"),
        (["--writes-per-visit", "0"], 2, "writes_per_visit (--writes-per-visit)"),
        (["--dcts", "2"], 2, "dcts (--dcts)"),  # a DC option with RC
        (["--dcis", "8"], 2, "dcis (--dcis)"),
        (["--role", "receive-only"], 2, "role (--role)"),  # pairs is send-only
        (["--senders", "2"], 4, "senders (--senders)"),  # receive-only's knob on pairs
        (["--pattern", "fan-in", "--senders", "3"], 3, "senders (--senders)"),  # > ranks - 1
        (["--pattern", "fan-out"], 2, "pattern (--pattern)"),
        (["--active", "8,x"], 2, "active (--active)"),
        (["--active", "0"], 2, "active (--active)"),
        (["--batch", "64", "--sq-depth", "64", "-b", "256"], 2, "batch (--batch)"),
        (["--pool", "1", "--active", "1"], 2, "pool (--pool)"),
    ],
)
def test_bad_input_is_refused_naming_the_field(args: list[str], ranks: int, field: str) -> None:
    with pytest.raises((ConfigError, UnsupportedError)) as e:
        plan_of(*args, ranks=ranks)
    assert f"invalid {field}=" in str(e.value)


def test_refused_on_every_rank_before_any_qp_exists(tmp_path: Path) -> None:
    """Under mpiexec: exit 2, one message, no run directory, no emu segment left behind."""
    out = tmp_path / "run"
    before = {p for p in os.listdir("/dev/shm") if p.startswith("gicbench-")}
    r = launch(3, "run", "active-connections", "--pattern", "fan-in", "--senders", "5",
               "--quiet", "-o", str(out), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("invalid senders (--senders)=5") == 1, r.stderr
    assert not out.exists()
    assert {p for p in os.listdir("/dev/shm") if p.startswith("gicbench-")} <= before


def test_each_pass_runs_its_control_first() -> None:
    (exp,) = plan_of("--active", "16,4", "--passes", "2", "-b", "8", "-e", "16").experiments
    pts = exp.points()
    assert [(p["pass"], p["size"], p["control"], p["connections"]) for p in pts] == [
        (n, size, c, x) for n in (1, 2) for size in (8, 16)
        for c, x in ((True, 2), (False, 4), (False, 16))
    ]
    assert {p["nic_role"] for p in pts} == {"send-only"}


def test_the_role_follows_the_pattern_and_sizes_the_pool_per_peer() -> None:
    for role, pattern in ROLE_PATTERN.items():
        (exp,) = plan_of("--pattern", pattern, "--active", "100", ranks=5).experiments
        assert exp.role == role
    (exp,) = plan_of("--pattern", "all-to-all", "--active", "100", ranks=5).experiments
    assert exp.lanes_per_peer_at(5) == 25  # 100 over 4 peers
    (exp,) = plan_of("--pattern", "fan-in", "--active", "100", "--senders", "3",
                     ranks=5).experiments  # fmt: skip
    assert exp.lanes_per_peer_at(5) == 34  # 100 over 3 senders, rounded up
    (exp,) = plan_of("--pattern", "all-to-all", "--active", "100", "--transport", "dc",
                     ranks=5).experiments  # fmt: skip
    assert exp.dci_pool(4, 5) == 25  # each DCI visits every peer


def test_receive_only_spreads_the_set_over_the_senders() -> None:
    sh = shares("receive-only", 5, 3)
    assert sh.senders == (1, 2, 3)
    assert [sh.rank_connections(r, 8) for r in range(5)] == [0, 3, 3, 2, 0]
    assert [sh.rank_connections(r, 2) for r in range(5)] == [0, 1, 1, 0, 0]  # the control


def test_send_receive_lanes_cycle_peers() -> None:
    (exp,) = plan_of("--pattern", "all-to-all", "--active", "7", ranks=4).experiments
    plan = exp._plan(traffic("all-to-all", 1, 4), 7)
    assert plan == [(0, 0, 0), (2, 0, 1), (3, 0, 2), (0, 1, 3), (2, 1, 4), (3, 1, 5),
                    (0, 2, 6)]  # fmt: skip
    (exp,) = plan_of("--pattern", "all-to-all", "--active", "7", "--transport", "dc",
                     ranks=4).experiments  # fmt: skip
    # DCI k reaches every peer in turn: DCI-peer pairs, the DCI changing destination
    assert [q for _, _, q in exp._plan(traffic("all-to-all", 1, 4), 7)] == [0, 0, 0, 1, 1, 1, 2]


def test_units_own_qps_and_share_the_visits() -> None:
    assert cycle_unit_lanes([0, 1, 2, 3, 4], 2) == [[0, 2, 4], [1, 3]]
    assert cycle_unit_lanes([0, 0, 1, 1, 2], 2) == [[0, 1, 4], [2, 3]]  # a DCI's lanes together
    assert cycle_lane_writes([0, 1, 2, 3, 4], 2, 4, 7) == [12, 16, 8, 12, 8]


class _Cycle(Traffic):
    """Rank 0's RC QPs or DCIs towards rank 1, lanes of one 64-byte slice each."""


@pytest.mark.parametrize(
    ("dc", "units", "w", "visits"),
    [(False, 1, 1, 7), (False, 3, 4, 10), (False, 2, 8, 3), (True, 2, 2, 9)],
)
def test_landing_matches_the_cycle_rule(dc: bool, units: int, w: int, visits: int) -> None:
    """What the native cycle leaves in every lane's slice is what cycle_lane_writes says (the
    rule the experiment validates against): slot k mod slots holds the k-th write's bytes."""
    size, slice_bytes = 8, 64  # 8 slots per lane: laps wrap over them
    with _Cycle(qps=0 if dc else 5, dcis=3 if dc else 0, depth=64, slice_bytes=slice_bytes,
                mr_bytes=5 * slice_bytes, both_ways=False, seed=3) as t:
        if dc:  # 3 DCIs, 2 destinations each: lanes (DCI 0, a), (0, b), (1, c), (1, d), (2, e)
            dcis = t.dc_lanes(3)
            lanes = tuple(Lane(dcis[i // 2].qp, 1, *_slices(t, i, slice_bytes), dcis[0].dc)
                          for i in range(5))  # fmt: skip
            keys = [i // 2 for i in range(5)]
        else:
            lanes, keys = t.lanes(5), list(range(5))
        sub = HostSubmitter(rank=0, fabric=t.fabrics[0], progress=t.fabrics[0].progress_policy(),
                            timeout_s=2.0)  # fmt: skip
        res = sub.cycle(CycleWork(lanes, units, w, 2, size, True, visits, 0, 4))
        counts = cycle_lane_writes(keys, units, w, visits)
        assert res.messages == visits * w * units
        assert_cycle_landing(t, counts, size, slice_bytes)


def assert_cycle_landing(t: Traffic, counts: list[int], size: int, slice_bytes: int) -> None:
    """Lane i's slice of rank 1's landing holds the first min(counts[i], slots) slots of rank
    0's source slice i, and nothing past them."""
    src, landing = t.src(0), t.landing(1)
    for i, n in enumerate(counts):
        got = landing[i * slice_bytes : (i + 1) * slice_bytes]
        written = min(n, slice_bytes // size) * size
        want = src[i * slice_bytes : i * slice_bytes + written]
        assert np.array_equal(got[:written], want), f"lane {i}"
        assert not got[written:].any(), f"lane {i} wrote past its {n} writes"


def _slices(t: Traffic, i: int, n: int):
    from gicbench.submit.base import Buffer

    src, dst = t.src_mr(0), t.landing_mr(1)
    return Buffer.local(src, i * n, n), Buffer(dst.addr + i * n, dst.rkey, n)


def test_the_cycle_is_refused_by_shape_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    from gicbench.submit import base as submitters
    from gicbench.submit.doca.submitter import DocaSubmitter

    # available or not, DOCA's submitter has no cycle loop: the shape check is what refuses
    monkeypatch.setattr(DocaSubmitter, "availability", classmethod(lambda cls, probes: None))

    having = [n for n in submitters.names() if Shape.CYCLE in submitters.get(n).shapes]
    assert sorted(having) == ["gpu", "host", "proxy"]
    with pytest.raises(UnsupportedError, match="cycle loops"):
        plan_of("--submitter", "doca")


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--transport", "dc"], "transport (--transport)"),  # DCI-peer pairs share a DCI
        (["--threads", "33", "--active", "64"], "threads (--threads)"),  # a ring per unit
        (["--active", "70000", "--pool", "70000"], "pool (--pool)"),  # 16-bit lane field
        (["--rings", "4"], "rings (--rings)"),  # a ring per unit: --rings would do nothing
        (["--producers", "2"], "producers (--producers)"),
    ],
)
def test_proxy_cycle_refusals_name_the_field(args: list[str], field: str) -> None:
    with pytest.raises((ConfigError, UnsupportedError)) as e:
        plan_of("--submitter", "proxy", *args)
    assert f"invalid {field}=" in str(e.value)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--transport", "dc"], "transport (--transport)"),
        (["--publish", "warp"], "publish (--publish)"),  # a unit is one thread
    ],
)
def test_gpu_cycle_refusals_name_the_field(monkeypatch: pytest.MonkeyPatch, args: list[str],
                                           field: str) -> None:
    from gicbench.submit.gpu import GpuSubmitter

    monkeypatch.setattr(GpuSubmitter, "availability", classmethod(lambda cls, probes: None))
    with pytest.raises((ConfigError, UnsupportedError)) as e:
        plan_of("--submitter", "gpu", *args)
    assert f"invalid {field}=" in str(e.value)


@pytest.mark.parametrize(("units", "workers", "w", "visits"),
                         [(1, 1, 1, 7), (3, 2, 4, 10), (2, 2, 8, 3), (4, 4, 3, 9)])
def test_proxy_landing_matches_the_cycle_rule(units: int, workers: int, w: int,
                                              visits: int) -> None:
    """mini-proxy's cycle (host producers on a ring each, workers owning their units' QPs)
    leaves what cycle_lane_writes says in every lane's slice, as the host loop does."""
    from gicbench.submit.proxy.params import ProxyParams
    from gicbench.submit.proxy.submitter import ProxySubmitter

    size, slice_bytes = 8, 64
    with _Cycle(qps=7, depth=64, slice_bytes=slice_bytes, mr_bytes=7 * slice_bytes,
                both_ways=False, seed=5) as t:
        lanes = t.lanes(7)
        sub = ProxySubmitter(rank=0, fabric=t.fabrics[0],
                             progress=t.fabrics[0].progress_policy(), timeout_s=5.0,
                             params=ProxyParams(workers=workers, precondition_s=0.0))
        res = sub.cycle(CycleWork(lanes, units, w, 2, size, True, visits, 2, 4))
        counts = cycle_lane_writes(list(range(7)), units, w, visits + 2)
        assert res.messages == visits * w * units
        assert sum(sub.last_ring_messages) == (visits + 2) * w * units
        assert len(sub.last_workers) == min(workers, units)
        assert_cycle_landing(t, counts, size, slice_bytes)


def test_a_pool_larger_than_emus_table_is_refused_in_pre_flight(tmp_path: Path) -> None:
    """emu's QP table holds 32,766 QPs a rank: more is refused before the run directory."""
    out = tmp_path / "run"
    r = launch(2, "run", "active-connections", "--active", "40000", "--sq-depth", "64",
               "--quiet", "-o", str(out), timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("invalid QPs per rank=40000") == 1, r.stderr
    assert "32,766" in r.stderr and "--pool" in r.stderr
    assert not out.exists()


def test_proxy_cycle_on_qps_that_never_complete_times_out_naming_the_qp() -> None:
    """A worker whose lanes never complete (QPs left in RESET) gives up at the deadline with
    the QP, the ring and its indices, never a hang; the rings are unmapped."""
    from gicbench import _native
    from gicbench.errors import CompletionTimeout
    from gicbench.submit.proxy.params import ProxyParams
    from gicbench.submit.proxy.submitter import ProxySubmitter

    with _Cycle(qps=4, depth=64, slice_bytes=64, mr_bytes=4 * 64, both_ways=False, seed=1,
                connect=False) as t:  # fmt: skip
        sub = ProxySubmitter(rank=0, fabric=t.fabrics[0],
                             progress=t.fabrics[0].progress_policy(), timeout_s=0.5,
                             params=ProxyParams(workers=2, precondition_s=0.0))  # fmt: skip
        with pytest.raises(CompletionTimeout) as e:
            sub.cycle(CycleWork(t.lanes(4), 2, 4, 2, 8, True, 50, 0, 10))
        msg = str(e.value)
        assert "rank 0" in msg and "no completion" in msg and "worker" in msg, msg
        assert "QP 0x" in msg and "SQ producer index" in msg and "ring" in msg, msg
    assert _native.proxy.live_rings() == 0
