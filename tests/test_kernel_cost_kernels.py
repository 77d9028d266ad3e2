"""cuda/kcost/: every kernel-cost build (caller x communication code x build, at a thin and a
thick live state) compiles for sm_90 with nvcc through the launcher's own build steps (no GPU
needed); the resources are parsed from the compiler's real -v report of those cubins and move
the way the mechanism says; the PTX holds the run-time branch to the call (code-only carries
it), the none build none of it; the build options and the argument block the launcher packs
are the ones the sources declare."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gpu_helpers import nvcc_or_skip

from gicbench.submit.gpu import kernel_cost as kc
from gicbench.submit.work import KC_BUILDS, KC_CALLERS, KC_VARIANTS

REPO = Path(__file__).resolve().parents[1]
CUDA = REPO / "cuda"


# ---- build options (no compiler) ----------------------------------------------------------------
def test_each_variant_gets_its_build() -> None:
    none = kc.build_for("compute", 8, "none", "separate")
    assert not none.comm and not none.separate  # no communication code: no call to separate
    assert "-DKC_COMM=0" in none.defines() and "-DKC_SEPARATE=0" in none.defines()
    for variant in KC_VARIANTS[1:]:  # code-only, send, send-wait: one cubin, run-time variant
        for build in KC_BUILDS:
            b = kc.build_for("stream", 16, variant, build)
            d = b.defines()
            assert "-DKC_COMM=1" in d and "-DKC_CALLER=1" in d and "-DKC_LIVE=16" in d
            assert (f"-DKC_SEPARATE={int(build == 'separate')}") in d
    assert kc.build_for("stream", 16, "send", "inline") == kc.build_for(
        "stream", 16, "code-only", "inline")
    assert {v: i for i, v in enumerate(KC_VARIANTS)} == kc.VARIANT_CODES


def test_separate_build_is_relocatable_and_device_linked(tmp_path: Path) -> None:
    root = Path("/src")
    inl = kc.nvcc_commands(kc.KernelBuild("compute", 8, True, "inline"), root, tmp_path, "nvcc",
                           "sm_90", tmp_path / "o.cubin")  # fmt: skip
    assert len(inl) == 1 and "-cubin" in inl[0] and "-rdc=true" not in inl[0]
    assert inl[0][inl[0].index("-Xptxas"):][:2] == ["-Xptxas", "-v"]
    sep = kc.nvcc_commands(kc.KernelBuild("compute", 8, True, "separate"), root, tmp_path,
                           "nvcc", "sm_90", tmp_path / "o.cubin")  # fmt: skip
    assert len(sep) == 3
    assert all("-rdc=true" in c for c in sep[:2])
    assert str(root / "kcost" / "send.cu") in sep[1]
    assert "-dlink" in sep[2] and "-cubin" in sep[2] and "-v" in sep[2]


def test_bad_builds_are_refused() -> None:
    for kw in ({"caller": "fft"}, {"build": "lto"}, {"live": 0}, {"ordering": "x"}):
        with pytest.raises(ValueError):
            kc.KernelBuild(**{"caller": "compute", "live": 8, "comm": True, **kw})
    with pytest.raises(ValueError):
        kc.build_for("compute", 8, "sometimes", "inline")


def test_send_args_bytes_at_the_headers_offsets() -> None:
    b = kc.send_args(0x1111, 7, 0x2222, 8, True, 123, 0x3333, 0x4444)
    assert b.nbytes == kc.SEND_ARGS_BYTES
    u64 = b.view(np.uint64)
    assert (u64[0], u64[2], u64[4], u64[5], u64[6]) == (0x1111, 0x2222, 123, 0x3333, 0x4444)
    assert int(b[8:12].view(np.int32)[0]) == 7
    assert int(b[24:28].view(np.uint32)[0]) == 8 and int(b[28:32].view(np.int32)[0]) == 1
    text = (CUDA / "kcost" / "send.cuh").read_text()
    assert f"sizeof(SendArgs) == {kc.SEND_ARGS_BYTES}" in text


# ---- parsing (literal reports as the tools print them) ------------------------------------------
PTXAS = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'kc_caller' for 'sm_90'
ptxas info    : Function properties for kc_caller
    104 bytes stack frame, 124 bytes spill stores, 144 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers, 104 bytes cumulative stack size
ptxas info    : Compile time = 63.500 ms
"""
NVLINK = """nvlink info    : Function properties for 'kc_caller':
nvlink info    : used 92 registers, used 0 barriers, 0 stack, 0 bytes smem, 584 bytes cmem[0], 0 bytes lmem
"""  # noqa: E501
# cuobjdump --dump-resource-usage of the separate build's linked cubin (compute, 8 live values)
CUOBJDUMP = """
Resource usage:
 Common:
  GLOBAL:0
 Function __cuda_sm20_div_u64:
  REG:0 STACK:0 SHARED:0 LOCAL:0 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function kc_drain:
  REG:38 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:536 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function kc_caller:
  REG:92 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:584 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function kc_send:
  REG:0 STACK:0 SHARED:0 LOCAL:0 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


def test_report_lines_parse() -> None:
    r = kc.parse_ptxas(PTXAS)["kc_caller"]
    assert (r.registers, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes) == (255, 104,
                                                                                       124, 144)
    n = kc.parse_nvlink(NVLINK)["kc_caller"]
    assert (n.registers, n.stack_bytes, n.local_bytes) == (92, 0, 0)
    c = kc.parse_cuobjdump(CUOBJDUMP)
    assert set(c) == {"__cuda_sm20_div_u64", "kc_drain", "kc_caller", "kc_send"}
    assert (c["kc_caller"].registers, c["kc_caller"].stack_bytes) == (92, 0)
    assert c["kc_drain"].registers == 38


# ---- nvcc ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kcost")


def _compiled(cache: Path, b: kc.KernelBuild) -> kc.Compiled:
    return kc.compile_cubin(b, "sm_90", cache=cache, nvcc=nvcc_or_skip("cuda/kcost"))


BUILDS = [(caller, live, comm, build) for caller in KC_CALLERS for live in (8, 224)
          for comm, build in ((False, "inline"), (True, "inline"), (True, "separate"))]


@pytest.mark.nvcc
@pytest.mark.parametrize(("caller", "live", "comm", "build"), BUILDS)
def test_every_build_compiles_for_sm90(cache: Path, caller: str, live: int, comm: bool,
                                       build: str) -> None:  # fmt: skip
    c = _compiled(cache, kc.KernelBuild(caller, live, comm, build))
    assert c.cubin.stat().st_size > 0
    r = c.resources[kc.CALLER]
    assert 0 < r.registers <= 255
    assert (kc.DRAIN in c.resources) == comm


@pytest.mark.nvcc
@pytest.mark.parametrize("caller", KC_CALLERS)
def test_resources_move_as_the_mechanism_says(cache: Path, caller: str) -> None:
    """Carrying the call costs registers; a thick live state with the call inlined spills; the
    separate build's ABI call needs a stack frame; without the call nothing spills."""
    thin = {(comm, build): _compiled(cache, kc.KernelBuild(caller, 8, comm, build))
            .resources[kc.CALLER]
            for comm, build in ((False, "inline"), (True, "inline"), (True, "separate"))}
    none, inl, sep = thin[False, "inline"], thin[True, "inline"], thin[True, "separate"]
    assert inl.registers > none.registers and sep.registers > none.registers
    assert none.spill_store_bytes == 0 and none.stack_bytes == 0
    thick = {comm: _compiled(cache, kc.KernelBuild(caller, 224, comm, "inline"))
             .resources[kc.CALLER] for comm in (False, True)}  # fmt: skip
    assert thick[False].spill_store_bytes == 0
    assert thick[True].registers == 255 and thick[True].spill_store_bytes > 0
    assert _compiled(cache, kc.KernelBuild(caller, 224, True, "separate")).resources[
        kc.CALLER].stack_bytes > 0


