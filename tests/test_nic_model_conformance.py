"""The conformance suite with every NIC model preset, on the CPU engine in both progress modes:
a model changes when results become visible, never what they are."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "conformance"))

import conformance_runner
from conformance_cases import CASE_IDS, CASES
from conformance_engines import CpuWorld
from conformance_model import Case

from gicbench.fabric.emu import nic_model

PRESETS = nic_model.preset_names()


class ModelledWorld(CpuWorld):
    """The conformance world (CpuWorld's tables) with a NIC model on every rank."""

    def __init__(self, world: int, progress: str, model: nic_model.NicModel) -> None:
        self._model = model
        super().__init__(world, progress)

    def create_fabric(self, rank: int):
        self.fabric_kw["nic_model"] = self._model
        f = super().create_fabric(rank)
        assert f.nic_model is self._model
        return f

    def close(self) -> None:
        if not self._closed:  # what the model charged, for the test to see
            c = [f.counters() for f in self.fabrics]
            WQES.append((sum(x["wqes"] for x in c), sum(x["nic_model_wqes"] for x in c)))
        super().close()


WQES: list[tuple[int, int]] = []  # per world: WQEs executed, WQEs the model planned


@pytest.fixture(params=[(p, m) for p in PRESETS for m in ("inline", "thread")],
                ids=[f"{p}-{m}" for p in PRESETS for m in ("inline", "thread")])
def modelled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    preset, mode = request.param
    model = nic_model.load(preset)
    assert model is not None
    monkeypatch.setattr(conformance_runner, "make_world",
                        lambda engine, world: ModelledWorld(world, mode, model))
    return f"cpu-{mode}"


def test_there_is_a_calibrated_preset() -> None:
    assert "cx7-200g-ib-hopper" in PRESETS


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_case_with_the_model(modelled: str, case: Case) -> None:
    WQES.clear()
    conformance_runner.run_case(case, modelled)
    executed, planned = WQES[0]
    assert planned >= executed  # the model planned every WQE the engine executed
