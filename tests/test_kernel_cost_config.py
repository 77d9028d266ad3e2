"""kernel-cost's configuration: listed, refused where nothing can run it (the host submitter
here; mini-proxy and DOCA by name: not built yet), bad knobs refused with exit status 2 naming
the field, the checks across knobs, the points, and the landing each sent message leaves."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from launching import gicbench

from gicbench.cli.main import main
from gicbench.config import RunConfig
from gicbench.errors import ConfigError, UnsupportedError
from gicbench.experiments.context import Layout
from gicbench.experiments.kernel_cost import KernelCost, KernelCostParams
from gicbench.patterns import traffic
from gicbench.submit.base import NoParams, Shape, Submitter
from gicbench.submit.doca import kernel_cost as dk
from gicbench.submit.doca.params import DocaParams
from gicbench.submit.doca.submitter import DocaSubmitter
from gicbench.submit.gpu.params import GpuParams
from gicbench.submit.gpu.submitter import GpuSubmitter
from gicbench.submit.proxy import kernel_cost as pk
from gicbench.submit.proxy.params import ProxyParams
from gicbench.submit.proxy.submitter import ProxySubmitter

CUDA = Path(__file__).resolve().parents[1] / "cuda"


def test_listed_with_its_knobs() -> None:
    r = gicbench("list", "kernel-cost")
    assert r.returncode == 0, r.stderr
    for flag in ("--caller", "--live", "--per-block", "--msg-size", "--variant", "--build",
                 "--qps", "--blocks", "--block-threads", "--blocks-per-sm", "--compute-steps",
                 "--stream-steps", "--launches", "--pairs"):  # fmt: skip
        assert flag in r.stdout
    assert "arXiv 2610.01380" in r.stdout


def test_refused_here_before_anything_exists(capsys, tmp_path) -> None:
    out = tmp_path / "run"
    rc = main(["run", "kernel-cost", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert "kernel-cost needs kernel-cost loops" in err and "submitter host" in err
    assert not out.exists()


@pytest.fixture
def gpu_probe(monkeypatch):
    """ProxyParams(producer="gpu") asks for a GPU as it is built: say there is one."""
    from gicbench import platform

    monkeypatch.setattr(platform, "probe_cupy", lambda: SimpleNamespace(ok=True, detail=""))


def test_mini_proxy_knobs_its_path_cannot_run_are_refused_by_name(gpu_probe) -> None:
    cfg = RunConfig.build(experiments=["kernel-cost"])
    with pytest.raises(UnsupportedError, match=r"mini-proxy path is GPU producers.*--producer gpu"):
        KernelCost.from_config(cfg, ProxySubmitter, ProxyParams())
    with pytest.raises(UnsupportedError, match="--handoff baseline: every ring is shared"):
        KernelCost.from_config(cfg, ProxySubmitter, ProxyParams(producer="gpu", handoff="tuned"))
    ok = ProxyParams(producer="gpu", handoff="baseline", workers=4, rings=32)
    assert isinstance(KernelCost.from_config(cfg, ProxySubmitter, ok), KernelCost)


def test_mini_proxy_points_are_checked_against_its_workers(gpu_probe) -> None:
    exp = _experiment()
    pts = [("kernel-cost", p) for p in exp.points()]
    # the rate loops' one-ring-per-lane rule is not kernel-cost's: 32 rings carry 528 lanes
    ProxySubmitter.check_points(ProxyParams(producer="gpu", workers=4, rings=32), pts)
    few = [("kernel-cost", {**p, "qps": 2}) for _, p in pts]
    with pytest.raises(ConfigError, match="--workers 4 with --qps 2: every worker owns lanes"):
        ProxySubmitter.check_points(ProxyParams(producer="gpu", workers=4), few)


def test_mini_proxy_placement_keeps_a_ring_to_its_lanes_worker() -> None:
    for lanes, workers, rings in ((528, 4, 32), (32, 4, 32), (4, 4, 32), (7, 3, 8), (5, 1, 1)):
        per = pk.ring_messages(528, lanes, workers, rings, 2)
        assert sum(per) == 528 * 2
        for b in range(528):
            r = pk.ring_of(b, lanes, workers, rings)
            assert 0 <= r < rings and r % workers == b % lanes % workers  # the worker owns both
    # workers dividing rings: block b's ring is b mod R, so 528 blocks fill all 32 rings
    assert [pk.ring_of(b, 528, 4, 32) for b in range(64)] == [b % 32 for b in range(64)]
    assert pk.kc_rings(ProxyParams()) == pk.KC_RINGS == 32


def test_mini_proxy_send_args_bytes_at_the_headers_offsets() -> None:
    b = pk.send_args(0x11, 0x22, 0x33, 0x44, 123, 32, 4, 528, 1024, 7168)
    assert b.nbytes == pk.SEND_ARGS_BYTES
    assert tuple(b[:40].view(np.uint64)) == (0x11, 0x22, 0x33, 0x44, 123)
    assert tuple(b[40:64].view(np.uint32)) == (32, 4, 528, 1024, 7168, 0)
    text = (CUDA / "kcost" / "send_proxy.cuh").read_text()
    assert f"sizeof(SendArgs) == {pk.SEND_ARGS_BYTES}" in text


def test_doca_knobs_its_path_cannot_run_are_refused_by_name() -> None:
    cfg = RunConfig.build(experiments=["kernel-cost"])
    with pytest.raises(UnsupportedError, match="one thread's put per message: use --doca-scope"):
        KernelCost.from_config(cfg, DocaSubmitter, DocaParams(doca_scope="warp"))
    with pytest.raises(UnsupportedError, match="does not ring BlueFlame"):
        KernelCost.from_config(cfg, DocaSubmitter, DocaParams(doca_handler="gpu-sm-bf"))
    for handler in ("gpu-sm-db", "gpu-sm-no-dbr", "cpu-proxy", "cpu-proxy-free-flow"):
        got = KernelCost.from_config(cfg, DocaSubmitter, DocaParams(doca_handler=handler))
        assert isinstance(got, KernelCost)


def test_doca_points_sharing_a_qp_need_gpu_sharing() -> None:
    inline = {"build": ("inline",)}
    pts = [("kernel-cost", p) for p in _experiment(**inline).points()]
    DocaSubmitter.check_points(DocaParams(), pts)  # one QP per block: exclusive is enough
    shared = [("kernel-cost", p) for p in _experiment(qps=8, blocks=64, **inline).points()]
    with pytest.raises(UnsupportedError, match="--doca-sharing exclusive with --qps 8 for 64"):
        DocaSubmitter.check_points(DocaParams(), shared)
    DocaSubmitter.check_points(DocaParams(doca_sharing="gpu"), shared)
    # the residency run sends nothing: any sharing, either build
    dormant = _experiment(blocks_per_sm=8, qps=8, variant=("none", "code-only"), per_block=("0",))
    DocaSubmitter.check_points(DocaParams(), [("kernel-cost", p) for p in dormant.points()])
    every = [("kernel-cost", p) for p in _experiment(blocks_per_sm=8, qps=8, **inline).points()]
    with pytest.raises(UnsupportedError, match="N per SM of blocks"):
        DocaSubmitter.check_points(DocaParams(), every)


def test_doca_runs_every_variant_of_both_builds_at_the_default_shape() -> None:
    """One QP per block: the default grid (both builds, every variant) passes the pre-flight."""
    pts = [("kernel-cost", p) for p in _experiment().points()]
    assert {p["build"] for _, p in pts} == {"none", "inline", "separate"}
    assert {(p["build"], p["variant"]) for _, p in pts} >= {("separate", "send"),
                                                            ("separate", "send-wait")}
    DocaSubmitter.check_points(DocaParams(), pts)


def test_doca_send_args_bytes_at_the_headers_offsets() -> None:
    b = dk.send_args(0x11, 0x22, 0x33, 456, 528, 8)
    assert b.nbytes == dk.SEND_ARGS_BYTES
    assert tuple(b[:32].view(np.uint64)) == (0x11, 0x22, 0x33, 456)
    assert tuple(b[32:40].view(np.uint32)) == (528, 8)
    text = (CUDA / "kcost" / "send_doca.cuh").read_text()
    assert f"sizeof(SendArgs) == {dk.SEND_ARGS_BYTES}" in text


def test_mini_gda_refuses_the_host_doorbell() -> None:
    cfg = RunConfig.build(experiments=["kernel-cost"])
    with pytest.raises(UnsupportedError, match="--doorbell gpu"):
        KernelCost.from_config(cfg, GpuSubmitter, GpuParams(doorbell="host"))
    assert isinstance(KernelCost.from_config(cfg, GpuSubmitter, GpuParams()), KernelCost)


@pytest.mark.parametrize(
    ("args", "field", "allowed"),
    [
        (["--live", "0"], "live (--live)", "integers in 1..224 (0 is not)"),
        (["--live", "8,,16"], "live (--live)", "no empty items"),
        (["--live", "8,8"], "live (--live)", "8 repeated"),
        (["--per-block", "65"], "per_block (--per-block)", "integers in 0..64 (65 is not)"),
        (["--msg-size", "4"], "msg_size (--msg-size)", "(4 is not)"),
        (["--msg-size", "big"], "msg_size (--msg-size)", "integers"),
        (["--caller", "fft"], "caller (--caller)", "one of compute, stream"),
        (["--variant", "maybe"], "variant (--variant)", "none, code-only, send, send-wait"),
        (["--build", "lto"], "build (--build)", "one of inline, separate"),
        (["--block-threads", "100"], "block_threads (--block-threads)", "a multiple of 32"),
        (["--blocks", "0"], "blocks (--blocks)", "1 <= blocks"),
        (["--qps", "529"], "qps (-q)", "qps <= 528"),
        (["--pairs", "0"], "pairs (--pairs)", "1 <= pairs"),
        (["--launches", "0"], "launches (--launches)", "1 <= launches"),
        (["--blocks-per-sm", "0"], "blocks_per_sm (--blocks-per-sm)", "1 <= blocks_per_sm"),
        (
            ["--live", "224", "--compute-steps", "74892"],
            "compute_steps (--compute-steps)",
            "at most 74891 with --live up to 224",
        ),
        (
            ["--live", "224", "--stream-steps", "10700"],
            "stream_steps (--stream-steps)",
            "at most 10699 with --live up to 224",
        ),
    ],
)
def test_bad_knobs_are_refused(capsys, args: list[str], field: str, allowed: str) -> None:
    rc = main(["run", "kernel-cost", *args])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"invalid {field}=" in err, err
    assert allowed in err, err


def test_the_largest_exact_step_counts_pass() -> None:
    KernelCostParams(live=("224",), compute_steps=74891, stream_steps=10699)


# ---- with a submitter that has the shape (none runs here) ----------------------------------------
class _Caller(Submitter):
    name = "test-kernel-cost"
    summary = "a stand-in with the kernel-cost shape"
    shapes = frozenset({Shape.KERNEL_COST})
    posting = ("mlx5-queues",)

    @classmethod
    def availability(cls, probes: Any) -> str | None:
        return None


def _experiment(**knobs: Any) -> KernelCost:
    cfg = RunConfig.build(experiments=["kernel-cost"], **knobs)
    exp = KernelCost.from_config(cfg, _Caller, NoParams())
    assert isinstance(exp, KernelCost)
    return exp


def test_qps_against_the_grid() -> None:
    with pytest.raises(ConfigError, match=r"qps \(-q\)=528: allowed <= --blocks-per-sm \(8\)"):
        _experiment(blocks_per_sm=8)
    assert _experiment(blocks_per_sm=8, qps=8).lanes_per_peer == 8
    with pytest.raises(ConfigError, match=r"qps \(-q\)=528: allowed <= --blocks \(64\)"):
        _experiment(blocks=64)


def test_one_destination_per_sender() -> None:
    exp = _experiment()
    exp.check_rank(traffic("pairs", 0, 2))


def test_points_skip_what_adds_nothing() -> None:
    pts = _experiment().points()
    # per caller and live: none once; per build: code-only x 4 counts, 2 sending variants x 3
    # counts x 2 sizes
    assert len(pts) == 2 * 2 * (1 + 2 * (4 + 2 * 3 * 2))
    none = [p for p in pts if p["variant"] == "none"]
    assert {(p["build"], p["per_block"], p["size"]) for p in none} == {("none", 0, 0)}
    assert all(p["size"] == 0 for p in pts if p["variant"] == "code-only")
    assert all(p["per_block"] > 0 and p["size"] in (8, 7168) for p in pts
               if p["variant"] in ("send", "send-wait"))  # fmt: skip
    first = pts[0]
    assert first == {"caller": "compute", "live": 8, "steps": 65536, "blocks": 528,
                     "grid_per_sm": 0, "threads": 256, "qps": 528, "launches": 15, "pairs": 3,
                     "variant": "none", "build": "none", "per_block": 0, "size": 0}  # fmt: skip
    assert {p["steps"] for p in pts if p["caller"] == "stream"} == {1200}
    residency = _experiment(blocks_per_sm=8, qps=8, variant=("none", "code-only"),
                            per_block=("0",)).points()  # fmt: skip
    assert {p["blocks"] for p in residency} == {0} and {p["grid_per_sm"] for p in residency} == {8}


def test_a_lane_slice_holds_a_blocks_messages() -> None:
    exp = _experiment(msg_size=("8", "7168"), per_block=("0", "16"))
    assert exp.max_message == 16 * 7168


class _Ctx:
    def __init__(self) -> None:
        self.traffic = traffic("pairs", 1, 2)


def test_landing_of_the_sending_variants_only() -> None:
    exp = _experiment(qps=4, blocks=8)
    layout = Layout(lane_bytes=1024, lanes=4)
    src = np.arange(4096, dtype=np.uint32).astype(np.uint8)
    point = {"variant": "send", "per_block": 4, "size": 8, "qps": 4}
    got = exp.expected_landing(_Ctx(), point, 0, src, layout)  # type: ignore[arg-type]
    assert [off for off, _ in got] == [0, 1024, 2048, 3072]
    assert all(np.array_equal(b, src[off : off + 32]) for off, b in got)
    for variant in ("none", "code-only"):
        assert exp.expected_landing(_Ctx(), {**point, "variant": variant}, 0, src,
                                    layout) == []  # type: ignore[arg-type]  # fmt: skip


# ---- run_point over a stand-in submitter: the results and the checks -----------------------------
class _Sub:
    """Returns what a correct (or a broken) launcher would: exact output, the variant's WQEs."""

    def __init__(self, skip_step: bool = False, stray_wqe: bool = False) -> None:
        self.skip_step, self.stray_wqe = skip_step, stray_wqe
        self.work: Any = None

    def kernel_cost(self, work: Any) -> Any:
        from gicbench.experiments.kernel_cost import expected_output
        from gicbench.submit.work import KernelCostResult, KernelResources

        self.work = work
        steps = work.steps - 1 if self.skip_step else work.steps
        out = expected_output(work.caller, work.live, steps, work.blocks, work.threads)
        runs = work.launches * work.pairs + 2
        posted = np.zeros(len(work.lanes), dtype=np.int64)
        if work.variant in ("send", "send-wait"):
            for b in range(work.blocks):
                posted[b % len(work.lanes)] += work.messages * runs
        if self.stray_wqe:
            posted[0] += 1
        ns = np.full((work.pairs, work.launches), 1000, dtype=np.int64)
        res = KernelResources(40, 0, 0, 0, 0, 4)
        return KernelCostResult(
            ns * 5 // 4,
            ns,
            res,
            KernelResources(28, 0, 0, 0, 0, 8),
            out,
            posted,
            work.blocks,
            runs,
            {"sm_clock_hz": 1.98e9},
        )


