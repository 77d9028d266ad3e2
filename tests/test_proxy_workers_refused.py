"""--workers above the QPs a msg-rate/payload point drives: refused naming the flag and the
range, before any ring or worker exists (it was capped silently to the lanes: a run asking
for 8 workers ran 2 and recorded --workers 8)."""

from __future__ import annotations

import pytest
from host_world import emu_world, proxy

from gicbench import _native
from gicbench.errors import ConfigError
from gicbench.submit.base import RateWork
from gicbench.submit.proxy import ProxySubmitter
from gicbench.submit.proxy.params import ProxyParams
from gicbench.submit.proxy.rings import lane_counts, proxy_geometry


def test_geometry_refuses_workers_above_lanes() -> None:
    with pytest.raises(ConfigError, match=r"workers \(--workers\).*1\.\.2 "):
        proxy_geometry(ProxyParams(workers=4, rings=4), 2, 1)
    with pytest.raises(ConfigError, match=r"workers \(--workers\)"):
        lane_counts(ProxyParams(workers=3, rings=4), 2, 1, 100)
    assert proxy_geometry(ProxyParams(workers=2, rings=4), 2, 1) == (2, 4, 1)


def test_rate_refuses_workers_above_lanes_before_any_engine() -> None:
    with emu_world(nqps=2, depth=64) as w:
        f = w.fabrics[0]
        sub = proxy(w, 0, workers=4, rings=4)
        before = f.counters()["wqes"]
        with pytest.raises(ConfigError, match=r"workers \(--workers\).*1\.\.2 ") as e:
            sub.rate(RateWork(w.lanes(2), 1, 1, 64, True, 100, 0, 10))
        assert "4" in str(e.value)
        assert sub.last_workers == []  # no engine started
        assert _native.proxy.live_rings() == 0
        assert f.counters()["wqes"] == before
        sub.close()


def test_check_rate_lanes_for_a_pre_flight_caller() -> None:
    """What an experiment's check_rank (the pattern known) calls to refuse it in pre-flight."""
    with pytest.raises(ConfigError, match=r"workers \(--workers\)=3.*1\.\.2 "):
        ProxySubmitter.check_rate_lanes(ProxyParams(workers=3, rings=4), 2)
    ProxySubmitter.check_rate_lanes(ProxyParams(workers=2), 2)
    ProxySubmitter.check_rate_lanes(ProxyParams(), 1)  # --workers not given: 1
    # --rings below the lanes: every lane needs a ring (0, the default, derives them)
    with pytest.raises(ConfigError, match=r"rings \(--rings\)=1.*>= 4"):
        ProxySubmitter.check_rate_lanes(ProxyParams(rings=1), 4)
    ProxySubmitter.check_rate_lanes(ProxyParams(), 64)


@pytest.mark.parametrize("experiment", ["msg-rate", "payload"])
def test_pre_flight_refuses_workers_above_a_ranks_lanes(experiment: str) -> None:
    """Pre-flight refuses it, before any NIC exists (exit 2): in make_plan where the pattern
    gives every sender one destination, else in the experiment's check_rank with the rank's
    part in the pattern (all-to-all: -q x the other ranks)."""
    from gicbench.config import RunConfig
    from gicbench.patterns import traffic
    from gicbench.plan import make_plan

    def cfg(pattern: str) -> RunConfig:
        return RunConfig.build(
            experiments=(experiment,), submitter="proxy", pattern=pattern, workers=4, rings=4,
            qps=2,
        )  # fmt: skip

    with pytest.raises(ConfigError, match=r"workers \(--workers\)=4.*1\.\.2 "):
        make_plan(cfg("pairs"))
    plan = make_plan(cfg("all-to-all"))
    with pytest.raises(ConfigError, match=r"workers \(--workers\)=4.*1\.\.2 "):
        for exp in plan.experiments:
            exp.check_rank(traffic("all-to-all", 0, 2))  # one peer: 2 lanes
    for exp in plan.experiments:
        exp.check_rank(traffic("all-to-all", 0, 3))  # two peers: 4 lanes, 4 workers


def test_pre_flight_refuses_rings_below_a_ranks_lanes() -> None:
    """--rings given below what a rank's rate loop drives (fan-out at 5 ranks: 4 destinations)
    is refused by the rank's pre-flight, naming --rings; left at 0 it is derived."""
    from gicbench.config import RunConfig
    from gicbench.patterns import traffic
    from gicbench.plan import make_plan

    plan = make_plan(RunConfig.build(experiments=("msg-rate",), submitter="proxy",
                                     pattern="fan-out", rings=1))  # fmt: skip
    with pytest.raises(ConfigError, match=r"rings \(--rings\)=1.*>= 4"):
        for exp in plan.experiments:
            exp.check_rank(traffic("fan-out", 0, 5))
    plan = make_plan(RunConfig.build(experiments=("msg-rate",), submitter="proxy",
                                     pattern="fan-out"))  # fmt: skip
    for exp in plan.experiments:
        exp.check_rank(traffic("fan-out", 0, 5))
