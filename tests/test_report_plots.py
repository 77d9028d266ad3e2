"""report.md draws the papers' figure for every experiment, and each figure says what it shows:
every axis a quantity and a unit, every line a legend entry, every heatmap panel the unit of
its colour, no trace dataset names (issue_ns) or unit-less values ("size=8") anywhere on it.
The figures are read back from the matplotlib objects the report saves."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from experiment_runs import EXPERIMENT_RUNS, loaded_rtt, moe_points, msg_rate, write_run
from matplotlib.figure import Figure

from gicbench.analysis import plots
from gicbench.analysis.report import write_report
from gicbench.experiments import registry

EXPECTED = {
    "single-op": {"single-op-latency.png"},
    "completion-scope": {"completion-scope-latency.png"},
    "clock-sweep": {"clock-sweep-latency.png"},
    "msg-rate": {"msg-rate-vs-batch.png"},
    "proxy-rate": {"proxy-rate-vs-workers.png"},
    "loaded-rtt": {"loaded-rtt-rtt.png"},
    "payload": {"payload-goodput.png"},
    "active-connections": {"active-connections-rate.png", "active-connections-normalized.png"},
    "moe-dispatch": {"moe-dispatch-send-topk4.png", "moe-dispatch-send-topk8.png"},
    "kernel-cost": {"kernel-cost-loss.png"},
}
UNIT = re.compile(r"\((B|µs|MHz|M msg/s|GB/s)[;)]")
Y_UNIT = re.compile(r"\((µs|M msg/s|GB/s|× its pass's control|%)\)$")
RAW = re.compile(r"\b\w+_(ns|us|mps|gbps)\b|size=")
CATEGORIES = ("what was timed", "point (")  # x axes of bar charts: categories, not numbers
HEAT_UNIT = re.compile(r"\((µs|%)\)$")  # a heatmap panel's title: what its colour shows
HEAT_COUNTS = ("tokens per rank",)  # heatmap axes that count


@pytest.fixture
def saved(monkeypatch) -> dict[str, Figure]:
    """Every figure the report saves, by file name (the Figure objects themselves)."""
    figures: dict[str, Figure] = {}
    real = plots.save_figure

    def capture(fig: Figure, out, *args, **kwargs):
        figures[Path(out).name] = fig
        return real(fig, out, *args, **kwargs)

    monkeypatch.setattr(plots, "save_figure", capture)
    return figures


def _texts(fig: Figure) -> list[str]:
    out = [t.get_text() for t in fig.texts]
    if fig._suptitle is not None:
        out.append(fig._suptitle.get_text())
    for legend in fig.legends:
        out += [t.get_text() for t in legend.get_texts()]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        out += [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        if ax.get_legend() is not None:
            out += [t.get_text() for t in ax.get_legend().get_texts()]
        out += [t.get_text() for t in ax.texts]
    return [t for t in out if t]


def _legend_labels(fig: Figure) -> set[str]:
    labels = {t.get_text() for legend in fig.legends for t in legend.get_texts()}
    for ax in fig.axes:
        if ax.get_legend() is not None:
            labels |= {t.get_text() for t in ax.get_legend().get_texts()}
    return labels


def check_figure(name: str, fig: Figure) -> None:
    legend = _legend_labels(fig)
    heat = [ax for ax in fig.axes if ax.images]
    for ax in heat:
        assert HEAT_UNIT.search(ax.get_title()), f"{name}: panel {ax.get_title()!r} has no unit"
        for label in (ax.get_xlabel(), ax.get_ylabel()):
            assert not label or UNIT.search(label) or label in HEAT_COUNTS, (
                f"{name}: heatmap axis {label!r} names neither a unit nor what it counts")
    drawn = [ax for ax in fig.axes if (ax.lines or ax.patches) and not ax.images]
    assert drawn or heat, f"{name}: nothing drawn"
    for ax in drawn:
        x, y = ax.get_xlabel(), ax.get_ylabel()
        assert Y_UNIT.search(y), f"{name}: y axis {y!r} has no unit"
        assert UNIT.search(x) or x in plots.COUNT_AXES or x.startswith(CATEGORIES), (
            f"{name}: x axis {x!r} names neither a unit nor what it counts")
        for line in ax.lines:
            if len(line.get_xdata()) == 0:
                continue
            label = str(line.get_label())
            assert not label.startswith("_"), f"{name}: a line without a legend entry"
            assert label in legend, f"{name}: line {label!r} is not in the legend"
    for text in _texts(fig):
        assert not RAW.search(text), f"{name}: raw name or unit-less value in {text!r}"


@pytest.mark.parametrize("experiment", sorted(EXPERIMENT_RUNS))
def test_every_experiment_gets_its_figure(tmp_path: Path, saved, experiment: str) -> None:
    run = write_run(tmp_path / experiment, EXPERIMENT_RUNS[experiment](np.random.default_rng(0)))
    failures: list[str] = []
    report = write_report(run, failures=failures)
    assert failures == []
    assert set(saved) == EXPECTED[experiment]
    text = report.read_text()
    for name, fig in saved.items():
        assert f"(plots/{name})" in text
        check_figure(name, fig)


def test_the_figures_cover_every_experiment() -> None:
    assert set(registry.names()) == set(EXPECTED) == set(EXPERIMENT_RUNS)


def test_msg_rate_bars_label_their_points_with_units(tmp_path: Path, saved) -> None:
    run = write_run(tmp_path / "r", msg_rate(np.random.default_rng(0), batches=(16,)))
    write_report(run)
    assert set(saved) == {"msg-rate.png"}
    fig = saved["msg-rate.png"]
    check_figure("msg-rate.png", fig)
    ticks = [t.get_text().replace("\n", ", ") for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["8 B, 1 QP, 1 thread, B=16"]


def test_msg_rate_over_sizes_draws_rate_and_goodput(tmp_path: Path, saved) -> None:
    run = write_run(tmp_path / "r", msg_rate(np.random.default_rng(0), sizes=(8, 64, 512, 4096),
                                             batches=(1,)))
    write_report(run)
    assert set(saved) == {"msg-rate-vs-size.png", "msg-rate-goodput.png"}
    for name, fig in saved.items():
        check_figure(name, fig)
    legend = _legend_labels(saved["msg-rate-goodput.png"])
    assert any(label.startswith("90% of it:") and "GB/s" in label for label in legend)


def test_loaded_rtt_draws_shared_dashed_and_reserved_solid(tmp_path: Path, saved) -> None:
    run = write_run(tmp_path / "r", loaded_rtt(np.random.default_rng(0)))
    write_report(run)
    ax = saved["loaded-rtt-rtt.png"].axes[0]
    styles = {str(line.get_label()): line.get_linestyle() for line in ax.lines}
    assert styles["shared queue, p50"] == "--" and styles["reserved queue, p50"] == "-"
    assert ax.get_yscale() == "log" and ax.get_xlabel() == plots.AXES["background"]
    # each p50 point carries the background rate it was measured under
    assert {t.get_text() for t in ax.texts} >= {"3", "1.5", "0.75", "2", "4", "8"}


def test_proxy_rate_is_rate_against_workers_per_batch(tmp_path: Path, saved) -> None:
    run = write_run(tmp_path / "r", EXPERIMENT_RUNS["proxy-rate"](np.random.default_rng(0)))
    write_report(run)
    ax = saved["proxy-rate-vs-workers.png"].axes[0]
    assert ax.get_xlabel() == "CPU workers T" and ax.get_yscale() == "log"
    assert sorted(str(line.get_label()) for line in ax.lines) == ["B=1", "B=16"]


def test_moe_wait_sweep_draws_the_exposed_heatmap(tmp_path: Path, saved) -> None:
    run = write_run(tmp_path / "r", moe_points(0, wait_sweep=True))
    failures: list[str] = []
    write_report(run, failures=failures)
    assert failures == [] and set(saved) == {"moe-dispatch-exposed.png"}
    fig = saved["moe-dispatch-exposed.png"]
    check_figure("moe-dispatch-exposed.png", fig)
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 4 and all(ax.patches for ax in panels)  # every backend's knees


def test_a_modelled_figure_says_so(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    plots.save_figure(fig, tmp_path / "m.png", modelled=True)
    assert plots.MODELLED_NOTE in [t.get_text() for t in fig.texts]


def test_connection_axis_labels_do_not_overlap() -> None:
    """Fig. 10's grid (1,024, 1,536, 2,048 within an octave on a log axis) is marked at every
    point, labelled only where labels stay apart: the first, the largest, each 2.5x the last."""
    grid = [2, 64, 256, 1024, 1536, 2048, 4096, 8192, 16384]
    assert plots.spaced(grid) == {2, 64, 256, 1024, 4096, 16384}
    assert plots.spaced([16, 64, 256, 1024]) == {16, 64, 256, 1024}
    assert plots.spaced([64, 200, 300]) == {64, 300}  # the largest replaces one too close
    assert plots.spaced([64, 100]) == {64, 100}  # the first and the largest always
    assert plots.spaced([]) == set()
