"""Kernel build cache: cuda/gda/kernels.cu compiled once per ordering and CQ polling (and device)
through CuPy's
RawModule (NVRTC); CuPy picks the architecture of the current device (-arch from the device)
and keeps its own on-disk cache, so a second run loads the cubin without compiling."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...cuda_host import cuda_dir, source_switches, switch_defines
from .params import CQ_POLLS, ORDERINGS

KERNELS = (
    "gda_prepare", "gda_finish", "gda_single_op", "gda_respond", "gda_msg_rate", "gda_clock",
)  # fmt: skip
_MODULES: dict[tuple[str, str, int], Any] = {}


DEFINES_ENV = "GICBENCH_GDA_DEFINES"


def kernel_switches(root: Path) -> set[str]:
    """mini-gda's build switches: every `#ifndef GDA_*` of cuda/gda/kernels.cu."""
    return source_switches(root / "gda" / "kernels.cu", "GDA_")


def build_options(ordering: str, root: Path, cq_poll: str = "expected") -> tuple[str, ...]:
    """NVRTC options of one variant's module (the same defines tests give nvcc)."""
    if ordering not in ORDERINGS:
        raise ValueError(f"ordering {ordering!r} is not one of {ORDERINGS}")
    if cq_poll not in CQ_POLLS:
        raise ValueError(f"cq_poll {cq_poll!r} is not one of {CQ_POLLS}")
    return (
        f"-I{root}",
        "--std=c++17",
        f"-DGDA_ORDERING={ORDERINGS.index(ordering)}",
        f"-DGDA_CQ_POLL={CQ_POLLS.index(cq_poll)}",
        # GICBENCH_GDA_DEFINES ("GDA_SOLO=1"): a variant for an A/B; empty, the kernels measured
        *switch_defines(DEFINES_ENV, kernel_switches(root), "mini-gda"),
    )


def module(ordering: str, cq_poll: str = "expected") -> Any:
    """The compiled module of one variant on the current device (cached per process)."""
    import cupy as cp

    dev = cp.cuda.runtime.getDevice()
    key = (ordering, cq_poll, dev)
    if key not in _MODULES:
        root = cuda_dir()
        src = (root / "gda" / "kernels.cu").read_text()
        opts = build_options(ordering, root, cq_poll)
        mod = cp.RawModule(code=src, options=opts, name_expressions=None)
        mod.compile()
        _MODULES[key] = mod
    return _MODULES[key]


def kernels(ordering: str, cq_poll: str = "expected") -> dict[str, Any]:
    mod = module(ordering, cq_poll)
    return {name: mod.get_function(name) for name in KERNELS}


def arch() -> str:
    import cupy as cp

    return "sm_" + cp.cuda.Device().compute_capability
