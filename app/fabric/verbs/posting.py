"""The posting path of the verbs provider: post_send chains and poll_cq on the native NIC.

A generic verbs device has no mlx5 queues in memory, so submitters post here instead of writing
WQEs. `post_writes` hands a chain of work requests to one ibv_post_send call (one doorbell);
`poll_cq` drains completions with ibv_poll_cq. The submitter's timed loops do not come through
here: they run natively (native/src/verbs_loops.cpp, app/submit/host/post_send.py).

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
from .fabric import const
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


def completion_error(fabric: Any, status: int, wr_id: int, qpn: int, vendor_err: int,
                     what: str = "") -> VerbsCompletionError:  # fmt: skip
    """The error for a completion with `status`, naming rank, QP and peer (and `what` ran)."""
    peer = fabric._peer_of.get(qpn)
    to = f" to rank {peer}" if peer is not None else ""
    during = f" ({what})" if what else ""
    return VerbsCompletionError(
        f"rank {fabric.rank}, QP 0x{qpn:06x}{to}: work request {wr_id} completed with "
        f"{wc_status_name(status)} ({status}, vendor error 0x{vendor_err:x}){during}",
        status,
        wr_id,
        qpn,
        fabric.rank,
        peer,
    )


class Posting:
    """The posting path of one VerbsFabric (see the module docstring)."""

    def __init__(self, fabric: Any, chain: int = 64) -> None:
        if not isinstance(chain, int) or chain < 1:
            raise ConfigError("chain", chain, "an int >= 1 (WRs per post_send)")
        self.f, self.rank, self.chain_len = fabric, fabric.rank, chain
        self.WRITE = const("IBV_WR_RDMA_WRITE")
        self.WRITE_IMM = const("IBV_WR_RDMA_WRITE_WITH_IMM")
        self.READ = const("IBV_WR_RDMA_READ")
        self.SIGNALED = const("IBV_SEND_SIGNALED")
        self.INLINE = const("IBV_SEND_INLINE")
        self.WC_RECV_IMM = const("IBV_WC_RECV_RDMA_WITH_IMM")
        self.WC_IMM = const("IBV_WC_WITH_IMM")
        self.WC_RECV = const("IBV_WC_RECV")  # receive opcodes have this bit (128)

    def where(self, qp: QueuePair) -> str:
        peer = self.f.peer_of(qp)
        to = f" to rank {peer}" if peer is not None else ""
        return f"rank {self.rank}, QP 0x{qp.qpn:06x}{to}"

    def _post(self, qp: QueuePair, ops: list[tuple]) -> None:
        k = len(ops)
        try:
            self.f.nic.post_send(self.f.qpn_of(qp), ops)
        except (RuntimeError, ValueError) as err:
            self.f.sw["errors"] += 1
            raise FabricError(f"post_send of {k} WR(s) failed ({self.where(qp)}): {err}") from err
        sw = self.f.sw
        sw["doorbells"] += 1
        sw["wqes"] += k

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
        k = len(ops)
        limit = min(self.chain_len, qp.sq.wqebb_cnt)
        if not 1 <= k <= limit:
            raise ConfigError("chain length", k, f"1..{limit} WRs for QP 0x{qp.qpn:06x}")
        chain = []
        for local, loff, remote, roff, size, signaled, imm, wr_id in ops:
            self._check(qp, local, loff, remote, roff, size, inline)
            flags = (self.SIGNALED if signaled else 0) | (self.INLINE if inline else 0)
            op = self.WRITE if imm is None else self.WRITE_IMM
            chain.append((op, local.addr + loff, local.lkey, remote.addr + roff, remote.rkey,
                          size, flags, -1 if imm is None else imm, wr_id))  # fmt: skip
        self._post(qp, chain)
        self.f.sw["bytes"] += sum(op[5] for op in chain)

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
        laddr, raddr = local.addr + local_offset, remote.addr + remote_offset
        self._post(qp, [(self.READ, laddr, local.lkey, raddr, remote.rkey, size, self.SIGNALED,
                         -1, wr_id)])  # fmt: skip
        self.f.sw["bytes"] += size

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
        s = self.f.scratch
        try:
            self.f.nic.post_recv(self.f.qpn_of(qp), n, s.addr, 8, s.lkey)
        except (RuntimeError, ValueError) as err:
            raise FabricError(f"post_recv failed ({self.where(qp)}): {err}") from err
        self.f.sw["recvs"] += n

    # ---- completions ----------------------------------------------------------------------------

    def poll_cq(
        self, cq: CompletionQueue, n: int, timeout_s: float, qp: QueuePair | None = None
    ) -> list[Completion]:
        """Wait for `n` completions on `cq`; raise on an error status or after `timeout_s`."""
        cqn = self.f.cqn_of(cq)
        out: list[Completion] = []
        deadline = time.monotonic() + timeout_s
        spins = 0
        while len(out) < n:
            try:
                wcs = self.f.nic.poll(cqn, n - len(out))
            except RuntimeError as err:
                msg = f"poll_cq on CQ {cq.cqn} failed (rank {self.rank}): {err}"
                raise FabricError(msg) from err
            for wr_id, status, op, byte_len, imm_data, qpn, wc_flags, vendor_err in wcs:
                if status != 0:
                    self.f.sw["errors"] += 1
                    raise completion_error(self.f, status, wr_id, qpn, vendor_err)
                # The immediate is the responder's: rxe also flags the requester's completion
                # of a WRITE_WITH_IMM, with imm_data 0.
                recv = op & self.WC_RECV
                imm = imm_data if recv and wc_flags & self.WC_IMM else None
                out.append(Completion(wr_id, op, byte_len, imm, qpn))
            if wcs:
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
