"""kernel-cost on mini-gda: the caller kernels of cuda/kcost/ built with nvcc per caller, live
values, communication code and build, their resources read from the compiler's report, and the
launcher that times paired passes of a variant and its reference with CUDA events (the paper,
arXiv 2610.01380, §4.3.2, Appendix D.2).

Both builds go through nvcc (not NVRTC): the separate build needs relocatable device code and a
device link (`-rdc=true`, then `-dlink -cubin`; NVRTC's relocatable output would need the driver's
linker driven by hand), and one compiler for both keeps their registers comparable. Cubins are
cached under ~/.cache/gicbench/kcost by a hash of the sources, the defines, the architecture and
nvcc's version, with the compiler's -v report beside each (the resources are parsed from it;
cuobjdump's resource usage, where installed, gives the same numbers).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...cuda_host import cuda_dir
from ...errors import ConfigError, UnsupportedError
from ..work import (
    KC_BUILDS,
    KC_CALLERS,
    KC_VARIANTS,
    KernelCostResult,
    KernelCostWork,
    KernelResources,
)
from . import lanes, status
from .params import CQ_POLLS, ORDERINGS

if TYPE_CHECKING:
    from .submitter import GpuSubmitter

VARIANT_CODES = {"none": 0, "code-only": 1, "send": 2, "send-wait": 3}  # kernel_cost.cu Variant
CALLER = "kc_caller"
DRAIN = "kc_drain"
SOURCES = ("kcost/kernel_cost.cu", "kcost/send.cu", "kcost/send.cuh", "gda/calls.cuh",
           "gda/queue.cuh", "gda/ordering.cuh", "gda/scope.cuh", "mlx5.cuh")  # fmt: skip
SEND_ARGS_BYTES = 56  # cuda/kcost/send.cuh SendArgs
STREAM_ELEMENTS = 1 << 26  # 256 MiB of float32: well past the H200's 60 MB L2
INPUT_MASK = STREAM_ELEMENTS - 1


@dataclass(frozen=True)
class KernelBuild:
    """One cubin: caller, live values, whether the call is built in (`comm`), how (`build`),
    and mini-gda's ordering and CQ polling. Without the call, `build` does not matter."""

    caller: str
    live: int
    comm: bool
    build: str = "inline"
    ordering: str = "gpu-fence"
    cq_poll: str = "expected"

    def __post_init__(self) -> None:
        if self.caller not in KC_CALLERS:
            raise ValueError(f"caller {self.caller!r} is not one of {KC_CALLERS}")
        if self.build not in KC_BUILDS:
            raise ValueError(f"build {self.build!r} is not one of {KC_BUILDS}")
        if not 1 <= self.live <= 256:
            raise ValueError(f"live {self.live} is not in 1..256")
        if self.ordering not in ORDERINGS or self.cq_poll not in CQ_POLLS:
            raise ValueError(f"ordering {self.ordering!r} / cq_poll {self.cq_poll!r} unknown")

    @property
    def separate(self) -> bool:
        return self.comm and self.build == "separate"

    def defines(self) -> tuple[str, ...]:
        return (
            f"-DKC_CALLER={KC_CALLERS.index(self.caller)}",
            f"-DKC_LIVE={self.live}",
            f"-DKC_COMM={int(self.comm)}",
            f"-DKC_SEPARATE={int(self.separate)}",
            f"-DGDA_ORDERING={ORDERINGS.index(self.ordering)}",
            f"-DGDA_CQ_POLL={CQ_POLLS.index(self.cq_poll)}",
        )

    def tag(self) -> str:
        how = self.build if self.comm else "nocomm"
        return f"{self.caller}-l{self.live}-{how}-{self.ordering}-{self.cq_poll}"


def build_for(caller: str, live: int, variant: str, build: str, ordering: str = "gpu-fence",
              cq_poll: str = "expected") -> KernelBuild:  # fmt: skip
    """The cubin a variant runs: `none` has no communication code (whatever the build)."""
    if variant not in KC_VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {KC_VARIANTS}")
    return KernelBuild(caller, live, variant != "none", build, ordering, cq_poll)


