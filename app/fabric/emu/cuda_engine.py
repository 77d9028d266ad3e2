"""The CUDA engine of one emu rank: cuda/emu_engine.cu as a persistent kernel on its own stream.

Compilation: nvcc, at first use, to a cubin cached under ~/.cache/gicbench/cuda by a hash of the
sources, the GPU's architecture and nvcc's version; CuPy loads the cubin. Not NVRTC: the engine
includes the segment layout (proxy's emu_layout.hpp, host C++ with GCC builtins NVRTC cannot
parse) and libcu++'s atomic_ref, and a cubin is what compute-sanitizer and the bench reuse.

Control. The kernel reads a host-mapped control block (stop, hold, gen, quiesce) and acks per
warp in host-mapped memory. Every control-plane change goes through here: create/register bump
`gen` and wait until every warp has re-read its QPs (and warp 0 the MR table) from the segment;
a QP state change first `hold`s the engine (every warp acks and waits: none is inside that QP),
as the CPU engine's lock does. quiesce() returns once every warp has completed a pass that began
after the call and found no work, its counters flushed (per-QP ones into the segment, the
segment-wide ones into the warp's row in GPU memory, which counters() adds: add_counters).

Residency: the engine's CTAs must all be resident at once, before any submitter kernel can fill
the GPU; otherwise a submitter waiting for a CQE and an engine CTA waiting for an SM deadlock.
Before launch the occupancy calculator says how many engine CTAs fit on the GPU with one SM left
free for submitters (engines of this process counted together); more is refused. After launch
every warp reports in; the engine is not used until all have (timeout: stopped, with a
diagnostic). Launch the engine (create the
fabric) before any submitter kernel.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...cuda_host import cuda_dir, source_switches, switch_defines
from ...errors import ConfigError, FabricError, UnsupportedError

THREADS = 256  # per CTA: 8 warps (the kernel's __launch_bounds__)
MAX_CTAS = 4096
DEFAULT_CTAS = 16
# A control handshake, the residency check or a stop that takes longer is a fault (raised with a
# diagnostic). GICBENCH_CUDA_ENGINE_TIMEOUT_S raises both, e.g. under compute-sanitizer.
ACK_TIMEOUT_S = float(os.environ.get("GICBENCH_CUDA_ENGINE_TIMEOUT_S", "10"))
STOP_TIMEOUT_S = ACK_TIMEOUT_S
# MiB of GPU memory reserved before the launch, from which device objects (queues, CQs, MRs,
# doorbell registers) are carved: compute-sanitizer memcheck checks a kernel's accesses against
# the allocations that existed at its launch, so only then is its report on the engine clean.
# 0 (default): each object is its own cudaMalloc, made when it is created.
ARENA_ENV = "GICBENCH_CUDA_ENGINE_ARENA_MB"
ARENA_ALIGN = 256  # what cudaMalloc gives: rings, CQs and MRs keep their alignment
MAX_RANKS = 256
KERNEL, SIZES = "gicbench_emu_engine", "gicbench_emu_engine_sizes"
SOURCES = ("emu_engine.cu", "emu_core.cuh", "gpi.cuh", "mlx5.cuh", "emu_layout.hpp")
_CUDA_HOST_REGISTER_PORTABLE_MAPPED = 0x01 | 0x02
_ATTR_CAN_USE_HOST_POINTER = 91  # cudaDevAttrCanUseHostPointerForRegisteredMem
_ATTR_SM_COUNT = 16  # cudaDevAttrMultiProcessorCount
# Control block (uint32 words) and per-warp ack (WarpAck: 4 x uint32, 2 x uint64).
STOP, HOLD, GEN, QUIESCE, REF_LO, REF_HI = range(6)
ACK_RESIDENT, ACK_HELD, ACK_GEN, ACK_QUIESCE = range(4)
ACK_WORDS = 8  # 32 bytes
PLACE_BYTES = 32  # QpPlace: ring, dbrec, doorbell, flags
PLACE_RING_GPU, PLACE_DBREC_GPU, PLACE_DOORBELL_GPU = 1, 2, 4  # QpPlace.flags: in GPU memory
DEVCQ_BYTES = 48  # DevCq: buf, ci_rec, lock, status, pi, dropped, ncqe, flags, cqn, pad
CQ_SET_CI = 0  # mlx5: the consumer index word of a CQ's record
# Peers (CUDA IPC): ranges of other processes' GPU memory mapped here (emu_engine.cu's PeerMap).
MAX_PEER_RANGES = 4096
PEER_RANGE_BYTES = 32  # PeerRange: lo, len, local, rank, pad
_IPC_LAZY_ENABLE_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
# The engine tables peers' engines read (emu_engine.cu's PeerTables, GICBENCH_ENGINE_PEER_TABLES):
# one allocation of the head (MR count, QP slots in use, the segment's table offsets), the
# per-QP engine state and the MR mirror, exported with the device objects.
TABLES_HEAD_BYTES = 64
TABLES_WHAT = "engine tables"
PEER_TABLES_BYTES = 32  # PeerTables: qps, mrs, hdr, max_qps, max_mrs
MR_ENTRY_BYTES = 48  # emu_layout.hpp's MrEntry


def arena_bytes() -> int:
    """GICBENCH_CUDA_ENGINE_ARENA_MB in bytes (ConfigError unless an int >= 0)."""
    raw = os.environ.get(ARENA_ENV, "0")
    try:
        mb = int(raw)
    except ValueError:
        mb = -1
    if mb < 0:
        raise ConfigError(ARENA_ENV, raw, "an int >= 0 (MiB of GPU memory the engine reserves "
                          "before its launch; 0: none)")  # fmt: skip
    return mb << 20


DEFINES_ENV = "GICBENCH_CUDA_ENGINE_DEFINES"


def engine_macros() -> set[str]:
    """The engine's build switches: every `#ifndef GICBENCH_ENGINE_*` of cuda/emu_engine.cu."""
    return source_switches(cuda_dir() / "emu_engine.cu", "GICBENCH_ENGINE_")


