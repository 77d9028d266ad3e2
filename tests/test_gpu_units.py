"""The GPU submitter's host-side rules (no GPU needed): msg-rate's distribution of messages over
lanes as gda_msg_rate hands them out, the reclamation bound, the clock tools' lock/restore
discipline (a fake nvidia-smi), and refusals before anything is created."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import numpy as np
import pytest

from gicbench.cuda_host import cuda_dir
from gicbench.errors import ConfigError, FabricError, UnsupportedError
from gicbench.experiments.msg_rate import lane_messages as host_lane_messages
from gicbench.submit.gpu import lanes
from gicbench.submit.gpu.build import DEFINES_ENV, build_options, kernel_switches
from gicbench.submit.gpu.params import ORDERINGS
from gicbench.submit.gpu_runtime import clock_lock as clock


def simulate(nlanes: int, threads: int, publish: str, batch: int, per_thread: int,
             writes_per_visit: int = 0) -> list[int]:
    """A literal walk of gda_msg_rate's loop: unit by unit, chain by chain, a visit of
    `writes_per_visit` writes (0: one batch) on a lane before the unit's next."""
    us = lanes.units(threads, publish)
    counts = [0] * nlanes
    for u, size in enumerate(us):
        mine = lanes.unit_lanes(u, len(us), nlanes)
        total, posted, k = per_thread * size, 0, 0
        visit = writes_per_visit * size if writes_per_visit else batch
        left = visit
        while posted < total:
            n = min(batch, total - posted, left)
            counts[mine[k]] += n
            posted += n
            left -= n
            if left == 0:
                left, k = visit, (k + 1) % len(mine)
    return counts


@pytest.mark.parametrize(
    ("nlanes", "threads", "publish", "batch", "per_thread"),
    [
        (1, 1, "thread", 1, 100),
        (4, 2, "thread", 3, 101),
        (4, 64, "thread", 5, 17),
        (3, 64, "warp", 32, 10),
        (16, 40, "warp", 7, 9),
        (5, 5, "lock", 4, 33),
        (2, 9, "lock", 1, 3),
    ],
)
def test_lane_messages_match_the_kernel_walk(nlanes, threads, publish, batch, per_thread) -> None:
    got = lanes.lane_messages(nlanes, threads, publish, batch, per_thread)
    assert got == simulate(nlanes, threads, publish, batch, per_thread)
    assert sum(got) == per_thread * threads


@pytest.mark.parametrize(
    ("nlanes", "units", "batch", "w", "visits"),
    [(1, 1, 1, 1, 9), (5, 2, 2, 5, 21), (7, 3, 4, 16, 12), (8, 4, 32, 32, 9), (16, 5, 16, 7, 3)],
)
def test_the_kernel_walk_with_visits_is_the_cycle_rule(nlanes, units, batch, w, visits) -> None:
    """gda_msg_rate with a visit of W writes (active-connections through mini-gda) carries on
    each lane what the experiment validates against (cycle_lane_writes)."""
    from gicbench.submit.work import cycle_lane_writes

    got = simulate(nlanes, units, "thread", batch, visits * w, writes_per_visit=w)
    assert got == cycle_lane_writes(list(range(nlanes)), units, w, visits)


def test_thread_publication_with_own_lanes_is_the_host_rule() -> None:
    # threads <= lanes: the same distribution as the host loop's (msg-rate validates with it)
    for nl, t, b, m in [(4, 2, 3, 101), (8, 8, 1, 50), (6, 4, 2, 7)]:
        assert lanes.lane_messages(nl, t, "thread", b, m) == host_lane_messages(nl, t, b, m)


