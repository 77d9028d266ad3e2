"""The provider interface: what a NIC must hand a submitter (DESIGN.md, "the one contract").

A fabric provider owns the NIC objects of one rank. Submitters only see the memory objects below
(SQ ring, doorbell record, doorbell word, CQ ring, CQ consumer record, QPN, keys) and never ask
which provider they have. Addresses are integers in this process's address space; `endpoint`
dicts are plain data, exchanged between ranks over MPI by app/bootstrap.
"""

from __future__ import annotations

import ctypes
import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np


class Access(enum.IntFlag):
    """Memory-region access flags (the subset of ibv_access_flags gicbench uses)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


class QpState(enum.IntEnum):
    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    ERR = 6


ACCESS_ALL = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ | Access.REMOTE_ATOMIC


@dataclass(frozen=True)
class MemoryRegion:
    """A registered buffer: `addr` is its address in this process, keys as the NIC checks them."""

    addr: int
    length: int
    lkey: int
    rkey: int
    access: Access


@dataclass(frozen=True)
class RemoteBuffer:
    """What a peer needs to target a buffer of ours: address in our space and rkey."""

    rank: int
    addr: int
    length: int
    rkey: int


@dataclass(frozen=True)
class CompletionQueue:
    """An mlx5 CQ in memory: `ncqe` 64-byte CQEs at `buf`, consumer index record at `dbrec`."""

    cqn: int
    buf: int
    ncqe: int
    dbrec: int


@dataclass(frozen=True)
class SendQueue:
    """An mlx5 SQ in memory: `wqebb_cnt` 64-byte basic blocks at `buf`.

    dbrec: address of the QP's doorbell record, two big-endian 32-bit words: receive producer
        index at +0 (MLX5_RCV_DBR), send producer index at +4 (MLX5_SND_DBR).
    doorbell: address of the 8-byte doorbell word (the UAR's BlueFlame register on hardware).
    """

    qpn: int
    buf: int
    wqebb_cnt: int
    dbrec: int
    doorbell: int
    cq: CompletionQueue


@dataclass(frozen=True)
class ReceiveQueue:
    """Receive queue of a QP (consumed by RDMA_WRITE_WITH_IMM): `wqe_cnt` 16-byte entries."""

    buf: int
    wqe_cnt: int
    dbrec: int
    cq: CompletionQueue


@dataclass(frozen=True)
class QueuePair:
    """An RC QP or a DCI. DCIs have `dci=True` and no fixed remote; RC QPs get one in connect()."""

    qpn: int
    sq: SendQueue
    rq: ReceiveQueue | None
    dci: bool = False


@dataclass(frozen=True)
class DcTarget:
    """A DCT: reachable by any DCI that presents `dc_key` in its address vector."""

    dctn: int
    dc_key: int
    lid: int
    cq: CompletionQueue
    rq: ReceiveQueue | None = None


@dataclass
class ProviderCaps:
    """What this provider can do here; `gicbench doctor` prints it."""

    name: str
    available: bool
    reason: str = ""
    multi_node: bool = False
    dc: bool = False
    gpu_queues: bool = False
    details: dict[str, Any] = field(default_factory=dict)


class Fabric(ABC):
    """The NIC of one rank. Creation order: open, register/create objects, exchange endpoints
    (bootstrap), connect, start progress, traffic, stop, close."""

    name: str = "abstract"

    @abstractmethod
    def local_info(self) -> dict[str, Any]:
        """Plain data every peer needs about this rank's NIC (allgathered by bootstrap)."""

    @abstractmethod
    def add_peers(self, infos: list[dict[str, Any]]) -> None:
        """Make every rank's NIC reachable (infos[r] is rank r's local_info())."""

    @abstractmethod
    def register(self, length: int, access: Access = ACCESS_ALL) -> MemoryRegion:
        """Allocate and register `length` bytes of host memory reachable by peers' NICs."""

    @abstractmethod
    def create_cq(self, ncqe: int) -> CompletionQueue: ...

    @abstractmethod
    def create_qp(
        self,
        send_cq: CompletionQueue,
        sq_wqebbs: int,
        recv_cq: CompletionQueue | None = None,
        rq_wqes: int = 0,
        dci: bool = False,
    ) -> QueuePair:
        """An RC QP (or a DCI with dci=True) in RESET."""

    @abstractmethod
    def create_dct(self, cq: CompletionQueue, dc_key: int) -> DcTarget: ...

    @abstractmethod
    def endpoint(self, qp: QueuePair) -> dict[str, Any]:
        """Plain data a peer needs to connect to `qp` (exchanged over MPI)."""

    @abstractmethod
    def connect(self, qp: QueuePair, remote: dict[str, Any]) -> None:
        """RESET -> INIT -> RTR -> RTS towards `remote` (an endpoint() of the peer's QP).
        For a DCI, `remote` is ignored and the DCI goes to RTS."""

    @abstractmethod
    def qp_state(self, qp: QueuePair) -> QpState: ...

    @abstractmethod
    def counters(self) -> dict[str, int]:
        """NIC counters of this rank: wqes, doorbells, bytes, messages, errors, stale_wqes, ..."""

    @abstractmethod
    def progress_hook(self) -> int:
        """Address of a C function `void(*)(void*)` a native polling loop calls while it waits,
        and 0 when the NIC progresses on its own. Paired with progress_ctx()."""

    @abstractmethod
    def progress_ctx(self) -> int: ...

    @abstractmethod
    def close(self) -> None: ...

    def seal(self) -> None:
        """Called on every rank after add_peers() and a barrier: every peer has attached. A
        provider that shares memory by name (emu) unlinks the name here; others do nothing."""
        return None

    def check(self) -> None:
        """Raise the NIC's asynchronous errors (FabricError/CompletionError): what it reported
        out of band, such as a CQ overrun or a stale WQE. Providers without such reports do
        nothing."""
        return None

    def __enter__(self) -> Fabric:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def host_view(addr: int, nbytes: int, dtype: np.typing.DTypeLike = np.uint8) -> np.ndarray:
    """A writable numpy array over `nbytes` of host memory at `addr` (no copy; valid while the
    fabric that owns the memory is open)."""
    if addr <= 0 or nbytes <= 0:
        raise ValueError(f"host_view: need addr > 0 and nbytes > 0, got {addr:#x}, {nbytes}")
    raw = (ctypes.c_uint8 * nbytes).from_address(addr)
    return np.frombuffer(raw, dtype=np.uint8).view(dtype)