class _RunCtx:
    def __init__(self, sub: _Sub) -> None:
        self.traffic = traffic("pairs", 0, 2)
        self.submitter = sub

    def lanes_to(self, peer: int, transport: str, count: int) -> tuple:
        return tuple(range(count))


def test_run_point_reports_the_loss_and_checks_the_work() -> None:
    exp = _experiment(qps=4, blocks=8, block_threads=64, compute_steps=10, stream_steps=10,
                      pairs=2, launches=3)  # fmt: skip
    sends = [p for p in exp.points() if p["variant"] == "send-wait" and p["size"] == 7168]
    pt = sends[0]
    sub = _Sub()
    r = exp.run_point(_RunCtx(sub), pt)  # type: ignore[arg-type]
    assert sub.work.inline is False and sub.work.messages == pt["per_block"]
    assert r.results["loss_pct"] == pytest.approx(20.0)  # 1 - 1000 / 1250
    assert r.results["registers"] == 40 and r.results["reference_blocks_per_sm"] == 8
    assert r.results["sm_clock_mhz"] == pytest.approx(1980.0)
    assert r.samples["kernel_ns"].shape == (6,)
    from gicbench.errors import ValidationError

    with pytest.raises(ValidationError, match="skipped work"):
        exp.run_point(_RunCtx(_Sub(skip_step=True)), pt)  # type: ignore[arg-type]
    dormant = next(p for p in exp.points() if p["variant"] == "code-only" and p["per_block"])
    with pytest.raises(ValidationError, match="code-only must post none"):
        exp.run_point(_RunCtx(_Sub(stray_wqe=True)), dormant)  # type: ignore[arg-type]
    assert exp.run_point(_RunCtx(_Sub()), dormant).results["posted"] == 0  # type: ignore[arg-type]
    small = next(p for p in exp.points() if p["variant"] == "send" and p["size"] == 8)
    exp.run_point(_RunCtx(sub), small)  # type: ignore[arg-type]
    assert sub.work.inline is True


