"""kernel-cost: what the enclosing kernel pays for communication code it carries, executes or
waits on (the paper, arXiv 2610.01380, §4.3.2, Fig. 9, Appendix D.2, Table 14).

A caller kernel of fixed useful work and launch shape (--blocks blocks of --block-threads
threads; 528 x 256 as the paper, four per SM of an H200) keeps --live values per thread across
every communication call, in two kinds: compute (FMA chains, --compute-steps steps) and stream
(coalesced loads into the live accumulators, --stream-steps steps, of an array of 256 MiB to
4 GiB: no element is read twice within 4 GiB, so the loads go to memory, not the L2). Each
block's thread 0 sends --per-block messages of --msg-size bytes spread through its work (8 B
inline, larger sizes as pointer payloads), one QP per block (--qps). Variants (--variant): none
(no communication code built in: the reference), code-only (built in, its branch decided at run
time and never taken), send (post and resume), send-wait (post, wait for the completion, then
resume); other warps compute throughout. Builds (--build): the call's body inlined into the
caller, or a separately compiled, non-inlined call (relocatable device code).

Every point times the variant and its reference in --pairs paired passes of --launches
launches each (the order alternates from pass to pass; a posting variant's completion drain runs
after each launch, outside the timed interval), and reports the median of the passes'
throughput losses, 100 x (1 - t_reference / t_variant), with both kernels' registers, spill
bytes, stack frame and blocks per SM. --blocks-per-sm N launches N blocks per SM of the GPU
instead of --blocks (the paper's residency run at 8).

Validation: every thread's output against its closed form (the work is exact in FP32: a skipped
step changes it), the WQEs each QP carried against what the variant posts, and (the harness,
from `expected_landing`) every message's bytes at the target.

Paths: the submitter is the path (its kernel_cost loop and its call in cuda/kcost/path.cuh):
mini-gda (`--submitter gpu`, one QP per block), mini-proxy's GPU producers (`--submitter proxy
--producer gpu`, descriptors into --rings host rings drained by --workers) and DOCA GPUNetIO
(`--submitter doca`, doca_gpu_dev_verbs_put on the block's QP). Knobs a path cannot run with are
refused by name before the shape check (Submitter.kernel_cost_refusal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError, UnsupportedError, ValidationError
from ..knobs import KIND_STR, Knob
from ..submit.base import KernelCostWork, Shape
from ..submit.work import KC_BUILDS, KC_CALLERS, KC_VARIANTS
from .common import QPS, field, int_list
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..patterns import Traffic
    from ..submit.base import Submitter
    from .context import Layout, RankContext

MAX_LIVE = 224  # the paper's largest sweep value; past it, a thread's registers cannot hold them
MAX_PER_BLOCK = 64
MAX_MSG = 1 << 20
INLINE_MAX = 220  # one WQE of four WQEBBs: 8-220 B go inline
EXACT = 1 << 24  # FP32 integers are exact below this: the closed form holds
INPUT_MAX = 7  # the caller's input is x & 7

CALLER = Knob("--caller", "caller kernels: compute (FMA chains), stream (memory-bound)",
              KIND_STR, choices=KC_CALLERS, many=True)  # fmt: skip
LIVE = Knob("--live", "live values per thread across each call to sweep, e.g. 8,16,...,224",
            KIND_STR, many=True)  # fmt: skip
PER_BLOCK = Knob("--per-block", "messages each block sends, spread through its work, e.g. "
                 "0,1,4,16", KIND_STR, many=True)  # fmt: skip
MSG_SIZE = Knob("--msg-size", "bytes of each message (<= 220 inline, larger by pointer), e.g. "
                "8,7168", KIND_STR, many=True)  # fmt: skip
VARIANT = Knob("--variant", "none (no communication code), code-only (built in, never taken), "
               "send, send-wait", KIND_STR, choices=KC_VARIANTS, many=True)  # fmt: skip
BUILD = Knob("--build", "the call inlined into the caller, or separately compiled (-rdc, a "
             "non-inlined call)", KIND_STR, choices=KC_BUILDS, many=True)  # fmt: skip
BLOCKS = Knob("--blocks", "blocks of the caller kernel (528: four per SM of an H200)", lo=1,
              hi=65535)  # fmt: skip
BLOCK_THREADS = Knob("--block-threads", "threads per block of the caller kernel (whole warps)",
                     lo=32, hi=1024)  # fmt: skip
BLOCKS_PER_SM = Knob("--blocks-per-sm", "launch this many blocks per SM of the GPU instead of "
                     "--blocks (the residency run: 8)", lo=1, hi=64)  # fmt: skip
COMPUTE_STEPS = Knob("--compute-steps", "FMA steps per live value and thread (compute caller)",
                     lo=1, hi=EXACT)  # fmt: skip
STREAM_STEPS = Knob("--stream-steps", "loads per live value and thread (stream caller)", lo=1,
                    hi=EXACT)  # fmt: skip
LAUNCHES = Knob("--launches", "timed launches per pass", lo=1, hi=10000)
PAIRS = Knob("--pairs", "paired passes (reference, variant) per point; the median is reported",
             lo=1, hi=1000)  # fmt: skip


@dataclass(frozen=True)
class KernelCostParams:
    caller: tuple[str, ...] = field(CALLER, KC_CALLERS)
    live: tuple[str, ...] = field(LIVE, ("8", "16"))
    per_block: tuple[str, ...] = field(PER_BLOCK, ("0", "1", "4", "16"))
    msg_size: tuple[str, ...] = field(MSG_SIZE, ("8", "7168"))
    variant: tuple[str, ...] = field(VARIANT, KC_VARIANTS)
    build: tuple[str, ...] = field(BUILD, KC_BUILDS)
    qps: int = field(QPS, 528)
    blocks: int = field(BLOCKS, 528)
    block_threads: int = field(BLOCK_THREADS, 256)
    blocks_per_sm: int | None = field(BLOCKS_PER_SM, None)
    compute_steps: int = field(COMPUTE_STEPS, 65536)
    stream_steps: int = field(STREAM_STEPS, 1200)
    launches: int = field(LAUNCHES, 15)
    pairs: int = field(PAIRS, 3)

    def __post_init__(self) -> None:
        # Checked as the Params are built: a bad knob is named even where nothing can run it.
        live = self.live_grid
        _ = self.per_block_grid, self.size_grid  # each parses and checks
        for k, name in ((BLOCKS, "blocks"), (BLOCK_THREADS, "block_threads"),
                        (COMPUTE_STEPS, "compute_steps"), (STREAM_STEPS, "stream_steps")):
            k.check(name, getattr(self, name))  # before they bound each other
        if self.block_threads % 32:
            raise ConfigError(BLOCK_THREADS.label("block_threads"), self.block_threads,
                              "a multiple of 32 (whole warps)")
        top = max(live)
        # Every thread's output is checked exactly: its sums must stay FP32 integers.
        if top * (INPUT_MAX + self.compute_steps) >= EXACT:
            most = (EXACT - 1) // top - INPUT_MAX
            raise ConfigError(COMPUTE_STEPS.label("compute_steps"), self.compute_steps,
                              f"at most {most} with --live up to {top} (the output's sum must "
                              "stay an exact FP32 integer)")
        if top * INPUT_MAX * self.stream_steps >= EXACT:
            most = (EXACT - 1) // (top * INPUT_MAX)
            raise ConfigError(STREAM_STEPS.label("stream_steps"), self.stream_steps,
                              f"at most {most} with --live up to {top} (the output's sum must "
                              "stay an exact FP32 integer)")

    @property
    def live_grid(self) -> tuple[int, ...]:
        return int_list(LIVE, "live", self.live, 1, MAX_LIVE)

    @property
    def per_block_grid(self) -> tuple[int, ...]:
        return int_list(PER_BLOCK, "per_block", self.per_block, 0, MAX_PER_BLOCK)

    @property
    def size_grid(self) -> tuple[int, ...]:
        return int_list(MSG_SIZE, "msg_size", self.msg_size, 8, MAX_MSG)

    def steps(self, caller: str) -> int:
        return self.compute_steps if caller == "compute" else self.stream_steps


def expected_output(caller: str, live: int, steps: int, grid: int, threads: int) -> np.ndarray:
    """Each thread's output as cuda/kcost/kernel_cost.cu computes it, exactly (float64 of FP32
    integers). compute: the sum over i of in[(t * live + i) & mask] + steps (a = b = 1); stream:
    the sum over i and steps s of in[((s * live + i) * T + t) & mask], T threads in all. With
    in[x] = x & 7 and a mask of at least three bits, both depend on t only through t mod 8 (and
    stream's on s only through s mod 8), so eight values give every thread's."""
    total = grid * threads
    i = np.arange(live, dtype=np.int64)
    vals = np.zeros(8, dtype=np.int64)
    for t8 in range(8):
        if caller == "compute":
            vals[t8] = int((((t8 * live + i) & INPUT_MAX) + steps).sum())
            continue
        for r in range(8):
            count = (steps - r + 7) // 8 if steps > r else 0
            vals[t8] += count * int(((((r * live + i) * total) + t8) & INPUT_MAX).sum())
    return vals[np.arange(total, dtype=np.int64) & 7].astype(np.float64)


def paired_loss(variant_ns: np.ndarray, reference_ns: np.ndarray) -> dict[str, float]:
    """Throughput loss of paired passes: per pass 100 x (1 - median(reference) /
    median(variant)), the median over passes reported with its range; kernel times in µs
    (medians of the pass medians)."""
    v = np.median(np.asarray(variant_ns, dtype=np.float64).reshape(len(variant_ns), -1), axis=1)
    r = np.median(np.asarray(reference_ns, dtype=np.float64).reshape(len(reference_ns), -1),
                  axis=1)  # fmt: skip
    loss = 100.0 * (1.0 - r / v)
    return {"loss_pct": float(np.median(loss)), "loss_min_pct": float(loss.min()),
            "loss_max_pct": float(loss.max()), "kernel_us": float(np.median(v)) / 1e3,
            "reference_us": float(np.median(r)) / 1e3}  # fmt: skip


@register
class KernelCost(Experiment):
    name = "kernel-cost"
    summary = "what the enclosing kernel pays for communication code: carried, sending, waiting"
    method = "the paper (arXiv 2610.01380) §4.3.2, Fig. 9, Appendix D.2 (Table 14)"
    Params = KernelCostParams
    shapes = frozenset({Shape.KERNEL_COST})
    patterns = ("pairs",)

    @classmethod
    def from_config(cls, cfg: RunConfig, submitter: type[Submitter],
                    submitter_params: Any) -> Experiment:  # fmt: skip
        """Knobs the submitter's path cannot run with are refused by name, before the shape
        check."""
        why = submitter.kernel_cost_refusal(submitter_params)
        if why is not None:
            raise UnsupportedError(f"experiment kernel-cost: {why}")
        return super().from_config(cfg, submitter, submitter_params)

    def check(self) -> None:
        p = self.params
        if p.blocks_per_sm is not None and p.qps > p.blocks_per_sm:
            raise ConfigError(QPS.label("qps"), p.qps,
                              f"<= --blocks-per-sm ({p.blocks_per_sm}) with --blocks-per-sm: "
                              "every QP must carry a block's messages on any GPU")  # fmt: skip
        if p.blocks_per_sm is None and p.qps > p.blocks:
            raise ConfigError(QPS.label("qps"), p.qps, f"<= --blocks ({p.blocks}): one QP a "
                              "block at most (a QP no block uses carries nothing)")

    def check_rank(self, traffic: Traffic) -> None:
        if len(traffic.sends_to) > 1:
            raise ConfigError("pattern (--pattern)", traffic.pattern,
                              "one destination per sender for kernel-cost")

    @property
    def lanes_per_peer(self) -> int:
        return int(self.params.qps)

    @property
    def max_message(self) -> int:
        # a lane's slice holds one block's messages of a point, whole
        p = self.params
        return max(p.size_grid) * max(1, max(p.per_block_grid))

    def points(self) -> list[dict[str, Any]]:
        """caller x live x build x variant x messages x size, less what adds nothing: none once
        per caller and live (no communication code: no build, no messages), code-only once per
        messages (nothing is sent: no size), send and send-wait only with messages."""
        p = self.params
        out = []
        for caller in p.caller:
            for live in p.live_grid:
                base = {"caller": caller, "live": live, "steps": p.steps(caller),
                        "blocks": 0 if p.blocks_per_sm else p.blocks,
                        "grid_per_sm": p.blocks_per_sm or 0, "threads": p.block_threads,
                        "qps": p.qps, "launches": p.launches, "pairs": p.pairs}  # fmt: skip
                if "none" in p.variant:
                    out.append({**base, "variant": "none", "build": "none", "per_block": 0,
                                "size": 0})  # fmt: skip
                for build in p.build:
                    for variant in p.variant:
                        if variant == "none":
                            continue
                        for m in p.per_block_grid:
                            if variant == "code-only":
                                out.append({**base, "variant": variant, "build": build,
                                            "per_block": m, "size": 0})  # fmt: skip
                                continue
                            if m == 0:
                                continue
                            out.extend({**base, "variant": variant, "build": build,
                                        "per_block": m, "size": s} for s in p.size_grid)
        return out

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        t = ctx.traffic
        if not t.sends:
            return PointResult(role=t.role)
        lanes = ctx.lanes_to(t.sends_to[0], "rc", point["qps"])
        size = point["size"] or 8
        build = "inline" if point["build"] == "none" else point["build"]
        res = ctx.submitter.kernel_cost(KernelCostWork(
            caller=point["caller"], live=point["live"], variant=point["variant"], build=build,
            messages=point["per_block"], size=size, inline=size <= INLINE_MAX,
            blocks=point["blocks"], blocks_per_sm=point["grid_per_sm"] or None,
            threads=point["threads"], steps=point["steps"], launches=point["launches"],
            pairs=point["pairs"], lanes=lanes,
        ))  # fmt: skip
        self._validate(point, res)
        loss = paired_loss(res.variant_ns, res.reference_ns)
        var, ref = res.variant, res.reference
        results = {
            **loss,
            "registers": var.registers, "reference_registers": ref.registers,
            "spill_store_bytes": var.spill_store_bytes, "spill_load_bytes": var.spill_load_bytes,
            "stack_bytes": var.stack_bytes, "local_bytes": var.local_bytes,
            "blocks_per_sm": var.blocks_per_sm if var.blocks_per_sm is not None else float("nan"),
            "reference_blocks_per_sm": (ref.blocks_per_sm if ref.blocks_per_sm is not None
                                        else float("nan")),
            "grid": res.grid, "posted": int(res.posted.sum()),
            **{k: v for k, v in res.details.items() if isinstance(v, (int, float))},
        }  # fmt: skip
        if "sm_clock_hz" in results:
            results["sm_clock_mhz"] = float(results["sm_clock_hz"]) / 1e6
        return PointResult(samples={"kernel_ns": np.asarray(res.variant_ns, np.int64).ravel()},
                           results=results, role=t.role)  # fmt: skip

    @staticmethod
    def _validate(point: dict[str, Any], res: Any) -> None:
        what = (f"kernel-cost {point['caller']} live={point['live']} {point['variant']} "
                f"{point['build']} per_block={point['per_block']}")  # fmt: skip
        want = expected_output(point["caller"], point["live"], point["steps"], res.grid,
                               point["threads"])  # fmt: skip
        got = np.asarray(res.output, dtype=np.float64)
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = int(np.flatnonzero(got != want)[0]) if got.shape == want.shape else -1
            raise ValidationError(f"{what}: the caller's output differs from its closed form "
                                  f"(first at thread {bad}): a variant skipped work")
        sends = point["variant"] in ("send", "send-wait")
        L = len(res.posted)
        per_lane = np.zeros(L, dtype=np.int64)
        if sends:
            for b in range(res.grid):
                per_lane[b % L] += point["per_block"]
        want_posted = per_lane * res.variant_launches
        if not np.array_equal(np.asarray(res.posted), want_posted):
            raise ValidationError(f"{what}: WQEs per QP {list(res.posted[:8])} differ from the "
                                  f"variant's {list(want_posted[:8])} (code-only must post none)")

    def expected_landing(self, ctx: RankContext, point: dict[str, Any], source: int,
                         source_bytes: np.ndarray, layout: Layout) -> list[tuple[int, np.ndarray]]:
        """Lane l's slice holds its block's messages, bytes [0, messages x size) from the same
        offset of the source's slice l (every block on a lane writes the same bytes)."""
        if source not in ctx.traffic.receives_from or point["variant"] in ("none", "code-only"):
            return []
        n = point["per_block"] * point["size"]
        if not n:
            return []
        return [(lane * layout.lane_bytes,
                 source_bytes[lane * layout.lane_bytes : lane * layout.lane_bytes + n])
                for lane in range(point["qps"])]  # fmt: skip

    def columns(self) -> list[Column]:
        return [
            Column("caller", "caller", "{}"),
            Column("live", "live", "{:d}", 5),
            Column("build", "build", "{}"),
            Column("variant", "variant", "{}"),
            Column("msgs", "per_block", "{:d}", 5),
            Column("size(B)", "size", "{:d}", 8),
            Column("kernel(µs)", "kernel_us"),
            Column("loss(%)", "loss_pct", "{:.1f}", 8),
            Column("regs", "registers", "{:.0f}", 5),
            Column("blk/SM", "blocks_per_sm", "{:.0f}", 6),
        ]
