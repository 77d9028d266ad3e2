"""mini-proxy's pre-flight decision on the verbs provider (the engine itself runs in the VM
group, tests/vm/test_proxy_verbs.py, on rxe): the proxy posts through post-send there, so the
plan accepts it; inline payloads beyond the verbs QPs' inline bytes are refused before anything
exists; the lane rows the native engine gets come from the verbs fabric's own QPs and CQs."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gicbench.config import RunConfig
from gicbench.errors import ConfigError
from gicbench.plan import make_plan
from gicbench.submit.base import Buffer, Lane
from gicbench.submit.proxy.verbs import on_verbs, refusal, verbs_lanes


def plan(**kw):
    return make_plan(RunConfig.build(submitter="proxy", **kw), here=False)


def test_the_plan_accepts_the_proxy_on_verbs() -> None:
    p = plan(provider="verbs", experiments=["single-op", "proxy-rate", "loaded-rtt", "payload"],
             payload="pointer", rings=4, queue=["shared", "reserved"],
             handoff="baseline")  # fmt: skip
    assert p.provider.name == "verbs"
    plan(provider="verbs", experiments=["single-op"], max_size=64)  # 64 B inline: the QPs' own


def test_inline_beyond_the_verbs_qps_is_refused_in_pre_flight() -> None:
    with pytest.raises(ConfigError) as e:
        plan(provider="verbs", experiments=["single-op"], max_size=128)
    assert e.value.field == "payload (--payload)"
    assert "pointer for sizes above 64 B" in str(e.value) and "128 B" in str(e.value)
    plan(provider="verbs", experiments=["single-op"], max_size=128, payload="pointer")
    plan(provider="emu", experiments=["single-op"], max_size=128)  # emu copies up to 512 B
    # loaded-rtt's probe and background are always inline: refused too (was refused after
    # bring-up, by the lane check)
    with pytest.raises(ConfigError) as e:
        plan(provider="verbs", experiments=["loaded-rtt"], max_size=128, handoff="baseline",
             rings=4)  # fmt: skip
    assert e.value.field == "max_size (-e)" and "loaded-rtt" in str(e.value)


def test_refusal_only_on_post_send_providers() -> None:
    pts = [("single-op", {"payload": "inline", "size": 4096})]
    assert refusal(pts, "emu", ("mlx5-queues",)) is None
    assert refusal(pts, "verbs", ("post-send",)) is not None
    assert refusal([("x", {"payload": "pointer", "size": 4096})], "verbs", ("post-send",)) is None


class FakeVerbsFabric:
    mlx5_queues = False
    device = "rxe0"

    def __init__(self, inline: int) -> None:
        self.inline = inline

    def max_inline(self, qp) -> int:
        return self.inline

    def qpn_of(self, qp) -> int:
        return qp.qpn

    def cqn_of(self, cq) -> int:
        return cq.cqn


def _lane(qpn: int) -> Lane:
    cq = SimpleNamespace(cqn=qpn + 100, ncqe=64)
    qp = SimpleNamespace(qpn=qpn, sq=SimpleNamespace(wqebb_cnt=32, cq=cq))
    return Lane(qp, 1, Buffer(0x1000, 7, 4096), Buffer(0x9000, 9, 2048))  # type: ignore[arg-type]


def test_verbs_lane_rows_and_the_qps_inline_limit() -> None:
    f = FakeVerbsFabric(inline=32)
    assert on_verbs(f) and not on_verbs(SimpleNamespace(mlx5_queues=True))
    rows = verbs_lanes(f, (_lane(5), _lane(6)), inline=False, max_size=1024)
    assert rows[0] == (5, 105, 32, 64, 32, (0x1000, 7, 2048), (0x9000, 9, 2048))
    assert rows[1][0] == 6
    assert verbs_lanes(f, (_lane(5),), inline=True, max_size=32)
    with pytest.raises(ConfigError, match="accepts 32 inline bytes"):
        verbs_lanes(f, (_lane(5),), inline=True, max_size=64)