@pytest.mark.parametrize("depth", [16, 64, 256, 1024])
@pytest.mark.parametrize("bbs", [1, 2, 4])
def test_signal_interval_keeps_every_wait_finite(depth: int, bbs: int) -> None:
    for batch in range(1, depth // bbs + 1):
        se = lanes.signal_every(depth, bbs, batch)
        assert se >= 1
        assert (se - 1 + batch) * bbs <= depth


def test_lane_table_width_matches_the_kernel_header() -> None:
    text = (Path(__file__).resolve().parents[1] / "cuda" / "gda" / "queue.cuh").read_text()
    body = text[text.index("enum LaneCol") : text.index("kLaneCols")]
    names = re.findall(r"^\s+(k\w+)", body, flags=re.M)
    assert len(names) == len(lanes.COLUMNS)


def test_build_options_name_the_ordering() -> None:
    root = cuda_dir()
    assert (root / "gda" / "kernels.cu").exists()  # installed with the package
    for i, o in enumerate(ORDERINGS):
        assert f"-DGDA_ORDERING={i}" in build_options(o, root)
    with pytest.raises(ValueError):
        build_options("fastest", root)


# ---- clock tools ---------------------------------------------------------------------------
@pytest.fixture
def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    log = tmp_path / "smi.log"
    script = tmp_path / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        'case "$*" in *-lgc\\ 666,666*) echo "not supported" >&2; exit 3;; esac\n'
        "exit 0\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return log


def test_clock_is_restored_after_success_and_failure(fake_smi: Path) -> None:
    with clock.locked("00000000:01:00.0", 1200):
        pass
    with pytest.raises(RuntimeError), clock.locked("00000000:01:00.0", 1410):
        raise RuntimeError("the point failed")
    with pytest.raises(FabricError, match="-lgc 666,666 failed"), clock.locked("gpu0", 666):
        pass
    lines = fake_smi.read_text().split("\n")
    assert lines[:6] == [
        "-i 00000000:01:00.0 -lgc 1200,1200",
        "-i 00000000:01:00.0 -rgc",
        "-i 00000000:01:00.0 -lgc 1410,1410",
        "-i 00000000:01:00.0 -rgc",
        "-i gpu0 -lgc 666,666",
        "-i gpu0 -rgc",  # restored even when the lock itself failed
    ]
    assert not clock._LOCKED


def test_measured_clock_must_match_the_lock() -> None:
    clock.check_measured(1200, 1.19e9)
    with pytest.raises(FabricError, match="did not hold"):
        clock.check_measured(1200, 1.98e9)


def test_no_nvidia_smi_is_unsupported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(UnsupportedError, match="nvidia-smi"):
        clock.nvidia_smi()


# ---- refusals in pre-flight (no GPU here) ---------------------------------------------------
def plan(**kw):
    from gicbench.config import RunConfig
    from gicbench.plan import make_plan

    return make_plan(RunConfig.build(**kw))


def test_gpu_only_knobs_and_experiments_are_refused_with_the_host_submitter() -> None:
    with pytest.raises(ConfigError, match="only with --submitter gpu"):
        plan(experiments=["msg-rate"], publish="warp")
    # by shape, not by name: the host submitter has no clock control
    with pytest.raises(UnsupportedError, match=r"clock-sweep needs clock loops.*with them: gpu"):
        plan(experiments=["clock-sweep"])


def test_gpu_submitter_without_cupy_says_why() -> None:
    with pytest.raises(UnsupportedError, match="needs an NVIDIA GPU and CuPy"):
        plan(experiments=["completion-scope"], submitter="gpu")


def test_bad_clock_list_is_refused() -> None:
    from gicbench.config import RunConfig
    from gicbench.plan import make_plan
    from gicbench.platform import LazyProbes, Probe

    probes = LazyProbes()
    probes["cupy"] = Probe("cupy", True, "faked for the test")
    cfg = RunConfig.build(experiments=["clock-sweep"], submitter="gpu", clocks=("1200", "fast"))
    with pytest.raises(ConfigError, match="clocks"):
        make_plan(cfg, probes)


# ---- clock-sweep's point: lock, measure, check, run, restore ------------------------------
class _FakeGpuSubmitter:
    """mini-gda's clock control (GpuSubmitter.locked_clock) over a fake device and kernel."""

    from gicbench.submit.gpu import GpuSubmitter

    locked_clock = GpuSubmitter.locked_clock

    def __init__(self, measured_hz: float) -> None:
        self.measured_hz = measured_hz

        class _Dev:
            pci_bus_id = "00000000:19:00.0"

        self.device = _Dev()

    def measure_clock(self) -> float:
        return self.measured_hz


def _clock_sweep(monkeypatch: pytest.MonkeyPatch, measured_hz: float):
    import types

    from gicbench.config import RunConfig
    from gicbench.experiments.clock_sweep import ClockSweep
    from gicbench.experiments.registry import PointResult
    from gicbench.experiments.single_op import SingleOp

    calls = []

    def fake_run(self, ctx, point):
        calls.append(point["clock_mhz"])
        return PointResult(samples={"issue_ns": np.array([1, 2])}, results={})

    from gicbench.submit.gpu import GpuParams, GpuSubmitter

    monkeypatch.setattr(SingleOp, "run_point", fake_run)
    exp = ClockSweep.from_config(
        RunConfig.build(experiments=["clock-sweep"], clocks=("1200", "1400")),
        GpuSubmitter,
        GpuParams(),
    )
    ctx = types.SimpleNamespace(
        traffic=types.SimpleNamespace(sends=True), submitter=_FakeGpuSubmitter(measured_hz)
    )
    return exp, ctx, calls


def test_clock_sweep_point_locks_measures_and_restores(monkeypatch, fake_smi: Path) -> None:
    exp, ctx, calls = _clock_sweep(monkeypatch, 1.201e9)
    points = exp.points()
    assert [p["clock_mhz"] for p in points] == [1200, 1200, 1400, 1400]
    r = exp.run_point(ctx, points[0])
    assert calls == [1200]
    assert r.results["sm_clock_mhz"] == pytest.approx(1201.0)
    assert fake_smi.read_text().split("\n")[:2] == [
        "-i 00000000:19:00.0 -lgc 1200,1200",
        "-i 00000000:19:00.0 -rgc",
    ]


def test_clock_sweep_refuses_a_lock_that_did_not_hold_and_restores(monkeypatch, fake_smi) -> None:
    exp, ctx, calls = _clock_sweep(monkeypatch, 1.98e9)
    with pytest.raises(FabricError, match="did not hold"):
        exp.run_point(ctx, exp.points()[2])
    assert calls == []  # nothing measured at the wrong clock
    assert fake_smi.read_text().split("\n")[:2] == [
        "-i 00000000:19:00.0 -lgc 1400,1400",
        "-i 00000000:19:00.0 -rgc",
    ]


# ---- the host-forwarded doorbell and the CQ poll: host-side rules ------------------------
def test_build_options_name_the_cq_poll() -> None:
    root = cuda_dir()
    assert "-DGDA_CQ_POLL=0" in build_options("gpu-fence", root, "scan")
    assert "-DGDA_CQ_POLL=1" in build_options("gpu-fence", root, "expected")
    with pytest.raises(ValueError):
        build_options("gpu-fence", root, "sometimes")


def test_build_switches_come_from_the_environment_and_unknown_ones_are_refused(
    monkeypatch,
) -> None:
    root = cuda_dir()
    assert "GDA_SOLO" in kernel_switches(root)
    monkeypatch.delenv(DEFINES_ENV, raising=False)
    assert not any(o.startswith("-DGDA_SOLO") for o in build_options("gpu-fence", root))
    monkeypatch.setenv(DEFINES_ENV, "GDA_SOLO=1")
    assert "-DGDA_SOLO=1" in build_options("gpu-fence", root)
    for bad in ("GDA_FAST=1", "GDA_SOLO=yes", "GDA_ORDERING=0"):
        monkeypatch.setenv(DEFINES_ENV, bad)
        with pytest.raises(ConfigError) as e:
            build_options("gpu-fence", root)
        assert e.value.field == DEFINES_ENV and "GDA_SOLO" in e.value.allowed


def test_qp_state_fits_the_rows_the_submitter_allocates() -> None:
    from gicbench.submit.gpu.submitter import STATE_WORDS

    text = (Path(__file__).resolve().parents[1] / "cuda" / "gda" / "queue.cuh").read_text()
    body = text[text.index("struct QpState {") : text.index("};", text.index("struct QpState {"))]
    fields = re.findall(r"^\s+uint32_t (\w+)(?:\[(\d+)\])?;", body, flags=re.M)
    assert "cq_pub" in [f for f, _ in fields] and "cq_slack" in [f for f, _ in fields]
    assert sum(int(n or 1) for _, n in fields) == STATE_WORDS  # the kernel's row is the array's


@pytest.mark.parametrize("depth", [16, 64, 256, 1024])
@pytest.mark.parametrize("bbs", [1, 2, 4])
def test_the_cq_record_lag_never_lets_a_cqe_overrun(depth: int, bbs: int) -> None:
    """With at most `inflight` CQEs owed and the record lagging by at most `slack` consumed
    CQEs, the furthest CQE (consumer index + inflight - 1) stays below record + ncqe."""
    ncqe = depth
    for batch in (1, max(1, depth // bbs // 2), depth // bbs):
        se = lanes.signal_every(depth, bbs, batch)
        inflight = lanes.max_inflight_cqes(depth, bbs, se)
        assert inflight <= ncqe
        slack = lanes.cq_slack(ncqe, inflight)
        record, ci = 0, slack  # the worst lag publish_cq_ci leaves
        assert ci + inflight - 1 < record + ncqe
    assert lanes.cq_slack(256, 1) == 255  # single-op: one WQE outstanding


def test_host_doorbell_with_gpu_resident_queues_is_refused_in_preflight(monkeypatch) -> None:
    from gicbench.submit.gpu.submitter import GpuSubmitter

    monkeypatch.setattr(GpuSubmitter, "availability", classmethod(lambda cls, probes: None))
    with pytest.raises(ConfigError, match=r"doorbell \(--doorbell\).*--queues device"):
        plan(experiments=["single-op"], submitter="gpu", doorbell="host", engine="cuda",
             queues="device")  # fmt: skip
    with pytest.raises(ConfigError, match="doorbell"):
        plan(experiments=["single-op"], submitter="gpu", doorbell="sometimes")
    with pytest.raises(ConfigError, match=r"cq_poll|cq-poll"):
        plan(experiments=["single-op"], submitter="gpu", cq_poll="never")


def test_host_doorbell_refuses_a_qp_whose_record_is_in_gpu_memory() -> None:
    from gicbench.fabric.base import CompletionQueue, MemoryDomain, QueuePair, SendQueue
    from gicbench.submit.gpu.forward import host_reachable

    cq = CompletionQueue(cqn=1, buf=0, ncqe=64, dbrec=0)
    sq = SendQueue(7, 0, 64, 0, 0, cq, MemoryDomain.DEVICE)
    why = host_reachable(QueuePair(qpn=7, sq=sq, rq=None))
    assert why is not None and "--queues device" in why
