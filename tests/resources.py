"""Test resources as classes, after rdma-core's pyverbs tests (BaseResources -> TrafficResources,
a vendor layer subclassing them): every step is a small factory method, a test file overrides
only the one that differs, and a world closes everything however its test ends.

`EmuRanks`: N emu ranks of one job in this process, peered (and sealed unless `seal=False`).
`Traffic`: on top of them, between rank 0 and rank 1, RC QP pairs (each QP its own CQ), DCIs
on rank 0 aimed at one DCT of rank 1, a source and a landing MR on each rank that sends or
receives (sources filled with a seeded pattern), and the `Lane`s the submitters take. Steps:
create_cq, create_qp, connect, create_dci, create_dct, create_mrs, fill, make_lanes,
make_dc_lanes.
`factory`: for a fixture, worlds made when the test asks (with what it asks), all closed at its
end.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, TypeVar

import numpy as np

from gicbench.fabric.base import (
    Access,
    CompletionQueue,
    DcTarget,
    MemoryRegion,
    QueuePair,
    host_view,
)
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.base import Buffer, DcAddress, Lane

DC_KEY = 0xC0FFEE
SRC_ACCESS = Access.LOCAL_WRITE
LANDING_ACCESS = Access.LOCAL_WRITE | Access.REMOTE_WRITE

W = TypeVar("W", bound="EmuRanks")


class EmuRanks:
    """`ranks` emu ranks of one job (`prefix`-<random>) in this process, each an EmuFabric with
    these settings (`fabric_kw`: max_qps, engine_ctas, queues, ... as EmuFabric takes them),
    peered with each other's local_info() and, with `seal`, sealed. A context manager; or
    start() and close() by hand. create_resources() is the hook a subclass fills."""

    def __init__(
        self,
        ranks: int = 2,
        *,
        progress: str = "inline",
        segment_bytes: int = 16 << 20,
        seal: bool = True,
        engine: str = "cpu",
        prefix: str = "t",
        **fabric_kw: Any,
    ) -> None:
        self.ranks, self.progress, self.segment_bytes = ranks, progress, segment_bytes
        self.seal, self.engine, self.prefix, self.fabric_kw = seal, engine, prefix, fabric_kw
        self.job = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.fabrics: list[EmuFabric] = []
        self._cleanup = ExitStack()
        self._closed = False

    # ---- lifetime -------------------------------------------------------------------------------
    def start(self: W) -> W:
        """Open, peer and seal the ranks, then create_resources(); whatever fails on the way
        closes what was made before it is raised."""
        try:
            for r in range(self.ranks):
                self.fabrics.append(self.create_fabric(r))
            self.peer()
            if self.seal:
                for f in self.fabrics:  # everyone attached: the "barrier" has passed
                    f.seal()
            self.create_resources()
        except BaseException:
            self.close()
            raise
        return self

    def __enter__(self: W) -> W:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def on_close(self, fn: Callable[[], object]) -> None:
        """Run `fn` at close, before any rank closes (last registered, first run)."""
        self._cleanup.callback(fn)

    def close(self) -> None:
        """The on_close callbacks, then every CUDA engine stopped before any rank closes (one
        process, several ranks: no engine kernel may spin while another unmaps), then every
        rank closed, the highest first (rank 0, whose memory the GPU tests register with CUDA,
        last, as the worlds these classes replaced did), each even when another's stop or
        close raised."""
        if self._closed:
            return
        self._closed = True
        try:
            self._cleanup.close()
        finally:
            with ExitStack() as closing:
                for f in self.fabrics:  # callbacks run last first: the highest rank first
                    closing.callback(f.close)
                for f in self.fabrics:
                    f.stop_engine()

    # ---- factory methods ------------------------------------------------------------------------
    def create_fabric(self, rank: int) -> EmuFabric:
        return EmuFabric(
            rank,
            self.ranks,
            self.job,
            progress=self.progress,  # type: ignore[arg-type]
            segment_bytes=self.segment_bytes,
            engine=self.engine,
            **self.fabric_kw,
        )

    def peer(self) -> None:
        infos = [f.local_info() for f in self.fabrics]
        for f in self.fabrics:
            f.add_peers(infos)

    def create_resources(self) -> None:
        """What a subclass makes once the ranks are peered (nothing here)."""


class Traffic(EmuRanks):
    """Queues, memory and lanes between rank 0 and rank 1 (further ranks get none).

    qps: RC QP pairs (pair i: [rank 0's QP, rank 1's QP]), each QP with its own CQ; SQs and CQs
        of `depth` entries; `connect`: every pair in RTS (False: left in RESET).
    dcis: DCIs on rank 0 (RTS) aimed at one DCT of rank 1 with `dc_key`; `dct` forces the DCT
        with or without DCIs (default: when there are DCIs).
    both_ways: a source and a landing MR on each rank, lanes from either side; otherwise rank
        0's source and rank 1's landing. Sources in `src_domain`, landings in `landing_domain`
        ("host-mapped": what register_cuda() maps into the GPU).
    slice_bytes: lane i reads and writes its own slice i of the MRs (MRs of slice_bytes x the
        lanes); None: every lane the whole MRs of `mr_bytes`.
    seed: the sources filled from numpy's default_rng(seed), rank 0's first (one seed per rank
        when a sequence); None leaves them zero.
    """

    def __init__(
        self,
        qps: int = 4,
        depth: int = 64,
        *,
        dcis: int = 0,
        dct: bool | None = None,
        dc_key: int = DC_KEY,
        connect: bool = True,
        both_ways: bool = True,
        mr_bytes: int | None = None,
        slice_bytes: int | None = None,
        src_domain: str | None = None,
        landing_domain: str | None = None,
        seed: int | Sequence[int] | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.nqps, self.depth, self.ndcis, self.dc_key = qps, depth, dcis, dc_key
        self.want_dct = dcis > 0 if dct is None else dct
        self.connect_rc, self.both_ways = connect, both_ways
        self.slice_bytes, self.seed = slice_bytes, seed
        self.src_domain, self.landing_domain = src_domain, landing_domain
        if mr_bytes is None:
            mr_bytes = 4096 if slice_bytes is None else slice_bytes * max(qps, dcis, 1)
        self.mr_bytes = mr_bytes
        self.rc: list[list[QueuePair]] = []
        self.dcis: list[QueuePair] = []
        self.dct: DcTarget | None = None
        self.dc_address: DcAddress | None = None
        self.bufs: list[tuple[MemoryRegion | None, MemoryRegion | None]] = []
        self._lanes: dict[int, tuple[Lane, ...]] = {}
        self._dc_lanes: tuple[Lane, ...] = ()

    def create_resources(self) -> None:
        for _ in range(self.nqps):
            pair = [self.create_qp(r, self.create_cq(r)) for r in (0, 1)]
            if self.connect_rc:
                self.connect(pair)
            self.rc.append(pair)
        self.dcis = [self.create_dci() for _ in range(self.ndcis)]
        if self.want_dct:
            self.dct = self.create_dct()
            self.dc_address = DcAddress(self.dct.dctn, self.dct.dc_key, self.dct.lid)
        self.bufs = self.create_mrs()
        self.fill()
        self._lanes = {side: self.make_lanes(side) for side in self.sides()}
        self._dc_lanes = self.make_dc_lanes()

    # ---- factory methods ------------------------------------------------------------------------
    def create_cq(self, rank: int) -> CompletionQueue:
        return self.fabrics[rank].create_cq(self.depth)

    def create_qp(self, rank: int, cq: CompletionQueue, dci: bool = False) -> QueuePair:
        return self.fabrics[rank].create_qp(cq, self.depth, dci=dci)

    def connect(self, pair: list[QueuePair]) -> None:
        """An RC pair to RTS, each QP aimed at the other."""
        f0, f1 = self.fabrics[:2]
        f0.connect(pair[0], f1.endpoint(pair[1]))
        f1.connect(pair[1], f0.endpoint(pair[0]))

    def create_dci(self) -> QueuePair:
        q = self.create_qp(0, self.create_cq(0), dci=True)
        self.fabrics[0].connect(q, {})  # a DCI has no fixed remote: straight to RTS
        return q

    def create_dct(self) -> DcTarget:
        return self.fabrics[1].create_dct(self.create_cq(1), self.dc_key)

    def sides(self) -> tuple[int, ...]:
        """The ranks that send (and so have a source MR and lanes)."""
        return (0, 1) if self.both_ways else (0,)

    def register(self, rank: int, access: Access, domain: str | None) -> MemoryRegion:
        return self.fabrics[rank].register(self.mr_bytes, access, domain=domain)

    def create_mrs(self) -> list[tuple[MemoryRegion | None, MemoryRegion | None]]:
        """Per rank (source, landing), rank 0's first; None where a rank has no such MR."""
        bufs = []
        for r in (0, 1):
            sends, lands = r in self.sides(), r == 1 or self.both_ways
            src = self.register(r, SRC_ACCESS, self.src_domain) if sends else None
            land = self.register(r, LANDING_ACCESS, self.landing_domain) if lands else None
            bufs.append((src, land))
        return bufs

    def fill(self) -> None:
        """Each source MR (all of it) from the seeded generator; nothing without a seed."""
        if self.seed is None:
            return
        if isinstance(self.seed, Sequence):
            rngs = [np.random.default_rng(s) for s in self.seed]
        else:  # one generator: rank 0's source draws first
            rngs = [np.random.default_rng(self.seed)] * len(self.bufs)
        for (src, _), rng in zip(self.bufs, rngs, strict=False):
            if src is not None:
                host_view(src.addr, src.length)[:] = rng.integers(0, 256, src.length, np.uint8)

    def lane(
        self, qp: QueuePair, side: int = 0, index: int = 0, dc: DcAddress | None = None
    ) -> Lane:
        """`side`'s lane over `qp`: its source towards the peer's landing, the whole MRs or,
        with slice_bytes, slice `index` of each."""
        src, dst = self.src_mr(side), self.landing_mr(1 - side)
        whole = lane_of(qp, src, dst, 1 - side, dc)
        if self.slice_bytes is None:
            return whole
        n = self.slice_bytes
        return Lane(qp, 1 - side, whole.src.slice(index * n, n), whole.dst.slice(index * n, n), dc)

    def make_lanes(self, side: int) -> tuple[Lane, ...]:
        return tuple(self.lane(pair[side], side, i) for i, pair in enumerate(self.rc))

    def make_dc_lanes(self) -> tuple[Lane, ...]:
        """Rank 0's DCI lanes, each with the DCT's address vector (none without a DCT)."""
        if self.dc_address is None:
            return ()
        return tuple(self.lane(q, 0, i, self.dc_address) for i, q in enumerate(self.dcis))

    # ---- what tests take ------------------------------------------------------------------------
    def lanes(self, n: int | None = None, side: int = 0) -> tuple[Lane, ...]:
        """The first `n` (default all) RC lanes from `side`."""
        if side not in self._lanes:
            raise ValueError(f"rank {side} sends nothing in this world (both_ways=False)")
        return self._lanes[side][:n]

    def dc_lanes(self, n: int | None = None) -> tuple[Lane, ...]:
        return self._dc_lanes[:n]

    def src_mr(self, rank: int = 0) -> MemoryRegion:
        mr = self.bufs[rank][0]
        if mr is None:
            raise ValueError(f"rank {rank} has no source MR in this world (both_ways=False)")
        return mr

    def landing_mr(self, rank: int = 1) -> MemoryRegion:
        mr = self.bufs[rank][1]
        if mr is None:
            raise ValueError(f"rank {rank} has no landing MR in this world (both_ways=False)")
        return mr

    def src(self, rank: int = 0) -> np.ndarray:
        mr = self.src_mr(rank)
        return host_view(mr.addr, mr.length)

    def landing(self, rank: int = 1) -> np.ndarray:
        mr = self.landing_mr(rank)
        return host_view(mr.addr, mr.length)

    def one_way(self) -> tuple[tuple[Lane, ...], MemoryRegion, MemoryRegion]:
        """Rank 0's RC lanes, its source and rank 1's landing: what a one-way test checks."""
        return self.lanes(), self.src_mr(0), self.landing_mr(1)


