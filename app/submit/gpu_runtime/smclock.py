"""The effective SM clock, measured in a kernel: clock64 cycles over globaltimer ns of one
spinning thread (cuda/smclock.cuh). One place for every GPU submitter (mini-gda and doca
convert clock64 cycles to ns with it)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...cuda_host import cuda_dir

_KERNELS: dict[int, Any] = {}  # device -> the stand-alone module's gda_clock


def clock_kernel(cp: Any) -> Any:
    """gda_clock of cuda/smclock.cu on the current device (compiled once per process)."""
    dev = cp.cuda.runtime.getDevice()
    if dev not in _KERNELS:
        root = cuda_dir()
        src = (root / "smclock.cu").read_text()
        mod = cp.RawModule(code=src, options=(f"-I{root}", "--std=c++17"))
        mod.compile()
        _KERNELS[dev] = mod.get_function("gda_clock")
    return _KERNELS[dev]


def measure(cp: Any, kernel: Any | None = None, ns: int = 2_000_000) -> float:
    """Hz of the current device's SM clock over `ns` of spinning (nan if the timer did not
    advance). kernel: a loaded gda_clock (a submitter's own module has one; default: the
    stand-alone clock module)."""
    if kernel is None:
        kernel = clock_kernel(cp)
    out = cp.zeros(2, dtype=cp.int64)
    kernel((1,), (1,), (np.uint64(ns), out))
    cp.cuda.get_current_stream().synchronize()  # never the device: an engine kernel may run
    dt, cyc = (int(v) for v in out.get())
    return cyc / dt * 1e9 if dt > 0 else float("nan")


def cycles_to_ns(cycles: np.ndarray, hz: float) -> np.ndarray:
    """int64 ns of clock64 cycle counts at `hz`."""
    return np.rint(np.asarray(cycles, dtype=np.float64) / hz * 1e9).astype(np.int64)
