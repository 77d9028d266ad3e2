"""loaded-rtt and payload with --submitter gpu (mini-gda), without a GPU: the plan (lanes, points,
what is refused before anything exists), the kernels' own checks, pacing, the shared/reserved
ratio over mini-gda's rows, and loaded.cu compiling for every ordering with nvcc."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from gpu_helpers import nvcc_or_skip
from test_gpu_kernels_nvcc import CUDA

from gicbench.config import RunConfig
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.plan import make_plan
from gicbench.platform import LazyProbes, Probe
from gicbench.submit.base import Buffer, LoadedResult, LoadedWork
from gicbench.submit.gpu import ORDERINGS
from gicbench.submit.gpu import loaded as gl
from gicbench.submit.gpu.build import KERNELS


def gpu_probes() -> LazyProbes:
    """Probes that say a GPU and CuPy are here (the rest of pre-flight is real)."""
    p = LazyProbes()
    p["cupy"] = Probe("cupy", True, "faked for the test")
    return p


def plan(**kw):
    return make_plan(RunConfig.build(submitter="gpu", **kw), gpu_probes())


def test_loaded_rtt_plans_a_private_probe_qp_and_one_qp_per_background_cta() -> None:
    p = plan(experiments=["loaded-rtt"], background=8, batch=4, pace=2.5)
    (exp,) = p.experiments
    assert exp.lanes_per_peer == 9 and p.lanes == 9 and p.rc_qps_per_peer() == 9
    (_, points) = p.points[0]
    assert [pt["queue"] for pt in points] == ["shared", "reserved"]
    assert points[0] == {
        "size": 8,
        "queue": "shared",
        "batch": 4,
        "background": 8,
        "pace_mps": 2.5,
        "iters": 1000,
        "warmup": 100,
    }  # no proxy geometry (workers, rings) in mini-gda's points
    assert [c.key for c in exp.columns()][:4] == ["size", "queue", "batch", "background"]


def test_loaded_rtt_gpu_takes_shared_with_tuned_nothing_proxy_only() -> None:
    """The proxy's handoff rule (a shared ring needs --handoff baseline) is the proxy's: mini-gda
    shares a QP through its reservation, so shared runs at the defaults."""
    p = plan(experiments=["loaded-rtt"], queue=("shared",))
    assert p.points[0][1][0]["queue"] == "shared"


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"batch": 33}, "batch (--batch)"),
        ({"batch": 32, "sq_depth": 64, "max_size": 512, "min_size": 512}, "batch (--batch)"),
        ({"min_size": 1024}, "min_size (-b)"),
        ({"rings": 4}, "rings (--rings)"),
        ({"handoff": "baseline"}, "handoff (--handoff)"),
    ],
)
def test_loaded_rtt_gpu_refusals_before_anything_exists(values, field: str) -> None:
    with pytest.raises(ConfigError) as e:
        plan(experiments=["loaded-rtt"], **values)
    assert e.value.field == field


def test_loaded_rtt_still_refuses_the_host_submitter() -> None:
    """Refused by shape, not by name: the host submitter has no loaded loop."""
    with pytest.raises(UnsupportedError) as e:
        make_plan(RunConfig.build(submitter="host", experiments=["loaded-rtt"]))
    msg = str(e.value)
    assert "loaded" in msg and "submitter host does not have" in msg
    assert "gpu" in msg and "proxy" in msg  # the submitters that have it


def test_payload_gpu_plans_pointer_writes_to_1mib() -> None:
    p = plan(experiments=["payload"])
    (_, points) = p.points[0]
    assert points[0]["size"] == 8 and points[-1]["size"] == 1 << 20
    assert {pt["payload"] for pt in points} == {"pointer"}


def _lane(depth: int, slice_bytes: int):
    qp = SimpleNamespace(sq=SimpleNamespace(wqebb_cnt=depth), qpn=1)
    buf = Buffer(0x1000, 1, slice_bytes)
    return SimpleNamespace(qp=qp, src=buf, dst=buf, dc=None)


def _work(**kw) -> LoadedWork:
    base = {
        "lanes": tuple(_lane(64, 512) for _ in range(3)),
        "requester": True,
        "shared": True,
        "background": 2,
        "batch": 8,
        "pace_mps": 0.0,
        "size": 8,
        "reply": Buffer(0x1000, 1, 512),
        "iters": 10,
        "warmup": 1,
    }
    return LoadedWork(**{**base, **kw})


def test_kernel_preconditions_are_checked_on_the_host() -> None:
    gl.check(_work(), 1)
    cases = [
        (_work(batch=64), "batch (--batch)"),
        (_work(batch=32), "batch (--batch)"),  # 33 WQEBBs > an SQ of 32 after the probe's
        (_work(size=600), "size"),
        (_work(background=3), "lanes"),
        (_work(lanes=tuple(_lane(64, 8) for _ in range(3))), "landing_bytes (--landing-bytes)"),
    ]
    for work, field in cases:
        with pytest.raises(ConfigError) as e:
            gl.check(work, 2 if work.batch == 32 else 1)
        assert e.value.field == field


def test_pace_splits_the_endpoint_rate_over_its_ctas() -> None:
    assert gl.pace_ps(4, 0.0) == 0
    assert gl.pace_ps(4, 2.0) == 2_000_000  # 4 CTAs at 0.5 M msg/s each: 2 µs per message
    assert gl.pace_ps(64, 32.0) == 2_000_000


def test_shared_over_private_qp_ratio_is_the_proxys_rule() -> None:
    """mini-gda's rows go through the one ratio rule (analysis/fits/apply.py _queue_ratio)."""
    from gicbench.analysis.fits import apply

    t = pd.DataFrame(
        {
            "size": [8, 8],
            "queue": ["shared", "reserved"],
            "batch": [8, 8],
            "background": [64, 64],
            "p50_us": [40.0, 8.0],
            "p99_us": [90.0, 30.0],
            "background_mps": [3.0, 3.5],
        }
    )
    (o,) = apply.fit_table("ratio", t, ["size", "queue", "batch", "background"])
    assert o.params["p50 shared/reserved"].value == pytest.approx(5.0)
    assert o.params["p99 shared/reserved"].value == pytest.approx(3.0)
    assert o.params["background reserved"].value == 3.5


