"""What every kernel-cost path shares (mini-gda, mini-proxy's GPU producers, DOCA GPUNetIO), below
the submitters so each may import it: the nvcc builds of cuda/kcost/ (one cubin per caller, live
values, communication code, build and path), the resources read from the compiler's report, the
occupancy question, and the paired timing loop (the paper, arXiv 2610.01380, §4.3.2, App. D.2).

Both builds go through nvcc (not NVRTC): the separate build needs relocatable device code and a
device link (`-rdc=true`, then `-dlink -cubin`; NVRTC's relocatable output would need the driver's
linker driven by hand), and one compiler for every build keeps their registers comparable. Cubins
are cached under ~/.cache/gicbench/kcost by a hash of the sources, the defines, the architecture
and nvcc's version, with the compiler's -v report beside each (the resources are parsed from it;
cuobjdump's resource usage, where installed, gives the same numbers).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..cuda_host import cuda_dir
from ..errors import ConfigError, UnsupportedError
from .work import KC_BUILDS, KC_CALLERS, KernelResources

VARIANT_CODES = {"none": 0, "code-only": 1, "send": 2, "send-wait": 3}  # kernel_cost.cu Variant
CALLER = "kc_caller"
DRAIN = "kc_drain"
CALLEE = "kc_send"  # the separately compiled call (send.cu), whatever the path
PATHS = {"gda": 0, "proxy": 1, "doca": 2}  # kcost/path.cuh KC_PATH
# Sources of every build (the caller, the separate unit, the path selector); each path adds its own.
COMMON_SOURCES = ("kcost/kernel_cost.cu", "kcost/send.cu", "kcost/path.cuh")
# The caller's input, float32 elements: at least 256 MiB (well past the H200's 60 MB L2), and as
# large as one launch's stream reads up to 4 GiB, so a stream launch reads no element twice
# within 4 GiB. Measured on the H200 (bench/kcost_stream_probe.py): a 256 MiB input re-read
# 39 times per launch served part of the re-reads from L2 (up to 4.4 TB/s apparent, and the
# builds' different residency changed how much); from 1 GiB up both builds read as with no
# re-read at all.
STREAM_MIN_ELEMENTS = 1 << 26
STREAM_MAX_ELEMENTS = 1 << 30


def nvcc_steps(defines: Sequence[str], separate: bool, root: Path, work: Path, nvcc: str,
               arch: str, out: Path, include: Sequence[str] = ()) -> list[list[str]]:  # fmt: skip
    """The nvcc steps that make `out` (one for a whole-program build; compile, compile, device
    link for the separate build). Every step reports resources (-Xptxas -v, -Xnvlink -v).
    `include`: extra include options (DOCA's headers as system headers)."""
    base = [nvcc, f"-arch={arch}", "-std=c++17", "-O3", f"-I{root}", *include, *defines]
    src = root / "kcost" / "kernel_cost.cu"
    if not separate:
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
class CallerBuild:
    """What one cubin of every path shares: the caller, its live values, whether the call is
    built in (`comm`) and how (`build`; without the call it does not matter). Each path's
    KernelBuild adds its own build options."""

    caller: str
    live: int
    comm: bool
    build: str = "inline"

    def __post_init__(self) -> None:
        if self.caller not in KC_CALLERS:
            raise ValueError(f"caller {self.caller!r} is not one of {KC_CALLERS}")
        if self.build not in KC_BUILDS:
            raise ValueError(f"build {self.build!r} is not one of {KC_BUILDS}")
        if not 1 <= self.live <= 256:
            raise ValueError(f"live {self.live} is not in 1..256")

    @property
    def separate(self) -> bool:
        return self.comm and self.build == "separate"

    def caller_defines(self, path: str) -> tuple[str, ...]:
        """The -D options of cuda/kcost/kernel_cost.cu for this build on `path` (PATHS)."""
        return (
            f"-DKC_PATH={PATHS[path]}",
            f"-DKC_CALLER={KC_CALLERS.index(self.caller)}",
            f"-DKC_LIVE={self.live}",
            f"-DKC_COMM={int(self.comm)}",
            f"-DKC_SEPARATE={int(self.separate)}",
        )

    def how(self) -> str:
        """The build as a tag names it: inline, separate, or nocomm without the call."""
        return self.build if self.comm else "nocomm"


@dataclass(frozen=True)
class Compiled:
    cubin: Path
    log: str  # the compiler's -v report of every step
    resources: dict[str, KernelResources]  # per kernel


_LOADED: dict[tuple[Any, int], tuple[Any, Compiled]] = {}


def loaded_module(cp: Any, build: Any, compile_: Callable[[], Compiled]) -> tuple[Any, Compiled]:
    """`build`'s cubin (compiled by `compile_`) and its module, loaded once per GPU of this
    process, for every path (a build names its path: builds of two paths never compare equal)."""
    key = (build, cp.cuda.runtime.getDevice())
    if key not in _LOADED:
        c = compile_()
        _LOADED[key] = (cp.RawModule(path=str(c.cubin)), c)
    return _LOADED[key]


def compile_build(tag: str, defines: Sequence[str], separate: bool, arch: str,
                  sources: Sequence[Path], cache: Path | None = None, nvcc: str | None = None,
                  include: Sequence[str] = ()) -> Compiled:  # fmt: skip
    """The cubin of one build (`tag` names it, `defines` make it) for `arch` and its resources,
    from the cache or built now. `sources`: every file it depends on (the cache key).
    UnsupportedError without nvcc; ConfigError naming the build when nvcc fails."""
    exe = nvcc or find_nvcc()
    if exe is None:
        raise UnsupportedError("kernel-cost compiles cuda/kcost/ with nvcc: not found")
    root = cuda_dir()
    ver = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256((arch + ver + " ".join([*defines, *include])).encode())
    for path in sources:
        h.update(path.read_bytes())
    home = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    cache = cache or home / "gicbench" / "kcost"
    cubin = cache / f"{tag}-{arch}-{h.hexdigest()[:16]}.cubin"
    log_path = cubin.with_suffix(".log")
    if not (cubin.exists() and log_path.exists()):
        cache.mkdir(parents=True, exist_ok=True)
        # a private work directory: two builds with one tag (a `none` build of either --build)
        # may compile at once, in one process or in two ranks
        work = Path(tempfile.mkdtemp(prefix=f"{cubin.stem}.", suffix=".d", dir=cache))
        tmp = work / "out.cubin"
        logs = []
        for cmd in nvcc_steps(defines, separate, root, work, exe, arch, tmp, include):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise ConfigError(
                    "build (--build)",
                    tag,
                    f"a build nvcc compiles:\n{(r.stdout + r.stderr).strip()}",
                )
            logs.append(r.stdout + r.stderr)
        log_path.write_text("\n".join(logs))
        tmp.replace(cubin)
        shutil.rmtree(work, ignore_errors=True)
    log = log_path.read_text()
    return Compiled(cubin, log, resources_from_log(log, linked=separate))


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
    run in it); otherwise ptxas's own lines (the caller and the drain)."""
    ptx = parse_ptxas(log)
    if not linked:
        return {k: v for k, v in ptx.items() if k in (CALLER, DRAIN)}
    out = {}
    zero = KernelResources(0, 0, 0, 0, 0)
    callee = ptx.get(CALLEE, zero)
    for name, r in parse_nvlink(log).items():
        own = ptx.get(name, zero)
        extra = callee if name == CALLER else zero
        out[name] = replace(
            r,
            spill_store_bytes=own.spill_store_bytes + extra.spill_store_bytes,
            spill_load_bytes=own.spill_load_bytes + extra.spill_load_bytes,
        )
    return out


