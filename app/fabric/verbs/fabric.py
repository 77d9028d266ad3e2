"""VerbsFabric: one rank's NIC objects through pyverbs (any RDMA device; RC only).

A generic verbs device (rdma_rxe, or any NIC through its provider library) keeps its queues
behind libibverbs, so this provider has no mlx5 queues in memory (`mlx5_queues=False`): the
SendQueue/CompletionQueue objects it returns carry the QPN/depth but zero ring addresses, and
submitters post through the posting path (posting.py, `post_send` chains and `poll_cq`). On an
mlx5 device, the `mlx5` provider (DevX, a later issue) gives direct WQE access instead.

Bring-up is the same MPI exchange as emu: local_info() per rank, endpoint() per QP (QPN, PSN,
GID, LID, GID index, MTU), connect() walks RESET -> INIT -> RTR -> RTS with a global route
(RoCE) or a LID route (InfiniBand).
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ConfigError, FabricError, UnsupportedError
from ..base import (
    ACCESS_ALL,
    Access,
    CompletionQueue,
    DcTarget,
    Fabric,
    MemoryDomain,
    ProgressPolicy,
    QpState,
    QueuePair,
    ReceiveQueue,
    SendQueue,
    host_view,
)
from .compat import enums
from .device import Selection, select
from .types import VerbsMemoryRegion

# RC attributes seen working on rxe and usual on hardware (perftest's defaults).
TIMEOUT = 14  # 4.096 µs * 2^14 ≈ 67 ms per retry
RETRY_CNT = 7
RNR_RETRY = 7
MIN_RNR_TIMER = 12
MAX_RD_ATOMIC = 1
MAX_INLINE = 64
SYSFS = Path("/sys/class/infiniband")


@contextlib.contextmanager
def checked(what: str, rank: int) -> Iterator[None]:
    """Every pyverbs call of bring-up goes through here: its errors become FabricError."""
    from pyverbs.pyverbs_error import PyverbsError

    try:
        yield
    except PyverbsError as e:
        raise FabricError(f"verbs rank {rank}: {what}: {e}") from e


def _access(a: Access) -> int:
    e = enums()
    flags = 0
    for bit, name in (
        (Access.LOCAL_WRITE, "IBV_ACCESS_LOCAL_WRITE"),
        (Access.REMOTE_WRITE, "IBV_ACCESS_REMOTE_WRITE"),
        (Access.REMOTE_READ, "IBV_ACCESS_REMOTE_READ"),
        (Access.REMOTE_ATOMIC, "IBV_ACCESS_REMOTE_ATOMIC"),
    ):
        if a & bit:
            flags |= int(getattr(e, name))
    return flags


def _mtu_enum(nbytes: int) -> int:
    return {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}[nbytes]


def _host_only(what: str, domain: MemoryDomain) -> None:
    # pyverbs allocates host memory; GPU memory needs dma-buf, which this provider lacks.
    if MemoryDomain(domain) is not MemoryDomain.HOST:
        raise UnsupportedError(
            f"provider verbs: {what} in memory domain {MemoryDomain(domain).value!r} is not "
            "available (host memory only; GPU memory through dma-buf is not implemented)"
        )


class VerbsFabric(Fabric):
    """The verbs NIC of `rank`: device/port/GID chosen by device.select()."""

    name = "verbs"
    mlx5_queues = False  # no WQE rings in memory: use the posting path
    post_send = True

    def __init__(
        self,
        rank: int,
        world_size: int,
        job: str = "",
        *,
        ib_dev: str | None = None,
        gid_index: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(world_size, int) or world_size < 1:
            raise ConfigError("world_size", world_size, "an int >= 1")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ConfigError("rank", rank, f"an int in 0..{world_size - 1}")
        self.rank, self.world_size, self.job = rank, world_size, job
        self.sel: Selection = select(ib_dev, gid_index, env)  # refuses before anything is created
        from pyverbs.device import Context
        from pyverbs.pd import PD

        self._closed = False
        with checked(f"open {self.sel.device}", rank):
            self.ctx = Context(name=self.sel.device)
            self.pd = PD(self.ctx)
        self._cqs: dict[int, Any] = {}  # cqn (ours) -> pyverbs CQ
        self._qps: dict[int, Any] = {}  # qpn -> pyverbs QP
        self._qp_objs: dict[int, QueuePair] = {}
        self._mrs: list[Any] = []
        self._peer_of: dict[int, int] = {}  # qpn -> remote rank
        self._psn: dict[int, int] = {}
        self._inline: dict[int, int] = {}  # qpn -> max inline bytes the QP accepted
        self._next_cqn = 1
        self._rng = random.Random()
        self.peers: list[dict[str, Any]] = []
        # Software counters the posting path updates (hardware ones come from sysfs).
        self.sw = {"wqes": 0, "doorbells": 0, "bytes": 0, "cqes": 0, "errors": 0, "recvs": 0}
        self._scratch = self.register(64, Access.LOCAL_WRITE)  # receives for WRITE_WITH_IMM

    @property
    def device(self) -> str:
        return self.sel.device

    @property
    def port(self) -> int:
        return self.sel.port.port

    @property
    def gid_index(self) -> int:
        return self.sel.gid.index

    def _live(self) -> None:
        if self._closed:
            raise FabricError(f"verbs rank {self.rank}: fabric is closed")

    # ---- bring-up -------------------------------------------------------------------------------
    def local_info(self) -> dict[str, Any]:
        self._live()
        p = self.sel.port
        return {
            "provider": "verbs",
            "rank": self.rank,
            "world_size": self.world_size,
            "job": self.job,
            "host": socket.gethostname(),
            "device": p.device,
            "port": p.port,
            "link_layer": p.link_layer,
            "lid": p.lid,
            "gid": self.sel.gid.gid,
            "gid_index": self.sel.gid.index,
            "mtu": p.active_mtu,
        }

    def add_peers(self, infos: list[dict[str, Any]]) -> None:
        self._live()
        if len(infos) != self.world_size:
            raise ConfigError("infos", f"{len(infos)} entries", f"{self.world_size} (one per rank)")
        for r, info in enumerate(infos):
            if info.get("provider") != "verbs" or info.get("rank") != r:
                raise ConfigError(f"infos[{r}]", info, f"local_info() of verbs rank {r}")
            if info.get("link_layer") != self.sel.port.link_layer:
                raise UnsupportedError(
                    f"verbs: rank {r} uses a {info.get('link_layer')} port, rank {self.rank} a "
                    f"{self.sel.port.link_layer} one; every rank needs the same link layer"
                )
        self.peers = list(infos)

    def register(
        self, length: int, access: Access = ACCESS_ALL, domain: MemoryDomain = MemoryDomain.HOST
    ) -> VerbsMemoryRegion:
        self._live()
        _host_only("register", domain)
        if not isinstance(length, int) or length <= 0:
            raise ConfigError("length", length, "an int >= 1 (bytes)")
        if not isinstance(access, int) or int(access) & ~int(ACCESS_ALL):
            raise ConfigError("access", access, "a combination of gicbench.fabric.base.Access")
        from pyverbs.mr import MR

        with checked(f"register {length} B", self.rank):
            mr = MR(self.pd, length, _access(Access(int(access))))
        self._mrs.append(mr)
        host_view(mr.buf, length)[:] = 0
        return VerbsMemoryRegion(
            addr=int(mr.buf),
            length=length,
            lkey=int(mr.lkey),
            rkey=int(mr.rkey),
            access=Access(int(access)),
            domain=MemoryDomain.HOST,
        )

    def view(self, mr: VerbsMemoryRegion, dtype: np.typing.DTypeLike = np.uint8) -> np.ndarray:
        self._live()
        return host_view(mr.addr, mr.length, dtype)

    def create_cq(self, ncqe: int, domain: MemoryDomain = MemoryDomain.HOST) -> CompletionQueue:
        self._live()
        _host_only("create_cq", domain)
        if not isinstance(ncqe, int) or not 1 <= ncqe <= (1 << 22):
            raise ConfigError("ncqe", ncqe, "an int in 1..4194304")
        from pyverbs.cq import CQ

        with checked(f"create_cq({ncqe})", self.rank):
            cq = CQ(self.ctx, ncqe, None, None, 0)
        cqn = self._next_cqn
        self._next_cqn += 1
        self._cqs[cqn] = cq
        # No CQ ring in our memory: buf/dbrec are 0 (mlx5_queues=False).
        return CompletionQueue(cqn=cqn, buf=0, ncqe=int(cq.cqe), dbrec=0)

    def _own_cq(self, field: str, cq: CompletionQueue | None) -> Any:
        if not isinstance(cq, CompletionQueue) or cq.cqn not in self._cqs:
            raise ConfigError(
                field, cq, f"a CompletionQueue created by this verbs rank {self.rank}"
            )
        return self._cqs[cq.cqn]

    def create_qp(
        self,
        send_cq: CompletionQueue,
        sq_wqebbs: int,
        recv_cq: CompletionQueue | None = None,
        rq_wqes: int = 0,
        dci: bool = False,
        domain: MemoryDomain = MemoryDomain.HOST,
    ) -> QueuePair:
        self._live()
        _host_only("create_qp", domain)
        if dci:
            raise UnsupportedError(
                "provider verbs has no DC transport (DCIs/DCTs need the mlx5 provider); "
                "use --transport rc"
            )
        scq = self._own_cq("send_cq", send_cq)
        rcq_obj = recv_cq or send_cq
        rcq = self._own_cq("recv_cq", rcq_obj)
        if not isinstance(sq_wqebbs, int) or not 1 <= sq_wqebbs <= 32768:
            raise ConfigError("sq_wqebbs", sq_wqebbs, "an int in 1..32768 (send WRs)")
        if not isinstance(rq_wqes, int) or not 0 <= rq_wqes <= 32768:
            raise ConfigError("rq_wqes", rq_wqes, "an int in 0..32768")
        from pyverbs.pyverbs_error import PyverbsError
        from pyverbs.qp import QP, QPCap, QPInitAttr

        e = enums()
        qp = None
        for inline in (MAX_INLINE, 0):  # a device without inline support refuses the first
            cap = QPCap(
                max_send_wr=sq_wqebbs,
                max_recv_wr=max(1, rq_wqes),
                max_send_sge=1,
                max_recv_sge=1,
                max_inline_data=inline,
            )
            attr = QPInitAttr(qp_type=e.IBV_QPT_RC, scq=scq, rcq=rcq, cap=cap, sq_sig_all=0)
            try:
                qp = QP(self.pd, attr)
                break
            except PyverbsError as err:
                if inline == 0:
                    raise FabricError(f"verbs rank {self.rank}: create_qp: {err}") from err
        assert qp is not None
        qpn = int(qp.qp_num)
        self._qps[qpn] = qp
        self._psn[qpn] = self._rng.randrange(1 << 24)
        sq = SendQueue(qpn=qpn, buf=0, wqebb_cnt=sq_wqebbs, dbrec=0, doorbell=0, cq=send_cq)
        rq = ReceiveQueue(buf=0, wqe_cnt=rq_wqes, dbrec=0, cq=rcq_obj) if rq_wqes else None
        q = QueuePair(qpn=qpn, sq=sq, rq=rq, dci=False)
        self._qp_objs[qpn] = q
        self._inline[qpn] = inline
        return q

    def create_dct(self, cq: CompletionQueue, dc_key: int) -> DcTarget:
        raise UnsupportedError(
            "provider verbs has no DC transport (DCTs need the mlx5 provider); use --transport rc"
        )

    def _own_qp(self, qp: QueuePair) -> Any:
        if not isinstance(qp, QueuePair) or qp.qpn not in self._qps:
            raise ConfigError("qp", qp, f"a QueuePair created by this verbs rank {self.rank}")
        return self._qps[qp.qpn]

    def endpoint(self, qp: QueuePair) -> dict[str, Any]:
        self._own_qp(qp)
        return {
            "provider": "verbs",
            "rank": self.rank,
            "qpn": qp.qpn,
            "psn": self._psn[qp.qpn],
            "gid": self.sel.gid.gid,
            "gid_index": self.sel.gid.index,
            "lid": self.sel.port.lid,
            "mtu": self.sel.port.active_mtu,
        }

    def connect(self, qp: QueuePair, remote: dict[str, Any]) -> None:
        pq = self._own_qp(qp)
        need = {"provider", "rank", "qpn", "psn", "gid", "lid", "mtu"}
        if (
            not isinstance(remote, dict)
            or remote.get("provider") != "verbs"
            or not need <= set(remote)
        ):
            raise ConfigError("remote", remote, "a verbs endpoint() of the peer's QP")
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.qp import QPAttr

        e = enums()
        port = self.sel.port
        mtu = min(port.active_mtu, int(remote["mtu"]))
        where = f"connect QP {qp.qpn:#x} to rank {remote['rank']} QP {int(remote['qpn']):#x}"
        with checked(where, self.rank):
            a = QPAttr(qp_state=e.IBV_QPS_INIT, cur_qp_state=e.IBV_QPS_RESET)
            a.pkey_index = 0
            a.port_num = port.port
            a.qp_access_flags = _access(ACCESS_ALL)
            pq.modify(
                a,
                e.IBV_QP_STATE | e.IBV_QP_PKEY_INDEX | e.IBV_QP_PORT | e.IBV_QP_ACCESS_FLAGS,
            )
            if port.link_layer == "InfiniBand" and self.sel.gid.index == 0:
                ah = AHAttr(dlid=int(remote["lid"]), port_num=port.port, is_global=0)
            else:
                gr = GlobalRoute(
                    dgid=GID(remote["gid"]), sgid_index=self.sel.gid.index, hop_limit=64
                )
                ah = AHAttr(gr=gr, is_global=1, port_num=port.port, dlid=int(remote["lid"]))
            a = QPAttr(qp_state=e.IBV_QPS_RTR, cur_qp_state=e.IBV_QPS_INIT)
            a.path_mtu = _mtu_enum(mtu)
            a.dest_qp_num = int(remote["qpn"])
            a.rq_psn = int(remote["psn"])
            a.max_dest_rd_atomic = MAX_RD_ATOMIC
            a.min_rnr_timer = MIN_RNR_TIMER
            a.ah_attr = ah
            pq.modify(
                a,
                e.IBV_QP_STATE | e.IBV_QP_AV | e.IBV_QP_PATH_MTU | e.IBV_QP_DEST_QPN
                | e.IBV_QP_RQ_PSN | e.IBV_QP_MAX_DEST_RD_ATOMIC | e.IBV_QP_MIN_RNR_TIMER,
            )  # fmt: skip
            a = QPAttr(qp_state=e.IBV_QPS_RTS, cur_qp_state=e.IBV_QPS_RTR)
            a.timeout = TIMEOUT
            a.retry_cnt = RETRY_CNT
            a.rnr_retry = RNR_RETRY
            a.sq_psn = self._psn[qp.qpn]
            a.max_rd_atomic = MAX_RD_ATOMIC
            pq.modify(
                a,
                e.IBV_QP_STATE | e.IBV_QP_TIMEOUT | e.IBV_QP_RETRY_CNT | e.IBV_QP_RNR_RETRY
                | e.IBV_QP_SQ_PSN | e.IBV_QP_MAX_QP_RD_ATOMIC,
            )  # fmt: skip
        self._peer_of[qp.qpn] = int(remote["rank"])

    def qp_state(self, qp: QueuePair) -> QpState:
        pq = self._own_qp(qp)
        e = enums()
        with checked(f"query QP {qp.qpn:#x}", self.rank):
            attr, _ = pq.query(e.IBV_QP_STATE)
        s = int(attr.qp_state)
        return QpState(s) if s in QpState._value2member_map_ else QpState.ERR

    # ---- what the posting path needs ------------------------------------------------------------
    def pv_qp(self, qp: QueuePair) -> Any:
        """The pyverbs QP behind `qp` (posting path only)."""
        return self._own_qp(qp)

    def pv_cq(self, cq: CompletionQueue) -> Any:
        return self._own_cq("cq", cq)

    def peer_of(self, qp: QueuePair) -> int | None:
        return self._peer_of.get(qp.qpn)

    def max_inline(self, qp: QueuePair) -> int:
        return self._inline.get(qp.qpn, 0)

    @property
    def scratch(self) -> VerbsMemoryRegion:
        return self._scratch

    # ---- counters, progress, close --------------------------------------------------------------
    def hw_counters(self) -> dict[str, int]:
        """The port's hardware counters from sysfs (rxe: sent_pkts, rcvd_pkts, ...)."""
        out: dict[str, int] = {}
        d = SYSFS / self.device / "ports" / str(self.port) / "hw_counters"
        for f in sorted(d.glob("*")) if d.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                out[f"hw_{f.name}"] = int(f.read_text().split()[0])
        return out

    def counters(self) -> dict[str, int]:
        self._live()
        return {**self.sw, **self.hw_counters()}

    def progress_policy(self) -> ProgressPolicy:
        return ProgressPolicy("hardware", autonomous=True)  # a verbs NIC progresses on its own

    def progress_hook(self) -> int:
        return 0

    def progress_ctx(self) -> int:
        return 0

    def close(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        # Children first: QPs, CQs, MRs, then PD and context.
        for objs in (self._qps.values(), self._cqs.values(), self._mrs):
            for o in objs:
                with contextlib.suppress(Exception):
                    o.close()
        for o in (self.pd, self.ctx):
            with contextlib.suppress(Exception):
                o.close()
        self._qps.clear()
        self._cqs.clear()
        self._mrs.clear()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