@pytest.mark.nvcc
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_loaded_kernels_compile_for_sm90_with_every_ordering(ordering: str, tmp_path: Path) -> None:
    out = tmp_path / "loaded.ptx"
    cmd = [nvcc_or_skip("cuda/gda"), "-arch=sm_90", "-std=c++17", f"-I{CUDA}", "-ptx",
           f"-DGDA_ORDERING={ORDERINGS.index(ordering)}", str(CUDA / "gda" / "loaded.cu"),
           "-o", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    ptx = out.read_text()
    for k in (*gl.KERNELS, *KERNELS):  # mini-gda's own kernels come with the include
        assert re.search(rf"\.entry {k}\(", ptx), f"{k} missing for {ordering}"


def test_run_point_hands_mini_gda_its_lanes_and_records_the_background() -> None:
    """The experiment's GPU path, with a submitter that records what it is given (the kernels
    are the gpu-marked tests'): C + 1 lanes, lane 0 the probe's, the rate carried per endpoint."""
    p = plan(experiments=["loaded-rtt"], background=4, batch=8)
    (exp,) = p.experiments
    (_, points) = p.points[0]
    given = []

    class Sub:
        def loaded(self, work: LoadedWork) -> LoadedResult:
            given.append(work)
            rtt = np.arange(1, work.iters + 1, dtype=np.int64) if work.requester else None
            return LoadedResult(
                rtt_ns=rtt if rtt is not None else np.array([], dtype=np.int64),
                background=3000,
                probe_ns=1_000_000,
                details={"background_posted": 4000, "background_doorbells": 500},
            )

    lanes_asked = []

    def lanes_to(peer: int, transport: str, count: int):
        lanes_asked.append((peer, transport, count))
        return tuple(_lane(256, 512) for _ in range(count))

    for sends in (True, False):
        traffic = SimpleNamespace(
            sends=sends,
            sends_to=(1,) if sends else (),
            receives_from=() if sends else (0,),
            role="requester" if sends else "responder",
        )
        ctx = SimpleNamespace(
            traffic=traffic,
            submitter=Sub(),
            lanes_to=lanes_to,
            landing_from=lambda peer: Buffer(0x2000, 1, 512),
        )
        for pt in points:
            res = exp.run_point(ctx, pt)
            assert res.results["background_mps"] == pytest.approx(3.0)  # 3000 in 1 ms
            assert res.results["background_posted"] == 4000
            assert ("rtt_ns" in res.samples) == sends
    assert lanes_asked == [(1, "rc", 5), (1, "rc", 5), (0, "rc", 5), (0, "rc", 5)]
    assert [w.shared for w in given] == [True, False, True, False]
    assert [w.requester for w in given] == [True, True, False, False]
    assert {(w.background, w.batch, len(w.lanes)) for w in given} == {(4, 8, 5)}
