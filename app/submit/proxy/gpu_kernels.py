"""Where mini-proxy's GPU producer kernels come from: cuda/proxy/kernels.cu (installed with the
package as gicbench/cuda, as mini-gda's kernels are), compiled with the ring layout of the native
module (proxy_ring.hpp through _native.proxy) as preprocessor definitions, so the layout has one
place. gpu.py builds them with CuPy (NVRTC); tests/proxy_gpu_cpu.py builds the same source for
the CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...cuda_host import cuda_dir

STD = "-std=c++17"


def kernel_path() -> Path:
    """The installed cuda/proxy/kernels.cu."""
    return cuda_dir() / "proxy" / "kernels.cu"


def source() -> str:
    return kernel_path().read_text()


def layout_defines(consts: Any) -> tuple[str, ...]:
    """-D options of the ring layout of the native module `consts` (_native.proxy)."""
    return (
        f"-DHEAD_OFF={consts.HEAD_OFF}",
        f"-DCOMPLETED_OFF={consts.COMPLETED_OFF}",
        f"-DCONTROL_OFF={consts.CONTROL_OFF}",
        f"-DHEADER_BYTES={consts.HEADER_BYTES}",
        f"-DMAX_LENGTH={consts.MAX_LENGTH}ULL",
    )


def options(consts: Any) -> tuple[str, ...]:
    """The compiler options of the kernels (NVRTC and nvcc take the same)."""
    return (STD, *layout_defines(consts))
