"""kernel-cost on mini-proxy's GPU producers (the paper, arXiv 2610.01380, §4.3.2, Fig. 9): the
caller kernels of cuda/kcost/ with mini-proxy's call (KC_PATH 1, kcost/send_proxy.cuh) built in.
Thread 0 of a block pushes each message's descriptor into a host ring mapped into the GPU; the
engine's pinned CPU workers (--workers, 4 in the paper's configuration) drain the --rings rings
(0: KC_RINGS) and post the writes; send-wait polls the ring's completion counter.

Placement, as the header: block b writes through lane b mod L (mini-gda's), that lane's worker
is lane mod T (the engine's rule) and its ring is ring_of(b): one of that worker's rings, so the
descriptors of a ring only name its worker's lanes. Descriptors take the baseline hand-off (a
device atomic reserves a ring index): many blocks share a ring, which --handoff tuned (one
producer per ring) cannot do, so tuned is refused by name.

Validation besides the experiment's: every ring's descriptors (the device reservations) equal
what the placement gives it and the workers completed them all (the ring's completion counter);
the WQEs per lane are the lane's SQ doorbell record (what the workers told the NIC) before and
after the call, in WQEBBs of one write.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...cuda_host import cuda_dir, launch_stream
from ...errors import CompletionTimeout, ConfigError, UnsupportedError, ValidationError
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
from .gpu_kernels import layout_defines
from .params import ProxyParams
from .verbs import on_verbs

if TYPE_CHECKING:
    from .submitter import ProxySubmitter

KC_RINGS = 32  # the paper's mini-proxy: 32 rings (4 workers)
SOURCES = (*COMMON_SOURCES, "kcost/send_proxy.cuh")
SEND_ARGS_BYTES = 64  # cuda/kcost/send_proxy.cuh SendArgs
DBREC_SND = 4  # byte offset of the send producer word in an SQ's doorbell record (mlx5)
STATUS = {1: "timeout", 2: "aborted by the host"}  # send_proxy.cuh status codes


def kc_rings(params: ProxyParams) -> int:
    """Rings of a kernel-cost call: --rings, else KC_RINGS (never fewer than the workers)."""
    return params.rings or max(KC_RINGS, params.workers)


def refusal(params: ProxyParams) -> str | None:
    """Knobs kernel-cost's mini-proxy path cannot run with, by name (pre-flight)."""
    if params.producer != "gpu":
        return ("kernel-cost's mini-proxy path is GPU producers (the caller kernel's blocks push "
                "the descriptors): use --producer gpu")  # fmt: skip
    if params.handoff != "baseline":
        return ("kernel-cost's mini-proxy path takes --handoff baseline: every ring is shared by "
                "many blocks, and tuned allows one producer per ring")  # fmt: skip
    return None


def point_refusal(params: ProxyParams, point: Mapping[str, Any]) -> str | None:
    """What the engine would refuse for this point, refused in pre-flight: a worker without a
    lane of its own (--workers above --qps)."""
    qps = int(point.get("qps", 1))
    if params.workers > qps:
        return (f"--workers {params.workers} with --qps {qps}: every worker owns lanes (at most "
                "one worker per QP)")  # fmt: skip
    return None


