"""The typed work of every loop shape a submitter may offer, and what each loop returns.

Experiments build these from their points and hand them to the submitter's method of the same
shape (`latency`, `respond`, `rate`, `loaded`, `proxy_rate`, `cycle`, `dispatch`, `kernel_cost`;
`locked_clock`
for clock control); they never call past them. Work is made of `Lane`s: a QP towards one peer
with the lane's source and destination regions. How a submitter lays lanes out (a native table,
a GPU array) is its own business.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..fabric.base import MemoryRegion, QueuePair


class Shape(str, enum.Enum):
    """Loop shapes an experiment asks for and a submitter declares (`Submitter.shapes`)."""

    LATENCY = "latency"  # one operation at a time, timed per operation
    RESPOND = "respond"  # answer a peer's requests (the far side of a round trip)
    RATE = "rate"  # many operations outstanding, timed over windows
    LOADED = "loaded"  # a probe's round trip while background producers load the endpoint
    PROXY_RATE = "proxy-rate"  # R descriptor rings drained by T workers in chains of B
    CLOCK = "clock"  # lock the SM clock of the GPU that runs the loops, and measure it
    CYCLE = "cycle"  # units cycle an active subset of connections, W writes per visit
    DISPATCH = "dispatch"  # MoE token dispatch: send kernel, [delay kernel], receive kernel
    KERNEL_COST = "kernel-cost"  # a caller kernel's time with communication code built in


@dataclass(frozen=True)
class Buffer:
    """A byte range the NIC reaches: local (key = lkey) or remote (key = rkey)."""

    addr: int
    key: int
    length: int

    @classmethod
    def local(cls, mr: MemoryRegion, offset: int = 0, length: int | None = None) -> Buffer:
        n = mr.length - offset if length is None else length
        if offset < 0 or n <= 0 or offset + n > mr.length:
            raise ValueError(f"slice [{offset}, {offset + n}) outside a {mr.length}-byte region")
        return cls(mr.addr + offset, mr.lkey, n)

    def slice(self, offset: int, length: int) -> Buffer:
        if offset < 0 or length <= 0 or offset + length > self.length:
            raise ValueError(f"slice [{offset}, {offset + length}) outside {self.length} bytes")
        return Buffer(self.addr + offset, self.key, length)


@dataclass(frozen=True)
class DcAddress:
    """The address vector a DCI puts in each WQE to reach a peer's DC target."""

    dctn: int
    dc_key: int
    lid: int


@dataclass(frozen=True)
class Lane:
    """One QP driven towards one peer: where it reads (src) and where it writes (dst)."""

    qp: QueuePair
    peer: int
    src: Buffer
    dst: Buffer
    dc: DcAddress | None = None


# ---- LATENCY and RESPOND ------------------------------------------------------------------------
# What a latency loop times, and the code each native loop and kernel knows it by.
LATENCY_MODES = ("issue", "put_completion", "round_trip")
MODE_CODES = {mode: code for code, mode in enumerate(LATENCY_MODES)}


@dataclass(frozen=True)
class LatencyWork:
    """Operations one at a time on lanes[selected]; `lanes` are all configured QPs (the scope
    of an all-QP quiet). `reply` is the local buffer a round trip's answer lands in."""

    lanes: tuple[Lane, ...]
    selected: int
    mode: str  # issue | put_completion | round_trip
    size: int
    inline: bool
    scope_all: bool
    iters: int
    warmup: int
    reply: Buffer | None = None


@dataclass(frozen=True)
class RespondWork:
    """Answer `count` round-trip requests that land in `watch`, writing back through `lane`."""

    lane: Lane
    watch: Buffer
    size: int
    inline: bool
    count: int


# ---- RATE and PROXY_RATE ------------------------------------------------------------------------
@dataclass(frozen=True)
class RateWork:
    """Many writes outstanding: thread t owns lanes t, t+T, ...; `batch` WQEs per doorbell."""

    lanes: tuple[Lane, ...]
    threads: int
    batch: int
    size: int
    inline: bool
    messages_per_thread: int
    warmup_per_thread: int
    window: int


