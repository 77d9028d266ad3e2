"""kernel-cost on DOCA GPUNetIO's device verbs (the paper, arXiv 2610.01380, §4.3.2, Fig. 9): the
caller kernels of cuda/kcost/ with DOCA's put built in (KC_PATH 2, kcost/send_doca.cuh). Thread 0
of block b calls doca_gpu_dev_verbs_put on QP b mod L (one QP per block at the default shape),
through the doca submitter's QP structures (kept in GPU memory across calls: DOCA's indices live
there); send-wait polls DOCA's CQ for that put's ticket. The NIC handler and the sharing mode are
the submitter's --doca-handler and --doca-sharing, compiled in as DOCA's templates take them.

Refused by name: --doca-scope warp (the call is one thread's put), --doca-handler gpu-sm-bf
(DOCA's put does not ring BlueFlame; cuda/doca stages those WQEs in shared memory, which would
change the caller's residency), and, for a point that sends with fewer QPs than blocks, sharing
other than gpu (blocks would reserve slots of one QP without DOCA's device-wide atomics).

Validation besides the experiment's: the WQE slots each QP reserved during the call (DOCA's
sq_rsvd_index before and after; one slot per put) against what the variant posts, and the
engine's fidelity counters (the submitter's `_launching`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...cuda_host import cuda_dir, launch_stream, note_stuck_kernel
from ...errors import CompletionTimeout, ConfigError, UnsupportedError
from ..gpu_runtime import smclock
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
    grid_of,
    loaded_module,
    time_pairs,
)
from ..work import KC_VARIANTS, KernelCostResult, KernelCostWork
from .headers import find, unavailable_reason
from .layout import NicHandler, Scope, Sharing
from .params import DocaParams

if TYPE_CHECKING:
    from .submitter import DocaSubmitter

SOURCES = (*COMMON_SOURCES, "kcost/send_doca.cuh", "doca/doca_kernels.cuh",
           "doca/gicbench_doca.cuh")  # fmt: skip
SEND_ARGS_BYTES = 40  # cuda/kcost/send_doca.cuh SendArgs
POSTED = "kc_posted"
STATUS = {2: "timeout", 3: "error CQE"}  # doca_kernels.cuh GICBENCH_DOCA_* of a wait


def refusal(params: DocaParams) -> str | None:
    """Knobs kernel-cost's DOCA path cannot run with, by name (pre-flight)."""
    if params.exec_scope != Scope.THREAD:
        return ("kernel-cost's DOCA path is one thread's put per message: use --doca-scope "
                "thread")  # fmt: skip
    if params.nic_handler == NicHandler.GPU_SM_BF:
        return (
            "kernel-cost's DOCA path calls doca_gpu_dev_verbs_put, which does not ring "
            "BlueFlame (gpu-sm-bf stages WQEs in shared memory): use another --doca-handler"
        )
    return None


def point_refusal(params: DocaParams, point: Mapping[str, Any]) -> str | None:
    """A sending point whose blocks share QPs needs DOCA's gpu sharing (pre-flight)."""
    why = refusal(params)
    if why is not None:
        return why
    if point.get("variant") not in ("send", "send-wait"):
        return None
    blocks, qps = int(point.get("blocks", 0)), int(point.get("qps", 1))
    shared = blocks == 0 or qps < blocks  # --blocks-per-sm: more blocks than QPs on any GPU
    if shared and params.sharing_mode != Sharing.GPU:
        return (f"--doca-sharing {params.doca_sharing} with --qps {qps} for "
                f"{blocks or 'N per SM of'} blocks: blocks share a QP, which takes "
                "--doca-sharing gpu")  # fmt: skip
    return None


@dataclass(frozen=True)
class KernelBuild(CallerBuild):
    """One cubin of the DOCA path: caller, live values, whether the call is built in (`comm`),
    how (`build`), and DOCA's NIC handler and sharing mode (their enum values)."""

    handler: int = int(NicHandler.GPU_SM_DB)
    sharing: int = int(Sharing.EXCLUSIVE)

    def __post_init__(self) -> None:
        super().__post_init__()
        NicHandler(self.handler)  # ValueError if unknown
        Sharing(self.sharing)

    def defines(self) -> tuple[str, ...]:
        return (
            *self.caller_defines("doca"),
            f"-DKC_DOCA_HANDLER={self.handler}",
            f"-DKC_DOCA_SHARING={self.sharing}",
        )

    def tag(self) -> str:
        how = self.how()
        h, s = NicHandler(self.handler).cli, Sharing(self.sharing).name.lower()
        return f"doca-{self.caller}-l{self.live}-{how}-{h}-{s}"


def build_for(caller: str, live: int, variant: str, build: str, params: DocaParams) -> KernelBuild:
    """The cubin a variant runs: `none` has no communication code (whatever the build)."""
    if variant not in KC_VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {KC_VARIANTS}")
    return KernelBuild(caller, live, variant != "none", build, int(params.nic_handler),
                       int(params.sharing_mode))  # fmt: skip


def include_flags(include: Path) -> tuple[str, ...]:
    """DOCA's headers as system headers (their warnings are not ours), as doca/build.py."""
    return ("-isystem", str(include))


def compile_cubin(b: KernelBuild, arch: str, cache: Path | None = None,
                  nvcc: str | None = None) -> Compiled:  # fmt: skip
    """The cubin of `b` for `arch` against DOCA's headers (UnsupportedError without them)."""
    headers = find()
    if headers is None:
        raise UnsupportedError(unavailable_reason())
    root = cuda_dir()
    version = headers.include / "common" / "doca_gpunetio_verbs_def.h"
    sources = [root / name for name in SOURCES] + [version]
    return compile_build(b.tag(), b.defines(), b.separate, arch, sources, cache, nvcc,
                         include_flags(headers.include))  # fmt: skip