def lane_of(
    qp: QueuePair, src: MemoryRegion, dst: Any, peer: int = 1, dc: DcAddress | None = None
) -> Lane:
    """A lane reading all of `src` and writing all of the peer's `dst` (an MR or a
    RemoteBuffer: addr, rkey, length)."""
    return Lane(qp, peer, Buffer.local(src), Buffer(dst.addr, dst.rkey, dst.length), dc)


@contextmanager
def factory(cls: Callable[..., W], **defaults: Any) -> Iterator[Callable[..., W]]:
    """For a fixture: `make(*args, **kw)` starts `cls(*args, **defaults, **kw)` (kw winning)
    when the test asks; every world made closes when the fixture ends, last made first."""
    with ExitStack() as stack:

        def make(*args: Any, **kw: Any) -> W:
            return stack.enter_context(cls(*args, **{**defaults, **kw}))

        yield make


def sliced(lanes: Sequence[Lane], n: int, region: int) -> tuple[Lane, ...]:
    """The first `n` lanes, lane i narrowed to its own `region` bytes (slice i) of its source
    and of its destination."""
    return tuple(
        Lane(ln.qp, ln.peer, ln.src.slice(i * region, region), ln.dst.slice(i * region, region),
             ln.dc)
        for i, ln in enumerate(lanes[:n])
    )  # fmt: skip


