"""Compile cuda/doca/doca_kernels.cu with nvcc against DOCA GPUNetIO's headers.

DOCA's device headers need a full CUDA toolchain (<cuda/atomic>, <linux/types.h>, inline PTX),
so the kernels are built with nvcc into a cubin, cached by the hash of the sources, the headers'
version and the flags, and loaded with CuPy (RawModule(path=...)). `nvcc_command()` is the one
place the flags live: the compile test (tests/test_doca_compile.py) uses it too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ...cuda_host import cuda_dir, nvcc_into
from ...errors import UnsupportedError
from .headers import Gpunetio, find, unavailable_reason

SOURCE = "doca/doca_kernels.cu"
DEFAULT_ARCH = "sm_90"
CACHE_ENV = "GICBENCH_DOCA_CACHE"


def nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )


def nvcc_command(
    exe: str, src: Path, out: Path, headers: Gpunetio, cuda: Path, *, arch: str = DEFAULT_ARCH,
    kind: str = "-cubin",
) -> list[str]:  # fmt: skip
    """nvcc flags for DOCA code: DOCA's headers as system headers (their warnings are not ours),
    gicbench's own with -Wall -Wextra."""
    return [exe, f"-arch={arch}", "-std=c++17", "-O3", f"-I{cuda}", "-isystem",
            str(headers.include), "-Xcompiler", "-Wall,-Wextra", kind, str(src), "-o",
            str(out)]  # fmt: skip


def compile_cubin(arch: str = DEFAULT_ARCH, cache_dir: Path | None = None) -> tuple[Path, Gpunetio]:
    """The cubin of every DOCA kernel for `arch` (built once per sources/headers/flags)."""
    headers = find()
    if headers is None:
        raise UnsupportedError(unavailable_reason())
    exe = nvcc()
    if exe is None:
        raise UnsupportedError("the doca submitter compiles its kernels with nvcc: not found")
    cuda = cuda_dir()
    h = hashlib.sha256()
    for f in sorted((cuda / "doca").glob("*")) + sorted(headers.include.rglob("*")):
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    h.update(arch.encode())
    root = cache_dir or Path(
        os.environ.get(CACHE_ENV, Path.home() / ".cache" / "gicbench" / "doca")
    )
    out = root / f"doca_kernels-{arch}-{h.hexdigest()[:16]}.cubin"
    if out.is_file():
        return out, headers
    nvcc_into(out, lambda tmp: nvcc_command(exe, cuda / SOURCE, tmp, headers, cuda, arch=arch),
              SOURCE)
    return out, headers


def log_path(cubin: Path) -> Path:
    """nvcc's command line and output for `cubin` (warnings are kept, not raised at run time)."""
    return cubin.with_suffix(".log")
