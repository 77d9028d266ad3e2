"""active-connections: message rate against the set of active connections (the paper, arXiv
2610.01380, §4.3.3, Fig. 10, Appendix D.3 Tables 15-16).

Per NIC a pool of connections is brought up once (RC QPs per peer, or a DCI pool addressing
1-8 DC targets per rank); each point selects the first `connections` of them as the active set
and every submitting unit cycles its share: `--writes-per-visit` writes on one connection, then
the next (1: a new connection every write; 8,192: long reuse). The rate is over the timed visits
with the final drain inside. Roles (`--role`, each on its traffic pattern):

- send-only (`--pattern pairs`): rank 2i sends to rank 2i+1 over all of its active set;
- receive-only (`--pattern fan-in`): `--senders` ranks share the active set into rank 0's NIC,
  whose rate is the aggregate over their common duration (the senders start together; the
  analysis divides their messages by the slowest one's time);
- send-receive (`--pattern all-to-all`): every rank sends to and receives from every other,
  connection c towards peer c mod P.

The x axis (`connections`) counts active connections per NIC per direction: QPs, or DCI-peer
pairs with --transport dc (connection c is DCI c div P to peer c mod P, so each DCI changes
destination after each burst of W writes). Every pass runs the two-connection control first
(`control`: 2 connections per NIC, to two peers where the role has them), each point is
normalised to the control of its own pass, and the grid is repeated `--passes` times so the
analysis reports the median over passes with their range. Each rank runs --threads submitting
units (one per QP where it drives fewer QPs); unit u owns QPs u, u+U, ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import ConfigError
from ..knobs import KIND_STR, Knob, parse_int
from ..mlx5 import write_wqebbs
from ..patterns import ROOT, Traffic, traffic
from ..submit.base import Buffer, CycleWork, DcAddress, Lane, Shape
from ..submit.work import cycle_lane_writes
from .common import (
    BATCH,
    PAYLOAD,
    THREADS,
    TRANSPORT,
    SizeSweep,
    field,
    rate_results,
)
from .msg_rate import MESSAGES, WINDOWS
from .registry import Column, Experiment, PointResult, register

if TYPE_CHECKING:
    from .context import Layout, RankContext

ROLES = ("send-only", "receive-only", "send-receive")
ROLE_PATTERN = {"send-only": "pairs", "receive-only": "fan-in", "send-receive": "all-to-all"}
PATTERN_ROLE = {p: r for r, p in ROLE_PATTERN.items()}
MAX_CONNECTIONS = 1 << 20  # per NIC; a provider refuses what it cannot bring up
MAX_WRITES_PER_VISIT = 1 << 20
CONTROL = 2  # connections of the control each pass runs, per sending rank

ROLE = Knob(
    "--role",
    "who sends: send-only (--pattern pairs), receive-only (--pattern fan-in) or send-receive "
    "(--pattern all-to-all); default: the role of --pattern",
    KIND_STR,
    choices=ROLES,
)
ACTIVE = Knob(
    "--active",
    "active connections per NIC per direction to sweep (RC QPs, or DCI-peer pairs with "
    "--transport dc), e.g. 64,256,1024",
    KIND_STR,
    many=True,
)
POOL = Knob(
    "--pool",
    "connections brought up per NIC, from which the active sets are taken (default: the "
    "largest --active)",
    lo=1,
    hi=MAX_CONNECTIONS,
)
WRITES_PER_VISIT = Knob(
    "--writes-per-visit",
    "writes a unit posts on a connection before moving to the next (1: a new connection every "
    "write; 8192: long reuse; with DC, the writes per destination burst)",
    lo=1,
    hi=MAX_WRITES_PER_VISIT,
)
LAPS = Knob("--laps", "timed cycles of its connections each unit makes, at least", lo=1,
            hi=1 << 20)
WARMUP_LAPS = Knob("--warmup-laps", "untimed cycles of its connections each unit makes first",
                   lo=0, hi=1 << 20)
PASSES = Knob("--passes", "repetitions of the whole grid, control included (the analysis "
              "reports the median over passes and their range)", lo=1, hi=1000)
SENDERS = Knob("--senders", "receive-only: ranks 1..N that send to rank 0 (default: every other "
               "rank)", lo=1, hi=4095)


@dataclass(frozen=True)
class ActiveConnectionsParams(SizeSweep):
    role: str | None = field(ROLE, None)
    active: tuple[str, ...] = field(ACTIVE, ("16", "64", "256", "1024"))
    pool: int | None = field(POOL, None)
    writes_per_visit: int = field(WRITES_PER_VISIT, 32)
    batch: int = field(BATCH, 32)
    payload: str = field(PAYLOAD, "inline")
    transport: str = field(TRANSPORT, "rc")
    threads: int = field(THREADS, 1)
    messages: int = field(MESSAGES, 100_000)
    laps: int = field(LAPS, 1)
    warmup_laps: int = field(WARMUP_LAPS, 1)
    passes: int = field(PASSES, 3)
    senders: int | None = field(SENDERS, None)

    @property
    def grid(self) -> tuple[int, ...]:
        label = ACTIVE.label("active")
        values = tuple(parse_int(v, label, "a comma-separated list of connection counts")
                       for v in self.active)
        bad = [v for v in values if not 1 <= v <= MAX_CONNECTIONS]
        if bad:
            raise ConfigError(label, ",".join(self.active),
                              f"connection counts in 1..{MAX_CONNECTIONS:,} ({bad[0]} is not)")
        return tuple(sorted(values))


@dataclass(frozen=True)
class Shares:
    """Who sends how many connections at one point, in a world of `world` ranks."""

    role: str
    world: int
    senders: tuple[int, ...]  # the ranks that send
    divisor: int  # what a rank's count is spread over: its peers (send-receive) or the senders

    def rank_connections(self, rank: int, connections: int) -> int:
        """Connections rank `rank` drives when the NIC's set is `connections`."""
        if rank not in self.senders:
            return 0
        if self.role != "receive-only":
            return connections
        i = self.senders.index(rank)
        return connections // len(self.senders) + (i < connections % len(self.senders))


