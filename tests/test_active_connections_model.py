"""An emu run with the NIC model's connection cache made small goes through `analyze`, and the
plateau + power-law fit recovers the onset the model states (send-receive: a NIC holding n
send-side and n receive-side contexts fills a cache of C lines at n = C / (s + r)).

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

HAS_MODEL = "nic_model" in {f.name for f in dataclasses.fields(EmuParams)}
pytestmark = pytest.mark.skipif(
    not HAS_MODEL, reason="emu has no --nic-model knob (the NIC model is not in this tree yet)"
)
PRESET = "cx7-200g-ib-hopper"
ONSET = 64  # connections per NIC per direction where the small cache fills
GRID = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 128, 192, 256, 384, 512)


def _toml_value(v: object) -> str:
    return json.dumps(v) if isinstance(v, str) else repr(v)


def small_cache_model(path: Path) -> Path:
    """The preset with C = ONSET x (s + r) lines and a miss that costs 2 µs of the receive
    pipeline (well above what emu's own engine takes per message, so the model shows)."""
    text = (resources.files("gicbench") / "fabric" / "emu" / "nic_models.toml").read_text()
    model = tomllib.loads(text)["models"][PRESET]
    params = model["params"]
    s, r = params["send_context_lines"]["value"], params["recv_context_lines"]["value"]
    params["cache_lines"] = {"value": ONSET * (s + r), "source": "this test: a small cache"}
    params["recv_miss_busy_ns"] = {"value": 2000.0, "source": "this test: a dear miss"}
    lines = [f"{k} = {_toml_value(v)}" for k, v in model.items() if k != "params"]
    for name, p in params.items():
        lines += ["", f"[params.{name}]", *(f"{k} = {_toml_value(v)}" for k, v in p.items())]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.xfail(
    strict=True,
    reason="known defect: through a 2-rank emu run the small cache's misses do not lower the NIC "
    "rate (every point is marked saturated: the engine is slower than the model, and the fit "
    "finds no decline); the model's own arithmetic shows the onset (test_nic_model_mechanisms)",
)
def test_analyze_recovers_the_modelled_onset(tmp_path: Path) -> None:
    model = small_cache_model(tmp_path / "small-cache.toml")
    out = tmp_path / "run"
    r = launch(2, "run", "active-connections", "--pattern", "all-to-all", "--nic-model",
               str(model), "--active", ",".join(map(str, GRID)), "--writes-per-visit", "1",
               "--messages", "20000", "--passes", "3", "--progress", "inline", "--quiet",
               "-o", str(out), timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    r = gicbench("analyze", str(out), "--json")
    assert r.returncode == 0, r.stderr
    (fit,) = json.loads(r.stdout)["fits"]["active-connections"]
    onset = fit["parameters"]["onset"]
    assert "error" not in fit, fit
    assert abs(onset["value"] - ONSET) <= onset["err"], (onset, fit["flags"])
