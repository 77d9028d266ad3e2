"""EmuFabric: the emulated NIC of one rank (Python control over gicbench._native.emu.Nic).

Memory: one POSIX shared-memory segment per rank holds every NIC object and registered buffer;
peers map each other's segment after the endpoint exchange (add_peers), then every rank calls
seal() after a barrier, which unlinks its name, so a crash after bring-up leaks nothing. Before
that, close(), atexit and SIGTERM unlink it, and the janitor (run at creation) removes segments of
dead processes. SIGTERM unlinks too (a native handler, installed where SIGTERM has its
default action).

Progress: "thread" runs one engine thread per rank, or `engine_threads` of them, each serving
its share of the rank's QPs (QP slot i on thread (i - 1) mod n; when idle a thread spins ~100 µs,
yields, then sleeps 1 µs doubling to 100 µs, and to 1 ms after ~50 ms of idleness; any work
resets it);
"inline" runs no thread and the rank's own polling drives the engine through
progress_hook()/progress_ctx() (or progress()). Thread mode is what a NIC is (the submitter's
core only submits) and gives ~0.2 µs doorbell-to-CQE when a core is free for the engine, but
the first doorbell after idling pays the sleep; inline mode needs no core of its own and is the
right one on oversubscribed machines (a 2-core CI box running two ranks), where a spinning engine
competes with the ranks it serves, at the price of doing the NIC's work on the poller's time.

Engines: engine="cpu" (the above) or "cuda" (cuda_engine.CudaEngine: a persistent kernel on
`engine_ctas` CTAs serves the rank's QPs; no CPU thread runs and progress() does nothing). With
the CUDA engine the segment is registered with CUDA and every object also has a GPU address
(device_buf, device_dbrec, device_doorbell, device_addr), and objects may be created in GPU
memory: domain="device" for create_qp (ring, doorbell record, doorbell register), create_cq
(ring, consumer record) and register (the region). `queues` is the default domain of create_qp
and create_cq. The CPU engine refuses domain="device": it cannot poll GPU memory at speed.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import re
import socket
import sys
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from ...cuda_host import device_pointer, stuck_kernels
from ...errors import CompletionError, ConfigError, FabricError, UnsupportedError
from ..base import (
    ACCESS_ALL,
    Access,
    CompletionQueue,
    DcTarget,
    Fabric,
    MemoryDomain,
    MemoryRegion,
    Posting,
    ProgressPolicy,
    ProviderCaps,
    QpState,
    QueuePair,
    ReceiveQueue,
    SendQueue,
    host_view,
)
from . import gpi as gpi_queue
from .gpi import GpiQueue, GpiWindow
from .janitor import create_segment, janitor
from .nic_model import SATURATED_FRACTION, NicModel
from .params import (  # declared once, with the knobs
    ENGINE_THREADS_FIELD,
    ENGINES,
    MAX_ENGINE_THREADS,
    QUEUE_PLACEMENTS,
    engine_threads_refusal,
)

# The CUDA engine is a persistent kernel: with CUDA's lazy module loading (the default since
# CUDA 12.2) a kernel loaded after it started (a GPU submitter's, CuPy's own) may need a
# context synchronisation, which waits for the engine forever (the `gicbench run --engine cuda`
# hang of 2026-11-30). Eager loading has to be chosen before CUDA initialises, so here, on the
# import every EmuFabric user and the emu provider make; cuda_engine.py refuses lazy mode.
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")

ProgressMode = Literal["thread", "inline"]
PROGRESS_MODES = ("thread", "inline")
DEFAULT_SEGMENT_BYTES = 256 << 20  # sparse: only touched pages cost memory
MAX_RANKS = 256
_JOB = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def _native() -> Any:
    from ..._native import emu  # imported lazily: `gicbench doctor` must work without it

    return emu


@contextlib.contextmanager
def _checked(what: str, rank: int) -> Iterator[None]:
    """Every native call goes through here: C++ exceptions become FabricError naming the call."""
    try:
        yield
    except (RuntimeError, ValueError, OSError) as e:
        raise FabricError(f"emu rank {rank}: {what}: {e}") from e


@dataclass(frozen=True)
class EmuErrorRecord:
    """An error the engine reported out of band (not, or not only, as a CQE)."""

    kind: str  # one of _KINDS' values (or "lost")
    qpn: int
    expected: int
    found: int
    cqn: int
    rank: int  # the engine that detected it

    def __str__(self) -> str:
        what = {
            "stale_wqe": "stale WQE (doorbell overtook the WQE): expected index {e}, found {f}",
            "not_rts": "doorbell on a QP not in RTS (state {e}): WQE {f} not executed",
            "cq_overrun": "CQ overrun: consumer index {e}, producer index {f}",
            "bad_doorbell": "doorbell outside the posted window: consumer index {e}, named {f}",
            "completion": "error CQE syndrome {e:#04x} at WQE {f}",
            "qp_fatal": "QP moved to ERR (was state {e}) by the overrun of its CQ",
            "doorbell_qpn": "doorbell register of QPN {e:#08x} rung with QPN {f:#08x}",
            "bad_dbrec": "send doorbell record outside the posted window: consumer index {e}, "
            "record {f}",
            "dead_owner": "CQ lock held by dead process {f}: taken over",
            "gpi_error": "GPI descriptor {f} failed with syndrome {e:#04x} (destination {c})",
            "lost": "{e} error records lost (the ring of 256 wrapped)",
        }[self.kind].format(e=self.expected, f=self.found, c=self.cqn)
        if self.kind.startswith("gpi_"):  # qpn holds the queue's number, cqn the destination
            return f"rank {self.rank} GPI queue {self.qpn:#08x}: {what}"
        return f"rank {self.rank} QP {self.qpn:#08x} CQ {self.cqn:#08x}: {what}"


_KINDS = {
    1: "stale_wqe",
    2: "not_rts",
    3: "cq_overrun",
    4: "bad_doorbell",
    5: "completion",
    6: "qp_fatal",
    7: "doorbell_qpn",
    8: "bad_dbrec",
    9: "dead_owner",
    10: "gpi_error",
}
DOMAINS = ("host", "host-mapped", "device")


def _domain(field: str, domain: object, engine: str = "cpu", default: str = "host") -> MemoryDomain:
    """The memory domain asked for (a MemoryDomain member or its value, None = `default`);
    DEVICE only with the CUDA engine."""
    v = getattr(domain, "value", domain)
    if v is None:
        v = default
    if v not in DOMAINS:
        raise ConfigError(field, domain, " or ".join(DOMAINS))
    if v == "device" and engine != "cuda":
        raise UnsupportedError(
            f"{field}='device': GPU-resident queues and memory need the CUDA engine "
            "(engine='cuda', --engine cuda); the CPU engine cannot poll GPU memory at speed "
            "(use 'host' or 'host-mapped')"
        )
    return MemoryDomain(v)


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _cq_flags(collapsed: bool, overrun_ignore: bool) -> int:
    nat = _native()
    return (nat.CQ_COLLAPSED if collapsed else 0) | (nat.CQ_OVERRUN_IGNORE if overrun_ignore else 0)


def _qp_flags(dbr: bool, wqe_sig: bool) -> int:
    nat = _native()
    return (0 if dbr else nat.QP_NO_DBR) | (nat.QP_WQE_SIG if wqe_sig else 0)


def _check_pd(pd: object) -> None:
    if not isinstance(pd, int) or not 0 <= pd < (1 << 32):
        raise ConfigError("pd", pd, "a protection domain number (an unsigned 32-bit int)")


# cudaHostRegister flags (cuda_runtime_api.h); CuPy's runtime module does not name them.
# Native NICs whose segments stay mapped because a kernel still reads them (close, above).
_PARKED: list[Any] = []
_CUDA_HOST_REGISTER_PORTABLE = 0x01
_CUDA_HOST_REGISTER_MAPPED = 0x02


def _page_up(addr: int, page: int = 4096) -> int:
    return -(-addr // page) * page


def page_spans(ranges: list[tuple[int, int]], page: int = 4096) -> list[tuple[int, int]]:
    """The pages covering (address, length) ranges as disjoint [lo, hi) spans, sorted: ranges
    sharing or touching a page are merged."""
    spans: list[tuple[int, int]] = []
    for addr, n in sorted(ranges):
        lo, hi = addr & ~(page - 1), (addr + n + page - 1) & ~(page - 1)
        if spans and lo <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(spans[-1][1], hi))
        else:
            spans.append((lo, hi))
    return spans


class EmuFabric(Fabric):
    """The software NIC of `rank` (of `world_size`, all on this node) for job `job`."""

    name = "emu"
    _open: ClassVar[weakref.WeakSet[EmuFabric]] = weakref.WeakSet()
    _hooks_installed: ClassVar[bool] = False

    def __init__(
        self,
        rank: int,
        world_size: int,
        job: str,
        progress: ProgressMode = "thread",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        *,
        max_qps: int = 1024,
        max_cqs: int = 1024,
        max_mrs: int = 1024,
        max_dcts: int = 256,
        clean_stale: bool = True,
        engine: str = "cpu",
        engine_ctas: int | None = None,
        engine_threads: int | None = None,
        queues: str = "host",
        nic_model: NicModel | None = None,
    ) -> None:
        if not isinstance(world_size, int) or not 1 <= world_size <= MAX_RANKS:
            raise ConfigError("world_size", world_size, f"an int in 1..{MAX_RANKS} (one node)")
        if not isinstance(rank, int) or not 0 <= rank < world_size:
            raise ConfigError("rank", rank, f"an int in 0..{world_size - 1}")
        if not isinstance(job, str) or not _JOB.match(job):
            raise ConfigError("job", job, "1-64 characters of [A-Za-z0-9_.-]")
        if progress not in PROGRESS_MODES:
            raise ConfigError("progress", progress, " or ".join(PROGRESS_MODES))
        if engine not in ENGINES:
            raise ConfigError("engine (--engine)", engine, " or ".join(ENGINES))
        if queues not in QUEUE_PLACEMENTS:
            raise ConfigError("queues (--queues)", queues, " or ".join(QUEUE_PLACEMENTS))
        if queues == "device" and engine != "cuda":
            raise UnsupportedError(
                "queues (--queues) = 'device' needs the CUDA engine (--engine cuda): the CPU "
                "engine cannot poll GPU memory at speed"
            )
        if engine_ctas is not None and engine != "cuda":
            raise ConfigError("engine_ctas (--engine-ctas)", engine_ctas, "unset (CPU engine)")
        if not isinstance(segment_bytes, int) or segment_bytes < 4096 or segment_bytes % 4096:
            raise ConfigError(
                "segment_bytes", segment_bytes, "a multiple of 4096 (see segment_bytes_for)"
            )
        if nic_model is not None and not isinstance(nic_model, NicModel):
            raise ConfigError("nic_model", nic_model, "a NicModel (nic_model.load) or None")
        if engine_threads is not None and (
            not isinstance(engine_threads, int) or not 1 <= engine_threads <= MAX_ENGINE_THREADS
        ):
            why = f"an int in 1..{MAX_ENGINE_THREADS}"
        else:
            model = nic_model.name if nic_model is not None else None
            why = engine_threads_refusal(engine_threads, engine, model, progress)
        if why:
            raise ConfigError(ENGINE_THREADS_FIELD, engine_threads, why)
        if nic_model is not None and engine != "cpu":
            raise UnsupportedError(
                f"nic_model (--nic-model) {nic_model.name}: the NIC model is charged by the CPU "
                "engine only (--engine cpu); the CUDA engine does not charge it yet"
            )
        model_params = nic_model.native_params() if nic_model is not None else None
        if model_params is not None:  # the model's shared region, on top of what was sized
            segment_bytes += -(-int(_native().model_bytes(model_params)) // 4096) * 4096
        for field, v, hi in (
            ("max_qps", max_qps, _native().MAX_QPS),
            ("max_dcts", max_dcts, _native().MAX_QPS),
            ("max_cqs", max_cqs, 0xFFFF),
            ("max_mrs", max_mrs, 0xFFFFFF),
        ):
            lo = 0 if field == "max_dcts" else 1
            if not isinstance(v, int) or not lo <= v < hi:
                raise ConfigError(field, v, f"an int in {lo}..{hi - 1}")
        self.rank, self.world_size, self.job, self.mode = rank, world_size, job, progress
        self.engine, self.queues, self.nic_model = engine, queues, nic_model
        self.engine_threads = (engine_threads or 1) if engine == "cpu" else 0  # 0: no CPU engine
        self._cuda: Any = None  # the CudaEngine with engine="cuda"
        if clean_stale:
            janitor()
        with _checked("create segment", rank):
            # +1: slot 0 of every table is reserved (no object number or key is 0); a random
            # name, retried when taken (peers learn it from local_info, see janitor.py)
            self.shm_name, self._nic = create_segment(
                lambda name: _native().Nic(
                    name, rank, world_size, segment_bytes,
                    max_mrs + 1, max_qps + 1, max_cqs + 1, max_dcts + 1,
                ), job, rank,
            )  # fmt: skip
        self._closed = False
        self._sealed = False
        self._peers_added = False
        self._cqs: dict[int, CompletionQueue] = {}
        self._qps: dict[int, QueuePair] = {}
        self._domains: dict[tuple[str, int], str] = {}  # (kind, number or addr) -> domain
        self._cuda_registered: int = 0  # host address registered with CUDA (0 = none)
        self._mr_len: dict[int, int] = {}
        self._cuda_ranges: list[int] = []  # host addresses registered with CUDA
        self._cuda_arena_end = 0  # end of the queue arena's pages registered so far
        self._dev_objs: dict[int, tuple[int, int, int]] = {}  # QP slot -> GPU ring, dbrec, db
        self._devcq: dict[int, int] = {}  # CQN -> its DevCq (GPU memory)
        self._gpis: dict[int, GpiQueue] = {}
        self._exported = 0  # GPU allocations peers knew of at the last exchange
        EmuFabric._install_exit_hooks()
        EmuFabric._open.add(self)
        if engine == "cuda":
            from .cuda_engine import DEFAULT_CTAS, CudaEngine

            try:
                self._cuda = CudaEngine(self._nic, rank, world_size, max_qps + 1, max_mrs + 1,
                                        max_cqs + 1, engine_ctas or DEFAULT_CTAS)  # fmt: skip
            except BaseException:
                self._closed = True
                EmuFabric._open.discard(self)
                self._nic.close()
                raise
        else:
            if model_params is not None:
                try:
                    with _checked("set NIC model", rank):
                        _native().nic_set_model(self._nic, model_params)
                except BaseException:
                    self.close()
                    raise
            if self.engine_threads > 1:
                self._nic.set_engine_threads(self.engine_threads)
            if progress == "thread":
                self._nic.start_thread()

    # ---- exit hygiene ---------------------------------------------------------------------------
    @classmethod
    def _install_exit_hooks(cls) -> None:
        # atexit here; SIGTERM is handled natively (the segment code unlinks from a C handler).
        if not cls._hooks_installed:
            cls._hooks_installed = True
            atexit.register(cls._close_all)

    @classmethod
    def _close_all(cls) -> None:
        for f in list(cls._open):
            with contextlib.suppress(Exception):
                f.close()

    # ---- Fabric: bring-up -----------------------------------------------------------------------
    @staticmethod
    def caps() -> ProviderCaps:
        return ProviderCaps(name="emu", available=True, multi_node=False, dc=True,
                            posting=(Posting.MLX5_QUEUES.value,),
                            details={"progress": list(PROGRESS_MODES),
                                     "engines": list(ENGINES)})  # fmt: skip

    def _live(self) -> Any:
        if self._closed:
            raise FabricError(f"emu rank {self.rank}: fabric is closed")
        return self._nic

    def local_info(self) -> dict[str, Any]:
        nic = self._live()
        return {
            "provider": "emu",
            "rank": self.rank,
            "world_size": self.world_size,
            "job": self.job,
            "shm": self.shm_name,
            "bytes": nic.bytes,
            "pid": os.getpid(),
            "lid": self.rank + 1,
            "host": socket.gethostname(),
            **self._ipc_info(),
        }

    def _ipc_info(self) -> dict[str, Any]:
        """The CUDA engine's GPU allocations peers of other processes map (CUDA IPC handles of
        device MRs and CQs) and this rank's GPU, for local_info()."""
        if self._cuda is None:
            return {}
        import cupy

        dev = cupy.cuda.Device()
        return {"ipc": self._cuda.ipc_export(), "gpu": dev.id,
                "gpu_bus": cupy.cuda.runtime.deviceGetPCIBusId(dev.id)}  # fmt: skip

    def add_peers(self, infos: list[dict[str, Any]]) -> None:
        nic = self._live()
        if len(infos) != self.world_size:
            raise ConfigError("infos", f"{len(infos)} entries", f"{self.world_size} (one per rank)")
        me = self.local_info()
        for r, info in enumerate(infos):
            if info.get("provider") != "emu" or info.get("rank") != r:
                raise ConfigError(f"infos[{r}]", info, f"local_info() of emu rank {r}")
            if info.get("job") != self.job:
                raise ConfigError(f"infos[{r}].job", info.get("job"), f"{self.job!r} (same job)")
            if info.get("host") != me["host"]:
                raise UnsupportedError(
                    f"emu is one node only: rank {r} is on {info.get('host')!r}, rank "
                    f"{self.rank} on {me['host']!r}; a multi-node run needs a real NIC "
                    "(--provider verbs or mlx5)"
                )
            if r != self.rank:
                with _checked(f"attach rank {r} ({info['shm']})", self.rank):
                    nic.attach_peer(r, info["shm"], int(info["bytes"]))
                if self._cuda is not None:
                    self._cuda_peer(r, info)
        self._peers_added = True
        self._exported = len(self._cuda.ipc_export()) if self._cuda is not None else 0

    def update_peers(self, infos: list[dict[str, Any]]) -> int:
        """After add_peers(): map the GPU memory objects other processes' ranks created since
        (infos[r]: their local_info() now, exchanged by the caller, e.g. an allgather). Until
        then a WQE of ours aimed at such an object completes with REMOTE_ACCESS (a receive into
        such a CQ: RNR). Returns the allocations mapped now."""
        self._live()
        if not self._peers_added:
            raise FabricError(f"emu rank {self.rank}: update_peers() before add_peers()")
        if len(infos) != self.world_size:
            raise ConfigError("infos", f"{len(infos)} entries", f"{self.world_size} (one per rank)")
        if self._cuda is None:
            return 0
        n = 0
        for r, info in enumerate(infos):
            if r != self.rank and int(info.get("pid", -1)) != os.getpid():
                n += self._cuda.ipc_import(r, info.get("ipc", []))
        self._exported = len(self._cuda.ipc_export())
        return n

    def unexchanged(self) -> list[str]:
        """GPU memory objects created after the last add_peers()/update_peers(): peers in other
        processes cannot reach them yet (empty without the CUDA engine or before add_peers)."""
        if self._cuda is None or not self._peers_added:
            return []
        return [e["what"] for e in self._cuda.ipc_export()[self._exported :]]

    def _cuda_peer(self, r: int, info: dict[str, Any]) -> None:
        """Give the CUDA engine rank r's segment. A rank of this process: its owner's mapping,
        already registered, where its GPU-memory objects' offsets point; another process's: our
        mapping, registered now, marked foreign, and its GPU memory objects (device MRs and
        CQs) opened from the CUDA IPC handles in its info (NVLink peer access to another GPU, or
        the same GPU under MPS)."""
        if int(info.get("pid", -1)) == os.getpid():
            owner = next((f for f in EmuFabric._open if f.job == self.job and f.rank == r), None)
            if owner is not None and owner._cuda is not None:
                self._cuda.add_peer_mapped(r, owner._cuda.base_dev)
                self._cuda.set_peer_tables(r, owner._cuda.own_tables)
                return
        self._cuda.add_peer(r, int(self._nic.seg_base(r)), int(info["bytes"]), foreign=True)
        self._cuda.ipc_import(r, info.get("ipc", []))

    def seal(self) -> None:
        """Every rank has attached (the caller passed a barrier): unlink our segment's name."""
        self._live().seal()
        self._sealed = True

    def register(
        self, length: int, access: Access = ACCESS_ALL, *, pd: int = 0, domain: object = None
    ) -> MemoryRegion:
        """A memory region in protection domain `pd` (only QPs/DCTs of the same pd may use its
        keys). domain: "host" (default), "host-mapped" (registered with CUDA by
        register_cuda()) or "device" (GPU memory; the CUDA engine only)."""
        if not isinstance(length, int) or length <= 0:
            raise ConfigError("length", length, "an int >= 1 (bytes)")
        if not isinstance(access, int) or int(access) & ~int(ACCESS_ALL):
            raise ConfigError("access", access, "a combination of gicbench.fabric.base.Access")
        _check_pd(pd)
        dom = _domain("domain", domain, self.engine)
        with _checked("register", self.rank):
            addr, n, key = self._live().reg_mr(length, int(access), pd)
        dev = 0
        if self._cuda is not None:
            if dom == MemoryDomain.DEVICE:
                # GPU memory: WQEs name it by its GPU address (addr = device_addr).
                addr = dev = self._cuda.alloc(n, export=f"MR key {key:#x}")
                with _checked("relocate MR to GPU memory", self.rank):
                    self._nic.relocate_mr(key, dev, self._cuda.base_dev)
            else:
                dev = self._cuda.dev(addr)
            self._cuda.sync(1, 1)  # no QP slot: the MR table only
        self._domains[("mr", addr)] = dom
        self._mr_len[addr] = n
        mr = MemoryRegion(addr=addr, length=n, lkey=key, rkey=key, access=Access(int(access)))
        return dataclasses.replace(mr, domain=dom, device_addr=dev)

    def view(self, mr: MemoryRegion, dtype: np.typing.DTypeLike = np.uint8) -> np.ndarray:
        """A numpy view of a registered region (valid while the fabric is open)."""
        self._live()
        if mr.domain == MemoryDomain.DEVICE:
            raise UnsupportedError("view() of a device-domain MR: it is GPU memory (use CuPy)")
        return host_view(mr.addr, mr.length, dtype)

    def create_cq(
        self,
        ncqe: int,
        *,
        collapsed: bool = False,
        overrun_ignore: bool = False,
        domain: object = None,
    ) -> CompletionQueue:
        """A CQ of `ncqe` entries. collapsed (mlx5 cqc.cc): every CQE is written to entry 0.
        overrun_ignore (cqc.oi): no overrun check (the consumer index need not be published);
        without it an overrun moves the CQ to CQ_OVERFLOW and its QPs to ERR."""
        if not isinstance(ncqe, int) or not _pow2(ncqe) or ncqe > (1 << 22):
            raise ConfigError("ncqe", ncqe, "a power of two in 1..4194304")
        dom = _domain("domain", domain, self.engine, self.queues)
        flags = _cq_flags(collapsed, overrun_ignore)
        with _checked("create_cq", self.rank):
            cqn, buf, dbrec, n = self._live().create_cq(ncqe, flags)
        dbuf = ddbrec = 0
        if self._cuda is not None:
            if dom == MemoryDomain.DEVICE:
                # The CQEs as the segment initialised them; ring, record and the engine's words
                # for the CQ (lock, status, producer index) in GPU memory.
                init = host_view(buf, n * 64).tobytes()
                dbuf, ddbrec, devcq = self._cuda.device_cq(cqn, n, flags, init)
                self._devcq[cqn] = devcq
                buf, dbrec = dbuf, ddbrec
                with _checked("relocate CQ to GPU memory", self.rank):
                    self._nic.relocate_cq(cqn, devcq)
            else:
                dbuf, ddbrec = self._cuda.dev(buf), self._cuda.dev(dbrec)
        cq = CompletionQueue(cqn=cqn, buf=buf, ncqe=n, dbrec=dbrec)
        cq = dataclasses.replace(cq, domain=dom, device_buf=dbuf, device_dbrec=ddbrec)
        self._domains[("cq", cqn)] = dom
        self._cqs[cqn] = cq
        return cq

    def _own_cq(self, field: str, cq: CompletionQueue | None) -> CompletionQueue:
        if not isinstance(cq, CompletionQueue) or self._cqs.get(cq.cqn) != cq:
            raise ConfigError(field, cq, f"a CompletionQueue created by this emu rank {self.rank}")
        return cq

    def create_qp(
        self,
        send_cq: CompletionQueue,
        sq_wqebbs: int,
        recv_cq: CompletionQueue | None = None,
        rq_wqes: int = 0,
        dci: bool = False,
        *,
        dbr: bool = True,
        wqe_sig: bool = False,
        max_inline: int = 0,
        pd: int = 0,
        domain: object = None,
    ) -> QueuePair:
        """dbr=False: no send doorbell record; the producer index comes from the doorbell value
        (ConnectX-7's DBR-less SQ, DOCA GPUNetIO's GPU_SM_NO_DBR). wqe_sig: the engine checks
        each WQE's mlx5 signature (bytes XOR to 0xff) before executing it. max_inline: inline
        payload bytes allowed per WQE (0 = what ds allows); more is LOCAL_LENGTH."""
        self._own_cq("send_cq", send_cq)
        if not isinstance(max_inline, int) or not 0 <= max_inline <= 1024:
            raise ConfigError("max_inline", max_inline, "an int in 0..1024 (0 = no limit)")
        _check_pd(pd)
        dom = _domain("domain", domain, self.engine, self.queues)
        flags = _qp_flags(dbr, wqe_sig)
        if not isinstance(sq_wqebbs, int) or not _pow2(sq_wqebbs) or sq_wqebbs > 32768:
            raise ConfigError("sq_wqebbs", sq_wqebbs, "a power of two in 1..32768")
        if not isinstance(rq_wqes, int) or (rq_wqes and (not _pow2(rq_wqes) or rq_wqes > 32768)):
            raise ConfigError("rq_wqes", rq_wqes, "0 or a power of two up to 32768")
        rcq = self._own_cq("recv_cq", recv_cq or send_cq) if rq_wqes else None
        with _checked("create_qp", self.rank):
            d = self._live().create_qp(
                send_cq.cqn, sq_wqebbs, rcq.cqn if rcq else 0, rq_wqes, bool(dci),
                flags, max_inline, pd,
            )  # fmt: skip
        buf, dbrec, doorbell = d["buf"], d["dbrec"], d["doorbell"]
        dev = (0, 0, 0)
        if self._cuda is not None:
            slot = d["qpn"] & 0xFFFF
            if dom == MemoryDomain.DEVICE:
                dev = (self._cuda.alloc(d["wqebb_cnt"] * 64), self._cuda.alloc(64),
                       self._cuda.doorbell_slot(slot))  # fmt: skip
                buf, dbrec, doorbell = dev
                self._dev_objs[slot] = dev
            else:
                dev = (self._cuda.dev(buf), self._cuda.dev(dbrec), self._cuda.dev(doorbell))
            self._cuda.place_qp(slot, *dev)  # the warps read the new slot
        sq = SendQueue(qpn=d["qpn"], buf=buf, wqebb_cnt=d["wqebb_cnt"], dbrec=dbrec,
                       doorbell=doorbell, cq=send_cq)  # fmt: skip
        sq = dataclasses.replace(sq, domain=dom, device_buf=dev[0], device_dbrec=dev[1],
                                 device_doorbell=dev[2])  # fmt: skip
        self._domains[("qp", d["qpn"])] = dom
        rq = None
        if rcq is not None:
            r = d["rq"]
            rq = ReceiveQueue(buf=r["buf"], wqe_cnt=r["wqe_cnt"], dbrec=r["dbrec"], cq=rcq)
        qp = QueuePair(qpn=d["qpn"], sq=sq, rq=rq, dci=bool(dci))
        self._qps[qp.qpn] = qp
        return qp

    def create_dct(
        self, cq: CompletionQueue, dc_key: int, rq_wqes: int = 0, *, pd: int = 0
    ) -> DcTarget:
        """A DCT; `rq_wqes` > 0 gives it a receive queue for WRITE_WITH_IMM (an SRQ on mlx5)."""
        self._own_cq("cq", cq)
        _check_pd(pd)
        if not isinstance(dc_key, int) or not 0 <= dc_key < (1 << 64):
            raise ConfigError("dc_key", dc_key, "an unsigned 64-bit int")
        if not isinstance(rq_wqes, int) or (rq_wqes and (not _pow2(rq_wqes) or rq_wqes > 32768)):
            raise ConfigError("rq_wqes", rq_wqes, "0 or a power of two up to 32768")
        with _checked("create_dct", self.rank):
            d = self._live().create_dct(cq.cqn, dc_key, rq_wqes, pd)
        rq = None
        if rq_wqes:
            r = d["rq"]
            rq = ReceiveQueue(buf=r["buf"], wqe_cnt=r["wqe_cnt"], dbrec=r["dbrec"], cq=cq)
        return DcTarget(dctn=d["dctn"], dc_key=dc_key, lid=self.rank + 1, cq=cq, rq=rq)

    def endpoint(self, qp: QueuePair) -> dict[str, Any]:
        self._own_qp(qp)
        return {"provider": "emu", "rank": self.rank, "qpn": qp.qpn, "lid": self.rank + 1}

    def _own_qp(self, qp: QueuePair) -> QueuePair:
        if not isinstance(qp, QueuePair) or self._qps.get(qp.qpn) != qp:
            raise ConfigError("qp", qp, f"a QueuePair created by this emu rank {self.rank}")
        return qp

    def connect(self, qp: QueuePair, remote: dict[str, Any]) -> None:
        self._own_qp(qp)
        if qp.dci:
            for s in (QpState.INIT, QpState.RTR, QpState.RTS):
                self.modify_qp(qp, s)
            return
        if not isinstance(remote, dict) or remote.get("provider") != "emu" or not {
            "rank", "qpn"} <= remote.keys():  # fmt: skip
            raise ConfigError("remote", remote, "an emu endpoint() of the peer's QP")
        self.modify_qp(qp, QpState.INIT)
        self.modify_qp(qp, QpState.RTR, remote)
        self.modify_qp(qp, QpState.RTS)

    def modify_qp(
        self, qp: QueuePair, state: QpState, remote: dict[str, Any] | None = None
    ) -> None:
        """One state transition (RESET->INIT->RTR->RTS, any->ERR, any->RESET); RTR of an RC
        QP needs `remote` (the peer's endpoint())."""
        self._own_qp(qp)
        if not isinstance(state, QpState):
            raise ConfigError("state", state, "a QpState")
        rr, rq = (-1, 0) if remote is None else (int(remote["rank"]), int(remote["qpn"]))
        if state == QpState.RTR and not qp.dci and remote is None:
            raise ConfigError("remote", None, "the peer's endpoint() for RTR of an RC QP")
        with _checked(f"modify QP {qp.qpn:#x} to {state.name}", self.rank):
            if self._cuda is None:
                self._live().modify_qp(qp.qpn, int(state), rr, rq)
                return
            with self._cuda.hold(qp.qpn & 0xFFFF):  # no warp is inside this QP meanwhile
                self._live().modify_qp(qp.qpn, int(state), rr, rq)
                dev = self._dev_objs.get(qp.qpn & 0xFFFF)
                if state == QpState.RESET and dev is not None:  # GPU doorbell and record too
                    self._cuda.zero(dev[1], 64)
                    self._cuda.zero(dev[2], 64)

    def qp_state(self, qp: QueuePair) -> QpState:
        self._own_qp(qp)
        return QpState(self._live().qp_state(qp.qpn))

    # ---- GPI queues (docs/gpi.md) ---------------------------------------------------------------
    def create_gpi(
        self, depth: int, *, ncounters: int = 1, nwindows: int = 1, pd: int = 0,
        domain: object = None,
    ) -> GpiQueue:  # fmt: skip
        """A GPI queue of `depth` descriptors (a power of two), `ncounters` completion counters
        and a window table of `nwindows` handles per rank, in protection domain `pd`. It lives
        in the queue arena: domain "host" or "host-mapped" (register_cuda() maps it). The CPU
        engine serves it; the CUDA engine does not (refused)."""
        if self._cuda is not None:
            raise UnsupportedError(
                "create_gpi: the CUDA engine does not serve GPI queues (docs/gpi.md, Engines); "
                "use the CPU engine (engine='cpu', --engine cpu)"
            )
        gpi_queue.check_create(depth, ncounters, nwindows)
        _check_pd(pd)
        dom = _domain("domain", domain, self.engine)
        with _checked("create_gpi", self.rank):
            num, base, ring, n = self._live().create_gpi(depth, ncounters, nwindows, pd)
        q = GpiQueue(num, n, base, ring, ncounters, nwindows, pd, dom)
        self._gpis[num] = q
        self._map_late_queues()
        return q

    def _map_late_queues(self) -> None:
        """A queue created after register_cuda(): the queue arena's new pages are registered
        and mapped too, so a GPU kernel reaches it at the arena's device address plus its
        offset. That holds where CUDA maps the new range right after the first (it maps
        registered host memory at the host's own address on the machines gicbench runs on);
        anything else is refused rather than handing a kernel an unmapped address."""
        if not self._cuda_registered:
            return
        from cupy.cuda import runtime

        host, n = self.queue_arena()
        lo, hi = self._cuda_arena_end, _page_up(host + n)
        if hi <= lo:
            return
        flags = _CUDA_HOST_REGISTER_PORTABLE | _CUDA_HOST_REGISTER_MAPPED
        with _checked("map the queue arena's new pages into the GPU", self.rank):
            runtime.hostRegister(lo, hi - lo, flags)
        self._cuda_ranges.append(lo)
        self._cuda_arena_end = hi
        if device_pointer(runtime, lo) != device_pointer(runtime, host) + (lo - host):
            raise UnsupportedError(
                f"emu rank {self.rank}: CUDA mapped the queue arena's new pages apart from its "
                "first ones; create every GPI queue before register_cuda()"
            )

    def _own_gpi(self, q: GpiQueue) -> GpiQueue:
        if not isinstance(q, GpiQueue) or self._gpis.get(q.num) != q:
            raise ConfigError("gpi", q, f"a GpiQueue created by this emu rank {self.rank}")
        return q

    def set_gpi_window(self, q: GpiQueue, handle: int, rank: int, window: GpiWindow) -> None:
        """Window `handle` of queue `q` at `rank`: the memory descriptors naming that handle
        and rank reach (checked again through that rank's MR table at every access)."""
        self._own_gpi(q)
        gpi_queue.check_window(q, handle, rank, self.world_size, window)
        with _checked(f"set window {handle} of GPI queue {q.num:#x}", self.rank):
            self._live().set_gpi_window(q.num, handle, rank, window.addr, window.length,
                                        window.key)  # fmt: skip

    def gpi_ring(self, q: GpiQueue) -> gpi_queue.GpiRing:
        """Queue `q`'s ring as numpy words (to post descriptors from the host)."""
        self._live()
        return gpi_queue.ring_of(self._own_gpi(q))

    def gpi_status(self, q: GpiQueue) -> dict[str, Any]:
        """pi, ci, errors, last_error and the counters of queue `q` (gpi.status)."""
        self._live()
        return gpi_queue.status(self._own_gpi(q))

    # ---- bring-up's pools: many QPs at once ----------------------------------------------------
    def create_qps(
        self,
        count: int,
        sq_wqebbs: int,
        cq_options: Mapping[str, Any],
        qp_options: Mapping[str, Any],
    ) -> list[QueuePair]:
        """The first QP and its CQ through create_cq/create_qp (every option checked there),
        the others from the same checked values in one loop of native calls: the per-QP path
        costs ~85 µs of Python a QP, 2.8 s for emu's 32,766. The CUDA engine takes the per-QP
        path (each QP is placed for its warps)."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ConfigError("count", count, "an int >= 1")
        if not isinstance(sq_wqebbs, int) or not _pow2(sq_wqebbs) or sq_wqebbs > 32768:
            raise ConfigError("sq_wqebbs", sq_wqebbs, "a power of two in 1..32768")
        if self._cuda is not None:
            return super().create_qps(count, sq_wqebbs, cq_options, qp_options)
        first = self.create_qp(self.create_cq(sq_wqebbs, **cq_options), sq_wqebbs, **qp_options)
        cq0, sq0 = first.sq.cq, first.sq
        cq_flags = _cq_flags(
            bool(cq_options.get("collapsed")), bool(cq_options.get("overrun_ignore"))
        )
        qp_flags = _qp_flags(bool(qp_options.get("dbr", True)), bool(qp_options.get("wqe_sig")))
        dci = bool(qp_options.get("dci"))
        inline, pd = int(qp_options.get("max_inline", 0)), int(qp_options.get("pd", 0))
        cq_dom, qp_dom = self._domains[("cq", cq0.cqn)], self._domains[("qp", first.qpn)]
        nic, out = self._live(), [first]
        with _checked("create_qps", self.rank):
            for _ in range(count - 1):
                cqn, buf, dbrec, n = nic.create_cq(cq0.ncqe, cq_flags)
                cq = CompletionQueue(cqn, buf, n, dbrec, cq_dom)
                d = nic.create_qp(cqn, sq0.wqebb_cnt, 0, 0, dci, qp_flags, inline, pd)
                sq = SendQueue(
                    d["qpn"], d["buf"], d["wqebb_cnt"], d["dbrec"], d["doorbell"], cq, qp_dom
                )
                qp = QueuePair(d["qpn"], sq, None, dci)
                self._cqs[cqn] = cq
                self._domains[("cq", cqn)] = cq_dom
                self._domains[("qp", qp.qpn)] = qp_dom
                self._qps[qp.qpn] = qp
                out.append(qp)
        return out

    def _own_all(self, qps: Sequence[QueuePair]) -> None:
        """_own_qp of each, by identity first (comparing frozen dataclasses field by field
        costs more than the bring-up of a QP)."""
        mine = self._qps
        for qp in qps:
            if mine.get(getattr(qp, "qpn", None)) is not qp:
                self._own_qp(qp)

    def endpoints(self, qps: Sequence[QueuePair]) -> dict[str, Any]:
        """The QP numbers in order, with what every emu endpoint() carries: one small object
        to exchange instead of a dict per QP."""
        self._own_all(qps)
        return {"provider": "emu", "rank": self.rank, "lid": self.rank + 1,
                "qpns": np.array([qp.qpn for qp in qps], dtype=np.uint32)}  # fmt: skip

    def connect_rc(self, qps: Sequence[QueuePair], remote: Any) -> None:
        """Every QP to RTS towards the peer's QP of the same place in `remote` (its
        endpoints(), or a list of endpoint() dicts), all checked before any QP changes; the
        CUDA engine takes the per-QP path."""
        if isinstance(remote, dict) and "qpns" in remote:
            if remote.get("provider") != "emu" or not isinstance(remote.get("rank"), int):
                raise ConfigError("remote", remote, "an emu endpoints() of the peer's QPs")
            rr, rqpns = int(remote["rank"]), np.asarray(remote["qpns"]).tolist()
        else:
            rr, rqpns = -1, []
        self._own_all(qps)
        dci = next((qp for qp in qps if qp.dci), None)
        if dci is not None:
            raise ConfigError("qp", dci, "an RC QP (connect a DCI with connect())")
        if rr < 0 or self._cuda is not None:  # endpoint() dicts, or the CUDA engine
            if rr >= 0:
                remote = [{"provider": "emu", "rank": rr, "qpn": q} for q in rqpns]
            return super().connect_rc(qps, remote)
        if len(rqpns) != len(qps):
            raise ConfigError("remote", f"{len(rqpns)} endpoints", f"{len(qps)}, one per QP")
        nic = self._live()
        init, rtr, rts = int(QpState.INIT), int(QpState.RTR), int(QpState.RTS)
        with _checked(f"connect {len(qps)} QPs to rank {rr}", self.rank):
            for qp, rq in zip(qps, rqpns, strict=True):
                nic.modify_qp(qp.qpn, init, -1, 0)
                nic.modify_qp(qp.qpn, rtr, rr, rq)
                nic.modify_qp(qp.qpn, rts, -1, 0)

    # ---- the queue arena and CUDA ---------------------------------------------------------------
    def queue_arena(self) -> tuple[int, int]:
        """(address, bytes) of the queue arena: doorbell registers, doorbell records and the rings
        created so far, page aligned at both ends and apart from the memory regions."""
        addr, n = self._live().queue_arena
        return int(addr), int(n)

    def register_cuda(self) -> dict[str, Any]:
        """Register the queue arena with CUDA (cudaHostRegister, portable + mapped) so GPU
        kernels can write WQEs, records and doorbells, plus the pages of every "host-mapped"
        memory region; return the device addresses: {"queue_arena": (host, device, bytes),
        "qps": {qpn: {"buf", "dbrec", "doorbell"}}, "cqs": {cqn: {"buf", "dbrec"}},
        "gpis": {num: {"base", "ring"}}, "mrs": {addr: device_addr}}. Call after every queue
        is created (the arena is registered as it is then). Raises UnsupportedError without
        CuPy or a GPU."""
        try:
            import cupy  # noqa: F401
            from cupy.cuda import runtime
        except ImportError as e:
            raise UnsupportedError(f"register_cuda needs CuPy ({e})") from e
        try:
            if runtime.getDeviceCount() < 1:
                raise UnsupportedError("register_cuda needs a CUDA GPU: none found")
        except runtime.CUDARuntimeError as e:
            raise UnsupportedError(f"register_cuda needs a CUDA GPU: {e}") from e
        if self._cuda is not None:
            return self._cuda_addresses()
        if self._cuda_registered:
            raise FabricError(f"emu rank {self.rank}: the queue arena is already registered")
        host, n = self.queue_arena()
        flags = _CUDA_HOST_REGISTER_PORTABLE | _CUDA_HOST_REGISTER_MAPPED
        runtime.hostRegister(host, n, flags)
        self._cuda_registered = host
        self._cuda_ranges = [host]
        self._cuda_arena_end = _page_up(host + n)
        dev = device_pointer(runtime, host)

        def d(a: int) -> int:
            return dev + (a - host)

        out: dict[str, Any] = {"queue_arena": (host, dev, n), "qps": {}, "cqs": {}, "mrs": {}}
        for qp in self._qps.values():
            out["qps"][qp.qpn] = {
                "buf": d(qp.sq.buf), "dbrec": d(qp.sq.dbrec), "doorbell": d(qp.sq.doorbell)
            }  # fmt: skip
        for cq in self._cqs.values():
            out["cqs"][cq.cqn] = {"buf": d(cq.buf), "dbrec": d(cq.dbrec)}
        out["gpis"] = {q.num: {"base": d(q.base), "ring": d(q.ring)} for q in self._gpis.values()}
        mapped = [
            (addr, self._mr_len[addr])
            for (kind, addr), dom in self._domains.items()
            if kind == "mr" and dom == "host-mapped"
        ]
        # MRs are 64-byte aligned, so neighbours can share a page: each page is registered once
        # (CUDA refuses a range that overlaps a registered one).
        for lo, hi in page_spans(mapped):
            runtime.hostRegister(lo, hi - lo, flags)
            self._cuda_ranges.append(lo)
            dev_lo = device_pointer(runtime, lo)
            for addr, _ in mapped:
                if lo <= addr < hi:
                    out["mrs"][addr] = dev_lo + (addr - lo)
        return out

    def _cuda_addresses(self) -> dict[str, Any]:
        """register_cuda() under the CUDA engine: the segment is registered already."""
        eng = self._cuda
        host, n = self.queue_arena()
        out: dict[str, Any] = {"queue_arena": (host, eng.dev(host), n), "qps": {}, "cqs": {},
                               "gpis": {}, "mrs": {}}  # fmt: skip
        for qp in self._qps.values():
            s = qp.sq
            out["qps"][qp.qpn] = {"buf": s.device_buf, "dbrec": s.device_dbrec,
                                  "doorbell": s.device_doorbell}  # fmt: skip
        for cq in self._cqs.values():
            out["cqs"][cq.cqn] = {"buf": cq.device_buf, "dbrec": cq.device_dbrec}
        for (kind, addr), dom in self._domains.items():
            if kind == "mr":
                out["mrs"][addr] = addr if dom == MemoryDomain.DEVICE else eng.dev(addr)
        return out

    # ---- counters and errors --------------------------------------------------------------------
    def counters(self) -> dict[str, int]:
        nic = self._live()
        c = dict(nic.counters())
        if self._cuda is not None:  # the CUDA engine keeps its own counts in GPU memory
            c = self._cuda.add_counters(c)
        c.update(nic.gpi_counters())  # the GPI queues' (docs/gpi.md, Counters)
        c.update(self.model_counters())
        return c

    def model_counters(self) -> dict[str, int]:
        """The NIC model's counters (nic_model_wqes, _cqes, _late, _send_misses, _recv_misses,
        _dci_connects); empty without a model."""
        return dict(_native().nic_model_counters(self._live())) if self.nic_model else {}

    def model_log(self) -> dict[str, np.ndarray]:
        """The last WQEs the model planned (oldest first, up to 8,192): qpn, idx, kind, flags,
        bytes, and in picoseconds of the model's clock t_seen (the engine saw it), t_exec and
        t_cqe (modelled landing and CQE), exec_at and cqe_at (when the engine did them; 0: not
        yet or unsignaled)."""
        if not self.nic_model:
            return {}
        cols = _native().nic_model_log(self._live())
        return {k: np.asarray(v, dtype=np.uint64) for k, v in cols.items()}

    def point_results(self, before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
        """Per point with a NIC model: which model produced it and whether the engine kept up
        with it (the share of events made visible later than modelled; saturated above 1%).
        Nothing without a model."""
        if self.nic_model is None:
            return {}
        events = sum(after.get(k, 0) - before.get(k, 0) for k in ("nic_model_wqes",
                                                                    "nic_model_cqes"))  # fmt: skip
        late = after.get("nic_model_late", 0) - before.get("nic_model_late", 0)
        frac = late / events if events else 0.0
        return {"nic_model": self.nic_model.name, "nic_model_late_fraction": frac,
                "nic_model_saturated": frac > SATURATED_FRACTION}  # fmt: skip

    def qp_counters(self, qp: QueuePair) -> dict[str, int]:
        """Per-QP engine state: state, sq_ci, wqes, doorbells, errors, stale_wqes, rq_ci."""
        self._own_qp(qp)
        return dict(self._live().qp_info(qp.qpn))

    def dct_counters(self, dct: DcTarget) -> dict[str, int]:
        return dict(self._live().dct_info(dct.dctn))

    def cq_status(self, cq: CompletionQueue) -> dict[str, int]:
        """status (0 OK, 9 CQ_OVERFLOW as in mlx5_ifc.h), pi (CQEs written), dropped."""
        self._own_cq("cq", cq)
        info = dict(self._live().cq_info(cq.cqn))
        if cq.cqn in self._devcq:  # the engine keeps these words in GPU memory
            info.update(self._cuda.cq_words(self._devcq[cq.cqn]))
        return info

    def errors(self) -> list[EmuErrorRecord]:
        """Error records reported since the last call (oldest first)."""
        records, lost = self._live().drain_errors()
        out = [
            EmuErrorRecord(_KINDS.get(k, f"kind{k}"), q, e, f, c, r) for k, q, e, f, c, r in records
        ]
        if lost:
            out.append(EmuErrorRecord("lost", 0, lost, 0, 0, self.rank))
        return out

    def check(self) -> None:
        """Raise what the engine reported: CompletionError when only error CQEs were reported,
        FabricError for stale WQEs, doorbells on non-RTS QPs, CQ overruns, bad doorbells."""
        recs = self.errors()
        if not recs:
            return
        text = "; ".join(str(r) for r in recs[:8])
        if len(recs) > 8:
            text += f" (+{len(recs) - 8} more)"
        if all(r.kind == "completion" for r in recs):
            first = recs[0]
            err: Exception = CompletionError(
                f"emu rank {self.rank}: {text}",
                syndrome=first.expected,
                wqe_counter=first.found,
                qpn=first.qpn,
            )
        else:
            err = FabricError(f"emu rank {self.rank}: {text}")
        err.records = recs  # type: ignore[attr-defined]
        raise err

    # ---- progress -------------------------------------------------------------------------------
    def progress_policy(self) -> ProgressPolicy:
        if self._cuda is not None:
            return ProgressPolicy("cuda", autonomous=True)
        if self.mode == "thread":
            return ProgressPolicy("thread", autonomous=True)
        return ProgressPolicy("inline", autonomous=False,
                              cpu_hook=(self.progress_hook(), self.progress_ctx()))  # fmt: skip

    def progress_hook(self) -> int:
        inline = self.mode == "inline" and self._cuda is None
        return int(self._live().progress_hook) if inline else 0

    def progress_ctx(self) -> int:
        inline = self.mode == "inline" and self._cuda is None
        return int(self._live().progress_ctx) if inline else 0

    def progress(self) -> int:
        """One CPU engine pass (either mode); returns the work done (0 = idle). Nothing with the
        CUDA engine, which runs on its own."""
        if self._cuda is not None:
            self._live()
            return 0
        return int(self._live().progress())

    @contextlib.contextmanager
    def setup_batch(self) -> Iterator[None]:
        """The CUDA engine's warps learn of the QPs created and connected inside at the end,
        in one handshake (CudaEngine.setup_batch); the CPU engine reads the segment directly and
        needs nothing."""
        if self._cuda is None:
            yield
            return
        with self._cuda.setup_batch():
            yield

    def quiesce(self) -> None:
        """Return once every doorbell rung before the call has been executed."""
        if self._cuda is not None:
            self._live()
            self._cuda.quiesce()
            return
        self._live().quiesce()

    def stop_engine(self) -> None:
        """Stop the CUDA engine's kernel (close() does it too). Several ranks of one process:
        stop every engine before closing any, so no CUDA call that waits for the device runs
        while another engine kernel spins."""
        if self._cuda is not None:
            self._cuda.stop()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        EmuFabric._open.discard(self)
        if self._cuda is not None:
            # A kernel that does not stop keeps the segment mapped (the process's exit ends
            # both) rather than have it fault on unmapped memory.
            self._cuda.close()
        if self._cuda_ranges and stuck_kernels():
            # cudaHostUnregister would wait for a kernel that never ends: keep the registered
            # segment mapped for the process's life, with the engine's thread stopped.
            self._nic.stop_thread()
            _PARKED.append(self._nic)
            print(
                f"gicbench: emu rank {self.rank}: host memory left registered and mapped at "
                f"close: a kernel is still running ({stuck_kernels()[-1]})",
                file=sys.stderr,
            )
            return
        if self._cuda_ranges:  # unregister before the segment is unmapped
            from cupy.cuda import runtime

            for a in self._cuda_ranges:
                with contextlib.suppress(Exception):
                    runtime.hostUnregister(a)
            self._cuda_ranges = []
        self._nic.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
