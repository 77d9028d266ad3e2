"""Configuration and plan validation (the Python API gets the same errors as the command line):
shared fields in RunConfig, experiment and submitter knobs through the plan, nothing created."""

from __future__ import annotations

import pytest

from gicbench.config import RunConfig, size_sweep
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.knobs import parse_size
from gicbench.plan import all_knobs, make_plan
from gicbench.submit.gpu import ORDERINGS


def plan(**kw):
    return make_plan(RunConfig.build(**kw))


def test_defaults_are_valid() -> None:
    p = plan()
    assert p.cfg.to_dict()["experiments"] == ["single-op"]
    assert p.experiments[0].params.sizes == [8]
    assert not p.uses_dc and p.dct_count() == 0 and p.dci_count(3) == 0


def test_size_sweep_and_parsing() -> None:
    assert size_sweep(8, 64, 2) == [8, 16, 32, 64]
    assert size_sweep(8, 100, 4) == [8, 32]
    assert [parse_size(s) for s in ("8", "4K", "4k", "1M", "2G", "16KiB")] == [
        8,
        4096,
        4096,
        1 << 20,
        2 << 30,
        16384,
    ]
    p = plan(payload="pointer", min_size=8, max_size=1 << 20, size_factor=4)
    assert p.experiments[0].params.sizes[-1] == 1 << 19


def test_seven_orderings_of_table_4_belong_to_the_gpu_submitter() -> None:
    assert len(ORDERINGS) == 7
    knob = all_knobs()["ordering"]
    assert knob.choices == ORDERINGS
    # The host submitter does not take an ordering: accepted-and-ignored is refused.
    with pytest.raises(ConfigError, match=r"only with --submitter gpu"):
        plan(ordering="sys-fence")


def test_gpu_submitter_is_refused_here_with_the_reason() -> None:
    with pytest.raises(UnsupportedError, match="submitter gpu is not available here"):
        plan(submitter="gpu")
    with pytest.raises(ConfigError, match="one of"):
        plan(submitter="nosuch")


def test_provider_without_implementation_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="provider verbs is not available"):
        plan(provider="verbs")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"qps": 0}, "qps (-q)"),
        ({"threads": 0}, "threads (-t)"),
        ({"sq_depth": 100}, "sq_depth (--sq-depth)"),
        ({"timeout_s": -1}, "timeout_s (--timeout)"),
        ({"timeout_s": float("nan")}, "timeout_s (--timeout)"),
        ({"timeout_s": 1e10}, "timeout_s (--timeout)"),
        ({"seed": -1}, "seed (--seed)"),
        ({"iters": 10**11}, "iters (-n)"),
        ({"iters": 2 * 10**9}, "iters (-n)"),
        ({"json": True, "csv": True}, "output"),
        ({"experiments": []}, "experiment"),
        ({"iters": True}, "iters (-n)"),
        ({"scope": "pe"}, "scope (--scope)"),
        ({"progress": "poll"}, "progress (--progress)"),
        ({"pattern": "ring"}, "pattern (--pattern)"),
        ({"min_size": 4}, "min_size (-b)"),
        ({"modes": ("issue", "bogus")}, "modes (--modes)"),
        ({"dcis": 4}, "dcis (--dcis)"),  # no experiment uses DC
        (
            {"landing_bytes": 4096, "payload": "pointer", "max_size": 8192},
            "landing_bytes (--landing-bytes)",
        ),
    ],
)
def test_each_field_is_checked(kwargs, field) -> None:
    with pytest.raises(ConfigError) as e:
        plan(**kwargs)
    assert e.value.field == field
    assert field in str(e.value) and "allowed" in str(e.value)


@pytest.mark.parametrize(
    ("kwargs", "wqebbs"),
    [
        ({"batch": 32, "min_size": 512}, 9),  # inline 512 B: 9 WQEBBs each
        ({"batch": 100, "min_size": 256}, 5),
        ({"batch": 128, "min_size": 64, "transport": "dc"}, 3),
    ],
)
def test_batch_is_counted_in_slots_not_wqes(kwargs, wqebbs) -> None:
    """These were accepted, then deadlocked."""
    with pytest.raises(ConfigError, match=f"x {wqebbs} WQEBBs each") as e:
        plan(experiments=["msg-rate"], **kwargs)
    assert e.value.field == "batch (--batch)"
    # the largest batch the message allows is accepted
    limit = 256 // wqebbs
    plan(experiments=["msg-rate"], **{**kwargs, "batch": limit})


def test_single_op_round_trip_needs_pairs() -> None:
    with pytest.raises(ConfigError, match="--pattern pairs"):
        plan(pattern="all-to-all")
    p = plan(pattern="all-to-all", modes=("issue", "put_completion"))
    assert [pt["mode"] for pt in p.points[0][1]] == ["issue", "put_completion"]


def test_knob_for_another_experiment_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"only with msg-rate"):
        plan(experiments=["single-op"], messages=10)
    plan(experiments=["single-op", "msg-rate"], messages=10)


def test_bring_up_counts_follow_the_experiments() -> None:
    p = plan(experiments=["msg-rate"], qps=8)
    assert p.rc_qps_per_peer() == 8 and not p.uses_dc
    p = plan(experiments=["msg-rate"], qps=4, transport="dc")
    assert p.uses_dc and p.dci_count(neighbours=3) == 12 and p.dct_count() == 1
    assert p.rc_qps_per_peer() == 1


def test_every_knob_is_one_object() -> None:
    knobs = all_knobs()
    assert {"min_size", "iters", "messages", "ordering", "pattern", "seed"} <= set(knobs)