def shares(role: str, world: int, senders: int | None) -> Shares:
    if role == "send-only":
        return Shares(role, world, tuple(r for r in range(0, world - 1, 2)), 1)
    if role == "receive-only":
        n = world - 1 if senders is None else senders
        return Shares(role, world, tuple(range(1, n + 1)), max(1, n))
    return Shares(role, world, tuple(range(world)), world - 1)


@register
class ActiveConnections(Experiment):
    name = "active-connections"
    summary = "message rate against active connections per NIC (send-only, receive-only, both)"
    method = "the paper (arXiv 2610.01380) §4.3.3, Fig. 10, Appendix D.3 (Tables 15-16)"
    Params = ActiveConnectionsParams
    shapes = frozenset({Shape.CYCLE})
    patterns = tuple(PATTERN_ROLE)
    fits = ("plateau",)  # per curve, on the median over passes of the normalised rate

    # ---- what the run needs ---------------------------------------------------------------
    @property
    def role(self) -> str:
        return self.params.role or PATTERN_ROLE[self.cfg.pattern]

    @property
    def pool(self) -> int:
        p = self.params
        return p.pool if p.pool is not None else max(*p.grid, CONTROL)

    @property
    def lanes_per_peer(self) -> int:
        return self.lanes_per_peer_at(2)

    def lanes_per_peer_at(self, world_size: int) -> int:
        # RC QPs towards each peer, or DCIs each reaching every peer once: both the active
        # count spread over the peers (or senders), rounded up.
        return max(1, math.ceil(self.pool / shares(self.role, world_size,
                                                   self.params.senders).divisor))

    def dci_pool(self, neighbours: int, world_size: int) -> int:
        return self.lanes_per_peer_at(world_size)  # every DCI visits every peer

    @property
    def transport(self) -> str:
        return self.params.transport

    # ---- checks ----------------------------------------------------------------------------
    def check(self) -> None:
        p = self.params
        p.check_sizes(p.payload)
        if p.role is not None and ROLE_PATTERN[p.role] != self.cfg.pattern:
            raise ConfigError(
                "role (--role)",
                p.role,
                f"the role of --pattern {self.cfg.pattern} ({PATTERN_ROLE[self.cfg.pattern]}), "
                f"or give --pattern {ROLE_PATTERN[p.role]} for {p.role}",
            )
        if p.senders is not None and self.role != "receive-only":
            raise ConfigError("senders (--senders)", p.senders, "only with --role receive-only "
                              "(--pattern fan-in)")
        grid = p.grid
        if p.pool is not None and max(grid) > p.pool:
            raise ConfigError(
                "active (--active)", ",".join(p.active),
                f"at most the pool of {p.pool} connections per NIC (--pool); "
                f"{max(grid)} is more",
            )
        if p.pool is not None and p.pool < CONTROL:
            raise ConfigError("pool (--pool)", p.pool, f">= {CONTROL} (each pass's control "
                              f"uses {CONTROL} connections)")
        chain = min(p.batch, p.writes_per_visit)
        bbs = write_wqebbs(p.payload == "inline", p.top, p.transport == "dc")
        if chain * bbs > self.cfg.sq_depth:
            raise ConfigError(
                "batch (--batch)", p.batch,
                f"<= {max(0, self.cfg.sq_depth // bbs)}: a chain of {chain} writes x {bbs} "
                f"WQEBBs each ({p.payload} {p.top} B, {p.transport}) exceeds the SQ "
                f"(--sq-depth {self.cfg.sq_depth} WQEBBs)",
            )

    def check_rank(self, t: Traffic) -> None:
        p = self.params
        sh = shares(self.role, t.size, p.senders)
        if self.role == "receive-only" and len(sh.senders) > t.size - 1:
            raise ConfigError(
                "senders (--senders)", p.senders,
                f"<= {t.size - 1} with {t.size} ranks (every rank but {ROOT} may send to it)",
            )
        if self.role == "send-only" and not sh.senders:
            raise ConfigError("ranks", t.size, ">= 2 for send-only (rank 2i sends to 2i+1)")

    # ---- the sweep -------------------------------------------------------------------------
    def points(self) -> list[dict[str, Any]]:
        p = self.params
        base = {
            "nic_role": self.role,  # "role" is the measuring role of an aggregated row
            "transport": p.transport,
            "payload": p.payload,
            "writes_per_visit": p.writes_per_visit,
            "batch": min(p.batch, p.writes_per_visit),
            "threads": p.threads,
            "pool": self.pool,
        }
        out = []
        for n in range(1, p.passes + 1):
            for size in p.sizes:
                # the control first: the reference of its own pass
                out += [{**base, "pass": n, "size": size, "control": x is None,
                         "connections": CONTROL if x is None else x}
                        for x in (None, *p.grid)]
        return out


    # ---- lanes: what each rank drives at a point ----------------------------------------------
    def _peers(self, t: Traffic) -> tuple[int, ...]:
        return tuple(t.sends_to)

    def _plan(self, t: Traffic, x: int) -> list[tuple[int, int, int]]:
        """(peer, slice, QP key) of each lane rank t.rank drives at x connections, in visit
        order: connection c goes to peer c mod P, in slice (and RC QP, or DCI) c div P."""
        sh = shares(self.role, t.size, self.params.senders)
        n = sh.rank_connections(t.rank, x)
        peers = self._peers(t)
        if not n or not peers:
            return []
        dc = self.params.transport == "dc"
        out = []
        for c in range(n):
            peer, k = peers[c % len(peers)], c // len(peers)
            out.append((peer, k, k if dc else c))
        return out  # with DC, DCI-major: a DCI's destinations one after another

    def _schedule(self, world: int, x: int) -> tuple[int, int, int]:
        """(units, timed visits, warm-up visits) of every sending rank at x connections: the
        same on all of them, so their windows line up (each unit records the same number) and
        the senders of receive-only run for a common duration. Units: --threads, fewer when a
        sender drives fewer QPs (each unit owns its QPs); visits: enough for --messages and for
        --laps of the longest unit's connections."""
        p = self.params
        sh = shares(self.role, world, p.senders)
        counts = {sh.rank_connections(r, x) for r in sh.senders} - {0}
        if not counts:
            return 1, 1, 0
        peers = world - 1 if self.role == "send-receive" else 1
        dc = p.transport == "dc"

        def qps(n: int) -> int:
            return -(-n // peers) if dc else n

        units = max(1, min(p.threads, *(qps(n) for n in counts)))

        def longest(n: int) -> int:  # the most connections one unit visits
            if not dc:
                return -(-n // units)
            per_dci = [min(peers, n - k * peers) for k in range(qps(n))]
            return max(sum(per_dci[u::units]) for u in range(units))

        most = max(longest(n) for n in counts)
        timed = max(-(-p.messages // p.writes_per_visit), p.laps * most)
        return units, timed, p.warmup_laps * most

    def _lanes(self, ctx: RankContext, plan: list[tuple[int, int, int]]) -> tuple[Lane, ...]:
        res, layout, step = ctx.res, ctx.layout, ctx.layout.lane_bytes
        assert res.src is not None
        lanes = []
        # where this rank's region starts in each peer's landing buffer
        at = {}
        for peer in {e[0] for e in plan}:
            theirs = traffic(ctx.traffic.pattern, peer, ctx.topo.size)
            remote = res.peer_landing[peer]
            at[peer] = (remote.addr + layout.region_offset(theirs, ctx.topo.rank), remote.rkey)
        src_all = Buffer.local(res.src)
        for peer, k, q in plan:
            base, rkey = at[peer]
            src = src_all.slice(k * step, step)
            dst = Buffer(base + k * step, rkey, step)
            if self.params.transport == "dc":
                dcts = res.peer_dcts[peer]
                d = dcts[q % len(dcts)]
                dc = DcAddress(d["dctn"], d["dc_key"], d["lid"])
                lanes.append(Lane(res.dcis[q], peer, src, dst, dc))
            else:
                lanes.append(Lane(res.rc[peer][k], peer, src, dst))
        return tuple(lanes)

    def run_point(self, ctx: RankContext, point: dict[str, Any]) -> PointResult:
        t = ctx.traffic
        x = int(point["connections"])
        plan = self._plan(t, x)
        if not plan:
            sh = shares(self.role, t.size, self.params.senders)
            idle = t.rank not in sh.senders and not t.receives_from
            return PointResult(role="idle" if idle else "receiver")
        keys = [q for _, _, q in plan]
        units, timed, warmup = self._schedule(t.size, x)
        res = ctx.submitter.cycle(
            CycleWork(
                lanes=self._lanes(ctx, plan),
                units=units,
                writes_per_visit=point["writes_per_visit"],
                batch=point["batch"],
                size=point["size"],
                inline=point["payload"] == "inline",
                visits=timed,
                warmup_visits=warmup,
                window=max(1, timed * point["writes_per_visit"] // WINDOWS),
            )
        )
        results = rate_results(res, point["size"], len({peer for peer, _, _ in plan}))
        results.update(rank_connections=len(plan), qps_driven=len(set(keys)), units=units)
        return PointResult(samples={"window_ns": res.windows_ns}, results=results, role=t.role)

    def expected_landing(
        self,
        ctx: RankContext,
        point: dict[str, Any],
        source: int,
        source_bytes: np.ndarray,
        layout: Layout,
    ) -> list[tuple[int, np.ndarray]]:
        """Each of the source's lanes towards this rank wrote slot k mod slots of its slice for
        its k-th write: the first min(writes, slots) slots hold the source's bytes."""
        if source not in ctx.traffic.receives_from:
            return []
        theirs = traffic(ctx.traffic.pattern, source, ctx.topo.size)
        x = int(point["connections"])
        plan = self._plan(theirs, x)
        if not plan:
            return []
        units, timed, warmup = self._schedule(ctx.topo.size, x)
        counts = cycle_lane_writes([q for _, _, q in plan], units, point["writes_per_visit"],
                                   timed + warmup)
        size = point["size"]
        slots = max(1, layout.lane_bytes // size)
        pieces = []
        for (peer, k, _), writes in zip(plan, counts, strict=True):
            if peer != ctx.topo.rank or not writes:
                continue
            start = k * layout.lane_bytes
            n = min(slots, writes) * size
            pieces.append((start, source_bytes[start : start + n]))
        return pieces

    def columns(self) -> list[Column]:
        return [
            Column("pass", "pass", "{:d}", 5),
            Column("size(B)", "size", "{:d}", 8),
            Column("connections", "connections", "{:d}", 11),
            Column("M msg/s (sum)", "msg_rate_mps"),
            Column("M msg/s per rank (median)", "msg_rate_mps_per_rank"),
            Column("GB/s (sum)", "gbps", "{:.3f}"),
            Column("window p50(µs)", "window_p50_us"),
        ]
