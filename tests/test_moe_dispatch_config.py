"""moe-dispatch's configuration: listed everywhere, refused where nothing can dispatch (a
machine without a GPU) before anything exists, bad knobs refused with exit status 2 naming the
field, the checks that need the world size or the GPU, and the sweep's points (backends
shuffled per round, reproducibly)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from launching import gicbench

from gicbench.cli.main import main
from gicbench.config import RunConfig
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.experiments import moe_dispatch
from gicbench.experiments.moe_dispatch import MoeDispatch
from gicbench.patterns import traffic
from gicbench.submit.base import NoParams, Shape, Submitter
from gicbench.submit.work import DISPATCH_BACKENDS


def test_listed_with_its_knobs() -> None:
    r = gicbench("list", "moe-dispatch")
    assert r.returncode == 0, r.stderr
    for flag in ("--tokens", "--topk", "--experts", "--hidden", "--sm-cap", "--backend",
                 "--rounds", "--wait-us", "--iters", "--warmup"):  # fmt: skip
        assert flag in r.stdout
    assert "arXiv 2611.12362" in r.stdout


def test_refused_here_before_anything_exists(capsys, tmp_path) -> None:
    """No submitter here has the dispatch loop (host, the default, has none; gpu needs a GPU):
    exit 2 with the reason, and no run directory is made."""
    out = tmp_path / "run"
    rc = main(["run", "moe-dispatch", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "moe-dispatch needs dispatch loops" in err and "submitter host" in err
    assert not out.exists()
    if gpu_submitter_runs_here():
        pytest.skip("a GPU submitter is available here")
    rc = main(["run", "moe-dispatch", "--submitter", "gpu", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "submitter gpu is not available here" in err and "GPU" in err
    assert not out.exists()


def gpu_submitter_runs_here() -> bool:
    from gicbench.platform import LazyProbes
    from gicbench.submit import base

    return base.get("gpu").availability(LazyProbes()) is None


@pytest.mark.parametrize(
    ("args", "field", "allowed"),
    [
        (["--tokens", "0"], "tokens (--tokens)", "integers in 1..8192 (0 is not)"),
        (["--tokens", "1,,2"], "tokens (--tokens)", "no empty items"),
        (["--tokens", "4,4"], "tokens (--tokens)", "4 repeated"),
        (["--tokens", "x"], "tokens (--tokens)", "integers"),
        (["--topk", "9", "--experts", "8"], "topk (--topk)", "at most --experts (8)"),
        (["--topk", "0"], "topk (--topk)", "(0 is not)"),
        (["--experts", "0"], "experts (--experts)", "1 <= experts"),
        (["--backend", "nvshmem"], "backend (--backend)", "gdaki, free-flow, gpi, gpi-mc"),
        (["--sm-cap", "0"], "sm_cap (--sm-cap)", "(0 is not)"),
        (["--wait-us", "-1"], "wait_us (--wait-us)", "waits in 0..1e+06"),
        (["--wait-us", "soon"], "wait_us (--wait-us)", "a number"),
        (["--hidden", "100"], "hidden (--hidden)", "a multiple of 8"),
        (["--rounds", "0"], "rounds (--rounds)", "1 <= rounds"),
        (["-n", "0"], "iters (-n)", "1 <= iters"),
    ],
)
def test_bad_knobs_are_refused(capsys, args: list[str], field: str, allowed: str) -> None:
    rc = main(["run", "moe-dispatch", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"invalid {field}=" in err, err
    assert allowed in err, err


def test_good_knobs_reach_the_submitter_refusal(capsys) -> None:
    """Valid knobs (hidden 7168, waits, one backend) pass the knob checks: the refusal is the
    submitter's."""
    rc = main(["run", "moe-dispatch", "--hidden", "7168", "--tokens", "1,2,4", "--topk", "8",
               "--wait-us", "0,4,8.5", "--backend", "gpi"])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "needs dispatch loops" in err, err


# ---- checks with a submitter that has the shape (none is available here) -----------------------
class _Dispatcher(Submitter):
    name = "test-dispatcher"
    summary = "a stand-in with the dispatch shape"
    shapes = frozenset({Shape.DISPATCH})
    posting = ("mlx5-queues",)
    refused: ClassVar[dict[str, str]] = {}

    @classmethod
    def availability(cls, probes: Any) -> str | None:
        return None

    @classmethod
    def dispatch_backends(cls, params: Any, provider: str, provider_params: Any) -> dict:
        return {b: cls.refused.get(b) for b in DISPATCH_BACKENDS}


def _experiment(**knobs: Any) -> MoeDispatch:
    cfg = RunConfig.build(experiments=["moe-dispatch"], pattern="all-to-all", **knobs)
    exp = MoeDispatch.from_config(cfg, _Dispatcher, NoParams())
    assert isinstance(exp, MoeDispatch)
    return exp


def test_a_backend_the_submitter_refuses_is_named_with_its_reason() -> None:
    _Dispatcher.refused = {"gpi-mc": "no FANOUT descriptor on this provider"}
    try:
        _experiment(backend=("gdaki", "gpi"))  # the refused one not chosen: fine
        with pytest.raises(UnsupportedError, match=r"backend \(--backend\) gpi-mc: no FANOUT"):
            _experiment()
    finally:
        _Dispatcher.refused = {}