# ---- launching (GPU) -----------------------------------------------------------------------------
def occupancy(cp: Any, fn: Any, threads: int) -> int | None:
    """Blocks of `threads` per SM the occupancy calculator allows (None where CuPy lacks it)."""
    occ = getattr(cp.cuda.driver, "occupancyMaxActiveBlocksPerMultiprocessor", None)
    ptr = getattr(getattr(fn, "kernel", fn), "ptr", None)  # a RawKernel's driver function
    if occ is None or ptr is None:
        return None
    return int(occ(ptr, threads, 0))


def caller_resources(cp: Any, c: Compiled, fn: Any, threads: int) -> KernelResources:
    """The caller's resources from its cubin's report, with the blocks per SM the occupancy
    calculator allows; the function's own registers where the report has none."""
    r = replace(c.resources[CALLER], blocks_per_sm=occupancy(cp, fn, threads))
    return r if r.registers else replace(r, registers=int(fn.num_regs))


def grid_of(cp: Any, blocks: int, blocks_per_sm: int | None) -> tuple[int, int]:
    """(blocks of the launch, SMs of the GPU): `blocks`, else `blocks_per_sm` per SM."""
    sms = int(cp.cuda.Device().attributes["MultiProcessorCount"])
    return (blocks if blocks else int(blocks_per_sm or 1) * sms), sms


