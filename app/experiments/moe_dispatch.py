"""moe-dispatch: MoE low-latency token dispatch, send and receive timed per iteration, over four
posting backends (the paper, arXiv 2611.12362, §II-B eqs 1-3, §II-C, §III-A, Figs. 5-6).

Every rank holds --tokens T tokens of 2 x --hidden bytes (BF16) and sends each to --topk of
--experts experts (top-k without replacement, drawn once per cell from --seed, app/moe/routing.py);
rank r owns experts [r*E/W, (r+1)*E/W), and each rank brings up one QP per local expert of every
peer (E/W lanes per peer). One iteration: the send kernel (at most --sm-cap CTAs) stages each
token and writes it to each of its experts' receive slots, then signals every (source, expert)
count word once (the signal rule in app/moe/routing.py); with --wait-us a one-thread delay
kernel runs for that long (the covering compute the paper's wait sweep models); then the
receive kernel polls the count words and copies the tokens expert-major. The send kernel's and
the receive kernel's times are the samples (`send_ns`, `recv_ns`, their sum `exposed_ns`, and
the delay as it ran, `wait_ns`).

Backends (--backend): gdaki (GPU-built WQEs, the GPU rings the doorbell), free-flow (GPU-built
WQEs, a host thread advances the producer index and rings), gpi (one WRITE descriptor per
(token, expert) on a GPI descriptor queue), gpi-mc (one FANOUT descriptor per token). The
submitter says which it can run here (`dispatch_backends`); only `--submitter gpu` has the
dispatch loop, so a machine without a GPU lists the experiment and refuses to run it.

Points: for each of --rounds rounds, the backends in an order shuffled reproducibly from
--seed + round (so no backend always runs first), then tokens x top-k x SM cap x wait. A cell's
routing is the same for every backend, SM cap, wait and round. After each point every rank
checks what it received: the counts against the routing, the expert-major buffer byte for byte
against the sources' tokens (gathered before the point), a combine-style BF16 sum, and (the
harness, from `expected_landing`) its landing slices against the senders' bytes. A failed check
fails the point as payload validation does.

Several ranks on one GPU need CUDA MPS (emu's pre-flight refuses them without it): otherwise
their send and receive kernels time-slice and the times measure the scheduler.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError, UnsupportedError, ValidationError
from ..fabric import registry as providers
from ..fabric.base import host_view
from ..knobs import KIND_STR, Knob, build, parse_float, parse_list
from ..moe import routing as rt
from ..submit.base import Buffer, DispatchPlan, DispatchWork, Shape
from ..submit.work import COUNT_WORD_BYTES, DISPATCH_BACKENDS, GPI_BACKENDS
from .common import ITERS, WARMUP, field, int_list, list_text
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from ..patterns import Traffic
    from .context import Layout, RankContext

MAX_TOKENS = 8192
MAX_TOPK = 64
MAX_EXPERTS = 4096
MAX_HIDDEN = 65536
MAX_SM_CAP = 4096
MAX_WAIT_US = 1e6
MAX_ROUNDS = 1000

TOKENS = Knob("--tokens", "tokens per rank to sweep, e.g. 1,2,4,...,256", KIND_STR, many=True)
TOPK = Knob("--topk", "experts each token goes to (top-k), e.g. 4,8", KIND_STR, many=True)
EXPERTS = Knob(
    "--experts", "experts in the job, spread evenly over the ranks", lo=1, hi=MAX_EXPERTS
)
HIDDEN = Knob(
    "--hidden",
    "hidden size H: a BF16 token is 2H bytes (2048; 7168 as DeepEP's test)",
    lo=8,
    hi=MAX_HIDDEN,
)
SM_CAP = Knob("--sm-cap", "CTAs of the dispatch send kernel to sweep, e.g. 32,64,128", KIND_STR,
              many=True)  # fmt: skip
BACKEND = Knob(
    "--backend",
    "dispatch backends to compare (gdaki: the reference)",
    KIND_STR,
    choices=DISPATCH_BACKENDS,
    many=True,
)
ROUNDS = Knob(
    "--rounds", "repetitions of the grid, backends reshuffled each round", lo=1, hi=MAX_ROUNDS
)
WAIT_US = Knob(
    "--wait-us",
    "µs of a delay kernel between send and receive to sweep (unset: no delay kernel)",
    KIND_STR,
    many=True,
)


@dataclass(frozen=True)
class MoeDispatchParams:
    tokens: tuple[str, ...] = field(TOKENS, tuple(str(1 << i) for i in range(9)))
    topk: tuple[str, ...] = field(TOPK, ("4", "8"))
    experts: int = field(EXPERTS, 128)
    hidden: int = field(HIDDEN, 2048)
    sm_cap: tuple[str, ...] = field(SM_CAP, ("32", "64", "128"))
    backend: tuple[str, ...] = field(BACKEND, DISPATCH_BACKENDS)
    rounds: int = field(ROUNDS, 5)
    wait_us: tuple[str, ...] | None = field(WAIT_US, None)
    iters: int = field(ITERS, 20)
    warmup: int = field(WARMUP, 5)

    def __post_init__(self) -> None:
        # Checked as the Params are built, before the plan asks the submitter for the shape:
        # a bad knob is named even where no submitter here can dispatch.
        _ = self.token_grid, self.sm_cap_grid, self.wait_grid  # each parses and checks
        topk = self.topk_grid
        EXPERTS.check("experts", self.experts)  # before it bounds top-k
        HIDDEN.check("hidden", self.hidden)
        if max(topk) > self.experts:
            raise ConfigError(
                TOPK.label("topk"),
                list_text(self.topk),
                f"at most --experts ({self.experts}): top-k picks distinct experts "
                f"({max(topk)} is more)",
            )
        if self.hidden % 8:
            raise ConfigError(
                HIDDEN.label("hidden"), self.hidden, "a multiple of 8 (tokens of 16-byte words)"
            )

    @property
    def token_grid(self) -> tuple[int, ...]:
        return int_list(TOKENS, "tokens", self.tokens, 1, MAX_TOKENS)

    @property
    def topk_grid(self) -> tuple[int, ...]:
        return int_list(TOPK, "topk", self.topk, 1, MAX_TOPK)

    @property
    def sm_cap_grid(self) -> tuple[int, ...]:
        return int_list(SM_CAP, "sm_cap", self.sm_cap, 1, MAX_SM_CAP)

    @property
    def wait_grid(self) -> tuple[float | None, ...]:
        if self.wait_us is None:
            return (None,)
        label = WAIT_US.label("wait_us")
        items = parse_list(list_text(self.wait_us), label, "waits in µs")
        out = tuple(parse_float(v, label) for v in items)
        bad = [v for v in out if not 0 <= v <= MAX_WAIT_US]
        if bad:
            raise ConfigError(
                label, ",".join(items), f"waits in 0..{MAX_WAIT_US:g} µs ({bad[0]:g} is not)"
            )
        return out

    @property
    def max_tokens(self) -> int:
        return max(self.token_grid)


def gpu_sm_count() -> int | None:
    """The fewest SMs of this machine's GPUs (CuPy), or None where there is no GPU."""
    try:
        import cupy as cp  # optional: a machine without a GPU lacks it

        n = cp.cuda.runtime.getDeviceCount()
        if n < 1:
            return None
        return min(
            int(cp.cuda.runtime.getDeviceProperties(i)["multiProcessorCount"]) for i in range(n)
        )
    except Exception:  # no CuPy, no driver, no device: nothing to check against
        return None


