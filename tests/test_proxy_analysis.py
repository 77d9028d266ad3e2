"""The analysis of mini-proxy's experiments: loaded-rtt's shared/reserved ratio and payload's
crossover against the reference bandwidth the run was given."""

from __future__ import annotations

import pandas as pd
import pytest

from gicbench.analysis.fits import apply


def test_loaded_rtt_ratio_per_group() -> None:
    t = pd.DataFrame(
        {
            "queue": ["shared", "reserved", "shared", "reserved"],
            "batch": [1, 1, 16, 16],
            "p50_us": [300.0, 10.0, 500.0, 20.0],
            "p99_us": [900.0, 30.0, 1000.0, 100.0],
            "background_mps": [2.0, 1.5, 9.0, 8.0],
        }
    )
    outs = apply.fit_table("ratio", t, ["queue", "batch"])
    assert [o.group for o in outs] == [{"batch": 1}, {"batch": 16}]
    assert outs[0].params["p50 shared/reserved"].value == pytest.approx(30.0)
    assert outs[1].params["p99 shared/reserved"].value == pytest.approx(10.0)
    assert outs[1].params["background shared"].value == 9.0
    assert "ratio" in apply.declared_fits("loaded-rtt")


def test_ratio_needs_both_queues() -> None:
    t = pd.DataFrame({"queue": ["reserved"], "p50_us": [1.0]})
    (o,) = apply.fit_table("ratio", t, ["queue"])
    assert o.error and "shared" in o.error


@pytest.mark.parametrize(("ref", "size"), [(0.0, 4096), (10.0, 2048)])
def test_payload_crossover_uses_the_reference_given(ref, size) -> None:
    t = pd.DataFrame(
        {
            "size": [512, 1024, 2048, 4096],
            "gbps": [2.0, 5.0, 9.5, 20.0],
            "reference_gbps": [ref] * 4,
        }
    )
    (o,) = apply.fit_table("crossover", t, ["size", "reference_gbps"])
    assert o.params["size"].value == size
    assert o.params["reference"].value == (ref or 20.0)