def input_elements(caller: str, live: int, steps: int, grid: int, threads: int) -> int:
    """Floats of the caller's input (a power of two: the kernel indexes it under a mask): the
    stream caller's whole footprint (steps x live loads per thread) between
    STREAM_MIN_ELEMENTS and STREAM_MAX_ELEMENTS; the compute caller reads live values per thread
    once, so the minimum."""
    need = live * steps * grid * threads if caller == "stream" else live * grid * threads
    n = STREAM_MIN_ELEMENTS
    while n < need and n < STREAM_MAX_ELEMENTS:
        n <<= 1
    return n


def caller_buffers(cp: Any, work: Any, grid: int) -> tuple[Any, Any]:
    """The caller's input (in[x] = x & 7 over input_elements floats) and its output (one float
    per thread) for `work` (a KernelCostWork) launched on `grid` blocks."""
    n = input_elements(work.caller, work.live, work.steps, grid, work.threads)
    free = int(cp.cuda.runtime.memGetInfo()[0])
    while n > STREAM_MIN_ELEMENTS and n * 4 > free // 2:  # a small GPU: half its free memory
        n >>= 1
    inp = cp.empty(n, dtype=cp.float32)
    _input_fill(cp)(inp)  # in place: no temporaries the size of a 4 GiB input
    return inp, cp.zeros(grid * work.threads, dtype=cp.float32)


def _input_fill(cp: Any) -> Any:
    return cp.ElementwiseKernel("", "float32 y", "y = (float)(i & 7)", "gicbench_kc_input")


def caller_args(inp: Any, out: Any, steps: int, send: Any, variant: int,
                messages: int) -> tuple[Any, ...]:  # fmt: skip
    """kc_caller's arguments (a = b = 1 at run time: the FMAs are issued)."""
    one = np.float32(1.0)
    return (inp, np.uint64(inp.size - 1), out, np.uint32(steps), one, one, send,
            np.int32(variant), np.uint32(messages))  # fmt: skip


def time_pairs(cp: Any, launches: int, pairs: int, reference: Callable[[], None],
               variant: Callable[[], None], drain: Callable[[], None] | None,
               wait: Callable[[Any], None]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Paired passes of the variant and its reference (order alternating), each `launches`
    launches timed by CUDA events; `drain` (a posting variant's) runs after each of the
    variant's launches, outside the timed interval. A warm launch of each comes first (first-
    launch costs stay untimed) and one more of the variant last (the output checked is the
    variant's): launches x pairs + 2 of the variant in all. `wait(event)` waits for an event.
    Returns (variant, reference) int64 ns, shape [pairs, launches]."""
    times = {"variant": np.zeros((pairs, launches), np.int64),
             "reference": np.zeros((pairs, launches), np.int64)}  # fmt: skip
    run = {"variant": variant, "reference": reference}
    reference()
    variant()
    if drain is not None:
        drain()
    for p in range(pairs):
        order = ("reference", "variant") if p % 2 == 0 else ("variant", "reference")
        for which in order:
            evs = []
            for _ in range(launches):
                e0, e1 = cp.cuda.Event(), cp.cuda.Event()
                e0.record()
                run[which]()
                e1.record()
                if which == "variant" and drain is not None:
                    drain()
                evs.append((e0, e1))
            wait(evs[-1][1])
            times[which][p] = [int(cp.cuda.get_elapsed_time(x, y) * 1e6) for x, y in evs]
    variant()
    if drain is not None:
        drain()
    end = cp.cuda.Event()
    end.record()
    wait(end)
    return times["variant"], times["reference"]


def wait_event(ev: Any, abort: Callable[[], None], poll_s: float = 50e-6) -> None:
    """Wait for `ev` without blocking signals: on any exception (a signal) call `abort` (the
    kernels' abort word), wait for the GPU and propagate."""
    try:
        while not ev.done:
            time.sleep(poll_s)
    except BaseException:
        abort()
        ev.synchronize()
        raise
