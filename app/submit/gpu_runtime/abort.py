"""The abort word a GPU submitter's kernels poll, so that a signal ends a launch promptly: one
pinned, GPU-mapped page per process and GPU, kept until exit (freeing pinned memory, like
cudaDeviceSynchronize, waits for every kernel of the device, and emu's CUDA engine is a kernel
that runs until its fabric closes, after the submitter)."""

from __future__ import annotations

from typing import Any

CUDA_HOST_ALLOC_PORTABLE_MAPPED = 0x01 | 0x02  # cudaHostAllocPortable | cudaHostAllocMapped
_PAGES: dict[int, tuple[int, int]] = {}


def abort_page(cp: Any, device: int) -> tuple[int, int]:
    """(host address, device address) of the page of `device`."""
    if device not in _PAGES:
        rt = cp.cuda.runtime
        host = rt.hostAlloc(4096, CUDA_HOST_ALLOC_PORTABLE_MAPPED)
        get = getattr(rt, "hostGetDevicePointer", None)
        _PAGES[device] = (host, int(get(host, 0)) if get else host)
    return _PAGES[device]
