"""kernel-cost on mini-gda: the caller kernels of cuda/kcost/ with mini-gda's call (KC_PATH 0,
kcost/send.cuh) built with nvcc per caller, live values, communication code and build, and the
launcher that times paired passes of a variant and its reference with CUDA events (the paper,
arXiv 2610.01380, §4.3.2, Appendix D.2). The builds, the resources and the timing loop every path
shares are in ..kernel_cost_common.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...cuda_host import cuda_dir
from ...errors import ConfigError
from ..kernel_cost_common import (
    CALLER,
    COMMON_SOURCES,
    DRAIN,
    VARIANT_CODES,
    CallerBuild,
    Compiled,
    caller_args,
    caller_buffers,
    caller_resources,
    compile_build,
    find_nvcc,
    grid_of,
    loaded_module,
    nvcc_steps,
    occupancy,
    parse_cuobjdump,
    parse_nvlink,
    parse_ptxas,
    resources_from_log,
    time_pairs,
    wait_event,
)
from ..work import KC_VARIANTS, KernelCostResult, KernelCostWork
from . import lanes, status
from .params import CQ_POLLS, ORDERINGS

if TYPE_CHECKING:
    from .submitter import GpuSubmitter

__all__ = ["CALLER", "DRAIN", "VARIANT_CODES", "Compiled", "KernelBuild", "build_for",
           "compile_cubin", "find_nvcc", "nvcc_commands", "occupancy", "parse_cuobjdump",
           "parse_nvlink", "parse_ptxas", "resources_from_log", "run", "send_args"]  # fmt: skip

SOURCES = (*COMMON_SOURCES, "kcost/send.cuh", "gda/calls.cuh", "gda/queue.cuh",
           "gda/ordering.cuh", "gda/scope.cuh", "mlx5.cuh")  # fmt: skip
SEND_ARGS_BYTES = 56  # cuda/kcost/send.cuh SendArgs


@dataclass(frozen=True)
class KernelBuild(CallerBuild):
    """One cubin: caller, live values, whether the call is built in (`comm`), how (`build`),
    and mini-gda's ordering and CQ polling. Without the call, `build` does not matter."""

    ordering: str = "gpu-fence"
    cq_poll: str = "expected"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ordering not in ORDERINGS or self.cq_poll not in CQ_POLLS:
            raise ValueError(f"ordering {self.ordering!r} / cq_poll {self.cq_poll!r} unknown")

    def defines(self) -> tuple[str, ...]:
        return (
            *self.caller_defines("gda"),
            f"-DGDA_ORDERING={ORDERINGS.index(self.ordering)}",
            f"-DGDA_CQ_POLL={CQ_POLLS.index(self.cq_poll)}",
        )

    def tag(self) -> str:
        how = self.how()
        return f"{self.caller}-l{self.live}-{how}-{self.ordering}-{self.cq_poll}"


def build_for(caller: str, live: int, variant: str, build: str, ordering: str = "gpu-fence",
              cq_poll: str = "expected") -> KernelBuild:  # fmt: skip
    """The cubin a variant runs: `none` has no communication code (whatever the build)."""
    if variant not in KC_VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {KC_VARIANTS}")
    return KernelBuild(caller, live, variant != "none", build, ordering, cq_poll)


def nvcc_commands(b: KernelBuild, root: Path, work: Path, nvcc: str, arch: str,
                  out: Path) -> list[list[str]]:  # fmt: skip
    """The nvcc steps that make `out` (kernel_cost_common.nvcc_steps with b's defines)."""
    return nvcc_steps(b.defines(), b.separate, root, work, nvcc, arch, out)


def compile_cubin(b: KernelBuild, arch: str, cache: Path | None = None,
                  nvcc: str | None = None) -> Compiled:  # fmt: skip
    """The cubin of `b` for `arch` (e.g. "sm_90") and its resources, from the cache or built
    now. UnsupportedError without nvcc; ConfigError naming the build when nvcc fails."""
    root = cuda_dir()
    return compile_build(b.tag(), b.defines(), b.separate, arch,
                         [root / name for name in SOURCES], cache, nvcc)  # fmt: skip


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


def run(sub: GpuSubmitter, work: KernelCostWork) -> KernelCostResult:
    """Paired passes of the variant and its reference (kernel_cost_common.time_pairs); a
    posting variant's drain runs after each of its launches, outside the timed interval."""
    cp = sub.cp
    arch = "sm_" + cp.cuda.Device().compute_capability
    grid, sms = grid_of(cp, work.blocks, work.blocks_per_sm)
    ref_b = build_for(work.caller, work.live, "none", work.build, sub.ordering, sub.params.cq_poll)
    var_b = build_for(work.caller, work.live, work.variant, work.build, sub.ordering,
                      sub.params.cq_poll)  # fmt: skip
    ref_mod, ref_c = loaded_module(cp, ref_b, lambda: compile_cubin(ref_b, arch))
    var_mod, var_c = loaded_module(cp, var_b, lambda: compile_cubin(var_b, arch))
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
    inp, out = caller_buffers(cp, work, grid)
    args = cp.asarray(send_args(tab.data.ptr, L, sub.states.data.ptr, work.size, work.inline,
                                sub.timeout_ns, sub.status.data.ptr, sub._abort_dev))  # fmt: skip
    code = VARIANT_CODES[work.variant]
    drain_fn = var_mod.get_function(DRAIN) if posts else None
    sub.status.fill(0)
    sub._abort[0] = 0

    def abort() -> None:
        sub._abort[0] = 1

    def drain() -> None:
        assert drain_fn is not None
        drain_fn(((L + 127) // 128,), (128,), (args,))

    try:
        variant_ns, reference_ns = time_pairs(
            cp, work.launches, work.pairs,
            lambda: ref_fn((grid,), (work.threads,), caller_args(inp, out, work.steps, args, 0,
                                                                 work.messages)),
            lambda: var_fn((grid,), (work.threads,), caller_args(inp, out, work.steps, args, code,
                                                                 work.messages)),
            drain if drain_fn is not None else None, lambda ev: wait_event(ev, abort))  # fmt: skip
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
    details = {"sm_clock_hz": sub.measure_clock(), "sms": float(sms),
               "num_regs_runtime": float(var_fn.num_regs),
               "local_bytes_runtime": float(var_fn.local_size_bytes)}  # fmt: skip
    sub.details = dict(details)  # what point_details hands the harness
    return KernelCostResult(
        variant_ns=variant_ns, reference_ns=reference_ns,
        variant=caller_resources(cp, var_c, var_fn, work.threads),
        reference=caller_resources(cp, ref_c, ref_fn, work.threads), output=out.get(),
        posted=posted, grid=grid, variant_launches=runs, details=details,
    )  # fmt: skip