def test_the_plan_for_mini_gda_sizes_a_lane_slice_per_block() -> None:
    """The run as planned for a GPU machine (here=False: all but whether this one has a GPU):
    528 QPs a peer, each lane slice one block's 16 x 7 KiB, and too many messages refused
    naming --landing-bytes."""
    from gicbench.plan import make_plan

    plan = make_plan(RunConfig.build(experiments=["kernel-cost"], submitter="gpu",
                                     ordering="sys-fence"), here=False)  # fmt: skip
    assert plan.lanes == 528 and plan.layout(2).lane_bytes == 16 * 7168
    big = RunConfig.build(experiments=["kernel-cost"], submitter="gpu", per_block=("64",))
    with pytest.raises(ConfigError, match=r"landing_bytes \(--landing-bytes\)"):
        make_plan(big, here=False).layout(2)
    with pytest.raises(UnsupportedError, match="mini-proxy path is GPU producers"):
        make_plan(RunConfig.build(experiments=["kernel-cost"], submitter="proxy"), here=False)


def test_the_plans_for_mini_proxy_and_doca(gpu_probe) -> None:
    """Both paths plan as mini-gda's (a lane slice per block's messages), with their own knobs."""
    from gicbench.plan import make_plan

    proxy = make_plan(RunConfig.build(experiments=["kernel-cost"], submitter="proxy",
                                      producer="gpu", handoff="baseline", workers=4, rings=32,
                                      qps=32), here=False)  # fmt: skip
    assert proxy.lanes == 32 and proxy.layout(2).lane_bytes >= 16 * 7168
    doca = make_plan(
        RunConfig.build(experiments=["kernel-cost"], submitter="doca", build=("inline",)),
        here=False,
    )
    assert doca.lanes == 528 and doca.layout(2).lane_bytes == 16 * 7168