def _cuobjdump() -> str:
    tool = shutil.which("cuobjdump") or next(
        (p for p in ("/usr/local/cuda/bin/cuobjdump",) if Path(p).exists()), None)
    if tool is None:
        pytest.skip("cuobjdump not found (pip's nvidia-cuda-cuobjdump has one: put it on PATH)")
    return tool


@pytest.mark.nvcc
@pytest.mark.parametrize("live", (8, 224))
def test_cuobjdump_agrees_with_the_compiler_report(cache: Path, live: int) -> None:
    tool = _cuobjdump()
    for comm, build in ((False, "inline"), (True, "inline"), (True, "separate")):
        c = _compiled(cache, kc.KernelBuild("stream", live, comm, build))
        out = subprocess.run([tool, "--dump-resource-usage", str(c.cubin)], capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        got = kc.parse_cuobjdump(out)[kc.CALLER]
        mine = c.resources[kc.CALLER]
        assert (got.registers, got.stack_bytes) == (mine.registers, mine.stack_bytes), build


def _function_sass(tool: str, cubin: Path, name: str) -> str:
    sass = subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    start = sass.index(f"Function : {name}")
    nxt = sass.find("Function : ", start + 1)
    return sass[start : nxt if nxt > 0 else len(sass)]


def _opcodes(sass: str) -> set[str]:
    return set(re.findall(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass))


@pytest.mark.nvcc
@pytest.mark.parametrize("caller", KC_CALLERS)
def test_the_dormant_call_is_in_the_sass(cache: Path, caller: str) -> None:
    """code-only's cubin is the sending variants' (the variant is a run-time argument): its
    caller's SASS holds the call, the reference's none of it. Inlined: the doorbell's fences and
    the QP lock's atomics; separate: a call out of the caller (the body is elsewhere)."""
    tool = _cuobjdump()
    none, inline, sep = (_opcodes(_function_sass(tool, _compiled(cache, b).cubin, kc.CALLER))
                         for b in (kc.KernelBuild(caller, 8, False),
                                   kc.KernelBuild(caller, 8, True, "inline"),
                                   kc.KernelBuild(caller, 8, True, "separate")))  # fmt: skip
    added = inline - none
    assert any(op.startswith(("MEMBAR", "FENCE")) for op in added), sorted(added)
    assert any(op.startswith("ATOM") for op in added), sorted(added)
    assert not any(op.startswith(("MEMBAR", "FENCE", "ATOM")) for op in none)
    calls = {op for op in sep - none if op.startswith("CALL")}
    assert calls, sorted(sep - none)
    assert not any(op.startswith(("MEMBAR", "ATOM")) for op in sep)  # they are in kc_send


def _ptx(tmp_path: Path, b: kc.KernelBuild) -> str:
    out = tmp_path / f"{b.tag()}.ptx"
    extra = ["-rdc=true"] if b.separate else []
    cmd = [nvcc_or_skip("cuda/kcost"), "-arch=sm_90", "-std=c++17", f"-I{CUDA}", *b.defines(),
           *extra, "-ptx", str(CUDA / "kcost" / "kernel_cost.cu"), "-o", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out.read_text()


def _entry(ptx: str, name: str) -> str:
    start = ptx.index(f".entry {name}(")
    nxt = ptx.find(".entry ", start + 1)
    return ptx[start : nxt if nxt > 0 else len(ptx)]


def _assert_variant_branch(entry: str) -> None:
    """The variant argument (the 8th) is compared with send's code at run time."""
    reg = re.search(r"ld\.param\.u32\s+(%r\d+), \[kc_caller_param_7\];", entry)
    assert reg, "the variant argument is read"
    code = kc.VARIANT_CODES["send"]
    assert re.search(rf"setp\.\w+\.s32\s+%p\d+, {re.escape(reg.group(1))}, {code};", entry)


@pytest.mark.nvcc
def test_ptx_carries_the_call_behind_a_run_time_branch(tmp_path: Path) -> None:
    none = _entry(_ptx(tmp_path, kc.KernelBuild("compute", 8, False)), kc.CALLER)
    assert "kc_send" not in none and not re.search(r"st\.volatile\.global\.u64|fence|membar",
                                                    none)
    assert "fma.rn.f32" in none
    inl = _entry(_ptx(tmp_path, kc.KernelBuild("compute", 8, True, "inline")), kc.CALLER)
    assert "call" not in re.sub(r"//.*", "", inl).split()  # inlined: no call instruction
    assert re.search(r"st\.volatile\.global\.u64", inl)  # the doorbell, built in
    _assert_variant_branch(inl)
    sep_ptx = _ptx(tmp_path, kc.KernelBuild("compute", 8, True, "separate"))
    sep = _entry(sep_ptx, kc.CALLER)
    _assert_variant_branch(sep)
    assert re.search(r"call(\.uni)?[^;]*kc_send", sep)  # a real call to the other unit
    assert ".extern .func" in sep_ptx and "kc_send" in sep_ptx
    assert not re.search(r"st\.volatile\.global\.u64", sep)  # the body is not here
