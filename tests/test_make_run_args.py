"""`make run`'s two command lines (the README's first command) pass pre-flight on every rank of
its 2-rank world: the plan, and each experiment's check for the rank's part in the pattern. A
new refusal once made `make run` fail where no test looked (--workers 2 with payload's one QP)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gicbench.cli.main import build_parser
from gicbench.cli.run import config_from_args
from gicbench.patterns import traffic
from gicbench.plan import make_plan

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def make_variable(name: str) -> str:
    """A `NAME ?= ...` assignment of the Makefile, continuation lines joined."""
    text = MAKEFILE.read_text().replace("\\\n", " ")
    m = re.search(rf"^{name}\s*\?=\s*(.*)$", text, re.MULTILINE)
    assert m, f"{name} not in the Makefile"
    return m.group(1)


@pytest.mark.parametrize("variable", ["RUN_ARGS", "PROXY_RUN_ARGS"])
def test_make_run_arguments_pass_pre_flight_on_every_rank(variable: str) -> None:
    np_ = int(make_variable("NP"))
    args = build_parser().parse_args(["run", *shlex.split(make_variable(variable))])
    cfg = config_from_args(args)
    plan = make_plan(cfg)
    for rank in range(np_):
        for exp in plan.experiments:
            exp.check_rank(traffic(cfg.pattern, rank, np_))
