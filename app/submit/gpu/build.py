"""Kernel build cache: cuda/gda/kernels.cu compiled once per ordering (and device) through CuPy's
RawModule (NVRTC); CuPy picks the architecture of the current device (-arch from the device)
and keeps its own on-disk cache, so a second run loads the cubin without compiling."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from .params import ORDERINGS

KERNELS = ("gda_prepare", "gda_single_op", "gda_respond", "gda_msg_rate", "gda_clock")
_MODULES: dict[tuple[str, int], Any] = {}


def cuda_dir() -> Path:
    """The installed cuda/ directory (CMake installs it as gicbench/cuda)."""
    return Path(str(importlib.resources.files("gicbench") / "cuda"))


def build_options(ordering: str, root: Path) -> tuple[str, ...]:
    """NVRTC options of one ordering's module (the same defines tests give nvcc)."""
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering {ordering!r} is not one of {ORDERINGS}")
    return (f"-I{root}", "--std=c++17", f"-DGDA_ORDERING={ORDERINGS.index(ordering)}")


def module(ordering: str) -> Any:
    """The compiled module of `ordering` on the current device (cached per process)."""
    import cupy as cp

    dev = cp.cuda.runtime.getDevice()
    key = (ordering, dev)
    if key not in _MODULES:
        root = cuda_dir()
        src = (root / "gda" / "kernels.cu").read_text()
        mod = cp.RawModule(code=src, options=build_options(ordering, root), name_expressions=None)
        mod.compile()
        _MODULES[key] = mod
    return _MODULES[key]


def kernels(ordering: str) -> dict[str, Any]:
    mod = module(ordering)
    return {name: mod.get_function(name) for name in KERNELS}


def arch() -> str:
    import cupy as cp

    return "sm_" + cp.cuda.Device().compute_capability
