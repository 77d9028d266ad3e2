"""kernel-cost's mini-proxy and DOCA GPUNetIO paths without a GPU: each path's build options
(cuda/kcost/path.cuh's KC_PATH, the ring layout or DOCA's handler and sharing compiled in), every
build compiled for sm_90 with nvcc (DOCA's against its headers; skipped without nvcc or them),
the compiler's resource report of those cubins, and the PTX: the call behind the run-time variant
branch, inlined (the path's stores in the caller, no call) or a real call to the separately
compiled kc_send (its stores not in the caller)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gpu_helpers import nvcc_or_skip

from gicbench import _native
from gicbench.submit.doca import kernel_cost as dk
from gicbench.submit.doca.layout import NicHandler, Sharing
from gicbench.submit.doca.params import DocaParams
from gicbench.submit.gpu import kernel_cost as gk
from gicbench.submit.kernel_cost_common import CALLER, DRAIN, VARIANT_CODES
from gicbench.submit.proxy import kernel_cost as pk
from gicbench.submit.work import KC_BUILDS, KC_CALLERS, KC_VARIANTS

CUDA = Path(__file__).resolve().parents[1] / "cuda"
CONSTS = _native.proxy


# ---- build options (no compiler) ----------------------------------------------------------------
def test_each_path_names_itself_and_its_variants_share_a_cubin() -> None:
    assert "-DKC_PATH=0" in gk.build_for("compute", 8, "send", "inline").defines()
    for variant in KC_VARIANTS[1:]:
        for build in KC_BUILDS:
            p = pk.build_for("stream", 16, variant, build).defines(CONSTS)
            assert "-DKC_PATH=1" in p and "-DKC_COMM=1" in p and "-DKC_LIVE=16" in p
            assert f"-DKC_SEPARATE={int(build == 'separate')}" in p
            assert f"-DHEAD_OFF={CONSTS.HEAD_OFF}" in p  # the native ring layout, compiled in
            d = dk.build_for("stream", 16, variant, build, DocaParams()).defines()
            assert "-DKC_PATH=2" in d and f"-DKC_SEPARATE={int(build == 'separate')}" in d
            assert f"-DKC_DOCA_HANDLER={int(NicHandler.GPU_SM_DB)}" in d
            assert f"-DKC_DOCA_SHARING={int(Sharing.EXCLUSIVE)}" in d
    none = pk.build_for("compute", 8, "none", "separate")
    assert not none.comm and not none.separate and "-DKC_COMM=0" in none.defines(CONSTS)
    assert pk.build_for("compute", 8, "send", "inline") == pk.build_for(
        "compute", 8, "code-only", "inline"
    )
    cpu = dk.build_for(
        "compute", 8, "send", "inline", DocaParams(doca_handler="cpu-proxy", doca_sharing="gpu")
    )
    assert f"-DKC_DOCA_HANDLER={int(NicHandler.CPU_PROXY)}" in cpu.defines()
    assert f"-DKC_DOCA_SHARING={int(Sharing.GPU)}" in cpu.defines()
    tags = {
        gk.build_for("compute", 8, "send", "inline").tag(),
        pk.build_for("compute", 8, "send", "inline").tag(),
        dk.build_for("compute", 8, "send", "inline", DocaParams()).tag(),
        cpu.tag(),
    }
    assert len(tags) == 4  # one cache entry per path (and per DOCA handler and sharing)


def test_bad_builds_are_refused() -> None:
    for kw in ({"caller": "fft"}, {"build": "lto"}, {"live": 0}):
        with pytest.raises(ValueError):
            pk.KernelBuild(**{"caller": "compute", "live": 8, "comm": True, **kw})
        with pytest.raises(ValueError):
            dk.KernelBuild(**{"caller": "compute", "live": 8, "comm": True, **kw})
    with pytest.raises(ValueError):
        dk.KernelBuild("compute", 8, True, handler=3)
    with pytest.raises(ValueError):
        pk.build_for("compute", 8, "sometimes", "inline")


def test_the_doca_build_takes_its_headers_as_system_headers() -> None:
    assert dk.include_flags(Path("/h")) == ("-isystem", "/h")


# ---- compiled (nvcc; DOCA's headers for the DOCA path) -------------------------------------------
def _doca_headers_or_skip() -> Any:
    from gicbench.submit.doca.headers import find, unavailable_reason

    h = find()
    if h is None:
        pytest.skip(unavailable_reason())
    return h


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kcost-paths")


def _compiled(cache: Path, path: str, caller: str, live: int, comm: bool, build: str) -> Any:
    nvcc = nvcc_or_skip("cuda/kcost")
    if path == "proxy":
        return pk.compile_cubin(pk.KernelBuild(caller, live, comm, build), "sm_90", CONSTS,
                                cache, nvcc)  # fmt: skip
    _doca_headers_or_skip()
    return dk.compile_cubin(dk.KernelBuild(caller, live, comm, build), "sm_90", cache, nvcc)


BUILDS = [(path, caller, live, comm, build) for path in ("proxy", "doca") for caller in KC_CALLERS
          for live in (8, 224)
          for comm, build in ((False, "inline"), (True, "inline"), (True, "separate"))]  # fmt: skip


@pytest.mark.nvcc
@pytest.mark.parametrize(("path", "caller", "live", "comm", "build"), BUILDS)
def test_every_build_compiles_for_sm90(cache: Path, path: str, caller: str, live: int,
                                       comm: bool, build: str) -> None:  # fmt: skip
    c = _compiled(cache, path, caller, live, comm, build)
    assert c.cubin.stat().st_size > 0
    r = c.resources[CALLER]
    assert 0 < r.registers <= 255
    assert (DRAIN in c.resources) == comm


@pytest.mark.nvcc
@pytest.mark.parametrize("path", ("proxy", "doca"))
def test_the_call_costs_registers_and_the_separate_call_a_frame(cache: Path, path: str) -> None:
    regs = {(comm, build): _compiled(cache, path, "compute", 8, comm, build).resources[CALLER]
            .registers for comm, build in ((False, "inline"), (True, "inline"),
                                           (True, "separate"))}  # fmt: skip
    assert regs[(True, "inline")] > regs[(False, "inline")]
    assert regs[(True, "separate")] > regs[(False, "inline")]
    # 224 live values cannot all stay in registers across an ABI call: the caller saves some
    assert (
        _compiled(cache, path, "compute", 224, True, "separate").resources[CALLER].stack_bytes > 0
    )


def _ptx(tmp_path: Path, path: str, comm: bool, build: str) -> str:
    nvcc = nvcc_or_skip("cuda/kcost")
    if path == "proxy":
        b: Any = pk.KernelBuild("compute", 8, comm, build)
        defines, include = b.defines(CONSTS), ()
    else:
        b = dk.KernelBuild("compute", 8, comm, build)
        defines, include = b.defines(), dk.include_flags(_doca_headers_or_skip().include)
    out = tmp_path / f"{b.tag()}.ptx"
    extra = ["-rdc=true"] if b.separate else []
    cmd = [nvcc, "-arch=sm_90", "-std=c++17", f"-I{CUDA}", *include, *defines, *extra, "-ptx",
           str(CUDA / "kcost" / "kernel_cost.cu"), "-o", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out.read_text()


def _entry(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    nxt = ptx.find(".entry ", start + 1)
    return re.sub(r"//.*", "", ptx[start : nxt if nxt > 0 else len(ptx)])


def _assert_variant_branch(entry: str) -> None:
    reg = re.search(r"ld\.param\.u32\s+(%r\d+), \[kc_caller_param_7\];", entry)
    assert reg, "the variant argument is read"
    code = VARIANT_CODES["send"]
    assert re.search(rf"setp\.\w+\.s32\s+%p\d+, {re.escape(reg.group(1))}, {code};", entry)


# What each path's call stores: mini-proxy's descriptor publish (a system-scope release), DOCA's
# doorbell (gpu-sm-db: an MMIO store) and its fences.
MARKS = {"proxy": r"st\.release\.sys\.global\.u64", "doca": r"st\.mmio\.relaxed\.sys|fence"}


@pytest.mark.nvcc
@pytest.mark.parametrize("path", ("proxy", "doca"))
def test_ptx_carries_the_call_behind_a_run_time_branch(tmp_path: Path, path: str) -> None:
    none = _entry(_ptx(tmp_path, path, False, "inline"), CALLER)
    assert "kc_send" not in none and not re.search(MARKS[path], none)
    assert "fma.rn.f32" in none
    inl = _entry(_ptx(tmp_path, path, True, "inline"), CALLER)
    assert "call" not in inl.split()  # inlined: no call instruction
    assert re.search(MARKS[path], inl)
    _assert_variant_branch(inl)
    sep_ptx = _ptx(tmp_path, path, True, "separate")
    sep = _entry(sep_ptx, CALLER)
    _assert_variant_branch(sep)
    assert re.search(r"call(\.uni)?[^;]*kc_send", sep)  # a real call to the other unit
    assert ".extern .func" in sep_ptx and "kc_send" in sep_ptx
    assert not re.search(MARKS[path], sep)  # the body is not here


# ---- the analysis names the path -----------------------------------------------------------------
def _agg(submitter: str, **cols: Any) -> Any:
    import pandas as pd

    agg = pd.DataFrame({"experiment": ["kernel-cost"] * 2, **cols})
    agg.attrs["manifest"] = {"submitter": submitter}
    return agg


def test_the_analysis_names_the_path_and_how_it_ran() -> None:
    from gicbench.analysis import kernel_cost as akc

    assert akc.path_of(_agg("gpu")) == ("mini-gda", "")
    assert akc.path_of(_agg("proxy", workers=[4.0, 4.0], rings=[32.0, 32.0])) == (
        "mini-proxy", "GPU producers, 4 workers, 32 rings")  # fmt: skip
    how = akc.path_of(_agg("doca", doca_handler=["cpu-proxy"] * 2, doca_sharing=["gpu"] * 2))
    assert how == ("DOCA GPUNetIO", "handler cpu-proxy, sharing gpu")


def test_the_report_says_which_path(tmp_path: Path) -> None:
    from experiment_runs import kernel_cost_points, write_run

    from gicbench.analysis.report import write_report

    run = write_run(tmp_path / "run", kernel_cost_points())
    assert "Path: mini-gda" in write_report(run, failures=[]).read_text()
