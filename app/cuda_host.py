"""Host memory seen from the GPU: the one place that turns a registered (cudaHostRegister,
mapped) host address into the address a kernel uses. The emulated NIC maps its queue arena and
MRs with it, mini-proxy's GPU producers their rings and words (app/submit/proxy/gpu.py)."""

from __future__ import annotations

from typing import Any

from .errors import UnsupportedError

# cudaDevAttrCanUseHostPointerForRegisteredMem (driver_types.h); CuPy does not name it.
CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM = 91


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