def nvcc_commands(b: KernelBuild, root: Path, work: Path, nvcc: str, arch: str,
                  out: Path) -> list[list[str]]:  # fmt: skip
    """The nvcc steps that make `out` (one for a whole-program build; compile, compile, device
    link for the separate build). Every step reports resources (-Xptxas -v, -Xnvlink -v)."""
    base = [nvcc, f"-arch={arch}", "-std=c++17", "-O3", f"-I{root}", *b.defines()]
    src = root / "kcost" / "kernel_cost.cu"
    if not b.separate:
        return [[*base, "-Xptxas", "-v", "-cubin", str(src), "-o", str(out)]]
    caller, send = work / "caller.o", work / "send.o"
    return [
        [*base, "-rdc=true", "-Xptxas", "-v", "-c", str(src), "-o", str(caller)],
        [*base, "-rdc=true", "-Xptxas", "-v", "-c", str(root / "kcost" / "send.cu"),
         "-o", str(send)],
        [nvcc, f"-arch={arch}", "-dlink", "-cubin", "-Xnvlink", "-v", str(caller), str(send),
         "-o", str(out)],
    ]  # fmt: skip


def find_nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )


@dataclass(frozen=True)
class Compiled:
    cubin: Path
    log: str  # the compiler's -v report of every step
    resources: dict[str, KernelResources]  # per kernel


def compile_cubin(b: KernelBuild, arch: str, cache: Path | None = None,
                  nvcc: str | None = None) -> Compiled:  # fmt: skip
    """The cubin of `b` for `arch` (e.g. "sm_90") and its resources, from the cache or built
    now. UnsupportedError without nvcc; ConfigError naming the build when nvcc fails."""
    exe = nvcc or find_nvcc()
    if exe is None:
        raise UnsupportedError("kernel-cost compiles cuda/kcost/ with nvcc: not found")
    root = cuda_dir()
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256((arch + ver + " ".join(b.defines())).encode())
    for name in SOURCES:
        h.update((root / name).read_bytes())
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache = cache or home / "gicbench" / "kcost"
    cubin = cache / f"{b.tag()}-{arch}-{h.hexdigest()[:16]}.cubin"
    log_path = cubin.with_suffix(".log")
    if not (cubin.exists() and log_path.exists()):
        work = cache / f"{cubin.stem}.{os.getpid()}.d"
        work.mkdir(parents=True, exist_ok=True)
        tmp = work / "out.cubin"
        logs = []
        for cmd in nvcc_commands(b, root, work, exe, arch, tmp):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise ConfigError("build (--build)", b.tag(),
                                  f"a build nvcc compiles:\n{(r.stdout + r.stderr).strip()}")
            logs.append(r.stdout + r.stderr)
        log_path.write_text("\n".join(logs))
        tmp.replace(cubin)
        shutil.rmtree(work, ignore_errors=True)
    log = log_path.read_text()
    return Compiled(cubin, log, resources_from_log(log, linked=b.separate))


# ---- resources -----------------------------------------------------------------------------------
_PTX_FN = re.compile(r"Function properties for (\w+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes "
                     r"spill stores, (\d+) bytes spill loads")  # fmt: skip
_PTX_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PTX_REGS = re.compile(r"Used (\d+) registers")
_PTX_LMEM = re.compile(r"(\d+) bytes lmem")
_NVLINK = re.compile(r"Function properties for '(\w+)':\s*\n[^\n]*?used (\d+) registers,[^\n]*?"
                     r"(\d+) stack,[^\n]*?(\d+) bytes lmem")  # fmt: skip
_CUOBJ = re.compile(r"Function (\w+):\s*\n\s*REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)")


def parse_ptxas(log: str) -> dict[str, KernelResources]:
    """ptxas -v: per entry function its registers, stack frame and spills (lmem where printed).
    Device functions of a relocatable compile (no "Used N registers") get registers 0."""
    spills = {m.group(1): tuple(int(g) for g in m.groups()[1:]) for m in _PTX_FN.finditer(log)}
    out: dict[str, KernelResources] = {}
    for block in re.split(r"(?=ptxas info\s*: Compiling entry function)", log):
        e = _PTX_ENTRY.search(block)
        if not e:
            continue
        regs = _PTX_REGS.search(block)
        lmem = _PTX_LMEM.search(block)
        stack, st, ld = spills.get(e.group(1), (0, 0, 0))
        out[e.group(1)] = KernelResources(int(regs.group(1)) if regs else 0, stack, st, ld,
                                          int(lmem.group(1)) if lmem else stack)  # fmt: skip
    for name, (stack, st, ld) in spills.items():
        out.setdefault(name, KernelResources(0, stack, st, ld, stack))
    return out


def parse_nvlink(log: str) -> dict[str, KernelResources]:
    """nvlink -v after a device link: each kernel's final registers, stack and lmem (its call
    graph included); spills are not in this report (parse_ptxas has them per function)."""
    return {m.group(1): KernelResources(int(m.group(2)), int(m.group(3)), 0, 0, int(m.group(4)))
            for m in _NVLINK.finditer(log)}  # fmt: skip


