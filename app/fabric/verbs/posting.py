"""The posting path of the verbs provider: post_send chains and poll_cq.

A generic verbs device has no mlx5 queues in memory, so submitters post here instead of writing
WQEs. One `Chain` per QP holds `depth` SendWR objects linked once, w0 -> w1 -> ... -> w(n-1); a
chain of k work requests is posted as the suffix w(n-k) .. w(n-1), so one post_send call (one
doorbell) carries k WRs without relinking anything. Each WR points at its own SGE, so filling a
WR is a few attribute stores and posting allocates nothing.

Completions: poll_cq() raises VerbsCompletionError for an error status, naming the rank, the QP,
the peer rank, the work request and the ibv_wc_status; a completion that does not arrive within
the timeout raises CompletionTimeout with the count still missing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ...errors import CompletionError, CompletionTimeout, ConfigError, FabricError
from ..base import CompletionQueue, MemoryRegion, QueuePair, RemoteBuffer
from .compat import enums
from .types import wc_status_name

TIME_CHECK_EVERY = 256  # polls between clock reads while waiting


class VerbsCompletionError(CompletionError):
    """An error completion: `status` is the ibv_wc_status (also in `syndrome`)."""

    def __init__(self, message: str, status: int, wr_id: int, qpn: int, rank: int,
                 peer: int | None) -> None:  # fmt: skip
        super().__init__(message, syndrome=status, wqe_counter=wr_id, qpn=qpn)
        self.status, self.wr_id, self.rank, self.peer = status, wr_id, rank, peer


@dataclass(frozen=True)
class Completion:
    wr_id: int
    opcode: int
    byte_len: int
    imm: int | None
    qpn: int


class Chain:
    """Prepared, pre-linked send WRs of one QP (see the module docstring)."""

    def __init__(self, pqp: Any, length: int) -> None:
        from pyverbs.wr import SGE, SendWR

        e = enums()
        self.pqp, self.length = pqp, length
        self.sges = [SGE(0, 0, 0) for _ in range(length)]
        self.wrs = [
            SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[s], send_flags=0) for s in self.sges
        ]
        for wr, sge in zip(self.wrs, self.sges, strict=True):
            wr.sg_list = sge  # the WR reads this SGE in place: fill the SGE, not the WR's copy
        for a, b in zip(self.wrs, self.wrs[1:], strict=False):
            a.next_wr = b

    def slot(self, k: int, i: int) -> tuple[Any, Any]:
        """(WR, SGE) of element i of a chain of k."""
        j = self.length - k + i
        return self.wrs[j], self.sges[j]

    def post(self, k: int) -> None:
        """Post the last k WRs in one post_send call."""
        self.pqp.post_send(self.wrs[self.length - k])


class Posting:
    """The posting path of one VerbsFabric (see the module docstring)."""

    def __init__(self, fabric: Any, chain: int = 64) -> None:
        if not isinstance(chain, int) or chain < 1:
            raise ConfigError("chain", chain, "an int >= 1 (WRs per post_send)")
        e = enums()
        self.f, self.rank, self.chain_len = fabric, fabric.rank, chain
        self.WRITE = int(e.IBV_WR_RDMA_WRITE)
        self.WRITE_IMM = int(e.IBV_WR_RDMA_WRITE_WITH_IMM)
        self.READ = int(e.IBV_WR_RDMA_READ)
        self.SIGNALED = int(e.IBV_SEND_SIGNALED)
        self.INLINE = int(e.IBV_SEND_INLINE)
        self.WC_RECV_IMM = int(e.IBV_WC_RECV_RDMA_WITH_IMM)
        self.WC_IMM = int(e.IBV_WC_WITH_IMM)
        self.WC_RECV = int(e.IBV_WC_RECV)  # receive opcodes have this bit (128)
        self._chains: dict[int, Chain] = {}
        self._recv: dict[int, Any] = {}

    # ---- objects --------------------------------------------------------------------------------
    def chain(self, qp: QueuePair) -> Chain:
        c = self._chains.get(qp.qpn)
        if c is None:
            n = min(self.chain_len, qp.sq.wqebb_cnt)
            c = self._chains[qp.qpn] = Chain(self.f.pv_qp(qp), n)
        return c

    def where(self, qp: QueuePair) -> str:
        peer = self.f.peer_of(qp)
        to = f" to rank {peer}" if peer is not None else ""
        return f"rank {self.rank}, QP 0x{qp.qpn:06x}{to}"

    def _post(self, qp: QueuePair, c: Chain, k: int) -> None:
        from pyverbs.pyverbs_error import PyverbsError

        try:
            c.post(k)
        except PyverbsError as err:
            self.f.sw["errors"] += 1
            raise FabricError(f"post_send of {k} WR(s) failed ({self.where(qp)}): {err}") from err
        sw = self.f.sw
        sw["doorbells"] += 1
        sw["wqes"] += k

    def fill(self, wr: Any, sge: Any, opcode: int, laddr: int, lkey: int, raddr: int, rkey: int,
             size: int, flags: int, imm: int | None, wr_id: int) -> None:  # fmt: skip
        sge.addr, sge.length, sge.lkey = laddr, size, lkey
        wr.set_wr_rdma(rkey, raddr)
        wr.opcode = opcode
        wr.send_flags = flags
        wr.wr_id = wr_id
        if imm is not None:
            wr.imm_data = imm

    # ---- posting --------------------------------------------------------------------------------
    def post_write(
        self,
        qp: QueuePair,
        local: MemoryRegion,
        remote: RemoteBuffer,
        size: int,
        signaled: bool = True,
        imm: int | None = None,
        *,
        local_offset: int = 0,
        remote_offset: int = 0,
        inline: bool = False,
        wr_id: int = 0,
    ) -> None:
        """One RDMA WRITE (WRITE_WITH_IMM when `imm` is given) of `size` bytes."""
        self.post_writes(
            qp, [(local, local_offset, remote, remote_offset, size, signaled, imm, wr_id)], inline
        )

    def post_writes(self, qp: QueuePair, ops: list[tuple], inline: bool = False) -> None:
        """A chain of writes in one post_send call. Each op: (local MR, local offset, remote
        buffer, remote offset, size, signaled, imm or None, wr_id)."""
        c = self.chain(qp)
        k = len(ops)
        if not 1 <= k <= c.length:
            raise ConfigError("chain length", k, f"1..{c.length} WRs for QP 0x{qp.qpn:06x}")
        for i, (local, loff, remote, roff, size, signaled, imm, wr_id) in enumerate(ops):
            self._check(qp, local, loff, remote, roff, size, inline)
            wr, sge = c.slot(k, i)
            flags = (self.SIGNALED if signaled else 0) | (self.INLINE if inline else 0)
            op = self.WRITE if imm is None else self.WRITE_IMM
            self.fill(wr, sge, op, local.addr + loff, local.lkey, remote.addr + roff, remote.rkey,
                      size, flags, imm, wr_id)  # fmt: skip
            self.f.sw["bytes"] += size
        self._post(qp, c, k)

    def post_read(
        self,
        qp: QueuePair,
        local: MemoryRegion,
        remote: RemoteBuffer,
        size: int,
        *,
        local_offset: int = 0,
        remote_offset: int = 0,
        wr_id: int = 0,
    ) -> None:
        """One signaled RDMA READ of `size` bytes from `remote` into `local`."""
        self._check(qp, local, local_offset, remote, remote_offset, size, False)
        c = self.chain(qp)
        wr, sge = c.slot(1, 0)
        laddr, raddr = local.addr + local_offset, remote.addr + remote_offset
        self.fill(
            wr,
            sge,
            self.READ,
            laddr,
            local.lkey,
            raddr,
            remote.rkey,
            size,
            self.SIGNALED,
            None,
            wr_id,
        )
        self.f.sw["bytes"] += size
        self._post(qp, c, 1)

    def _check(self, qp: QueuePair, local: MemoryRegion, loff: int, remote: RemoteBuffer,
               roff: int, size: int, inline: bool) -> None:  # fmt: skip
        if size < 1 or loff < 0 or loff + size > local.length:
            raise ConfigError("size/local_offset", (size, loff), f"within the {local.length} B MR")
        # The remote bound is the peer NIC's to enforce (a bad access is a remote access error);
        # only a negative offset is refused here.
        if roff < 0:
            raise ConfigError("remote_offset", roff, ">= 0")
        if inline and size > self.f.max_inline(qp):
            raise ConfigError(
                "payload (inline)", size, f"<= {self.f.max_inline(qp)} B on QP 0x{qp.qpn:06x}"
            )

    def post_recv(self, qp: QueuePair, n: int = 1) -> None:
        """Post `n` receives (WRITE_WITH_IMM consumes one each; the data goes to the write's
        target, the receive only carries the immediate)."""
        from pyverbs.pyverbs_error import PyverbsError
        from pyverbs.wr import SGE, RecvWR

        wr = self._recv.get(qp.qpn)
        if wr is None:
            s = self.f.scratch
            wr = self._recv[qp.qpn] = RecvWR(wr_id=0, num_sge=1, sg=[SGE(s.addr, 8, s.lkey)])
        pqp = self.f.pv_qp(qp)
        try:
            for _ in range(n):
                pqp.post_recv(wr)
        except PyverbsError as err:
            raise FabricError(f"post_recv failed ({self.where(qp)}): {err}") from err
        self.f.sw["recvs"] += n

    # ---- completions ----------------------------------------------------------------------------
    def raise_wc(self, qp: QueuePair | None, wc: Any) -> None:
        status = int(wc.status)
        qpn = int(wc.qp_num)
        peer = self.f._peer_of.get(qpn)
        to = f" to rank {peer}" if peer is not None else ""
        self.f.sw["errors"] += 1
        raise VerbsCompletionError(
            f"rank {self.rank}, QP 0x{qpn:06x}{to}: work request {int(wc.wr_id)} completed with "
            f"{wc_status_name(status)} ({status}, vendor error 0x{int(wc.vendor_err):x})",
            status,
            int(wc.wr_id),
            qpn,
            self.rank,
            peer,
        )

    def poll_cq(
        self, cq: CompletionQueue, n: int, timeout_s: float, qp: QueuePair | None = None
    ) -> list[Completion]:
        """Wait for `n` completions on `cq`; raise on an error status or after `timeout_s`."""
        pcq = self.f.pv_cq(cq)
        out: list[Completion] = []
        deadline = time.monotonic() + timeout_s
        spins = 0
        while len(out) < n:
            got, wcs = pcq.poll(n - len(out))
            for wc in wcs[:got]:
                if wc.status != 0:
                    self.raise_wc(qp, wc)
                # The immediate is the responder's: rxe also flags the requester's completion
                # of a WRITE_WITH_IMM, with imm_data 0.
                op = int(wc.opcode)
                recv = op & self.WC_RECV
                imm = int(wc.imm_data) if recv and int(wc.wc_flags) & self.WC_IMM else None
                out.append(Completion(int(wc.wr_id), op, int(wc.byte_len), imm,
                                      int(wc.qp_num)))  # fmt: skip
            if got:
                continue
            spins += 1
            if spins % TIME_CHECK_EVERY == 0 and time.monotonic() > deadline:
                where = self.where(qp) if qp is not None else f"rank {self.rank}"
                raise CompletionTimeout(
                    f"{n - len(out)} of {n} completion(s) missing after {timeout_s:g} s on CQ "
                    f"{cq.cqn} ({where})"
                )
        self.f.sw["cqes"] += len(out)
        return out
