"""docs/architecture.md's worked examples plan as the page says (the MPI test runs them)."""

from __future__ import annotations

import pytest
from architecture_examples import blocks, registered

from gicbench.config import RunConfig
from gicbench.errors import UnsupportedError
from gicbench.plan import make_plan


def test_the_page_has_both_examples() -> None:
    assert len(blocks()) == 2


def test_the_new_experiment_plans_on_every_submitter_with_the_rate_shape() -> None:
    with registered():
        plan = make_plan(RunConfig.build(experiments=["batch-sweep"], batches=("1", "8")))
        (_, points) = plan.points[0]
        assert [p["batch"] for p in points] == [1, 8]
        plan = make_plan(RunConfig.build(experiments=["batch-sweep"], submitter="proxy"))
        assert plan.submitter.name == "proxy"


def test_the_new_submitter_runs_what_its_shapes_allow_and_no_more() -> None:
    with registered():
        cfg = RunConfig.build(experiments=["single-op"], submitter="serial",
                              modes=("issue", "put_completion"))  # fmt: skip
        assert make_plan(cfg).submitter.name == "serial"
        with pytest.raises(UnsupportedError, match=r"needs respond loops.*serial"):
            make_plan(RunConfig.build(experiments=["single-op"], submitter="serial"))
        rate = r"needs rate loops.*with them: doca, gpu, host, nvshmem, proxy\)"  # sorted
        with pytest.raises(UnsupportedError, match=rate):
            make_plan(RunConfig.build(experiments=["msg-rate"], submitter="serial"))
