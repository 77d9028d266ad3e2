"""The provider interface: what a NIC must hand a submitter (docs/architecture.md, "the one
contract").

A fabric provider owns the NIC objects of one rank. Submitters only see the memory objects below
(SQ ring, doorbell record, doorbell word, CQ ring, CQ consumer record, QPN, keys) and never ask
which provider they have. Addresses are integers in this process's address space; `endpoint`
dicts are plain data, exchanged between ranks over MPI by app/bootstrap.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ConfigError


class Access(enum.IntFlag):
    """Memory-region access flags (the subset of ibv_access_flags gicbench uses)."""

    LOCAL_WRITE = 1
    REMOTE_WRITE = 2
    REMOTE_READ = 4
    REMOTE_ATOMIC = 8


class MemoryDomain(str, enum.Enum):
    """Where a memory object lives (the paper's "memory geography").

    HOST: pageable or shared host memory only the CPU touches. HOST_MAPPED: pinned host memory
    mapped into the GPU's address space (a GPU kernel reaches it over PCIe/C2C; `device_addr` is
    the GPU-side address). DEVICE: GPU memory (`device_addr` is its address; `addr` is 0 unless
    the provider also maps it for the CPU).
    """

    HOST = "host"
    HOST_MAPPED = "host-mapped"
    DEVICE = "device"


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
    domain: MemoryDomain = MemoryDomain.HOST
    device_addr: int = 0  # the GPU's address of the buffer, 0 when the GPU cannot reach it


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
    domain: MemoryDomain = MemoryDomain.HOST
    device_buf: int = 0  # GPU addresses of the ring and the record, 0 when not mapped
    device_dbrec: int = 0


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
    domain: MemoryDomain = MemoryDomain.HOST
    device_buf: int = 0  # GPU addresses of ring, record and doorbell, 0 when not mapped
    device_dbrec: int = 0
    device_doorbell: int = 0


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


class Posting(str, enum.Enum):
    """How a submitter can hand work to a provider's NIC."""

    MLX5_QUEUES = "mlx5-queues"  # WQEs written straight into SQ rings in memory (emu, mlx5)
    POST_SEND = "post-send"  # a library call per chain (ibv_post_send on a generic verbs device)


@dataclass(frozen=True)
class ProgressPolicy:
    """Who moves the NIC forward while a submitter waits.

    autonomous: the NIC progresses on its own (hardware, or emu's engine thread); any submitter,
        a GPU kernel included, may simply poll memory.
    cpu_hook: otherwise, a C function `void(*)(void*)` and its context that a native CPU polling
        loop calls while it waits (emu's inline mode). A GPU kernel cannot call it, so a GPU
        submitter refuses a policy that is not autonomous.
    """

    mode: str
    autonomous: bool
    cpu_hook: tuple[int, int] = (0, 0)


@dataclass
class ProviderCaps:
    """What this provider (or submitter) can do here; `gicbench doctor` prints it."""

    name: str
    available: bool
    reason: str = ""
    multi_node: bool = False
    dc: bool = False
    gpu_queues: bool = False
    posting: tuple[str, ...] = ()  # Posting values this provider offers
    memory_domains: tuple[str, ...] = ("host",)
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
    def register(
        self, length: int, access: Access = ACCESS_ALL, domain: MemoryDomain = MemoryDomain.HOST
    ) -> MemoryRegion:
        """Allocate and register `length` bytes in `domain`, reachable by peers' NICs. A provider
        refuses (UnsupportedError) a domain it cannot offer."""

    @abstractmethod
    def create_cq(self, ncqe: int, domain: MemoryDomain = MemoryDomain.HOST) -> CompletionQueue:
        """A CQ of `ncqe` CQEs whose ring and consumer record live in `domain`."""

    @abstractmethod
    def create_qp(
        self,
        send_cq: CompletionQueue,
        sq_wqebbs: int,
        recv_cq: CompletionQueue | None = None,
        rq_wqes: int = 0,
        dci: bool = False,
        domain: MemoryDomain = MemoryDomain.HOST,
    ) -> QueuePair:
        """An RC QP (or a DCI with dci=True) in RESET; its rings and doorbell record live in
        `domain`."""

    @abstractmethod
    def create_dct(self, cq: CompletionQueue, dc_key: int) -> DcTarget: ...

    @abstractmethod
    def endpoint(self, qp: QueuePair) -> dict[str, Any]:
        """Plain data a peer needs to connect to `qp` (exchanged over MPI)."""

    @abstractmethod
    def connect(self, qp: QueuePair, remote: dict[str, Any]) -> None:
        """RESET -> INIT -> RTR -> RTS towards `remote` (an endpoint() of the peer's QP).
        For a DCI, `remote` is ignored and the DCI goes to RTS."""

    def create_qps(
        self,
        count: int,
        sq_wqebbs: int,
        cq_options: Mapping[str, Any],
        qp_options: Mapping[str, Any],
    ) -> list[QueuePair]:
        """`count` QPs in RESET, each with its own send CQ of `sq_wqebbs` entries, made with the
        provider's keyword options for create_cq and create_qp (bring-up's RC QPs towards one
        peer, or its DCIs with dci=True). A provider may make them in one go; by default one
        create_cq and create_qp each."""
        return [
            self.create_qp(self.create_cq(sq_wqebbs, **cq_options), sq_wqebbs, **qp_options)
            for _ in range(count)
        ]

    def endpoints(self, qps: Sequence[QueuePair]) -> Any:
        """Plain data a peer needs to connect to each of `qps`, in order (exchanged over MPI,
        handed to the peer's connect_rc); by default endpoint() of each."""
        return [self.endpoint(qp) for qp in qps]

    def connect_rc(self, qps: Sequence[QueuePair], remote: Any) -> None:
        """connect() qps[i] to the peer's i-th QP, `remote` being the peer's endpoints() of its
        QPs (as many as `qps`, else ConfigError before any QP changes)."""
        if len(remote) != len(qps):
            raise ConfigError("remote", f"{len(remote)} endpoints", f"{len(qps)}, one per QP")
        for qp, ep in zip(qps, remote, strict=True):
            self.connect(qp, ep)

    @abstractmethod
    def qp_state(self, qp: QueuePair) -> QpState: ...

    @abstractmethod
    def counters(self) -> dict[str, int]:
        """NIC counters of this rank: wqes, doorbells, bytes, messages, errors, stale_wqes, ..."""

    def point_results(self, before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
        """Results the NIC adds to a point, from its counters before and after it (emu: which
        NIC model produced the point and whether its engine kept up). Others: none."""
        return {}

    @abstractmethod
    def progress_policy(self) -> ProgressPolicy:
        """Who progresses this NIC (see ProgressPolicy); the harness matches it to the
        submitter before any traffic."""

    @abstractmethod
    def close(self) -> None: ...

    def seal(self) -> None:
        """Called on every rank after add_peers() and a barrier: every peer has attached. A
        provider that shares memory by name (emu) unlinks the name here; others do nothing."""
        return None

    @contextlib.contextmanager
    def setup_batch(self) -> Iterator[None]:
        """Objects created and connected inside the block may be made ready together at its end
        (a provider whose NIC must be told of every change, such as emu's CUDA engine, then
        tells it once); no traffic may use them before the block ends. Others do nothing."""
        yield

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