@dataclass(frozen=True)
class Cell:
    """A cell's routing (the same for every backend, SM cap, wait and round)."""

    routing: np.ndarray
    slots: np.ndarray
    counts: np.ndarray
    digest: str


@register
class MoeDispatch(Experiment):
    name = "moe-dispatch"
    summary = "MoE token dispatch: send and receive kernel times over posting backends"
    method = "the paper (arXiv 2611.12362) §II-B, §II-C, §III-A, Figs. 5-6"
    Params = MoeDispatchParams
    shapes = frozenset({Shape.DISPATCH})
    patterns = ("all-to-all", "pairs")  # pairs only with 2 ranks (the same QPs)
    fits = ("exposed",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The world size, once check_rank has seen it: the harness lays the landing region
        # out after check_rank, and the source region's share per lane depends on it.
        self._world = 2
        self._cells: dict[tuple[int, int, int], Cell] = {}

    # ---- what bring-up must provide --------------------------------------------------------
    @property
    def lanes_per_peer(self) -> int:
        return self.lanes_per_peer_at(self._world)

    def lanes_per_peer_at(self, world_size: int) -> int:
        # one QP per local expert of the peer
        return max(1, self.params.experts // max(1, world_size))

    @property
    def transport(self) -> str:
        return "rc"

    @property
    def slot_bytes(self) -> int:
        return 2 * self.params.hidden

    @property
    def counter_offset(self) -> int:
        """The count word's offset in a landing slice: after T_max slots."""
        return self.params.max_tokens * self.slot_bytes

    @property
    def slice_bytes(self) -> int:
        return self.counter_offset + COUNT_WORD_BYTES

    def _source_need(self, world: int) -> int:
        """Bytes of the source region: tokens and staging (T_max slots each), then the self
        area (one landing slice per local expert)."""
        return 2 * self.counter_offset + self.lanes_per_peer_at(world) * self.slice_bytes

    @property
    def max_message(self) -> int:
        # A lane slice holds T_max slots and the count word; the source region (lanes x lane
        # slices) must also hold the tokens, the staging copy and the self area, so each lane
        # slice carries its share of those.
        lanes = self.lanes_per_peer_at(self._world)
        share = -(-self._source_need(self._world) // lanes)
        # Whole tokens (and whole count words): a lane slice is then a whole number of slots
        # apart from the next, which gpi-mc's fan-out descriptors count in slots of the stride.
        unit = math.lcm(COUNT_WORD_BYTES, self.slot_bytes)
        return -(-max(share, self.slice_bytes) // unit) * unit

    def uses_gpi_queues(self) -> bool:
        return any(b in GPI_BACKENDS for b in self.params.backend)

    # ---- checks ----------------------------------------------------------------------------
    def check(self) -> None:
        p = self.params
        provider = providers.get(self.cfg.provider)
        provider_params = build(provider.Params, self.cfg.knobs, provider.name)
        reasons = self.submitter.dispatch_backends(
            self.submitter_params, self.cfg.provider, provider_params
        )
        for b in p.backend:
            why = reasons.get(b, f"submitter {self.submitter.name} does not know backend {b}")
            if why is not None:
                raise UnsupportedError(f"moe-dispatch backend (--backend) {b}: {why}")

    def check_rank(self, t: Traffic) -> None:
        p = self.params
        if p.experts % t.size:
            raise ConfigError(
                EXPERTS.label("experts"),
                p.experts,
                f"a multiple of the {t.size} ranks (each rank owns experts/ranks experts)",
            )
        if t.pattern == "pairs" and t.size != 2:
            raise ConfigError(
                "pattern (--pattern)",
                t.pattern,
                f"all-to-all for moe-dispatch with {t.size} ranks (pairs only with 2)",
            )
        sms = gpu_sm_count()
        if sms is not None and max(p.sm_cap_grid) > sms:
            raise ConfigError(
                SM_CAP.label("sm_cap"),
                list_text(p.sm_cap),
                f"at most the GPU's {sms} SMs ({max(p.sm_cap_grid)} is more)",
            )
        self._world = t.size

    # ---- the sweep -------------------------------------------------------------------------
    def points(self) -> list[dict[str, Any]]:
        p = self.params
        seed = self.cfg.seed
        out = []
        for r in range(p.rounds):
            order = np.random.default_rng(seed + r).permutation(len(p.backend))
            for b in (p.backend[i] for i in order):
                for tokens in p.token_grid:
                    for topk in p.topk_grid:
                        for cap in p.sm_cap_grid:
                            for wait in p.wait_grid:
                                out.append({
                                    "experiment": self.name,
                                    "round": r,
                                    "backend": b,
                                    "tokens": tokens,
                                    "topk": topk,
                                    "hidden": p.hidden,
                                    "experts": p.experts,
                                    "sm_cap": cap,
                                    "wait_us": wait,
                                    "iters": p.iters,
                                    "warmup": p.warmup,
                                    "seed": seed,
                                })  # fmt: skip
        return out

    def cell(self, world: int, tokens: int, topk: int) -> Cell:
        """The routing of (tokens, top-k) in a world of `world` ranks, drawn once."""
        key = (world, tokens, topk)
        if key not in self._cells:
            e = self.params.experts
            routing = rt.draw_routing(self.cfg.seed, world, tokens, topk, e)
            self._cells[key] = Cell(
                routing, rt.slots_of(routing, e), rt.counts_of(routing, e),
                rt.routing_digest(routing),
            )  # fmt: skip
        return self._cells[key]

    def dispatch_plan(self, world: int, point: dict[str, Any]) -> DispatchPlan:
        c = self.cell(world, point["tokens"], point["topk"])
        return DispatchPlan(
            backend=point["backend"],
            tokens=point["tokens"],
            hidden=point["hidden"],
            topk=point["topk"],
            experts=point["experts"],
            sm_cap=point["sm_cap"],
            wait_us=point["wait_us"],
            iters=point["iters"],
            warmup=point["warmup"],
            routing=c.routing,
            slots=c.slots,
            counts=c.counts,
        )

    def work(self, ctx: RankContext, plan: DispatchPlan) -> DispatchWork:
        """This rank's DispatchWork. The source region holds the tokens at [0, T*2H), the
        staging copy at [T*2H, 2*T*2H) and, from 2*T_max*2H, the self area (one landing slice
        per local expert); one lane per (peer, local expert), reading the staging copy and
        writing the peer's slice for (this rank, that expert); this rank's landing slice per
        (source, local expert); every slice's count word after its T_max slots."""
        world, rank = ctx.topo.size, ctx.topo.rank
        el = self.lanes_per_peer_at(world)
        src = ctx.res.src
        assert src is not None
        need = self._source_need(world)
        if need > src.length:
            raise ConfigError(
                "landing_bytes (--landing-bytes)",
                ctx.cfg.landing_bytes,
                f"enough for a {need}-byte source region (tokens, staging and {el} local "
                f"experts' slices; it has {src.length})",
            )
        tb = plan.tokens * self.slot_bytes
        tokens_src = Buffer.local(src, 0, tb)
        staging = Buffer.local(src, tb, tb)
        self_at = 2 * self.counter_offset
        self_recv = tuple(
            Buffer.local(src, self_at + e * self.slice_bytes, self.slice_bytes) for e in range(el)
        )
        peers = [r for r in range(world) if r != rank]
        lanes = {
            d: tuple(dataclasses.replace(lane, src=staging) for lane in ctx.lanes_to(d, "rc", el))
            for d in peers
        }
        recv = {s: tuple(ctx.landing_from(s, e) for e in range(el)) for s in peers}
        return DispatchWork(
            plan=plan,
            rank=rank,
            world=world,
            tokens_src=tokens_src,
            staging=staging,
            lanes=lanes,
            recv=recv,
            slot_bytes=self.slot_bytes,
            counter_offset=self.counter_offset,
            self_recv=self_recv,
            expert_major=None,
            barrier=ctx.comm.Barrier if world > 1 else None,
        )

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        world, rank = ctx.topo.size, ctx.topo.rank
        plan = self.dispatch_plan(world, point)
        work = self.work(ctx, plan)
        src = ctx.res.src
        assert src is not None
        view = host_view(src.addr, src.length)
        tb = plan.tokens * self.slot_bytes
        # The harness filled the source region with the rank's pattern: the self area's count
        # words must start at zero, and staging is cleared so a read before the copy shows.
        view[tb : 2 * tb] = 0
        self_at = 2 * self.counter_offset
        view[self_at : self_at + len(work.self_recv) * self.slice_bytes] = 0
        mine = view[:tb].reshape(plan.tokens, self.slot_bytes).copy()
        # Every source's tokens, for the checks after the point: gathered before it, so no
        # collective follows a loop that may fail on one rank only.
        tokens = dict(enumerate(ctx.comm.allgather(mine)))
        res = ctx.submitter.dispatch(work)
        try:
            rt.check_counts(res.received, plan.counts, rank, world)
            checked = rt.check_expert_major(
                res.expert_major, plan.routing, rank, world, plan.experts, tokens
            )
            combine_err = rt.combine_check(
                res.expert_major, plan.routing, rank, world, plan.experts, tokens
            )
        except rt.DispatchCheckError as e:
            raise ValidationError(
                f"moe-dispatch {plan.backend} tokens={plan.tokens} topk={plan.topk} "
                f"sm_cap={plan.sm_cap}: {e}"
            ) from e
        send = np.asarray(res.send_ns, dtype=np.int64)
        recv = np.asarray(res.recv_ns, dtype=np.int64)
        wait = np.asarray(res.wait_ns, dtype=np.int64)
        gt = np.asarray(res.send_gt_ns, dtype=np.int64)
        results: dict[str, Any] = {
            "received_tokens": int(np.asarray(res.received).sum()),
            "routing_digest": self.cell(world, plan.tokens, plan.topk).digest,
            "wait_actual_us": float(wait.mean()) / 1e3 if wait.size else 0.0,
            "send_gt_mean_us": float(gt.mean()) / 1e3 if gt.size else float("nan"),
            "expert_major_bytes": checked,
            "combine_max_abs_err": combine_err,
        }
        for k, v in res.details.items():  # the submitter's scalars (doorbells, calibration)
            if isinstance(v, bool | int | float | str):
                results[f"dispatch_{k}"] = v
        return PointResult(
            samples={"send_ns": send, "recv_ns": recv, "exposed_ns": send + recv,
                     "wait_ns": wait},
            results=results,
            role="both",  # every rank sends and receives (also with --pattern pairs)
        )  # fmt: skip

    def expected_landing(
        self,
        ctx: RankContext,
        point: dict[str, Any],
        source: int,
        source_bytes: np.ndarray,
        layout: Layout,
    ) -> list[tuple[int, np.ndarray]]:
        """Slice (source, local expert e) holds, in slots 0..count-1, the source's tokens to e
        in token order; its count word is back to zero (the receiver resets it)."""
        world, rank = ctx.topo.size, ctx.topo.rank
        if source == rank:
            return []
        c = self.cell(world, point["tokens"], point["topk"])
        el = self.lanes_per_peer_at(world)
        width = self.slot_bytes
        src_tokens = source_bytes[: point["tokens"] * width].reshape(point["tokens"], width)
        pieces = []
        for e in range(el):
            base = e * layout.lane_bytes
            sent = rt.tokens_to(c.routing, source, rank * el + e)
            if sent.size:
                pieces.append((base, src_tokens[sent].ravel()))
            pieces.append((base + self.counter_offset, np.zeros(COUNT_WORD_BYTES, np.uint8)))
        return pieces

    def columns(self) -> list[Column]:
        return [
            Column("round", "round", "{:d}", 5),
            Column("backend", "backend", "{}", 9),
            Column("tokens", "tokens", "{:d}", 6),
            Column("topk", "topk", "{:d}", 4),
            Column("sm_cap", "sm_cap", "{:d}", 6),
            Column("wait(µs)", "wait_us", "{:g}", 8),
            Column("metric", "metric", "{}", 10),
            Column("mean(µs)", "mean_us"),
            Column("slowest mean(µs)", "slowest_mean_us"),
        ]
