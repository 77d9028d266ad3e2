"""mini-proxy's GPU producer kernels run on the CPU, for tests on machines without a GPU.

The kernels' source (cuda/proxy/kernels.cu, as gpu_kernels.py loads it) keeps every PTX
instruction in five helpers; built with PX_CPU, this shim gives them host atomics instead (a
release store, an acquire load, one 16-byte SSE store for the tuned publish, as the host
producers do), and the CUDA built-ins (blockIdx, gridDim, atomicAdd, clock64 as nanoseconds)
their host meaning. g++ compiles the same kernels into a shared library; `cpu_producers` gives a
GpuProducers whose CuPy is a stand-in over numpy: each launched block is a host thread calling
the kernel, a stream's event is done when its blocks have returned. What the kernels make land,
through gpu.py's own argument computation and a real engine, can then be compared with what the
host producers (proxy_host.cpp) land for the same work. Timing means nothing here; landing does.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from gicbench import _native
from gicbench.submit.proxy import gpu
from gicbench.submit.proxy.gpu_kernels import options, source

SHIM = r"""
#include <atomic>
#include <cstdint>
#include <ctime>
#include <sched.h>
#include <emmintrin.h>
#define PX_CPU 1
#define __global__
#define __device__
#define __forceinline__ inline
struct PxDim { unsigned x = 0; };
static thread_local PxDim threadIdx, blockIdx, gridDim;
extern "C" void px_cpu_block(unsigned b, unsigned n) { blockIdx.x = b; gridDim.x = n; }
typedef unsigned long long u64;
static inline u64 px_now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (u64)t.tv_sec * 1000000000ull + (u64)t.tv_nsec;
}
// Every read of host-written state sits in a spin loop or before a publish: let the engine's
// threads run (two cores shared by many here).
static inline u64 ld_sys(const u64* p) {
  sched_yield();
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static inline u64 gtime() { return px_now(); }
static inline long long clock64() { return (long long)px_now(); }
static inline void st_word(u64* p, u64 v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
static inline void st_release_sys(u64* p, u64 v) {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
static inline void st_pair(u64* p, u64 w0, u64 w1) {
  std::atomic_signal_fence(std::memory_order_release);
  _mm_store_si128(reinterpret_cast<__m128i*>(p), _mm_set_epi64x((long long)w1, (long long)w0));
}
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline u64 atomicAdd(u64* p, u64 v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
"""

_LIB: dict[str, ctypes.CDLL] = {}


def compiler() -> str | None:
    return shutil.which("g++") or shutil.which("c++")


def build(tmp: Path) -> ctypes.CDLL:
    """The kernels as a host shared library (once per process)."""
    if "lib" not in _LIB:
        cxx = compiler()
        assert cxx is not None
        cc, so = tmp / "px_cpu.cpp", tmp / "px_cpu.so"
        cc.write_text(SHIM + source())
        flags = [*options(_native.proxy), "-O1", "-fPIC", "-shared", "-pthread"]
        r = subprocess.run(
            [cxx, *flags, str(cc), "-o", str(so)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert r.returncode == 0, r.stderr
        _LIB["lib"] = ctypes.CDLL(str(so))
    return _LIB["lib"]


class DevArray(np.ndarray):
    """A "device" array: host memory the CPU kernels write, read back with get()."""

    def get(self) -> np.ndarray:
        return np.array(self)


def _arg(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return ctypes.c_void_p(a.ctypes.data)
    for t, c in (
        (np.uint64, ctypes.c_uint64),
        (np.int64, ctypes.c_int64),
        (np.uint32, ctypes.c_uint32),
        (np.int32, ctypes.c_int32),
        (np.float64, ctypes.c_double),
    ):
        if isinstance(a, t):
            return c(a.item())
    raise TypeError(f"kernel argument of type {type(a).__name__}")


class _Current(threading.local):
    stream: Stream | None = None


class Stream:
    """A stream: the blocks launched on it. The current stream is per thread, as CuPy's is
    (two in-process ranks launch from two threads: a shared one would put one rank's kernels,
    and its waits, on the other's stream)."""

    _current = _Current()

    def __init__(self, non_blocking: bool = True) -> None:
        self.blocks: list[threading.Thread] = []

    @classmethod
    def current(cls) -> Stream | None:
        return cls._current.stream

    def __enter__(self) -> Stream:
        self.prev, Stream._current.stream = Stream._current.stream, self
        return self

    def __exit__(self, *exc: object) -> None:
        Stream._current.stream = self.prev

    def synchronize(self) -> None:
        for t in self.blocks:
            t.join()


LEGACY_STREAM = Stream()


def get_current_stream() -> Stream:
    """This thread's stream: a launch outside `with stream:` uses CuPy's legacy default."""
    return Stream.current() or LEGACY_STREAM


class Event:
    def record(self, stream: Stream) -> None:
        self.blocks = list(stream.blocks)

    @property
    def done(self) -> bool:
        return not any(t.is_alive() for t in self.blocks)

    def synchronize(self) -> None:
        for t in self.blocks:
            t.join()


class Kernel:
    """fn((grid,), (block,), args): one host thread per block (its thread 0; the others of
    a block return at once in every producer kernel), on the current stream."""

    def __init__(self, lib: ctypes.CDLL, name: str) -> None:
        self.lib, self.fn = lib, getattr(lib, name)
        self.fn.restype = None
        self.launches: list[tuple[int, tuple]] = []

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        stream = Stream.current()
        assert stream is not None, "a launch outside a stream"
        self.launches.append((int(grid[0]), args))
        cargs = [_arg(a) for a in args]
        n = int(grid[0])

        def run(b: int) -> None:
            self.lib.px_cpu_block(ctypes.c_uint(b), ctypes.c_uint(n))
            self.fn(*cargs)

        for b in range(n):
            t = threading.Thread(target=run, args=(b,), daemon=True)
            t.start()
            stream.blocks.append(t)


def fake_cupy() -> SimpleNamespace:
    def zeros(n: int, dtype: Any) -> DevArray:
        return np.zeros(n, dtype=dtype).view(DevArray)

    def asarray(a: Any) -> DevArray:
        return np.array(a).view(DevArray)

    return SimpleNamespace(
        uint64=np.uint64,
        int64=np.int64,
        int32=np.int32,
        uint32=np.uint32,
        zeros=zeros,
        asarray=asarray,
        cuda=SimpleNamespace(Stream=Stream, Event=Event, get_current_stream=get_current_stream),
    )


class Runtime:
    """cudaHostRegister and friends over host memory: the "device" address is the host one."""

    class CUDARuntimeError(RuntimeError):
        status = 0

    def __init__(self) -> None:
        self.registered: list[int] = []

    def hostRegister(self, addr: int, n: int, flags: int) -> None:
        self.registered.append(addr)

    def hostUnregister(self, addr: int) -> None:
        self.registered.remove(addr)

    def hostGetDevicePointer(self, addr: int, flags: int) -> int:
        return addr


def _fill(p: gpu.GpuProducers, params: Any, tmp: Path) -> None:
    lib = build(tmp)
    p.cp, p.rt, p.params = fake_cupy(), Runtime(), params
    p.consts, p.host = _native.proxy, _native.host
    p.device, p.pci_bus_id, p.module = None, None, lib
    p.fn = {n: Kernel(lib, n) for n in gpu.KERNELS}
    p.sm_hz = 1e9  # clock64 counts nanoseconds here


def cpu_producers(params: Any, tmp: Path) -> gpu.GpuProducers:
    """A GpuProducers (gpu.py, unchanged) whose kernels run on the CPU."""
    p = object.__new__(gpu.GpuProducers)
    _fill(p, params, tmp)
    return p


def install(monkeypatch: Any, tmp: Path) -> None:
    """`--producer gpu` through the whole harness with the CPU-built kernels: the CuPy probe
    says yes, GpuProducers builds the CPU kernels, preload has nothing to load."""
    from types import SimpleNamespace

    import gicbench.platform as platform
    from gicbench.submit.proxy import ProxySubmitter

    monkeypatch.setattr(
        platform, "probe_cupy", lambda: SimpleNamespace(ok=True, detail="CPU-built kernels")
    )
    monkeypatch.setattr(
        gpu.GpuProducers, "__init__", lambda self, params, device=0: _fill(self, params, tmp)
    )
    monkeypatch.setattr(ProxySubmitter, "preload", classmethod(lambda cls, params, rank: None))
