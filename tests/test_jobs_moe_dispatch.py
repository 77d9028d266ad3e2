"""The moe-dispatch jobs family: its template runs the factor sweep by default and the wait
sweep with --sweep, both as the paper ran them (arXiv 2611.12362, §III-A), every point planned
before anything runs."""

from __future__ import annotations

import pytest

from gicbench.cli.jobs import RenderOptions, render, templates, templates_dir
from gicbench.errors import ConfigError
from gicbench.experiments import registry

pytestmark = pytest.mark.skipif(
    "moe-dispatch" not in registry.names(), reason="the moe-dispatch experiment is not installed"
)
TOKENS = "1,2,4,8,16,32,64,128,256"
BACKENDS = "gdaki,free-flow,gpi,gpi-mc"


def _spec(name: str):
    from gicbench.sweep import load_spec

    return load_spec(templates_dir() / "sweeps" / name)


def _arg(args: tuple[str, ...], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_factor_sweep_is_the_papers_grid() -> None:
    spec = _spec("moe-dispatch-factor.toml")
    grid = {(p.ranks, p.params["sm-cap"], p.params["topk"]) for p in spec.points}
    assert grid == {(r, c, k) for r in (4, 8, 16) for c in ("32", "64", "128") for k in "48"}
    for p in spec.points:
        assert p.experiments == ("moe-dispatch",)
        assert _arg(p.run_args, "--tokens") == TOKENS
        assert _arg(p.run_args, "--backend") == BACKENDS  # side by side in one run
        assert _arg(p.run_args, "--rounds") == "5" and _arg(p.run_args, "--submitter") == "gpu"
        assert "--wait-us" not in p.run_args  # no delay kernel: the send alone is timed
    assert spec.max_ranks == 16


def test_wait_sweep_is_the_papers_grid() -> None:
    (p,) = _spec("moe-dispatch-wait.toml").points
    assert p.ranks == 8
    assert _arg(p.run_args, "--topk") == "8" and _arg(p.run_args, "--sm-cap") == "128"
    assert _arg(p.run_args, "--wait-us") == "0,4,8,16,32,64,96,128,256,512,1024"
    assert _arg(p.run_args, "--tokens") == TOKENS
    assert _arg(p.run_args, "--backend") == BACKENDS


def test_template_renders_either_sweep() -> None:
    assert "moe-dispatch" in templates()
    t = render("moe-dispatch", RenderOptions(nodes=4, ntasks_per_node=4, gpus_per_node=4))
    assert "sweeps/moe-dispatch-factor.toml" in t and "runs/sweep-moe-dispatch-factor" in t
    assert "gicbench analyze" in t
    with pytest.raises(ConfigError, match="ntasks"):  # EP16 points need 16 tasks
        render("moe-dispatch", RenderOptions(nodes=2, ntasks_per_node=4))
    wait = str(templates_dir() / "sweeps" / "moe-dispatch-wait.toml")
    t = render("moe-dispatch", RenderOptions(nodes=2, ntasks_per_node=4, sweep=wait))
    assert "moe-dispatch-wait.toml" in t and "runs/sweep-moe-dispatch-wait" in t
