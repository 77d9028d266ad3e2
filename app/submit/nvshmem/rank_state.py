"""NVSHMEM's device state for one rank of a gicbench run (what `--submitter nvshmem` installs).

The harness gives each rank RC QPs towards its peers (lane i to a peer rides QP i of that peer),
one source region and one landing region; the lanes carry NIC addresses. NVSHMEM addresses data
through a symmetric heap: lkey = lkeys[(src - heap_base) >> log2_chunk], raddr =
peer_heap_base_remote[pe] + (dst - heap_base), rkey = rkeys[chunk * npes + pe]. Here the heap is
the whole NIC address space in one chunk (heap_base 0, heap_size and the chunk 2**48, every
peer_heap_base_remote 0): raddr is then the lane's remote address unchanged, the one lkey is the
source region's and the rkey of PE p is p's landing region's. NVSHMEM's device code runs the same
lookups as over a real heap; only what the table holds differs (docs/nvshmem.md).

QP table ([QP slot][PE], NVSHMEM's `globalmem.rcs`): slot s of peer p is the harness's QP s to p.
A PE this rank has no QP to (a pattern that does not connect every pair) gets idle records: a
QP whose bookkeeping is all zero and whose CQ record points at it, so NVSHMEM's PE-wide quiet,
which walks every PE, finds nothing outstanding there (as on an idle real QP). This PE's own
entries stay zero (NVSHMEM skips them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError
from ...fabric.base import CompletionQueue, MemoryRegion, QueuePair
from . import layout
from .runtime import Bases, States

WHOLE_SPACE_LOG2 = 48  # the NIC address space as one chunk: every address below 2**48
IDLE_DEPTH = layout.MIN_QP_DEPTH  # what an idle record says its depth is (never posted to)


@dataclass(frozen=True)
class RankQueues:
    """One rank's QPs as NVSHMEM's table holds them: `slots[p]` its QPs to peer p, in the order
    lanes take them; `ibuf` a registered region of 2 * IBUF_SLOT bytes per QP (put-signal's
    atomic writes its old value into slot 0)."""

    mype: int
    npes: int
    slots: Mapping[int, Sequence[QueuePair]]
    ibuf: MemoryRegion | None  # None only without QPs

    def __post_init__(self) -> None:
        if not 0 <= self.mype < self.npes:
            raise ConfigError("mype", self.mype, f"0..{self.npes - 1}")
        for p, qps in self.slots.items():
            if not 0 <= p < self.npes or p == self.mype:
                raise ConfigError("peer", p, f"another PE of 0..{self.npes - 1}")
            if any(q.dci for q in qps):
                raise ConfigError("QP", "dci", "RC QPs only (NVSHMEM's RC table)")
        need = 2 * layout.IBUF_SLOT * self.count
        have = self.ibuf.length if self.ibuf is not None else 0
        if have < need:
            raise ConfigError("ibuf", have, f">= {need} bytes (an ibuf slot pair per QP)")

    @property
    def rc_per_pe(self) -> int:
        return max((len(q) for q in self.slots.values()), default=1) or 1

    @property
    def count(self) -> int:
        return sum(len(q) for q in self.slots.values())

    def ordered(self) -> list[tuple[int, int, QueuePair]]:
        """(peer, slot, QP) of every QP, peers ascending."""
        return [(p, s, q) for p in sorted(self.slots) for s, q in enumerate(self.slots[p])]


def whole_space_keys(src_lkey: int, rkey_of_pe: Sequence[int]) -> tuple[list, list]:
    """The lkey and rkey tables of the one-chunk heap: (lkey, end of the space as an address),
    and per PE (its rkey, end of the space as an offset)."""
    end = 1 << WHOLE_SPACE_LOG2
    return [(src_lkey, end)], [(k, end) for k in rkey_of_pe]


def rank_states(q: RankQueues, bases: Bases, *,
                sq_dev: Callable[[QueuePair], tuple[int, int, int]],
                cq_dev: Callable[[CompletionQueue], tuple[int, int]], src_lkey: int,
                rkey_of_pe: Sequence[int], requests_in_batch: int, nic_buf_on_gpumem: bool,
                heap_in_sysmem: bool) -> States:  # fmt: skip
    """Every record for rank q.mype: the QP and CQ arrays, both device states and the peer
    bases (all zero: the one-chunk heap). sq_dev(qp) -> GPU addresses of its SQ ring, doorbell
    record and doorbell register; cq_dev(cq) -> its ring's and record's."""
    if len(rkey_of_pe) != q.npes:
        raise ConfigError("rkey_of_pe", len(rkey_of_pe), f"{q.npes} entries (one per PE)")
    rc, npes = q.rc_per_pe, q.npes
    qps = np.zeros(rc * npes, layout.QP_DTYPE)
    cqs = np.zeros(rc * npes, layout.CQ_DTYPE)
    qsize, csize = layout.QP_DTYPE.itemsize, layout.CQ_DTYPE.itemsize
    index: dict[int, int] = {}
    for n, (pe, slot, qp) in enumerate(q.ordered()):
        assert q.ibuf is not None  # RankQueues checked it
        i = layout.rc_index(slot, pe, npes, rc)
        qp_addr, cq_addr = bases.rcs + i * qsize, bases.cqs + i * csize
        buf, dbrec, doorbell = sq_dev(qp)
        cbuf, cdbrec = cq_dev(qp.sq.cq)
        qps[i] = layout.qp_record(qpn=qp.qpn, wqe=buf, nwqes=qp.sq.wqebb_cnt, dbrec=dbrec + 4,
                                  bf=doorbell, cq_addr=cq_addr, qp_addr=qp_addr,
                                  ibuf=q.ibuf.addr + n * 2 * layout.IBUF_SLOT,
                                  ibuf_lkey=q.ibuf.lkey, ibuf_rkey=q.ibuf.rkey)  # fmt: skip
        cqs[i] = layout.cq_record(cqn=qp.sq.cq.cqn, ncqe=qp.sq.cq.ncqe, cqe=cbuf, dbrec=cdbrec,
                                  qpn=qp.qpn, qp_addr=qp_addr)  # fmt: skip
        index[qp.qpn] = i
    for pe in range(npes):
        for slot in range(rc):
            i = layout.rc_index(slot, pe, npes, rc)
            if pe == q.mype or slot < len(q.slots.get(pe, ())):
                continue
            qp_addr, cq_addr = bases.rcs + i * qsize, bases.cqs + i * csize
            qps[i] = layout.qp_record(qpn=0, wqe=0, nwqes=IDLE_DEPTH, dbrec=0, bf=0,
                                      cq_addr=cq_addr, qp_addr=qp_addr, ibuf=0, ibuf_lkey=0)
            cqs[i] = layout.cq_record(cqn=0, ncqe=IDLE_DEPTH, cqe=0, dbrec=0, qpn=0,
                                      qp_addr=qp_addr)  # fmt: skip
    lk, rk = whole_space_keys(src_lkey, rkey_of_pe)
    ibgda = layout.ibgda_state(rcs=bases.rcs, cqs=bases.cqs, qp_group_switches=bases.switches,
                               lkey_table=lk, rkey_table=rk, log2_chunk=WHOLE_SPACE_LOG2,
                               rc_per_pe=rc, requests_in_batch=requests_in_batch,
                               nic_buf_on_gpumem=nic_buf_on_gpumem,
                               rkeys_rest=bases.rkeys_rest)  # fmt: skip
    device = layout.device_state(mype=q.mype, npes=npes, heap_base=0,
                                 heap_size=1 << WHOLE_SPACE_LOG2, peer_heap_base_p2p=bases.p2p,
                                 peer_heap_base_remote=bases.remote,
                                 region_active_count=bases.region_count,
                                 heap_in_sysmem=heap_in_sysmem)  # fmt: skip
    return States(qps, cqs, ibgda, device, np.zeros(npes, np.uint64), bases, index)


def rkeys_rest(rkey_of_pe: Sequence[int]) -> np.ndarray:
    """The rkey entries past constant memory (PEs 64 and up), for the GPU array."""
    return layout.key_table(whole_space_keys(0, rkey_of_pe)[1])[1]