def even_lane_messages(nlanes: int, threads: int, per_thread: int) -> list[int]:
    """Messages each lane carries when the threads share the lanes evenly (threads / nlanes
    on every lane, each posting per_thread): a submitter's rate_lane_messages where its
    threads outnumber its lanes."""
    return [threads // nlanes * per_thread] * nlanes


@dataclass
class RateResult:
    """A rate loop's windows (int64 ns, each `window` messages of one thread or producer) and
    its totals over the timed region (the final drain included)."""

    windows_ns: np.ndarray
    elapsed_ns: int
    messages: int
    doorbells: int
    cqes: int

    @classmethod
    def from_stats(cls, windows: Any, stats: Mapping[str, Any]) -> RateResult:
        """From a native rate loop's windows and totals (elapsed_ns, messages, doorbells,
        cqes)."""
        return cls(
            windows_ns=np.asarray(windows, dtype=np.int64),
            elapsed_ns=int(stats["elapsed_ns"]),
            messages=int(stats["messages"]),
            doorbells=int(stats["doorbells"]),
            cqes=int(stats["cqes"]),
        )


@dataclass(frozen=True)
class ProxyRateWork:
    """T workers (lanes[:T], one QP each), R rings, chains of up to B WQEs; `producers` fill the
    rings with `messages` writes of `size` bytes each (after `warmup`). Returns a RateResult."""

    lanes: tuple[Lane, ...]
    workers: int
    rings: int
    batch: int
    producers: int
    size: int
    inline: bool
    messages: int
    warmup: int
    window: int


# ---- LOADED -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedWork:
    """A probe's round trip of `size` inline bytes on lanes[0] while `background` producers
    (host threads or GPU CTAs) post batches of `batch` writes on this endpoint, paced to
    `pace_mps` M msg/s per endpoint when > 0. `shared`: the probe's queue (a ring or a QP) is
    one the background also fills, else it is reserved for the probe. `requester` False answers
    the peer's probe instead. `reply`: the landing slice the answer (requester) or the request
    (responder) arrives in; the probe's sequence word is its last 8 bytes. `lanes`: as many as
    the submitter's `loaded_lanes` asked for."""

    lanes: tuple[Lane, ...]
    requester: bool
    shared: bool
    background: int
    batch: int
    pace_mps: float
    size: int
    reply: Buffer
    iters: int
    warmup: int


@dataclass
class LoadedResult:
    """The probe's samples (requester only), the background writes retired while the measured
    probes ran and the span they ran in, and the submitter's own numbers for the trace."""

    rtt_ns: np.ndarray
    background: int
    probe_ns: int
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def background_mps(self) -> float:
        """The rate the background carried during the probe (M msg/s)."""
        return self.background / self.probe_ns * 1e3 if self.probe_ns > 0 else 0.0


# ---- CYCLE --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CycleWork:
    """Active connections: `units` submitting units cycle the connections in `lanes`. Lanes
    that share a QP are one DCI's destinations (DCI-peer pairs); every other lane is one
    connection (an RC QP). QPs are numbered by their first lane; unit u owns QPs u, u+U, ... and
    visits the lanes of its QPs in `lanes` order, one after another and round again: each visit
    posts `writes_per_visit` writes on that connection (in chains of min(batch, W), one doorbell
    each) before the unit moves on. Each unit makes `warmup_visits` untimed visits, then
    `visits` timed ones; lane l's k-th write goes to slot k mod slots of its regions; the final
    drain is inside the timed region. Returns a RateResult (windows of `window` messages)."""

    lanes: tuple[Lane, ...]
    units: int
    writes_per_visit: int
    batch: int
    size: int
    inline: bool
    visits: int
    warmup_visits: int
    window: int


def cycle_unit_lanes(qps: Sequence[Hashable], units: int) -> list[list[int]]:
    """The lanes (indices) each unit of a cycle visits, in visit order, by CycleWork's rule;
    `qps[i]` names lane i's QP (lanes naming the same one share it)."""
    number: dict[Hashable, int] = {}
    owned: list[list[int]] = [[] for _ in range(units)]
    for i, q in enumerate(qps):
        owned[number.setdefault(q, len(number)) % units].append(i)
    return owned


def own_qp_lanes(lanes: Sequence[Lane], submitter: str) -> list[int]:
    """The QP numbers of a cycle's lanes, for a submitter whose units own each lane's QP (one
    lane per QP: RC); lanes sharing a QP (a DCI's destinations) are refused naming the field,
    as `refuse_dci_pairs` refuses the point in pre-flight."""
    qpns = [lane.qp.qpn for lane in lanes]
    if len(set(qpns)) != len(qpns):
        refuse_dci_pairs("dc", submitter)
    return qpns


def refuse_dci_pairs(transport: str | None, submitter: str) -> None:
    """Refuse an active-connections point over DCI-peer pairs for `submitter` (its units or
    workers own each lane's QP; the pairs of one DCI share it)."""
    if transport == "dc":
        from ..errors import ConfigError

        raise ConfigError(
            "transport (--transport)", "dc",
            f"rc for active-connections with --submitter {submitter}: its units own each "
            "lane's QP, and DCI-peer pairs share a DCI",
        )


def cycle_lane_writes(
    qps: Sequence[Hashable], units: int, writes_per_visit: int, visits: int
) -> list[int]:
    """Writes each lane of a cycle carries when every unit makes `visits` visits (warm-up
    included): unit u's j-th of n lanes takes visits j, j+n, ..."""
    counts = [0] * len(qps)
    for mine in cycle_unit_lanes(qps, units):
        n = len(mine)
        for j, lane in enumerate(mine):
            counts[lane] = (visits // n + (j < visits % n)) * writes_per_visit
    return counts


# ---- DISPATCH -----------------------------------------------------------------------------------
# The backends a dispatch send kernel can post through (arXiv 2611.12362, §II-C): GPU-initiated
# mlx5 WQEs with a GPU doorbell (gdaki) or a host-forwarded one (free-flow), and the GPI
# descriptor queue with one WRITE per (token, expert) (gpi) or one FANOUT per token (gpi-mc).
DISPATCH_BACKENDS = ("gdaki", "free-flow", "gpi", "gpi-mc")
GPI_BACKENDS = ("gpi", "gpi-mc")  # the backends that post into a GPI queue (docs/gpi.md)
COUNT_WORD_BYTES = 8  # each landing slice's count word: (tokens received + 1), 0 until signalled


@dataclass(frozen=True)
class DispatchPlan:
    """One dispatch point, computed once by the experiment and the same on every rank. Experts
    are spread evenly: rank r owns experts [r*E/W, (r+1)*E/W). `routing[s, t, j]` is the j-th
    expert source s sends token t to (top-k without replacement); `slots[s, t, j]` the receive
    slot of that copy at its expert (its index among s's tokens to that expert, in token
    order); `counts[s, e]` how many tokens s sends to expert e (app/moe/routing.py)."""

    backend: str  # one of DISPATCH_BACKENDS
    tokens: int  # T tokens per rank
    hidden: int  # H: a BF16 token is 2 * H bytes
    topk: int
    experts: int  # E over the whole job
    sm_cap: int  # CTAs of the send kernel
    wait_us: float | None  # None: no delay kernel between send and receive
    iters: int
    warmup: int
    routing: np.ndarray  # int32 [world, T, topk]
    slots: np.ndarray  # int32 [world, T, topk]
    counts: np.ndarray  # int32 [world, E]

    @property
    def token_bytes(self) -> int:
        return 2 * self.hidden

    def local_experts(self, world: int) -> int:
        return self.experts // world


@dataclass(frozen=True)
class DispatchWork:
    """This rank's part of a dispatch point. `tokens_src`: the rank's T tokens in its source
    region (token t is the pattern's bytes [t*2H, (t+1)*2H)); `staging`: the source region
    after them, where the send kernel copies each token before the NIC reads it. `lanes[d]`:
    one lane per local expert e of peer d (QP e towards d; dst: d's landing slice for (this
    rank, e)). `recv[s]`: this rank's landing slice per local expert for source s's tokens;
    slot i at i * slot_bytes, the count word at counter_offset (after T_max slots). This rank's
    own tokens to its own experts go to `self_recv` (one area per local expert, laid out as a
    landing slice) by a copy, not RDMA. `expert_major`: where the receive kernel copies the
    tokens, for local expert e, source s in rank order, its slots in order (None: the
    submitter allocates it on the GPU)."""

    plan: DispatchPlan
    rank: int
    world: int
    tokens_src: Buffer
    staging: Buffer
    lanes: dict[int, tuple[Lane, ...]]  # peer -> one lane per local expert of that peer
    recv: dict[int, tuple[Buffer, ...]]  # source -> landing slice per local expert
    slot_bytes: int  # 2H
    counter_offset: int  # the count word's offset in each landing slice
    self_recv: tuple[Buffer, ...]
    expert_major: Buffer | None = None
    # A host barrier over every rank of the job (MPI's, or a test's): the submitter calls it
    # before each iteration's send, so no rank signals a word a receiver has not yet zeroed.
    # None: a world of one rank.
    barrier: Callable[[], None] | None = None


@dataclass(frozen=True)
class DispatchResult:
    """What a dispatch call measured (int64 ns per timed iteration) and received. `received[e,
    s]`: the count the receive kernel read for local expert e from source s; `expert_major`:
    the last iteration's expert-major buffer, copied to the host; `details`: the submitter's
    own numbers (doorbells, descriptors, the delay kernel's calibration)."""

    send_ns: np.ndarray  # the send kernel, CUDA events
    recv_ns: np.ndarray  # the receive kernel, CUDA events
    wait_ns: np.ndarray  # the delay kernel as it ran (zeros without one)
    send_gt_ns: np.ndarray  # the send kernel by the in-kernel globaltimer
    received: np.ndarray  # int32 [E_local, world]
    expert_major: np.ndarray  # uint8
    details: dict[str, Any] = field(default_factory=dict)


# ---- KERNEL_COST --------------------------------------------------------------------------------
# What the enclosing kernel pays for communication code (arXiv 2610.01380, §4.3.2, Fig. 9): the
# caller kernels, the variants of the call inside them, and how the call is built.
KC_CALLERS = ("compute", "stream")  # FMA chains, or memory-bound streaming
KC_VARIANTS = ("none", "code-only", "send", "send-wait")  # none: no communication code built in
KC_BUILDS = ("inline", "separate")  # the call's body inlined, or a non-inlined call (-rdc)


@dataclass(frozen=True)
class KernelCostWork:
    """One kernel-cost point on this rank. The caller kernel runs `blocks` blocks of `threads`
    threads (0: `blocks_per_sm` times the GPU's SM count), each thread `steps` steps of its
    caller's work on `live` values it keeps across every call; block b's thread 0 sends
    `messages` writes of `size` bytes (inline payload when `inline`) on lane b mod len(lanes),
    message k from offset k * size of the lane's source slice to the same offset of its
    destination. Per pair of passes the reference (no communication code) and the variant each
    run `launches` timed launches, in an order that alternates from pass to pass; a variant
    that posts drains its completions after each launch, outside the timed interval."""

    caller: str  # one of KC_CALLERS
    live: int
    variant: str  # one of KC_VARIANTS
    build: str  # one of KC_BUILDS
    messages: int  # per block
    size: int
    inline: bool
    blocks: int
    blocks_per_sm: int | None
    threads: int
    steps: int
    launches: int
    pairs: int
    lanes: tuple[Lane, ...]


@dataclass(frozen=True)
class KernelResources:
    """What the compiled cubin says of one kernel (ptxas/nvlink -v or cuobjdump), and the
    blocks per SM the occupancy calculator allows at the launch's block size (None: not asked,
    as in a CPU-only build)."""

    registers: int
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    local_bytes: int
    blocks_per_sm: int | None = None


@dataclass(frozen=True)
class KernelCostResult:
    """What a kernel-cost call measured: CUDA-event times (int64 ns) of every timed launch,
    shape [pairs, launches], of the variant and of its paired reference; both kernels'
    resources; the caller's output (one float32 per thread) of the variant's last launch;
    `posted[l]`: WQEs the variant posted on lane l over the whole call, in `variant_launches`
    launches (timed and untimed); `grid`: the blocks it ran; `details`: the submitter's own
    numbers (SM clock, SM count)."""

    variant_ns: np.ndarray
    reference_ns: np.ndarray
    variant: KernelResources
    reference: KernelResources
    output: np.ndarray
    posted: np.ndarray
    grid: int
    variant_launches: int
    details: dict[str, Any] = field(default_factory=dict)