def ring_of(block: int, nlanes: int, workers: int, nrings: int) -> int:
    """The ring block `block` pushes into (send_proxy.cuh ring_of)."""
    w = block % nlanes % workers
    n = (nrings - w + workers - 1) // workers
    return w + workers * ((block // workers) % n)


def ring_messages(grid: int, nlanes: int, workers: int, nrings: int, per_block: int) -> list[int]:
    """Descriptors each ring is given by one launch of `grid` blocks sending `per_block` each."""
    out = [0] * nrings
    for b in range(grid):
        out[ring_of(b, nlanes, workers, nrings)] += per_block
    return out


@dataclass(frozen=True)
class KernelBuild(CallerBuild):
    """One cubin of the mini-proxy path: caller, live values, whether the call is built in
    (`comm`) and how (`build`). The ring layout (the native module's) is compiled in."""

    def __post_init__(self) -> None:
        super().__post_init__()

    def defines(self, consts: Any) -> tuple[str, ...]:
        """-D options; `consts`: the native ring layout (_native.proxy)."""
        return (
            *self.caller_defines("proxy"),
            *layout_defines(consts),
        )

    def tag(self) -> str:
        return f"proxy-{self.caller}-l{self.live}-{self.how()}"


def build_for(caller: str, live: int, variant: str, build: str) -> KernelBuild:
    """The cubin a variant runs: `none` has no communication code (whatever the build)."""
    if variant not in KC_VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {KC_VARIANTS}")
    return KernelBuild(caller, live, variant != "none", build)


def compile_cubin(b: KernelBuild, arch: str, consts: Any, cache: Any = None,
                  nvcc: str | None = None) -> Compiled:  # fmt: skip
    root = cuda_dir()
    return compile_build(b.tag(), b.defines(consts), b.separate, arch,
                         [root / name for name in SOURCES], cache, nvcc)  # fmt: skip


def send_args(rings_dev: int, reserve_dev: int, control_dev: int, status_dev: int,
              timeout_ns: int, nrings: int, workers: int, nlanes: int, depth: int,
              size: int) -> np.ndarray:  # fmt: skip
    """cuda/kcost/send_proxy.cuh SendArgs as bytes (little-endian, its field offsets)."""
    out = np.zeros(SEND_ARGS_BYTES, dtype=np.uint8)
    out[:40].view(np.uint64)[:] = (rings_dev, reserve_dev, control_dev, status_dev, timeout_ns)
    out[40:64].view(np.uint32)[:] = (nrings, workers, nlanes, depth, size, 0)
    return out


def dbrec_wqebbs(lane: Any) -> int:
    """The low 16 bits of the WQEBBs the lane's SQ doorbell record announces (big-endian)."""
    addr = int(lane.qp.sq.dbrec)
    if not addr:
        raise UnsupportedError("kernel-cost's mini-proxy path reads each lane's SQ doorbell "
                               "record: this fabric gives none")  # fmt: skip
    raw = ctypes.c_uint32.from_address(addr + DBREC_SND).value
    return int.from_bytes(raw.to_bytes(4, "little"), "big") & 0xFFFF


def run(sub: ProxySubmitter, work: KernelCostWork) -> KernelCostResult:
    """Paired passes of the variant and its reference (kernel_cost_common.time_pairs) with the
    engine running: a posting variant's drain (every ring's descriptors completed) runs after
    each of its launches, outside the timed interval."""
    why = refusal(sub.params)
    if why is not None or sub.gpu is None:
        raise ConfigError("producer (--producer)", sub.params.producer, why or "gpu")
    if on_verbs(sub.fabric):
        raise UnsupportedError(
            "kernel-cost's mini-proxy path reads the lanes' doorbell "
            "records in host memory: run it on emu's queues, not verbs"
        )
    gpu = sub.gpu
    cp, consts = gpu.cp, gpu.consts
    arch = "sm_" + cp.cuda.Device().compute_capability
    grid, sms = grid_of(cp, work.blocks, work.blocks_per_sm)
    L, T, R = len(work.lanes), sub.params.workers, kc_rings(sub.params)
    if L < T:
        raise ConfigError("workers (--workers)", T, f"<= --qps {L} (every worker owns a lane)")
    ref_b = build_for(work.caller, work.live, "none", work.build)
    var_b = build_for(work.caller, work.live, work.variant, work.build)
    ref_mod, ref_c = loaded_module(cp, ref_b, lambda: compile_cubin(ref_b, arch, consts))
    var_mod, var_c = loaded_module(cp, var_b, lambda: compile_cubin(var_b, arch, consts))
    ref_fn, var_fn = ref_mod.get_function(CALLER), var_mod.get_function(CALLER)
    posts = work.variant in ("send", "send-wait") and work.messages > 0
    drain_fn = var_mod.get_function(DRAIN) if posts else None
    code = VARIANT_CODES[work.variant]
    runs = work.launches * work.pairs + 2  # the timed launches, the warm one and the last one
    given = ring_messages(grid, L, T, R, work.messages if posts else 0)
    per_lane = [0] * L
    for b in range(grid):
        per_lane[b % L] += work.messages if posts else 0
    bbs = int(gpu.host.write_wqebbs(work.inline, work.size, False, False))
    inp, out = caller_buffers(cp, work, grid)
    with sub.engine(work.lanes, T, R, 1, work.size, work.inline) as eng, ExitStack() as stack:
        rings = gpu._rings(eng, stack)
        ctl_dev = rings[0] + consts.CONTROL_OFF
        ring_ptrs = cp.asarray(np.array(rings, dtype=np.uint64))
        reserve = cp.zeros(R, dtype=cp.uint64)
        status = cp.zeros(1, dtype=cp.uint64)
        args = cp.asarray(send_args(ring_ptrs.data.ptr, reserve.data.ptr, ctl_dev,
                                    status.data.ptr, sub.timeout_ns, R, T, L,
                                    sub.params.ring_depth, work.size))  # fmt: skip
        before = [dbrec_wqebbs(ln) for ln in work.lanes]
        stream = launch_stream(cp)
        # the host's bound: the engine's timeout and 0.1 ms a message, for every pass
        bound = gpu._timeout_s(eng, grid * max(1, work.messages) * work.launches)

        def drain() -> None:
            assert drain_fn is not None
            drain_fn(((R + 127) // 128,), (128,), (args,))

        with stream:
            variant_ns, reference_ns = time_pairs(
                cp, work.launches, work.pairs,
                lambda: ref_fn((grid,), (work.threads,), caller_args(inp, out, work.steps, args,
                                                                     0, work.messages)),
                lambda: var_fn((grid,), (work.threads,), caller_args(inp, out, work.steps, args,
                                                                     code, work.messages)),
                drain if drain_fn is not None else None,
                lambda ev: gpu._watch(eng, stream, "kernel-cost (caller kernel)", bound),
            )  # fmt: skip
        st = int(status.get()[0])
        if st:
            raise CompletionTimeout(
                f"rank {sub.rank}: kernel-cost (mini-proxy): {STATUS.get(st >> 32, st >> 32)} "
                f"on ring {st & 0xFFFFFFFF} ({gpu._ring_state(eng)})"
            )
        reserved = [int(v) for v in reserve.get()]
        completed = [int(ctypes.c_uint64.from_address(eng.native.ring_addr(r)
                                                      + consts.COMPLETED_OFF).value)
                     for r in range(R)]  # fmt: skip
        after = [dbrec_wqebbs(ln) for ln in work.lanes]
    want = [g * runs for g in given]
    if reserved != want or completed != want:
        raise ValidationError(
            f"rank {sub.rank}: kernel-cost (mini-proxy): descriptors per ring {reserved[:8]}, "
            f"completed {completed[:8]}, differ from the placement's {want[:8]}"
        )
    posted = np.zeros(L, dtype=np.int64)
    for i in range(L):
        # the record keeps 16 bits: lift the difference to the count it is closest to
        delta = (after[i] - before[i]) % (1 << 16)
        expect = per_lane[i] * runs * bbs
        lifted = expect + ((delta - expect + (1 << 15)) % (1 << 16) - (1 << 15))
        posted[i] = lifted // bbs
    details = {"sm_clock_hz": float(gpu.sm_hz), "sms": float(sms), "workers": float(T),
               "rings": float(R), "num_regs_runtime": float(var_fn.num_regs),
               "local_bytes_runtime": float(var_fn.local_size_bytes)}  # fmt: skip
    return KernelCostResult(
        variant_ns=variant_ns, reference_ns=reference_ns,
        variant=caller_resources(cp, var_c, var_fn, work.threads),
        reference=caller_resources(cp, ref_c, ref_fn, work.threads), output=out.get(),
        posted=posted, grid=grid, variant_launches=runs, details=details,
    )  # fmt: skip
