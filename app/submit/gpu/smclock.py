"""The effective SM clock, measured in a kernel: clock64 cycles over globaltimer ns of one
spinning thread (cuda/gda/kernels.cu gda_clock). One place for both GPU submitters (mini-gda
and doca convert clock64 cycles to ns with it)."""

from __future__ import annotations

from typing import Any

import numpy as np

DEFAULT_ORDERING = "gpu-fence"  # any ordering's module holds gda_clock


def measure(cp: Any, kernel: Any | None = None, ns: int = 2_000_000) -> float:
    """Hz of the current device's SM clock over `ns` of spinning (nan if the timer did not
    advance). kernel: a loaded gda_clock (default: from mini-gda's kernel module)."""
    if kernel is None:
        from . import build

        kernel = build.module(DEFAULT_ORDERING).get_function("gda_clock")
    out = cp.zeros(2, dtype=cp.int64)
    kernel((1,), (1,), (np.uint64(ns), out))
    cp.cuda.get_current_stream().synchronize()  # never the device: an engine kernel may run
    dt, cyc = (int(v) for v in out.get())
    return cyc / dt * 1e9 if dt > 0 else float("nan")


def cycles_to_ns(cycles: np.ndarray, hz: float) -> np.ndarray:
    """int64 ns of clock64 cycle counts at `hz`."""
    return np.rint(np.asarray(cycles, dtype=np.float64) / hz * 1e9).astype(np.int64)
