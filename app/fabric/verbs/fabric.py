"""VerbsFabric: one rank's NIC objects through libibverbs (any RDMA device; RC only).

The objects (device context, PD, MRs, CQs, QPs) are owned by the native module
(`gicbench._native.verbs.Nic`, native/src/verbs_nic.cpp): the submitter's native loops need the
raw ibv_qp/ibv_cq pointers, which pyverbs keeps private. pyverbs only probes devices, ports and
GIDs (device.py) for selection and `gicbench doctor`.

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
    """Every native verbs call of bring-up goes through here: its errors become FabricError."""
    try:
        yield
    except (RuntimeError, ValueError) as e:
        raise FabricError(f"verbs rank {rank}: {what}: {e}") from e


def native() -> Any:
    """gicbench._native.verbs (built where libibverbs is installed)."""
    from ... import _native

    mod = getattr(_native, "verbs", None)
    if mod is None:
        raise UnsupportedError(
            "provider verbs: the native module was built without libibverbs "
            "(install libibverbs-dev, then `make setup`)"
        )
    return mod


def const(name: str) -> int:
    return int(native().CONSTANTS[name])


def _access(a: Access) -> int:
    flags = 0
    for bit, name in (
        (Access.LOCAL_WRITE, "IBV_ACCESS_LOCAL_WRITE"),
        (Access.REMOTE_WRITE, "IBV_ACCESS_REMOTE_WRITE"),
        (Access.REMOTE_READ, "IBV_ACCESS_REMOTE_READ"),
        (Access.REMOTE_ATOMIC, "IBV_ACCESS_REMOTE_ATOMIC"),
    ):
        if a & bit:
            flags |= const(name)
    return flags


def _mtu_enum(nbytes: int) -> int:
    return {256: 1, 512: 2, 1024: 3, 2048: 4, 4096: 5}[nbytes]


def _host_only(what: str, domain: MemoryDomain) -> None:
    # The native side allocates host memory; GPU memory needs dma-buf, which this provider lacks.
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
        mod = native()
        with checked(f"open {self.sel.device}", rank):
            self.nic = mod.Nic(self.sel.device)  # device context and PD
        self._closed = False
        self._cqs: set[int] = set()  # CQ numbers (the native side's)
        self._qp_objs: dict[int, QueuePair] = {}
        self._peer_of: dict[int, int] = {}  # qpn -> remote rank
        self._psn: dict[int, int] = {}
        self._inline: dict[int, int] = {}  # qpn -> max inline bytes the QP accepted
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
        with checked(f"register {length} B", self.rank):
            addr, lkey, rkey = self.nic.reg_mr(length, _access(Access(int(access))))  # zeroed
        return VerbsMemoryRegion(
            addr=int(addr),
            length=length,
            lkey=int(lkey),
            rkey=int(rkey),
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
        with checked(f"create_cq({ncqe})", self.rank):
            cqn, cqe = self.nic.create_cq(ncqe)
        self._cqs.add(cqn)
        # No CQ ring in our memory: buf/dbrec are 0 (mlx5_queues=False).
        return CompletionQueue(cqn=cqn, buf=0, ncqe=int(cqe), dbrec=0)

    def _own_cq(self, field: str, cq: CompletionQueue | None) -> int:
        if not isinstance(cq, CompletionQueue) or cq.cqn not in self._cqs:
            raise ConfigError(
                field, cq, f"a CompletionQueue created by this verbs rank {self.rank}"
            )
        return cq.cqn

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
        # A device without inline support is retried without inline data (native side).
        with checked("create_qp", self.rank):
            qpn, inline, _ = self.nic.create_qp(scq, rcq, sq_wqebbs, max(1, rq_wqes), MAX_INLINE)
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

    def _own_qp(self, qp: QueuePair) -> int:
        if not isinstance(qp, QueuePair) or qp.qpn not in self._qp_objs:
            raise ConfigError("qp", qp, f"a QueuePair created by this verbs rank {self.rank}")
        return qp.qpn

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
        port = self.sel.port
        mtu = min(port.active_mtu, int(remote["mtu"]))
        where = f"connect QP {qp.qpn:#x} to rank {remote['rank']} QP {int(remote['qpn']):#x}"
        lid_route = port.link_layer == "InfiniBand" and self.sel.gid.index == 0
        dgid = b"" if lid_route else bytes.fromhex(str(remote["gid"]).replace(":", ""))
        with checked(where, self.rank):
            self.nic.to_init(pq, port.port, _access(ACCESS_ALL))
            self.nic.to_rtr(pq, int(remote["qpn"]), int(remote["psn"]), _mtu_enum(mtu),
                            int(remote["lid"]), dgid, self.sel.gid.index, port.port,
                            MIN_RNR_TIMER, MAX_RD_ATOMIC)  # fmt: skip
            self.nic.to_rts(pq, self._psn[qp.qpn], TIMEOUT, RETRY_CNT, RNR_RETRY, MAX_RD_ATOMIC)
        self._peer_of[qp.qpn] = int(remote["rank"])

    def qp_state(self, qp: QueuePair) -> QpState:
        pq = self._own_qp(qp)
        with checked(f"query QP {qp.qpn:#x}", self.rank):
            s = int(self.nic.qp_state(pq))
        return QpState(s) if s in QpState._value2member_map_ else QpState.ERR

    # ---- what the posting path needs ------------------------------------------------------------
    def qpn_of(self, qp: QueuePair) -> int:
        """`qp`'s number on the native NIC, checked to be ours (posting path)."""
        return self._own_qp(qp)

    def cqn_of(self, cq: CompletionQueue) -> int:
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
        self.nic.close()  # children first: QPs, CQs, MRs, then PD and context
        self._cqs.clear()
        self._qp_objs.clear()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