def bench_lanes(fs: Sequence[Any], n: int, rcq: Any) -> tuple[list, list, list]:
    """`n` RC QPs of rank 0 (each with its own 64-entry CQ) to rank 1 (receive CQ `rcq`), as the
    native bench_rate poster takes them: (sq tuples, cq tuples, the QPs)."""
    sqs, cqs, qps = [], [], []
    for _ in range(n):
        cq = fs[0].create_cq(64)
        qp = fs[0].create_qp(cq, 64)
        peer = fs[1].create_qp(rcq, 4)
        fs[0].connect(qp, fs[1].endpoint(peer))
        fs[1].connect(peer, fs[0].endpoint(qp))
        sqs.append((qp.sq.buf, qp.sq.wqebb_cnt, qp.sq.dbrec, qp.sq.doorbell, qp.qpn))
        cqs.append((cq.buf, cq.ncqe, cq.dbrec))
        qps.append(qp)
    return sqs, cqs, qps


def assert_executed_once(f: Any, before: dict[str, int], posted: int, total: int,
                         batch: int) -> None:  # fmt: skip
    """After a native poster's `total` WQEs on rank `f` (counters `before`): all posted, each
    executed once, one CQE per doorbell batch, none stale, no errors."""
    after = f.counters()
    f.check()
    assert posted == total
    assert after["wqes"] - before["wqes"] == total
    assert after["cqes"] - before["cqes"] == total // batch
    assert after["stale_wqes"] == after["errors"] == after["bad_doorbells"] == 0
