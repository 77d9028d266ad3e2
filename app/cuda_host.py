"""What every GPU-side part shares, below them all: the installed CUDA sources (`cuda_dir`), and
host memory seen from the GPU (`device_pointer`: the one place that turns a registered,
mapped host address into the address a kernel uses; the emulated NIC maps its queue arena and
MRs with it, mini-proxy's GPU producers their rings and words)."""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from .errors import UnsupportedError

# cudaDevAttrCanUseHostPointerForRegisteredMem (driver_types.h); CuPy does not name it.
CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91


def cuda_dir() -> Path:
    """The installed cuda/ directory (CMake installs the repository's cuda/ as gicbench/cuda):
    the kernels compiled at run time (NVRTC through CuPy, or nvcc) and their headers."""
    return Path(str(importlib.resources.files("gicbench") / "cuda"))


def device_pointer(runtime: Any, host: int) -> int:
    """The GPU's address of registered host memory `host` (CuPy's cuda.runtime as `runtime`):
    cudaHostGetDevicePointer where CuPy has it, else the host address itself where the device
    says it may use it (unified addressing, every 64-bit Linux GPU of interest), else refused."""
    get = getattr(runtime, "hostGetDevicePointer", None)
    if get is not None:
        return int(get(host, 0))
    dev = runtime.getDevice()
    if runtime.deviceGetAttribute(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, dev):
        return host
    raise UnsupportedError(
        f"GPU {dev} cannot use host pointers for registered memory and CuPy has no "
        "cudaHostGetDevicePointer: host memory cannot be mapped"
    )