def engine_defines() -> list[str]:
    """GICBENCH_CUDA_ENGINE_DEFINES ("SCOPE_GPU=1,CTL_WARP=1"; the GICBENCH_ENGINE_ prefix may be
    left out) as nvcc -D flags for the engine every CudaEngine of this process builds: a variant
    of bench/cuda_engine.py's under the conformance suite. ConfigError for a name the engine does
    not read or a value that is not an int >= 0. Empty (default): the engine as measured."""
    return switch_defines(DEFINES_ENV, engine_macros(), "the engine", "GICBENCH_ENGINE_")


def _nvcc() -> str:
    exe = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )
    if exe is None:
        raise UnsupportedError("--engine cuda compiles cuda/emu_engine.cu with nvcc: not found")
    return exe


def compile_engine(arch: str, source: str = "emu_engine.cu") -> Path:
    """The cubin of cuda/`source` (the engine, or bench/cuda_engine.py's kernels) for `arch`
    (e.g. "sm_90"), from the cache or built now."""
    src = cuda_dir()
    nvcc = _nvcc()
    defs = engine_defines() if source == "emu_engine.cu" else []
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256((arch + ver + " ".join(defs)).encode())
    for name in (source, *SOURCES):
        h.update((src / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gicbench" / "cuda"
    cubin = cache / f"{Path(source).stem}-{arch}-{h.hexdigest()[:16]}.cubin"
    if cubin.exists():
        return cubin
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cubin.with_suffix(f".{os.getpid()}.tmp")
    cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-O3", "-lineinfo", f"-I{src}", *defs, "-cubin",
           str(src / source), "-o", str(tmp)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise FabricError(f"nvcc failed on {source}:\n{(r.stdout + r.stderr).strip()}")
    tmp.replace(cubin)
    return cubin


def _cupy() -> Any:
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except ImportError as e:
        raise UnsupportedError(f"--engine cuda needs CuPy ({e})") from e
    except Exception as e:  # CUDARuntimeError: no driver, no device
        raise UnsupportedError(f"--engine cuda needs a CUDA GPU: {e}") from e
    if n < 1:
        raise UnsupportedError("--engine cuda needs a CUDA GPU: none found")
    return cupy


def _blocks_per_sm(cp: Any, kernel: Any, threads: int) -> int:
    """CTAs of `threads` that fit on one SM at once (the occupancy calculator; from the
    kernel's registers where CuPy lacks it)."""
    occ = getattr(cp.cuda.driver, "occupancyMaxActiveBlocksPerMultiprocessor", None)
    fn = getattr(kernel, "kernel", None)
    if occ is not None and fn is not None and hasattr(fn, "ptr"):
        return int(occ(fn.ptr, threads, 0))
    attrs = cp.cuda.Device().attributes
    regs_warp = -(-int(kernel.num_regs) * 32 // 256) * 256  # allocated per warp, 256 at a time
    by_regs = attrs["MaxRegistersPerMultiprocessor"] // (regs_warp * (threads // 32))
    by_threads = attrs["MaxThreadsPerMultiProcessor"] // threads
    return max(0, min(by_regs, by_threads, attrs.get("MaxBlocksPerMultiprocessor", 32)))


def module_loading() -> str:
    """CUDA's module loading mode in this process ("eager", "lazy", or "unknown" where the driver
    cannot say): cuModuleGetLoadingMode."""
    import ctypes

    try:
        fn = ctypes.CDLL("libcuda.so.1").cuModuleGetLoadingMode
    except (OSError, AttributeError):
        return "unknown"
    mode = ctypes.c_int(0)
    if fn(ctypes.byref(mode)) != 0:
        return "unknown"
    return {1: "eager", 2: "lazy"}.get(mode.value, "unknown")  # CU_MODULE_{EAGER,LAZY}_LOADING


class AddressRanges:
    """Disjoint [lo, hi) address ranges, looked up in O(log n): a rank with 16,384 QPs has twice
    as many GPU allocations, and a linear scan per QP made its set-up quadratic."""

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []
        for lo, hi in ranges:
            self.add(lo, hi)

    def add(self, lo: int, hi: int) -> None:
        i = bisect.bisect_right(self._lo, lo)
        self._lo.insert(i, lo)
        self._hi.insert(i, hi)

    def __contains__(self, addr: object) -> bool:
        i = bisect.bisect_right(self._lo, addr) - 1  # type: ignore[arg-type]
        return i >= 0 and addr < self._hi[i]  # type: ignore[operator]


def place_flags(gpu: AddressRanges, ring: int, dbrec: int, doorbell: int) -> int:
    """QpPlace.flags: which of a QP's ring, record and doorbell lie in GPU memory this engine
    allocated (`gpu`); anything else (the mapped segment) is host memory. Only a positive match
    counts: an address of unknown kind is treated as host memory (system scope), the conservative
    side."""
    return ((PLACE_RING_GPU if ring in gpu else 0) | (PLACE_DBREC_GPU if dbrec in gpu else 0)
            | (PLACE_DOORBELL_GPU if doorbell in gpu else 0))  # fmt: skip


def add_warp_counts(counts: dict[str, int], rows: np.ndarray) -> dict[str, int]:
    """`counts` (name -> value, in the counters' index order) plus the column sums of `rows`
    (one row per warp, one column per counter, the same order). The engine counts its own
    segment's events in GPU memory, per warp, not with system-scope atomics on the mapped
    segment: the host adds them here."""
    if rows.ndim != 2 or rows.shape[1] != len(counts):
        raise FabricError(f"CUDA engine counter rows {rows.shape} do not match the segment's "
                          f"{len(counts)} counters")  # fmt: skip
    sums = rows.sum(axis=0, dtype=np.uint64)
    return {k: int(v) + int(s) for (k, v), s in zip(counts.items(), sums, strict=True)}


class CudaEngine:
    """The persistent engine kernel serving rank `nic`'s QPs (see the module docstring)."""

    _ctas_launched: ClassVar[int] = 0  # engine CTAs resident in this process
    _modules: ClassVar[dict[str, Any]] = {}  # arch -> (module, kernel, sizes): loaded once
    # Exported allocations of closed engines: cudaFree waits for the device, so they are freed
    # only once no engine kernel of this process is running.
    _deferred: ClassVar[list[Any]] = []

    def __init__(self, nic: Any, rank: int, world: int, max_qps: int, max_mrs: int,
                 max_cqs: int, ctas: int = DEFAULT_CTAS) -> None:  # fmt: skip
        if not isinstance(ctas, int) or not 1 <= ctas <= MAX_CTAS:
            raise ConfigError("engine_ctas (--engine-ctas)", ctas, f"an int in 1..{MAX_CTAS}")
        arena = arena_bytes()
        engine_defines()  # refused here, before anything is made
        cp = _cupy()
        if module_loading() == "lazy":
            raise UnsupportedError(
                "the CUDA engine needs CUDA_MODULE_LOADING=EAGER in the environment before CUDA "
                "initialises (importing gicbench.fabric.emu sets it; here CUDA was initialised "
                "first): with lazy loading, a kernel loaded after the engine started may wait "
                "for the engine's persistent kernel forever"
            )
        self.cp, rt = cp, cp.cuda.runtime
        self.rank, self.world, self.ctas = rank, world, ctas
        self.max_qps, self.max_mrs = max_qps, max_mrs
        self._stopped = True
        self._registered: list[int] = []
        self._hold_token = 0
        self._batch: set[int] | None = None  # QP slots placed inside setup_batch(), not yet synced
        dev = cp.cuda.Device()
        cc = dev.compute_capability
        if cc not in CudaEngine._modules:  # once per process (another engine may be running)
            module = cp.RawModule(path=str(compile_engine(f"sm_{cc}")))
            sizes = cp.zeros(8, dtype=cp.uint64)
            module.get_function(SIZES)((1,), (1,), (sizes,))
            CudaEngine._modules[cc] = (module, module.get_function(KERNEL), sizes.get())
        self.module, self.kernel, sz = CudaEngine._modules[cc]
        qp_b, cfg_b, ack_b, place_b, mr_b, devcq_b, ncnt = (int(x) for x in sz[:7])
        self._qp_b = qp_b
        if (ack_b, place_b, mr_b, devcq_b) != (ACK_WORDS * 4, PLACE_BYTES, MR_ENTRY_BYTES,
                                               DEVCQ_BYTES):  # fmt: skip
            raise FabricError(f"emu_engine.cu layouts differ from cuda_engine.py: {sz.tolist()}")
        if ncnt != len(nic.counters()):
            raise FabricError(
                f"emu_engine.cu counts {ncnt} counters, the segment {len(nic.counters())}"
            )
        # Residency: every CTA of every engine in this process resident at once.
        sms = rt.deviceGetAttribute(_ATTR_SM_COUNT, dev.id)
        per_sm = _blocks_per_sm(cp, self.kernel, THREADS)
        # One SM's worth stays free: an engine filling every SM leaves a submitter's kernels
        # (and the bench's producer) no room to ever start (seen on the H200 with 132 CTAs).
        room = per_sm * (sms - 1) - CudaEngine._ctas_launched
        if ctas > room:
            raise UnsupportedError(
                f"engine_ctas (--engine-ctas) = {ctas}: only {max(room, 0)} more engine CTAs of "
                f"{THREADS} threads can be resident on this GPU with one SM left for submitters "
                f"({per_sm} per SM x {sms} SMs, {CudaEngine._ctas_launched} already used by "
                "engines of this process); the engine's CTAs must all be resident or a "
                "submitter could starve it, and must not fill the GPU or starve the submitter"
            )
        self.nwarps = ctas * THREADS // 32
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.ctl_stream = cp.cuda.Stream(non_blocking=True)
        # The segment, mapped (tables, counters, error records, host-resident queues and MRs).
        self.base, self.bytes = int(nic.base), int(nic.bytes)
        self.base_dev = self.register_host(self.base, self.bytes)
        # Host-mapped control block and acks.
        self._ctl_mem = cp.cuda.alloc_pinned_memory(32)
        self.ctl = np.frombuffer(self._ctl_mem, np.uint32, 6)
        self.ctl[:] = 0
        self._ack_mem = cp.cuda.alloc_pinned_memory(self.nwarps * ACK_WORDS * 4)
        self.acks = np.frombuffer(self._ack_mem, np.uint32, self.nwarps * ACK_WORDS).reshape(
            self.nwarps, ACK_WORDS
        )
        self.acks[:] = 0
        # GPU memory: the tables peers read (head, per-QP engine state, MR mirror: one
        # allocation of its own, so its IPC handle maps exactly it), placement, the config.
        self._exports: list[dict[str, Any]] = []  # GPU memory peers may map (ipc_export)
        qps_at = TABLES_HEAD_BYTES
        mrs_at = qps_at + -(-max_qps * qp_b // ARENA_ALIGN) * ARENA_ALIGN
        tab_bytes = mrs_at + max_mrs * mr_b
        self._tables = cp.cuda.memory.Memory(tab_bytes)
        self.tables = int(self._tables.ptr)
        rt.memsetAsync(self.tables, 0, tab_bytes, self.ctl_stream.ptr)
        self.ctl_stream.synchronize()
        self._exports.append({"addr": self.tables, "bytes": tab_bytes, "what": TABLES_WHAT,
                              "handle": None,
                              "tables": {"qps": qps_at, "mrs": mrs_at, "max_qps": max_qps,
                                         "max_mrs": max_mrs}})  # fmt: skip
        self.own_tables = (self.tables + qps_at, self.tables + mrs_at, self.tables, max_qps,
                           max_mrs)  # fmt: skip
        self.place = cp.zeros((max_qps, 4), dtype=cp.uint64)
        self.peer_tables = cp.zeros(MAX_RANKS * PEER_TABLES_BYTES, dtype=cp.uint8)
        self.cq_dev = cp.zeros(max_cqs, dtype=cp.uint64)  # own CQ slot -> its DevCq (0: none)
        self.ctl_mirror = cp.zeros(8, dtype=cp.uint32)  # the control block as warps read it
        # Per warp, running totals of its own-segment counts (add_counters sums them).
        self.ncounters = ncnt
        self.wcnt = cp.zeros(self.nwarps * ncnt, dtype=cp.uint64)
        # Peers: n, shared, then MAX_PEER_RANGES PeerRanges (written by ipc_import).
        self.peer_map = cp.zeros(8 + MAX_PEER_RANGES * PEER_RANGE_BYTES, dtype=cp.uint8)
        self._opened: dict[tuple[int, int], int] = {}  # (rank, owner address) -> mapped here
        self._n_ranges = 0
        self._dev_bufs: list[Any] = []  # GPU memory handed out (kept until close)
        self._dev_bufs.append(self._tables)  # freed as the exported objects are
        self._gpu_ranges = AddressRanges()  # [lo, hi) of every alloc(): GPU memory
        self._db_page: Any = None  # GPU doorbell registers, one per QP slot, made on demand
        # The arena (ARENA_ENV), allocated before the launch; alloc() carves from it. Its own
        # cudaMalloc (not the pool): its IPC handle then maps exactly it, from its base.
        self._arena: Any = cp.cuda.memory.Memory(arena) if arena else None
        self._arena_at = int(self._arena.ptr) if arena else 0
        self._arena_end = self._arena_at + arena
        cfg = np.zeros(cfg_b // 8, np.uint64)
        cfg[rank] = self.base_dev
        meta = cfg[MAX_RANKS:]
        meta.view(np.int32)[:2] = (rank, world)
        meta.view(np.uint32)[2:4] = (os.getpid() & 0xFFFFFFFF, max_qps)
        ptrs = [self._ctl_dev(), self._acks_dev(), self.place.data.ptr, self.tables + qps_at,
                self.tables + mrs_at, self.tables, self.tables + 4,
                self.cq_dev.data.ptr, self.ctl_mirror.data.ptr,
                self.peer_map.data.ptr, self.wcnt.data.ptr, self.tables,
                self.peer_tables.data.ptr]  # fmt: skip
        meta[2 : 2 + len(ptrs)] = ptrs
        self.cfg = cp.asarray(cfg)
        cp.cuda.Stream.null.synchronize()  # in place before the launch (never the device: other
        self.ctl_stream.synchronize()  # engines of this process may be running)
        self._launch()

    # ---- memory ---------------------------------------------------------------------------------
    def register_host(self, addr: int, n: int) -> int:
        """cudaHostRegister(portable | mapped) a range; returns its GPU address."""
        rt = self.cp.cuda.runtime
        rt.hostRegister(addr, n, _CUDA_HOST_REGISTER_PORTABLE_MAPPED)
        self._registered.append(addr)
        get = getattr(rt, "hostGetDevicePointer", None)
        if get is not None:
            return int(get(addr, 0))
        if rt.deviceGetAttribute(_ATTR_CAN_USE_HOST_POINTER, rt.getDevice()):
            return addr
        raise UnsupportedError("this GPU cannot use host pointers for registered memory")

    def dev(self, host_addr: int) -> int:
        """The GPU address of an address inside this rank's segment."""
        return self.base_dev + (host_addr - self.base)

    def alloc(self, nbytes: int, init: bytes | None = None, export: str = "") -> int:
        """GPU memory (zeroed, or `init`), kept until close; returns its address. From the arena
        when there is one (ARENA_ENV), else CuPy's pool. export: what it is (e.g. "MR key
        0x103"), for memory peers in other processes map (ipc_export). With an arena, the arena
        is exported once, as one peer range covering every object carved from it (so memcheck
        still sees one pre-launch allocation); without, the object is an allocation of its own
        (cudaMalloc, not the pool, so its IPC handle maps exactly it)."""
        if (
            export
            and self._arena is not None
            and not any(e["addr"] == int(self._arena.ptr) for e in self._exports)
        ):
            self._exports.append({"addr": int(self._arena.ptr),
                                  "bytes": self._arena_end - int(self._arena.ptr),
                                  "what": f"GPU arena ({ARENA_ENV})", "handle": None})  # fmt: skip
        if export and self._arena is None:
            mem = self.cp.cuda.memory.Memory(max(nbytes, 64))
            self._exports.append({"addr": int(mem.ptr), "bytes": max(nbytes, 64),
                                  "what": export, "handle": None})  # fmt: skip
            self._dev_bufs.append(mem)
            ptr = int(mem.ptr)
        elif self._arena is not None:
            ptr = -(-self._arena_at // ARENA_ALIGN) * ARENA_ALIGN
            if ptr + max(nbytes, 64) > self._arena_end:
                raise UnsupportedError(
                    f"{ARENA_ENV}={os.environ.get(ARENA_ENV)}: the CUDA engine's GPU arena is "
                    f"full ({nbytes} more bytes wanted, {self._arena_end - self._arena_at} left);"
                    f" raise {ARENA_ENV}"
                )
            self._arena_at = ptr + max(nbytes, 64)
        else:
            mem = self.cp.cuda.alloc(max(nbytes, 64))
            self._dev_bufs.append(mem)
            ptr = int(mem.ptr)
        self._gpu_ranges.add(ptr, ptr + max(nbytes, 64))
        rt = self.cp.cuda.runtime
        if init is None:
            rt.memsetAsync(ptr, 0, nbytes, self.ctl_stream.ptr)
        else:
            host = np.frombuffer(init, np.uint8)
            rt.memcpyAsync(ptr, host.ctypes.data, len(init), 1, self.ctl_stream.ptr)
        self.ctl_stream.synchronize()
        return ptr

    def device_cq(self, cqn: int, ncqe: int, flags: int, init: bytes) -> tuple[int, int, int]:
        """A CQ's ring, record and DevCq in GPU memory, one allocation (one IPC handle: peers'
        engines write responder CQEs here); returns (ring, record, DevCq)."""
        n = ncqe * 64
        ring = self.alloc(n + 64 + DEVCQ_BYTES, init=init + bytes(64 + DEVCQ_BYTES),
                          export=f"CQ {cqn:#x}")  # fmt: skip
        dbrec, dev = ring + n, ring + n + 64
        d = np.zeros(DEVCQ_BYTES // 4, np.uint32)
        d.view(np.uint64)[:2] = (ring, dbrec + 4 * CQ_SET_CI)
        d[8:11] = (ncqe, flags, cqn)  # lock, status, pi, dropped start at 0
        self.write(dev, d)
        self.write(self.cq_dev.data.ptr + 8 * (cqn & 0xFFFF), np.array([dev], np.uint64))
        return ring, dbrec, dev

    def warp_counts(self) -> np.ndarray:
        """The warps' counter rows (nwarps x counters, GPU memory) as they stand: complete up to
        the last quiesce, hold or stop, as the segment's counters were when warps flushed there."""
        out = np.zeros(self.nwarps * self.ncounters, np.uint64)
        try:
            self.cp.cuda.runtime.memcpyAsync(out.ctypes.data, self.wcnt.data.ptr, out.nbytes, 2,
                                             self.ctl_stream.ptr)  # fmt: skip
            self.ctl_stream.synchronize()
        except Exception as e:  # CUDARuntimeError: e.g. the engine kernel faulted
            raise FabricError(f"emu rank {self.rank}: the CUDA engine's counters (GPU memory) "
                              f"cannot be read: {e}") from e  # fmt: skip
        return out.reshape(self.nwarps, self.ncounters)

    def add_counters(self, counts: dict[str, int]) -> dict[str, int]:
        """`counts` (the segment's counters, in the layout's order: Nic.counters()) with what
        this engine's warps counted added: what counters() returns."""
        return add_warp_counts(counts, self.warp_counts())

    def cq_words(self, devcq: int) -> dict[str, int]:
        """status, pi, dropped of a CQ in GPU memory (as CqEntry's for cq_status())."""
        out = np.zeros(DEVCQ_BYTES // 4, np.uint32)
        self.cp.cuda.runtime.memcpyAsync(out.ctypes.data, devcq, DEVCQ_BYTES, 2,
                                         self.ctl_stream.ptr)  # fmt: skip
        self.ctl_stream.synchronize()
        return {"status": int(out[5]), "pi": int(out[6]), "dropped": int(out[7])}

    def write(self, dst: int, host: np.ndarray) -> None:
        """Host bytes to GPU memory, on the control stream (the engine's keeps running)."""
        self.cp.cuda.runtime.memcpyAsync(dst, host.ctypes.data, host.nbytes, 1,
                                         self.ctl_stream.ptr)  # fmt: skip
        self.ctl_stream.synchronize()

    def zero(self, addr: int, nbytes: int) -> None:
        self.cp.cuda.runtime.memsetAsync(addr, 0, nbytes, self.ctl_stream.ptr)
        self.ctl_stream.synchronize()

    def doorbell_slot(self, index: int) -> int:
        """A GPU-memory doorbell register (64 bytes apart, like the segment's) for QP slot i."""
        if self._db_page is None:
            self._db_page = self.alloc(self.max_qps * 64)
        return self._db_page + index * 64

    def place_qp(self, index: int, ring: int, dbrec: int, doorbell: int) -> None:
        """Where QP slot `index`'s ring, record and doorbell are (GPU addresses); then the warps
        re-read their QPs."""
        flags = place_flags(self._gpu_ranges, ring, dbrec, doorbell)
        self.write(self.place.data.ptr + index * PLACE_BYTES,
                   np.array([ring, dbrec, doorbell, flags], np.uint64))  # fmt: skip
        if self._batch is not None:
            self._batch.add(index)  # synced at the batch's end
        else:
            self.sync(index, index + 1)

    @contextlib.contextmanager
    def setup_batch(self) -> Iterator[None]:
        """QP slots placed inside are re-read by the warps together at the end: one handshake,
        not one per create and two per state change (16,384 QPs took a minute of handshakes).
        Nothing can be inside such a QP before then (no doorbell was rung on it: the caller
        posts nothing before the block ends; a warp that re-reads all slots meanwhile sees an
        unrung QP), so its state changes need no hold. Nested blocks sync at the outermost."""
        if self._batch is not None:
            yield
            return
        self._batch = set()
        ok = False
        try:
            yield
            ok = True
        finally:
            fresh, self._batch = self._batch, None
            if fresh and (ok or self.running()):
                try:
                    self.sync(min(fresh), max(fresh) + 1)
                except FabricError:
                    if ok:
                        raise  # else the block's own error is the one to report

    def add_peer(self, rank: int, base: int, nbytes: int, foreign: bool) -> None:
        """Rank `rank`'s segment as mapped here; foreign: it is another process's rank."""
        self.add_peer_mapped(rank, self.register_host(base, nbytes) | (1 if foreign else 0))

    def add_peer_mapped(self, rank: int, addr: int) -> None:
        """Rank `rank`'s segment at GPU address `addr` (bit 0: another process's)."""
        if addr & 1:  # peers in other processes may lock our CQs: system-scope hand-offs
            self.write(self.peer_map.data.ptr + 4, np.array([1], np.uint32))
        self.write(self.cfg.data.ptr + 8 * rank, np.array([addr], np.uint64))
        self.sync()

    # ---- peers in other processes: CUDA IPC ------------------------------------------------------
    def ipc_export(self) -> list[dict[str, Any]]:
        """Every GPU allocation peers must reach (device MRs; device CQs with their engine
        words), with its cudaIpcGetMemHandle as hex: plain data for local_info()."""
        rt = self.cp.cuda.runtime
        out = []
        for e in self._exports:
            if e["handle"] is None:
                try:
                    e["handle"] = bytes(rt.ipcGetMemHandle(e["addr"])).hex()
                except Exception as err:  # CUDARuntimeError
                    raise FabricError(f"emu rank {self.rank}: cudaIpcGetMemHandle of its "
                                      f"{e['what']} at {e['addr']:#x}: {err}") from err  # fmt: skip
            out.append({k: e[k] for k in ("addr", "bytes", "what", "handle", "tables") if k in e})
        return out

    def ipc_import(self, rank: int, exports: list[dict[str, Any]]) -> int:
        """Open rank `rank`'s exported allocations (another process's; cudaIpcOpenMemHandle:
        NVLink peer access to another GPU, or the same GPU) and add them to the engine's peer
        map; ones already open are skipped. Returns how many were opened now."""
        rt = self.cp.cuda.runtime
        new = []
        for e in exports:
            key = (rank, int(e["addr"]))
            if key in self._opened:
                continue
            if "tables" in e:  # not a peer range: the engine reads it through cfg.peer_tables
                self._import_tables(rank, e)
                continue
            if self._n_ranges + len(new) >= MAX_PEER_RANGES:
                raise FabricError(
                    f"emu rank {self.rank}: rank {rank}'s {e['what']}: the CUDA engine's peer map "
                    f"is full ({MAX_PEER_RANGES} GPU allocations of other processes' ranks)"
                )
            try:
                local = int(rt.ipcOpenMemHandle(bytes.fromhex(e["handle"]),
                                                _IPC_LAZY_ENABLE_PEER_ACCESS))  # fmt: skip
            except Exception as err:  # CUDARuntimeError
                raise FabricError(
                    f"emu rank {self.rank}: cudaIpcOpenMemHandle of rank {rank}'s {e['what']} "
                    f"({e['bytes']} bytes at {int(e['addr']):#x} there): {err}"
                ) from err
            self._opened[key] = local
            new.append((int(e["addr"]), int(e["bytes"]), local, rank))
        if not new:
            return 0
        ranges = np.zeros(len(new) * 4, np.uint64)
        for k, (lo, n, local, r) in enumerate(new):
            ranges[4 * k : 4 * k + 4] = (lo, n, local, r)
        self.write(self.peer_map.data.ptr + 8 + self._n_ranges * PEER_RANGE_BYTES, ranges)
        self._n_ranges += len(new)  # the entries land before the count that covers them
        self.write(self.peer_map.data.ptr, np.array([self._n_ranges], np.uint32))
        return len(new)

    def _import_tables(self, rank: int, e: dict[str, Any]) -> None:
        """Map rank `rank`'s published engine tables (an ipc_export entry with "tables") and
        point cfg.peer_tables[rank] at them."""
        t, n = e["tables"], int(e["bytes"])
        try:
            qps, mrs, max_qps, max_mrs = (int(t[k]) for k in ("qps", "mrs", "max_qps", "max_mrs"))
        except (KeyError, TypeError, ValueError) as err:
            raise FabricError(f"emu rank {self.rank}: rank {rank}'s {TABLES_WHAT}: {t!r} is not "
                              "its layout (qps, mrs, max_qps, max_mrs)") from err  # fmt: skip
        fits = qps >= TABLES_HEAD_BYTES and qps + max_qps * self._qp_b <= mrs
        if not (fits and mrs + max_mrs * MR_ENTRY_BYTES <= n):
            raise FabricError(
                f"emu rank {self.rank}: rank {rank}'s {TABLES_WHAT} layout {t!r} does not fit "
                f"its {n} bytes (another build of the engine?)"
            )
        rt = self.cp.cuda.runtime
        try:
            handle = bytes.fromhex(e["handle"])
            local = int(rt.ipcOpenMemHandle(handle, _IPC_LAZY_ENABLE_PEER_ACCESS))
        except Exception as err:  # CUDARuntimeError
            raise FabricError(f"emu rank {self.rank}: cudaIpcOpenMemHandle of rank {rank}'s "
                              f"{TABLES_WHAT} ({n} bytes): {err}") from err  # fmt: skip
        self._opened[(rank, int(e["addr"]))] = local
        self.set_peer_tables(rank, (local + qps, local + mrs, local, max_qps, max_mrs))

    def set_peer_tables(self, rank: int, tables: tuple[int, int, int, int, int]) -> None:
        """cfg.peer_tables[rank] = (qps, mrs, hdr, max_qps, max_mrs) as mapped here (a rank of
        this process: its engine's own_tables)."""
        w = np.zeros(PEER_TABLES_BYTES // 8, np.uint64)
        w[:3] = tables[:3]
        w.view(np.uint32)[6:8] = tables[3:]
        self.write(self.peer_tables.data.ptr + PEER_TABLES_BYTES * rank, w)

    def ipc_close(self) -> None:
        """Close every peer mapping (after the kernel stopped: nothing reads them then)."""
        rt = self.cp.cuda.runtime
        for local in self._opened.values():
            with contextlib.suppress(Exception):
                rt.ipcCloseMemHandle(local)
        self._opened = {}

    def _ctl_dev(self) -> int:
        return self._host_mapped(self._ctl_mem.ptr)

    def _acks_dev(self) -> int:
        return self._host_mapped(self._ack_mem.ptr)

    def _host_mapped(self, ptr: int) -> int:
        get = getattr(self.cp.cuda.runtime, "hostGetDevicePointer", None)
        return int(get(ptr, 0)) if get is not None else int(ptr)

    # ---- launch, handshakes, stop ---------------------------------------------------------------
    def _launch(self) -> None:
        self.ctl[GEN] = 1
        self.write(self.ctl_mirror.data.ptr, self.ctl.copy())  # warp 0 keeps it current after
        with self.stream:  # a RawKernel launches on the current stream
            self.kernel((self.ctas,), (THREADS,), (self.cfg,))
        self._stopped = False
        CudaEngine._ctas_launched += self.ctas
        try:
            self._wait(ACK_RESIDENT, 1, "report in (residency)")
            self._wait(ACK_GEN, 1, "read its QPs")
        except FabricError:
            self.stop()
            raise

    def _wait(self, word: int, value: int, what: str, timeout: float = ACK_TIMEOUT_S) -> None:
        t0 = time.monotonic()
        while True:
            col = self.acks[:, word]
            if (col == value).all():
                return
            if self.stream.done:
                raise FabricError(f"emu rank {self.rank}: the CUDA engine exited while its warps "
                                  f"were to {what}: {self.diagnostic()}")  # fmt: skip
            if time.monotonic() - t0 > timeout:
                late = np.flatnonzero(col != value)
                raise FabricError(
                    f"emu rank {self.rank}: CUDA engine warps {late[:8].tolist()} (of "
                    f"{self.nwarps}) did not {what} within {timeout:.0f} s: {self.diagnostic()}"
                )
            time.sleep(0)

    def diagnostic(self) -> str:
        a = self.acks
        passes = a[:, 4:6].copy().view(np.uint64)[:, 0]
        served = a[:, 6:8].copy().view(np.uint64)[:, 0]
        return (
            f"ctl stop={self.ctl[STOP]} hold={self.ctl[HOLD]} gen={self.ctl[GEN]} "
            f"quiesce={self.ctl[QUIESCE]}; warps resident {int(a[:, ACK_RESIDENT].sum())}/"
            f"{self.nwarps}, gen acks {sorted(set(a[:, ACK_GEN].tolist()))[:4]}, quiesce acks "
            f"{sorted(set(a[:, ACK_QUIESCE].tolist()))[:4]}, passes (last report) "
            f"min {int(passes.min())} max {int(passes.max())}, QPs served {int(served.sum())}"
        )

    def _bump(self, lo: int, hi: int) -> int:
        """A new generation: warps that see exactly this one re-read QP slots [lo, hi) (hi 0:
        all; a warp that missed a generation re-reads all)."""
        self.ctl[REF_LO], self.ctl[REF_HI] = lo, hi
        self.ctl[GEN] = g = (int(self.ctl[GEN]) + 1) & 0xFFFFFFFF or 1
        return g

    def sync(self, lo: int = 0, hi: int = 0) -> None:
        """Every warp has re-read the segment's tables (after a create, register or modify):
        QP slots [lo, hi) (hi 0: all) and the MR table."""
        self._live()
        self._wait(ACK_GEN, self._bump(lo, hi), "re-read the tables")

    @contextlib.contextmanager
    def hold(self, slot: int = 0):  # type: ignore[no-untyped-def]
        """No warp serves while the block runs (a QP state change); then QP `slot` (0: all) is
        re-read."""
        if slot and self._batch is not None and slot in self._batch:
            yield  # not yet read by any warp (setup_batch)
            return
        self._live()
        self._hold_token += 1
        self.ctl[HOLD] = self._hold_token
        try:
            self._wait(ACK_HELD, self._hold_token, "hold")
            yield
        finally:
            g = self._bump(slot, slot + 1 if slot else 0)
            self.ctl[HOLD] = 0
        self._wait(ACK_GEN, g, "re-read the tables after a hold")

    def quiesce(self, timeout: float = ACK_TIMEOUT_S) -> None:
        """Return once every doorbell rung before the call has been handled and counted."""
        self._live()
        self.ctl[QUIESCE] = q = (int(self.ctl[QUIESCE]) + 1) & 0xFFFFFFFF
        self._wait(ACK_QUIESCE, q, "quiesce", timeout)

    def _live(self) -> None:
        if self._stopped:
            raise FabricError(f"emu rank {self.rank}: the CUDA engine is stopped")

    def running(self) -> bool:
        return not self._stopped and not self.stream.done

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Set the stop flag and wait for the kernel; a kernel that does not stop in `timeout` is
        reported (FabricError with the warps' last reports), never waited on forever."""
        if self._stopped:
            return
        self.ctl[STOP] = 1
        t0 = time.monotonic()
        while not self.stream.done:
            if time.monotonic() - t0 > timeout:
                raise FabricError(
                    f"emu rank {self.rank}: the CUDA engine did not stop within {timeout:.0f} s "
                    f"of its stop flag: {self.diagnostic()} (the kernel ends with the process)"
                )
            time.sleep(0.0005)
        self._stopped = True
        CudaEngine._ctas_launched -= self.ctas
        self.stream.synchronize()  # raises the kernel's error, if it faulted

    def close(self) -> None:
        """Stop the kernel, then unregister host memory and free GPU memory."""
        self.stop()
        self.ipc_close()
        rt = self.cp.cuda.runtime
        for a in self._registered:
            with contextlib.suppress(Exception):
                rt.hostUnregister(a)
        self._registered = []
        own = [m for m in self._dev_bufs if isinstance(m, self.cp.cuda.memory.Memory)]
        CudaEngine._deferred.extend(own)  # freeing these now would wait for running engines
        self._dev_bufs = []
        if self._arena is not None:  # carved objects may still be read by running engines
            CudaEngine._deferred.append(self._arena)
        self._arena = None
        if CudaEngine._ctas_launched == 0:
            CudaEngine._deferred = []
