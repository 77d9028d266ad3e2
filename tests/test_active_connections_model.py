"""An emu run with the NIC model's connection cache made small goes through `analyze`, and the
fit recovers the onset the model states: a NIC receiving on n connections holds n receive-side
contexts of r lines, so a cache of C lines holds them all up to n = C / r (and a NIC sending and
receiving on n would hold n (s + r) lines, full at n = C / (s + r)).

The NIC model (emu's --nic-model) is built beside this experiment; until it is there this test
skips, naming the missing knob. It uses the model's own preset as the base and changes only the
cache's size and the cost of a miss, so the onset falls inside a grid emu runs in seconds."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest
import tomllib
from launching import gicbench, launch

from gicbench.fabric.emu.params import EmuParams
from gicbench.trace import open_run

HAS_MODEL = "nic_model" in {f.name for f in dataclasses.fields(EmuParams)}
pytestmark = pytest.mark.skipif(
    not HAS_MODEL, reason="emu has no --nic-model knob (the NIC model is not in this tree yet)"
)
PRESET = "cx7-200g-ib-hopper"
ONSET = 64  # connections per NIC per direction where the small cache fills
GRID = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 128, 192, 256, 384, 512)
# Around the onset as well: the cache fills at ONSET and the next connection overflows it.
FINE_GRID = tuple(sorted({*GRID, 60, ONSET - 1, ONSET + 1, 68, 72}))


def _toml_value(v: object) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def small_cache_model(path: Path, receive_only: bool = False) -> Path:
    """The preset with C = ONSET x (s + r) lines (receive-only: ONSET x r) and a miss that
    costs 2 µs of the receive pipeline (well above what emu's own engine takes per message, so
    the model shows)."""
    text = (resources.files("gicbench") / "fabric" / "emu" / "nic_models.toml").read_text()
    model = tomllib.loads(text)["models"][PRESET]
    params = model["params"]
    s, r = params["send_context_lines"]["value"], params["recv_context_lines"]["value"]
    lines = ONSET * (r if receive_only else s + r)
    params["cache_lines"] = {"value": lines, "source": "this test: a small cache"}
    params["recv_miss_busy_ns"] = {"value": 2000.0, "source": "this test: a dear miss"}
    lines = [f"{k} = {_toml_value(v)}" for k, v in model.items() if k != "params"]
    for name, p in params.items():
        lines += ["", f"[params.{name}]", *(f"{k} = {_toml_value(v)}" for k, v in p.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


MISS_RATE_MPS = 1e3 / (2000.0 + 1e3 / 260.0)  # M msg/s: the receive pipeline, a miss a message


def test_receive_only_past_the_small_cache_runs_at_the_modelled_miss_rate(tmp_path: Path) -> None:
    """Receive-only (rank 1 writes into rank 0, which sends nothing): only rank 1's engine
    touches rank 0's context cache, in the order rank 1 posted, so the model's cost shows
    through the run. With C = ONSET x r lines, 128 and 256 receive-side contexts cycled one
    write a visit miss on every message, and the modelled receive pipeline (2 µs a miss) caps
    the NIC rate at 0.5 M msg/s, a tenth of what the engine reaches alone; nothing is visible
    before its modelled time, so the cap holds however fast the engine runs. (Twice the cap
    allows the first turns, while the engine is still finding the QPs newly rung and cycles
    fewer contexts, which fit.)"""
    model = small_cache_model(tmp_path / "small-cache.toml", receive_only=True)
    out = tmp_path / "run"
    r = launch(2, "run", "active-connections", "--pattern", "fan-in", "--nic-model",
               str(model), "--active", "32,128,256", "--writes-per-visit", "1",
               "--messages", "20000", "--passes", "1", "--progress", "inline", "--quiet",
               "-o", str(out), timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    with open_run(out) as run:
        sender = {p.params["connections"]: p.results for p in run.ranks[1].points()}
    rates = {n: sender[n]["msg_rate_mps"] for n in (128, 256)}
    assert all(sender[n]["nic_model"] == model.stem for n in rates)
    assert all(v <= 2 * MISS_RATE_MPS for v in rates.values()), (rates, sender)


def _model_lines(model: Path) -> tuple[int, int, int]:
    """The cache's lines and a send-side and a receive-side context's, as the model file
    states them."""
    params = tomllib.loads(model.read_text())["params"]
    return tuple(int(params[k]["value"]) for k in ("cache_lines", "send_context_lines",
                                                    "recv_context_lines"))  # type: ignore[return-value]


def _analyzed_onset(out: Path) -> dict:
    r = gicbench("analyze", str(out), "--json")
    assert r.returncode == 0, r.stderr
    (fit,) = json.loads(r.stdout)["fits"]["active-connections"]
    assert "error" not in fit, fit
    return fit


def test_analyze_recovers_the_modelled_onset(tmp_path: Path) -> None:
    """Receive-only (rank 1 writes into rank 0, which sends nothing): one engine touches rank 0's
    cache, cycling its n receive-side contexts. Up to C / r of them every lookup hits; one more
    and the cyclic order makes every lookup a miss (least recently used is always the next one
    wanted): the rate leaves its plateau in one step between n = C / r and the next point, and
    the fit's onset, that interval, holds the modelled one."""
    model = small_cache_model(tmp_path / "small-cache.toml", receive_only=True)
    lines, _, r_lines = _model_lines(model)
    modelled = lines // r_lines  # the most receive-side contexts the cache holds
    assert modelled in FINE_GRID
    out = tmp_path / "run"
    r = launch(2, "run", "active-connections", "--pattern", "fan-in", "--nic-model",
               str(model), "--active", ",".join(map(str, FINE_GRID)), "--writes-per-visit", "1",
               "--messages", "20000", "--passes", "3", "--progress", "inline", "--quiet",
               "-o", str(out), timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    fit = _analyzed_onset(out)
    onset = fit["parameters"]["onset"]
    assert "drop at the onset" in fit["parameters"], fit  # a step, not a gradual decline
    assert abs(onset["value"] - modelled) <= onset["err"], (onset, fit["flags"])
    assert onset["err"] <= (FINE_GRID[FINE_GRID.index(modelled) + 1] - modelled) / 2, onset


@pytest.mark.xfail(
    strict=False,
    reason="emu does not realise the shared cache's send-receive onset C / (s + r): the model "
    "touches a NIC's cache when an engine plans a WQE, so the order of lookups is the order "
    "the two ranks' engines plan in, and they plan in bursts (each what its rank posted, until "
    "it holds its plan-ahead window of modelled work; in turns on loaded cores), not "
    "interleaved message by message as the model's onset assumes. Past C / (s + r) the "
    "send-side contexts (s = 9 r lines each) miss, at no cost, "
    "but the receive-side ones keep hitting until enough of the peer's sends fall between two "
    "visits of a connection: the trace's counters show ~3% receive misses at 80 connections, "
    "and the rate leaves its plateau anywhere from 80 to 256 (between C / (s + r) and C / r) "
    "from run to run",
)
def test_analyze_recovers_the_send_receive_onset(tmp_path: Path) -> None:
    model = small_cache_model(tmp_path / "small-cache.toml")
    out = tmp_path / "run"
    r = launch(2, "run", "active-connections", "--pattern", "all-to-all", "--nic-model",
               str(model), "--active", ",".join(map(str, GRID)), "--writes-per-visit", "1",
               "--messages", "20000", "--passes", "3", "--progress", "inline", "--quiet",
               "-o", str(out), timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    lines, s_lines, r_lines = _model_lines(model)
    modelled = lines // (s_lines + r_lines)  # n send-side and n receive-side contexts fit
    fit = _analyzed_onset(out)
    onset = fit["parameters"]["onset"]
    assert abs(onset["value"] - modelled) <= onset["err"], (onset, fit["flags"])