def parse_cuobjdump(text: str) -> dict[str, KernelResources]:
    """`cuobjdump --dump-resource-usage` of a cubin: REG, STACK and LOCAL per function."""
    return {m.group(1): KernelResources(int(m.group(2)), int(m.group(3)), 0, 0, int(m.group(4)))
            for m in _CUOBJ.finditer(text)}  # fmt: skip


def resources_from_log(log: str, linked: bool) -> dict[str, KernelResources]:
    """Each kernel's resources. A linked (separate) build: registers and stack from nvlink (the
    final kernel), spill bytes summed over the kernel and the separately compiled call (both
    run in it); otherwise ptxas's own lines."""
    ptx = parse_ptxas(log)
    if not linked:
        return {k: v for k, v in ptx.items() if k in (CALLER, DRAIN)}
    out = {}
    callee = ptx.get("kc_send", KernelResources(0, 0, 0, 0, 0))
    for name, r in parse_nvlink(log).items():
        own = ptx.get(name, KernelResources(0, 0, 0, 0, 0))
        extra = callee if name == CALLER else KernelResources(0, 0, 0, 0, 0)
        out[name] = replace(r, spill_store_bytes=own.spill_store_bytes + extra.spill_store_bytes,
                            spill_load_bytes=own.spill_load_bytes + extra.spill_load_bytes)
    return out


# ---- launcher (GPU) ------------------------------------------------------------------------------
def send_args(lanes_dev: int, nlanes: int, states: int, size: int, inline: bool,
              timeout_ns: int, status_dev: int, abort_dev: int) -> np.ndarray:  # fmt: skip
    """cuda/kcost/send.cuh SendArgs as bytes (little-endian, its field offsets)."""
    out = np.zeros(SEND_ARGS_BYTES, dtype=np.uint8)
    v = out.view(np.uint64)
    v[0], v[2], v[4], v[5], v[6] = lanes_dev, states, timeout_ns, status_dev, abort_dev
    out[8:12].view(np.int32)[0] = nlanes
    out[24:28].view(np.uint32)[0] = size
    out[28:32].view(np.int32)[0] = int(inline)
    return out


def occupancy(cp: Any, fn: Any, threads: int) -> int | None:
    """Blocks of `threads` per SM the occupancy calculator allows (None where CuPy lacks it)."""
    occ = getattr(cp.cuda.driver, "occupancyMaxActiveBlocksPerMultiprocessor", None)
    ptr = getattr(getattr(fn, "kernel", fn), "ptr", None)  # a RawKernel's driver function
    if occ is None or ptr is None:
        return None
    return int(occ(ptr, threads, 0))


_MODULES: dict[tuple[KernelBuild, int], tuple[Any, Compiled]] = {}


def _module(cp: Any, b: KernelBuild, arch: str) -> tuple[Any, Compiled]:
    key = (b, cp.cuda.runtime.getDevice())
    if key not in _MODULES:
        c = compile_cubin(b, arch)
        _MODULES[key] = (cp.RawModule(path=str(c.cubin)), c)
    return _MODULES[key]


def _wait(sub: GpuSubmitter, ev: Any) -> None:
    """Wait for `ev` without blocking signals: a signal sets the abort word and propagates."""
    try:
        while not ev.done:
            time.sleep(50e-6)
    except BaseException:
        sub._abort[0] = 1
        ev.synchronize()
        raise