def send_args(qps_dev: int, lanes_dev: int, status_dev: int, timeout_ns: int, nqps: int,
              size: int) -> np.ndarray:  # fmt: skip
    """cuda/kcost/send_doca.cuh SendArgs as bytes (little-endian, its field offsets)."""
    out = np.zeros(SEND_ARGS_BYTES, dtype=np.uint8)
    out[:32].view(np.uint64)[:] = (qps_dev, lanes_dev, status_dev, timeout_ns)
    out[32:40].view(np.uint32)[:] = (nqps, size)
    return out


def run(sub: DocaSubmitter, work: KernelCostWork, grace_s: float = 5.0) -> KernelCostResult:
    """Paired passes of the variant and its reference (kernel_cost_common.time_pairs) on the
    lanes' DOCA QP structures; a posting variant's drain (each QP's last put completed) runs
    after each of its launches, outside the timed interval."""
    cp = sub.cp
    params: DocaParams = sub.params
    arch = "sm_" + cp.cuda.Device().compute_capability
    grid, sms = grid_of(cp, work.blocks, work.blocks_per_sm)
    L = len(work.lanes)
    posts = work.variant in ("send", "send-wait") and work.messages > 0
    why = refusal(params)
    if why is None and posts and grid > L and params.sharing_mode != Sharing.GPU:
        why = f"--doca-sharing gpu: {grid} blocks share {L} QPs"
    if why is not None:
        raise ConfigError("doca (--doca-*)", params.doca_handler, why)
    ref_b = build_for(work.caller, work.live, "none", work.build, params)
    var_b = build_for(work.caller, work.live, work.variant, work.build, params)
    ref_mod, ref_c = loaded_module(cp, ref_b, lambda: compile_cubin(ref_b, arch))
    var_mod, var_c = loaded_module(cp, var_b, lambda: compile_cubin(var_b, arch))
    ref_fn, var_fn = ref_mod.get_function(CALLER), var_mod.get_function(CALLER)
    drain_fn = var_mod.get_function(DRAIN) if posts else None
    posted_fn = var_mod.get_function(POSTED) if var_b.comm else None
    code = VARIANT_CODES[work.variant]
    runs = work.launches * work.pairs + 2  # the timed launches, the warm one and the last one
    inp, out = caller_buffers(cp, work, grid)
    lanes_dev = cp.asarray(sub._lanes(work.lanes).view(np.uint8))
    status = cp.zeros(1, dtype=cp.uint64)
    sub.details = sub._base_details()
    deadline_s = sub.timeout_ns / 1e9 + grace_s

    def wait(ev: Any) -> None:
        # DOCA's own slot wait inside put is unbounded: bound the launch from the host
        end = time.monotonic() + deadline_s
        while not ev.done:
            if time.monotonic() > end:
                note_stuck_kernel("kernel-cost DOCA caller")
                raise CompletionTimeout(f"rank {sub.rank}: kernel-cost (doca "
                                        f"{params.doca_handler}): a launch still runs "
                                        f"{deadline_s:.1f} s after it started")  # fmt: skip
            time.sleep(50e-6)

    stream = launch_stream(cp)
    with sub._launching(sub._rows(work.lanes)) as qps, stream:
        args = cp.asarray(send_args(qps.data.ptr, lanes_dev.data.ptr, status.data.ptr,
                                    sub.timeout_ns, L, work.size))  # fmt: skip
        before = cp.zeros(L, dtype=cp.uint64)
        after = cp.zeros(L, dtype=cp.uint64)
        if posted_fn is not None:
            posted_fn(((L + 127) // 128,), (128,), (args, before))

        def drain() -> None:
            assert drain_fn is not None
            drain_fn(((L + 127) // 128,), (128,), (args,))

        variant_ns, reference_ns = time_pairs(
            cp, work.launches, work.pairs,
            lambda: ref_fn((grid,), (work.threads,), caller_args(inp, out, work.steps, args, 0,
                                                                 work.messages)),
            lambda: var_fn((grid,), (work.threads,), caller_args(inp, out, work.steps, args, code,
                                                                 work.messages)),
            drain if drain_fn is not None else None, wait)  # fmt: skip
        if posted_fn is not None:
            posted_fn(((L + 127) // 128,), (128,), (args, after))
        stream.synchronize()
    st = int(status.get()[0])
    if st:
        raise CompletionTimeout(
            f"rank {sub.rank}: kernel-cost (doca {params.doca_handler}): "
            f"{STATUS.get(st >> 32, st >> 32)} on QP {st & 0xFFFFFFFF}"
        )
    posted = after.get().astype(np.int64) - before.get().astype(np.int64)  # a slot per put
    sub.sm_clock_hz = smclock.measure(cp)
    details = {"sm_clock_hz": sub.sm_clock_hz, "sms": float(sms),
               "num_regs_runtime": float(var_fn.num_regs),
               "local_bytes_runtime": float(var_fn.local_size_bytes)}  # fmt: skip
    sub.details.update(details)
    return KernelCostResult(
        variant_ns=variant_ns, reference_ns=reference_ns,
        variant=caller_resources(cp, var_c, var_fn, work.threads),
        reference=caller_resources(cp, ref_c, ref_fn, work.threads), output=out.get(),
        posted=posted, grid=grid, variant_launches=runs, details=details,
    )  # fmt: skip
