"""What every GPU-side part shares, below them all: the installed CUDA sources (`cuda_dir`), and
host memory seen from the GPU (`device_pointer`: the one place that turns a registered,
mapped host address into the address a kernel uses; the emulated NIC maps its queue arena and
MRs with it, mini-proxy's GPU producers their rings and words)."""

from __future__ import annotations

import importlib.resources
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import ConfigError, UnsupportedError

# Kernels that were still running past their launcher's deadline (what each launcher said),
# for this process's lifetime: nothing stops a running kernel but its process's exit.
_STUCK_KERNELS: list[str] = []

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


# Hardware work queues per CUDA context (CUDA_DEVICE_MAX_CONNECTIONS, 1-32). gicbench runs
# kernels that wait for each other on streams of their own (an engine's persistent kernel, a
# background load beside a probe, a responder beside a requester in one process): streams that
# share a queue are serialised, and a kernel queued behind a spinning one does not start until
# it ends. Measured on the H200 under MPS, the two-rank in-process loaded test of mini-proxy's
# GPU producers hung or faulted in 5 of 10 runs with the variable unset, 1 of 22 with 8 or 32.
CONNECTIONS_VAR = "CUDA_DEVICE_MAX_CONNECTIONS"
MAX_HARDWARE_QUEUES = 32  # what CUDA takes at most
HARDWARE_QUEUES = str(MAX_HARDWARE_QUEUES)


def reserve_hardware_queues() -> None:
    """Ask for HARDWARE_QUEUES queues in every CUDA context this process creates later, unless
    the user set CUDA_DEVICE_MAX_CONNECTIONS (read when the context is created)."""
    os.environ.setdefault(CONNECTIONS_VAR, HARDWARE_QUEUES)


# MPS serves a GPU's clients through a bounded number of device connections, and each process
# takes as many as it asks CUDA for work queues (CUDA_DEVICE_MAX_CONNECTIONS: gicbench asks
# HARDWARE_QUEUES). On the H200 machine (one GPU) 3 gicbench ranks at 32 started and a
# 4th was refused ("Reached maximum number of device connections", surfacing as
# cudaErrorDevicesUnavailable or out of memory at bring-up); 8 ranks started at 4 and at 2, not
# at 12. So from MPS_RANKS_AT_FULL_CONNECTIONS + 1 ranks on a GPU each process asks for at most
# its share of MPS_DEVICE_CONNECTIONS (8 x 4 started, 8 x 12 did not).
MPS_RANKS_AT_FULL_CONNECTIONS = 3
MPS_DEVICE_CONNECTIONS = 32
CUDA_DEFAULT_CONNECTIONS = 8


def share_mps_connections(sharing: int) -> int | None:
    """Before this process initialises CUDA (the driver reads the variable when it starts; set
    later, it has no effect), with `sharing` ranks on its GPU under MPS: above
    MPS_RANKS_AT_FULL_CONNECTIONS, lower CUDA_DEVICE_MAX_CONNECTIONS to
    MPS_DEVICE_CONNECTIONS // sharing where it asks for more (a larger value, even the user's,
    makes MPS refuse ranks). Returns the value in force (None: unset, CUDA's default)."""
    if sharing > MPS_RANKS_AT_FULL_CONNECTIONS:
        share = max(1, MPS_DEVICE_CONNECTIONS // sharing)
        if (connections_in_force() or CUDA_DEFAULT_CONNECTIONS) > share:
            os.environ[CONNECTIONS_VAR] = str(share)
    return connections_in_force()


def connections_in_force() -> int | None:
    """CUDA_DEVICE_MAX_CONNECTIONS as this process runs with it: 1..MAX_HARDWARE_QUEUES, else
    None (unset, or a value CUDA does not take, which leaves it at its default)."""
    raw = os.environ.get(CONNECTIONS_VAR, "").strip()
    if not re.fullmatch(r"[0-9]{1,3}", raw, re.ASCII):
        return None
    return int(raw) if 1 <= int(raw) <= MAX_HARDWARE_QUEUES else None


def launch_stream(cp: Any) -> Any:
    """A non-blocking stream of its own for a launch, once the current stream's work is done.

    CuPy stages arguments on the current stream (asarray, zeros): for pageable memory the copy
    has returned to the host before its data is on the GPU, and a non-blocking stream does not
    wait for the legacy stream, so a kernel launched at once may read the old bytes of a pointer
    table (an illegal address that shows when another thread keeps the legacy stream busy, as
    two in-process ranks do). Never the legacy stream itself: an engine or another rank's
    persistent kernel may be running."""
    cp.cuda.get_current_stream().synchronize()
    return cp.cuda.Stream(non_blocking=True)


def note_stuck_kernel(what: str) -> None:
    """Record that a kernel is still running past its deadline (`what`: the kernel and why).
    cudaHostUnregister and cudaFree wait for the device to go idle, which it never will, so the
    emulated NIC's close leaves its host memory registered and mapped instead of hanging (and
    instead of unmapping memory the kernel still reads); the process's exit ends both."""
    _STUCK_KERNELS.append(what)


def stuck_kernels() -> tuple[str, ...]:
    """What `note_stuck_kernel` recorded in this process, oldest first."""
    return tuple(_STUCK_KERNELS)


def nvcc_into(out: Path, command: Callable[[Path], list[str]], source: str) -> None:
    """Build `out` with one nvcc command (`command(path)` writes to `path`): into a temporary
    file beside it, renamed into place only when nvcc succeeded, with nvcc's command line and
    output in out's `.log`. UnsupportedError naming `source` when nvcc fails."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # a private name: two threads or ranks may build the same `out` at once
    fd, name = tempfile.mkstemp(prefix=f"{out.stem}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(name)
    cmd = command(tmp)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise UnsupportedError(f"nvcc failed on {source} ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    out.with_suffix(".log").write_text(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    tmp.replace(out)


def import_cupy(what: str) -> Any:
    """CuPy, or UnsupportedError saying that `what` (e.g. "the doca submitter") needs it."""
    try:
        import cupy
    except ImportError as e:
        raise UnsupportedError(f"{what} needs CuPy ({e})") from e
    return cupy


def source_switches(source: Path, prefix: str) -> set[str]:
    """A CUDA source's build switches: every `#ifndef PREFIX*` line of it."""
    return set(re.findall(rf"^#ifndef ({prefix}[A-Z0-9_]+)$", source.read_text(), re.M))


def switch_defines(env: str, known: set[str], what: str, prefix: str = "") -> list[str]:
    """The environment variable `env` ("NAME=INT,..."; `prefix` may be left out of a NAME) as
    nvcc/NVRTC -D options: a build variant for an A/B beside the default. ConfigError for a name
    not in `known` (`what`'s switches) or a value that is not an int >= 0."""
    raw = os.environ.get(env, "")
    out = []
    for item in filter(None, (x.strip() for x in raw.split(","))):
        name, _, value = item.partition("=")
        if not name.startswith(prefix):
            name = prefix + name
        if name not in known or not value.isdigit():
            raise ConfigError(env, raw, f"comma-separated NAME=INT of {what}'s switches "
                              f"{sorted(known)}")  # fmt: skip
        out.append(f"-D{name}={value}")
    return out
