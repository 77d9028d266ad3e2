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
after the call and found no work, its counters flushed into the segment.

Residency: the engine's CTAs must all be resident at once, before any submitter kernel can fill
the GPU; otherwise a submitter waiting for a CQE and an engine CTA waiting for an SM deadlock.
Before launch the occupancy calculator says how many engine CTAs fit on the GPU (engines of this
process counted together); more is refused. After launch every warp reports in; the engine is
not used until all have (timeout: stopped, with a diagnostic). Launch the engine (create the
fabric) before any submitter kernel.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ...errors import ConfigError, FabricError, UnsupportedError

THREADS = 256  # per CTA: 8 warps (the kernel's __launch_bounds__)
MAX_CTAS = 4096
DEFAULT_CTAS = 16
ACK_TIMEOUT_S = 10.0  # a control handshake or the residency check that takes longer is a fault
STOP_TIMEOUT_S = 10.0
MAX_RANKS = 256
KERNEL, SIZES = "gicbench_emu_engine", "gicbench_emu_engine_sizes"
SOURCES = ("emu_engine.cu", "emu_core.cuh", "mlx5.cuh", "emu_layout.hpp")
_CUDA_HOST_REGISTER_PORTABLE_MAPPED = 0x01 | 0x02
_ATTR_CAN_USE_HOST_POINTER = 91  # cudaDevAttrCanUseHostPointerForRegisteredMem
_ATTR_SM_COUNT = 16  # cudaDevAttrMultiProcessorCount
# Control block (uint32 words) and per-warp ack (WarpAck: 4 x uint32, 2 x uint64).
STOP, HOLD, GEN, QUIESCE = range(4)
ACK_RESIDENT, ACK_HELD, ACK_GEN, ACK_QUIESCE = range(4)
ACK_WORDS = 8  # 32 bytes
PLACE_BYTES = 24  # QpPlace: ring, dbrec, doorbell


def cuda_dir() -> Path:
    return Path(str(importlib.resources.files("gicbench") / "cuda"))


def _nvcc() -> str:
    exe = shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )
    if exe is None:
        raise UnsupportedError("--engine cuda compiles cuda/emu_engine.cu with nvcc: not found")
    return exe