def test_the_default_submitter_contract_refuses_every_backend() -> None:
    reasons = Submitter.dispatch_backends.__func__(_Dispatcher, None, "emu", None)
    assert set(reasons) == set(DISPATCH_BACKENDS)
    assert all("has no dispatch loop" in why for why in reasons.values())


def test_experts_must_spread_evenly_over_the_ranks() -> None:
    exp = _experiment(experts=128)
    exp.check_rank(traffic("all-to-all", 0, 4))
    assert exp.lanes_per_peer_at(4) == 32
    with pytest.raises(ConfigError, match=r"invalid experts \(--experts\)=128: allowed a "
                       r"multiple of the 3 ranks"):  # fmt: skip
        exp.check_rank(traffic("all-to-all", 1, 3))


def test_pairs_only_with_two_ranks() -> None:
    cfg = RunConfig.build(experiments=["moe-dispatch"], pattern="pairs")
    exp = MoeDispatch.from_config(cfg, _Dispatcher, NoParams())
    exp.check_rank(traffic("pairs", 0, 2))
    with pytest.raises(ConfigError, match=r"pattern \(--pattern\)='pairs'"):
        exp.check_rank(traffic("pairs", 0, 4))


def test_sm_cap_above_the_gpus_sms_is_refused(monkeypatch) -> None:
    exp = _experiment(sm_cap=("32", "64", "128"))
    monkeypatch.setattr(moe_dispatch, "gpu_sm_count", lambda: 132)  # an H200
    exp.check_rank(traffic("all-to-all", 0, 2))
    monkeypatch.setattr(moe_dispatch, "gpu_sm_count", lambda: 108)
    with pytest.raises(ConfigError, match=r"sm_cap \(--sm-cap\).*at most the GPU's 108 SMs"):
        exp.check_rank(traffic("all-to-all", 0, 2))
    monkeypatch.setattr(moe_dispatch, "gpu_sm_count", lambda: None)  # no GPU: nothing to check
    exp.check_rank(traffic("all-to-all", 0, 2))


def test_points_shuffle_the_backends_per_round_reproducibly() -> None:
    exp = _experiment(rounds=4, tokens=("1", "8"), topk=("4",), sm_cap=("32", "64"), seed=11)
    pts = exp.points()
    assert len(pts) == 4 * 4 * 2 * 1 * 2
    assert pts == _experiment(rounds=4, tokens=("1", "8"), topk=("4",), sm_cap=("32", "64"),
                              seed=11).points()  # fmt: skip
    per_round = [list(dict.fromkeys(p["backend"] for p in pts if p["round"] == r))
                 for r in range(4)]  # fmt: skip
    for r, order in enumerate(per_round):
        want = [DISPATCH_BACKENDS[i] for i in np.random.default_rng(11 + r).permutation(4)]
        assert order == want
    assert len({tuple(o) for o in per_round}) > 1  # not the same order every round
    first = pts[0]
    assert first == {
        "experiment": "moe-dispatch", "round": 0, "backend": per_round[0][0], "tokens": 1,
        "topk": 4, "hidden": 2048, "experts": 128, "sm_cap": 32, "wait_us": None, "iters": 20,
        "warmup": 5, "seed": 11,
    }  # fmt: skip
    waits = _experiment(rounds=1, backend=("gdaki",), tokens=("2",), topk=("8",),
                        sm_cap=("128",), wait_us=("0", "4", "16")).points()  # fmt: skip
    assert [p["wait_us"] for p in waits] == [0.0, 4.0, 16.0]


def test_landing_slices_hold_t_max_slots_and_the_count_word() -> None:
    exp = _experiment(tokens=("1", "256"), hidden=2048, experts=128)
    exp.check_rank(traffic("all-to-all", 0, 8))
    assert exp.counter_offset == 256 * 4096
    assert exp.max_message >= exp.counter_offset + 8 and exp.max_message % 8 == 0
    # the source region (16 lanes x the slice) holds tokens, staging and the self area
    assert 16 * exp.max_message >= 2 * 256 * 4096 + 16 * (256 * 4096 + 8)


def test_list_knobs_from_a_sweep_file_as_lists_or_text() -> None:
    p = moe_dispatch.MoeDispatchParams(tokens=[1, 16], wait_us="0,4.5", sm_cap=(128,))
    assert p.token_grid == (1, 16) and p.wait_grid == (0.0, 4.5) and p.sm_cap_grid == (128,)
    assert moe_dispatch.MoeDispatchParams(tokens="16").token_grid == (16,)


def test_the_plan_reserves_gpi_room_only_for_the_gpi_backends() -> None:
    """mini-gda asks for room for one GPI queue a rank; the plan keeps it only when the run's
    backends post into GPI queues (the emulated NIC sizes its segment from it)."""
    from gicbench.plan import make_plan

    def gpis(backends: tuple[str, ...]) -> tuple:
        cfg = RunConfig.build(experiments=["moe-dispatch"], submitter="gpu", backend=backends,
                              landing_bytes=256 << 20)  # fmt: skip
        return make_plan(cfg, here=False).queue_options().gpis

    assert gpis(("gdaki", "free-flow")) == ()
    assert len(gpis(("gdaki", "gpi"))) == 1
    assert len(gpis(("gpi-mc",))) == 1