def run(sub: GpuSubmitter, work: KernelCostWork) -> KernelCostResult:
    """Paired passes of the variant and its reference (order alternating), each `launches`
    launches timed by CUDA events; a posting variant's drain runs after each of its launches,
    outside the timed interval."""
    cp = sub.cp
    arch = "sm_" + cp.cuda.Device().compute_capability
    sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    grid = work.blocks if work.blocks else int(work.blocks_per_sm or 1) * sms
    ref_b = build_for(work.caller, work.live, "none", work.build, sub.ordering, sub.params.cq_poll)
    var_b = build_for(work.caller, work.live, work.variant, work.build, sub.ordering,
                      sub.params.cq_poll)  # fmt: skip
    ref_mod, ref_c = _module(cp, ref_b, arch)
    var_mod, var_c = _module(cp, var_b, arch)
    ref_fn, var_fn = ref_mod.get_function(CALLER), var_mod.get_function(CALLER)
    posts = work.variant in ("send", "send-wait") and work.messages > 0
    L = len(work.lanes)
    if L == 0:
        raise ConfigError("qps (--qps)", 0, "at least one lane (the call's arguments name one)")
    if work.inline and work.size > 220:
        raise ConfigError("msg_size (--msg-size)", work.size, "<= 220 B inline (one WQE)")
    bbs = sub._bbs(work.inline, work.size, False)
    src_keep, srcs = sub._stage([ln.src for ln in work.lanes]) if work.inline else (None, [0] * L)
    per_lane = [0] * L
    for b in range(grid):
        per_lane[b % L] += work.messages if posts else 0
    runs = work.launches * work.pairs + 2  # the timed launches, the warm one and the last one
    tab = sub._prepare(work.lanes, bbs, srcs, [n * runs for n in per_lane], max([1, *per_lane]))
    inp = (cp.arange(STREAM_ELEMENTS, dtype=cp.uint32) & 7).astype(cp.float32)
    out = cp.zeros(grid * work.threads, dtype=cp.float32)
    args = cp.asarray(send_args(tab.data.ptr, L, sub.states.data.ptr, work.size, work.inline,
                                sub.timeout_ns, sub.status.data.ptr, sub._abort_dev))  # fmt: skip
    code = np.int32(VARIANT_CODES[work.variant])
    drain = var_mod.get_function(DRAIN) if posts else None
    sub.status.fill(0)
    sub._abort[0] = 0
    a, b1 = np.float32(1.0), np.float32(1.0)  # run-time values: the FMAs are issued

    def launch(fn: Any, variant: np.int32) -> None:
        fn((grid,), (work.threads,), (inp, np.uint64(INPUT_MASK), out, np.uint32(work.steps), a,
                                      b1, args, variant, np.uint32(work.messages)))  # fmt: skip

    times = {"variant": np.zeros((work.pairs, work.launches), np.int64),
             "reference": np.zeros((work.pairs, work.launches), np.int64)}  # fmt: skip
    launch(ref_fn, np.int32(0))  # warm: first-launch costs (module load, TLB) stay untimed
    launch(var_fn, code)
    if drain is not None:
        drain(((L + 127) // 128,), (128,), (args,))
    try:
        for p in range(work.pairs):
            order = ("reference", "variant") if p % 2 == 0 else ("variant", "reference")
            for which in order:
                evs = []
                for _ in range(work.launches):
                    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                    e0.record()
                    launch(var_fn if which == "variant" else ref_fn,
                           code if which == "variant" else np.int32(0))  # fmt: skip
                    e1.record()
                    if which == "variant" and drain is not None:
                        drain(((L + 127) // 128,), (128,), (args,))
                    evs.append((e0, e1))
                _wait(sub, evs[-1][1])
                times[which][p] = [int(cp.cuda.get_elapsed_time(x, y) * 1e6) for x, y in evs]
        launch(var_fn, code)  # the output checked: the variant's, whatever ran last
        if drain is not None:
            drain(((L + 127) // 128,), (128,), (args,))
        end = cp.cuda.Event()
        end.record()
        _wait(sub, end)
    finally:
        sub.k["gda_finish"](((L + 127) // 128,), (128,), (tab, np.int32(L), sub.states))
    st = sub.status.get()
    status.raise_for(st, sub.rank, "kernel-cost", sub.timeout_ns / 1e9, sum(per_lane))
    sub._check_stale()
    del src_keep
    posted = np.zeros(L, dtype=np.int64)
    rows, states = cp.asnumpy(tab), sub.states.get()
    for i in range(L):
        s = states[int(rows[i][lanes.COL["state"]])]  # pub - base: the whole call
        posted[i] = (int(s[2]) - int(s[0])) % (1 << 32) // bbs
    ref_r = replace(ref_c.resources[CALLER], blocks_per_sm=occupancy(cp, ref_fn, work.threads))
    var_r = replace(var_c.resources[CALLER], blocks_per_sm=occupancy(cp, var_fn, work.threads))
    # fall back to the function's own attributes where the cubin's report has no registers
    if var_r.registers == 0:
        var_r = replace(var_r, registers=int(var_fn.num_regs))
    details = {"sm_clock_hz": sub.measure_clock(), "sms": float(sms),
               "num_regs_runtime": float(var_fn.num_regs),
               "local_bytes_runtime": float(var_fn.local_size_bytes)}  # fmt: skip
    sub.details = dict(details)  # what point_details hands the harness
    return KernelCostResult(
        variant_ns=times["variant"], reference_ns=times["reference"], variant=var_r,
        reference=ref_r, output=out.get(), posted=posted, grid=grid, variant_launches=runs,
        details=details,
    )