def compile_engine(arch: str) -> Path:
    """The engine's cubin for `arch` (e.g. "sm_90"), from the cache or built now."""
    src = cuda_dir()
    nvcc = _nvcc()
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    h = hashlib.sha256((arch + ver).encode())
    for name in SOURCES:
        h.update((src / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gicbench" / "cuda"
    cubin = cache / f"emu_engine-{arch}-{h.hexdigest()[:16]}.cubin"
    if cubin.exists():
        return cubin
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cubin.with_suffix(f".{os.getpid()}.tmp")
    cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-O3", "-lineinfo", f"-I{src}", "-cubin",
           str(src / "emu_engine.cu"), "-o", str(tmp)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise FabricError(f"nvcc failed on emu_engine.cu:\n{(r.stdout + r.stderr).strip()}")
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


class CudaEngine:
    """The persistent engine kernel serving rank `nic`'s QPs (see the module docstring)."""

    _ctas_launched: ClassVar[int] = 0  # engine CTAs resident in this process

    def __init__(self, nic: Any, rank: int, world: int, max_qps: int, max_mrs: int,
                 ctas: int = DEFAULT_CTAS) -> None:  # fmt: skip
        if not isinstance(ctas, int) or not 1 <= ctas <= MAX_CTAS:
            raise ConfigError("engine_ctas (--engine-ctas)", ctas, f"an int in 1..{MAX_CTAS}")
        cp = _cupy()
        self.cp, rt = cp, cp.cuda.runtime
        self.rank, self.world, self.ctas = rank, world, ctas
        self.max_qps, self.max_mrs = max_qps, max_mrs
        self._stopped = True
        self._registered: list[int] = []
        self._hold_token = 0
        dev = cp.cuda.Device()
        cc = dev.compute_capability
        self.module = cp.RawModule(path=str(compile_engine(f"sm_{cc}")))
        self.kernel = self.module.get_function(KERNEL)
        sizes = cp.zeros(8, dtype=cp.uint64)
        self.module.get_function(SIZES)((1,), (1,), (sizes,))
        qp_b, cfg_b, ack_b, place_b, mr_b = (int(x) for x in sizes.get()[:5])
        if ack_b != ACK_WORDS * 4 or place_b != PLACE_BYTES or mr_b != 48:
            raise FabricError(f"emu_engine.cu layouts differ from cuda_engine.py: {sizes.get()}")
        # Residency: every CTA of every engine in this process resident at once.
        sms = rt.deviceGetAttribute(_ATTR_SM_COUNT, dev.id)
        fn = getattr(self.kernel, "kernel", self.kernel)
        per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, THREADS, 0)
        room = per_sm * sms - CudaEngine._ctas_launched
        if ctas > room:
            raise UnsupportedError(
                f"engine_ctas (--engine-ctas) = {ctas}: only {room} more engine CTAs of "
                f"{THREADS} threads can be resident on this GPU ({per_sm} per SM x {sms} SMs, "
                f"{CudaEngine._ctas_launched} already used by engines of this process); the "
                "engine's CTAs must all be resident or a submitter could starve it"
            )
        self.nwarps = ctas * THREADS // 32
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.ctl_stream = cp.cuda.Stream(non_blocking=True)
        # The segment, mapped (tables, counters, error records, host-resident queues and MRs).
        self.base, self.bytes = int(nic.base), int(nic.bytes)
        self.base_dev = self.register_host(self.base, self.bytes)
        # Host-mapped control block and acks.
        self._ctl_mem = cp.cuda.alloc_pinned_memory(16)
        self.ctl = np.frombuffer(self._ctl_mem, np.uint32, 4)
        self.ctl[:] = 0
        self._ack_mem = cp.cuda.alloc_pinned_memory(self.nwarps * ACK_WORDS * 4)
        self.acks = np.frombuffer(self._ack_mem, np.uint32, self.nwarps * ACK_WORDS).reshape(
            self.nwarps, ACK_WORDS
        )
        self.acks[:] = 0
        # GPU memory: per-QP engine state and placement, the MR mirror, the config.
        self.qps = cp.zeros(max_qps * qp_b, dtype=cp.uint8)
        self.place = cp.zeros((max_qps, 3), dtype=cp.uint64)
        self.mr_mirror = cp.zeros(max_mrs * mr_b, dtype=cp.uint8)
        self.words = cp.zeros(2, dtype=cp.uint32)  # mr_count, n_qps
        self._dev_bufs: list[Any] = []  # GPU memory handed out (kept until close)
        self._db_page: Any = None  # GPU doorbell registers, one per QP slot, made on demand
        cfg = np.zeros(cfg_b // 8, np.uint64)
        cfg[rank] = self.base_dev
        meta = cfg[MAX_RANKS:]
        meta.view(np.int32)[:2] = (rank, world)
        meta.view(np.uint32)[2:4] = (os.getpid() & 0xFFFFFFFF, max_qps)
        ptrs = [self._ctl_dev(), self._acks_dev(), self.place.data.ptr, self.qps.data.ptr,
                self.mr_mirror.data.ptr, self.words.data.ptr, self.words.data.ptr + 4]  # fmt: skip
        meta[2:9] = ptrs
        self.cfg = cp.asarray(cfg)
        cp.cuda.runtime.deviceSynchronize()  # everything above is in place before the launch
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

    def alloc(self, nbytes: int, init: bytes | None = None) -> int:
        """GPU memory (zeroed, or `init`), kept until close; returns its address."""
        mem = self.cp.cuda.alloc(max(nbytes, 64))
        self._dev_bufs.append(mem)
        rt = self.cp.cuda.runtime
        if init is None:
            rt.memsetAsync(mem.ptr, 0, nbytes, self.ctl_stream.ptr)
        else:
            host = np.frombuffer(init, np.uint8)
            rt.memcpyAsync(mem.ptr, host.ctypes.data, len(init), 1, self.ctl_stream.ptr)
        self.ctl_stream.synchronize()
        return int(mem.ptr)

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
        host = np.array([ring, dbrec, doorbell], np.uint64)
        dst = self.place.data.ptr + index * PLACE_BYTES
        self.cp.cuda.runtime.memcpyAsync(dst, host.ctypes.data, PLACE_BYTES, 1, self.ctl_stream.ptr)
        self.ctl_stream.synchronize()
        self.sync()

    def add_peer(self, rank: int, base: int, nbytes: int, foreign: bool) -> None:
        """Rank `rank`'s segment as mapped here; foreign: it is another process's rank."""
        self.add_peer_mapped(rank, self.register_host(base, nbytes) | (1 if foreign else 0))

    def add_peer_mapped(self, rank: int, addr: int) -> None:
        """Rank `rank`'s segment at GPU address `addr` (bit 0: another process's)."""
        host = np.array([addr], np.uint64)
        self.cp.cuda.runtime.memcpyAsync(self.cfg.data.ptr + 8 * rank, host.ctypes.data, 8, 1,
                                         self.ctl_stream.ptr)  # fmt: skip
        self.ctl_stream.synchronize()
        self.sync()

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
        self.kernel((self.ctas,), (THREADS,), (self.cfg,), stream=self.stream)
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

    def sync(self) -> None:
        """Every warp has re-read the segment's tables (after a create, register or modify)."""
        self._live()
        self.ctl[GEN] = g = (int(self.ctl[GEN]) + 1) & 0xFFFFFFFF or 1
        self._wait(ACK_GEN, g, "re-read the tables")

    @contextlib.contextmanager
    def hold(self):  # type: ignore[no-untyped-def]
        """No warp serves while the block runs (a QP state change); the tables are re-read."""
        self._live()
        self._hold_token += 1
        self.ctl[HOLD] = self._hold_token
        try:
            self._wait(ACK_HELD, self._hold_token, "hold")
            yield
        finally:
            self.ctl[GEN] = g = (int(self.ctl[GEN]) + 1) & 0xFFFFFFFF or 1
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
        rt = self.cp.cuda.runtime
        for a in self._registered:
            with contextlib.suppress(Exception):
                rt.hostUnregister(a)
        self._registered = []
        self._dev_bufs = []
