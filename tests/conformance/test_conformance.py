"""The conformance suite: every case (conformance_cases.CASES, the extended atomics of
conformance_masked_cases, the GPI queues of conformance_gpi_cases) against every engine.

Point it at another engine by adding its name to conformance_engines.ENGINES (and a builder in
make_world); the cases do not change.
"""

from __future__ import annotations

import pytest
from conformance_cases import CASES as BASE_CASES
from conformance_engines import ENGINES, GPU_ENGINES
from conformance_gpi_cases import GPI_CASES
from conformance_masked_cases import MASKED_ATOMIC_CASES
from conformance_model import Case
from conformance_runner import run_case

CASES = [*BASE_CASES, *MASKED_ATOMIC_CASES, *GPI_CASES]
CASE_IDS = [c.name for c in CASES]


@pytest.fixture(
    params=[pytest.param(e, marks=pytest.mark.gpu) if e in GPU_ENGINES else e for e in ENGINES]
)
def engine(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_case(engine: str, case: Case) -> None:
    if case.gpis and engine in GPU_ENGINES:
        pytest.skip("the CUDA engine does not serve GPI queues yet (docs/gpi.md, Engines)")
    run_case(case, engine)


def test_case_names_are_unique() -> None:
    assert len(set(CASE_IDS)) == len(CASE_IDS)
