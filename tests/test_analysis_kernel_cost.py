"""kernel-cost's arithmetic on synthetic rows of known truth (tests/experiment_runs.py): the
paired-pass loss, waiting against sending, the resources per build, Fig. 9's bars and the
report's tables; and the experiment's closed form of the caller's output against a brute-force
evaluation of the kernel's loops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from experiment_runs import KC_REFERENCE_US, KC_REGS, kc_truth, kernel_cost_points, write_run

from gicbench.analysis import kernel_cost as akc
from gicbench.analysis.load import aggregate_ranks, load_run
from gicbench.analysis.report import write_report
from gicbench.experiments.kernel_cost import expected_output, paired_loss


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> object:
    run = write_run(tmp_path_factory.mktemp("kc") / "run", kernel_cost_points())
    return akc.rows(aggregate_ranks(load_run(run)))


def test_paired_loss_is_the_median_of_the_passes() -> None:
    ref = np.array([[100, 100, 300], [200, 200, 200], [100, 100, 100]])  # medians 100, 200, 100
    var = np.array([[125, 125, 1], [250, 250, 250], [200, 200, 200]])  # 125, 250, 200
    got = paired_loss(var, ref)
    assert got["loss_pct"] == pytest.approx(20.0)  # passes lose 20, 20, 50
    assert (got["loss_min_pct"], got["loss_max_pct"]) == pytest.approx((20.0, 50.0))
    assert got["kernel_us"] == pytest.approx(0.2) and got["reference_us"] == pytest.approx(0.1)


def test_every_row_carries_its_truth(table) -> None:
    assert len(table) == 2 * (1 + 2 * (4 + 12))
    for _, r in table.iterrows():
        build = "inline" if r["build"] == "none" else r["build"]
        want = kc_truth(r["caller"], build, r["variant"], int(r["per_block"]), int(r["size"]))
        assert r["loss_pct"] == pytest.approx(want, abs=1e-4)
        assert r["reference_us"] == pytest.approx(KC_REFERENCE_US[r["caller"]])


def test_waiting_is_against_sending(table) -> None:
    w = akc.wait_extra(table)
    assert len(w) == 2 * 2 * 3 * 2
    for _, r in w.iterrows():
        ls = kc_truth(r["caller"], r["build"], "send", int(r["per_block"]), int(r["size"])) / 100
        lw = kc_truth(r["caller"], r["build"], "send-wait", int(r["per_block"]),
                      int(r["size"])) / 100  # fmt: skip
        # t = R / (1 - loss): 1 - t_send / t_wait = 1 - (1 - lw) / (1 - ls)
        assert r["wait_extra_pct"] == pytest.approx(100 * (1 - (1 - lw) / (1 - ls)), abs=1e-4)


def test_resources_one_row_per_build(table) -> None:
    res = akc.resources(table)
    assert list(res["build"][res["caller"] == "compute"]) == ["none", "inline", "separate"]
    for _, r in res.iterrows():
        assert r["registers"] == KC_REGS[r["build"]]
    assert set(res.loc[res["build"] == "separate", "stack_bytes"]) == {416}


def test_fig9_bars_take_sixteen_small_messages(table) -> None:
    b = akc.bars(table)
    assert (b.attrs["per_block"], b.attrs["size"]) == (16, 8)
    assert len(b) == 2 * 2 * 3  # callers x builds x (code-only, send, send-wait)
    row = b[(b["caller"] == "stream") & (b["build"] == "separate") & (b["variant"] == "send")]
    assert float(row["loss_pct"].iloc[0]) == pytest.approx(kc_truth("stream", "separate",
                                                                    "send", 16, 8), abs=1e-4)


def test_report_has_the_tables_and_the_figure(tmp_path: Path) -> None:
    run = write_run(tmp_path / "run", kernel_cost_points())
    failures: list[str] = []
    text = write_report(run, failures=failures).read_text()
    assert failures == []
    assert "(plots/kernel-cost-loss.png)" in text
    for head in ("loss (%)", "waiting loss vs send (%)", "registers/thread", "stack frame (B)",
                 "blocks/SM"):
        assert head in text


@pytest.mark.parametrize("caller", ("compute", "stream"))
def test_closed_form_of_the_caller_output(caller: str) -> None:
    """The kernel's loops (cuda/kcost/kernel_cost.cu), run literally on a small grid."""
    mask = (1 << 26) - 1
    for live in (1, 3, 8):
        for steps in (1, 5, 17):
            grid, thr = 3, 64
            total = grid * thr
            t = np.arange(total)
            v = np.zeros((total, live))
            for i in range(live):
                if caller == "compute":
                    v[:, i] = (((t * live + i) & mask) & 7) + steps
                else:
                    for s in range(steps):
                        v[:, i] += (((s * live + i) * total + t) & mask) & 7
            assert np.array_equal(v.sum(axis=1), expected_output(caller, live, steps, grid, thr))


def test_stream_input_holds_a_launch_without_rereads() -> None:
    """The stream caller's input is as large as one launch reads (no element read twice, so no
    re-read can come from the L2), at least 256 MiB, at most 4 GiB; compute reads its live
    values once: the minimum. Always a power of two (the kernel masks its index)."""
    from gicbench.submit.kernel_cost_common import (
        STREAM_MAX_ELEMENTS,
        STREAM_MIN_ELEMENTS,
        input_elements,
    )

    small = input_elements("stream", 1, 1, 2, 64)
    assert small == STREAM_MIN_ELEMENTS
    # the default shape at live 16: 1200 x 16 x 528 x 256 = 2.6e9 loads, past 4 GiB: the cap
    assert input_elements("stream", 16, 1200, 528, 256) == STREAM_MAX_ELEMENTS
    # live 8, 100 steps: 108 M loads -> 2^27 elements, every load a distinct element
    need = 8 * 100 * 528 * 256
    n = input_elements("stream", 8, 100, 528, 256)
    assert n >= need and n // 2 < need and n & (n - 1) == 0
    assert input_elements("compute", 224, 65536, 528, 256) == STREAM_MIN_ELEMENTS
