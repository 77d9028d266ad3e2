"""Compile cuda/nvshmem/nvshmem_kernels.cu with nvcc against NVSHMEM's headers.

NVSHMEM's device headers need a full CUDA toolchain and rdma-core's <infiniband/mlx5dv.h>, and a
whole-program compile (the device states NVSHMEM's host library fills are then this module's own
__constant__ symbols; cuda/nvshmem/gicbench_nvshmem.cuh says why), so the kernels are built with
nvcc into a cubin, cached by the hash of the sources, the headers and the flags. Two variants:
"default" (the wheel's build options) and "gpumem-only" (NVSHMEM_IBGDA_SUPPORT_GPUMEM_ONLY: the
release-store doorbell ordering of NVSHMEM's GPU-memory-only build). `nvcc_command()` is the one
place the flags live; `header_closure()` is how headers.HEADERS was found.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ...cuda_host import cuda_dir, nvcc_into
from ...errors import UnsupportedError
from .headers import Nvshmem, find, unavailable_reason

SOURCE = "nvshmem/nvshmem_kernels.cu"
DEFAULT_ARCH = "sm_90"
CACHE_ENV = "GICBENCH_NVSHMEM_CACHE"
VARIANTS = {"default": (), "gpumem-only": ("-DGICBENCH_NVSHMEM_GPUMEM_ONLY=1",)}
MLX5DV = Path("/usr/include/infiniband/mlx5dv.h")


def nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.access(p, os.X_OK)), None
    )


def missing_prerequisite() -> str | None:
    """Why the kernels cannot be compiled here (nvcc, rdma-core's header), else None."""
    if nvcc() is None:
        return "nvcc not found (the CUDA compiler is needed to compile cuda/nvshmem)"
    if not MLX5DV.is_file():
        return (f"{MLX5DV} not found: NVSHMEM's IBGDA headers include rdma-core's mlx5dv.h "
                "(install libibverbs-dev; make setup does)")  # fmt: skip
    return None


def nvcc_command(
    exe: str, src: Path, out: Path, headers: Nvshmem, cuda: Path, *, arch: str = DEFAULT_ARCH,
    kind: str = "-cubin", variant: str = "default",
) -> list[str]:  # fmt: skip
    """nvcc flags for NVSHMEM code: NVSHMEM's headers as system headers (their warnings are not
    ours), gicbench's own with -Wall -Wextra; never -rdc."""
    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {', '.join(VARIANTS)}")
    return [exe, f"-arch={arch}", "-std=c++17", "-O3", *VARIANTS[variant], f"-I{cuda}",
            "-isystem", str(headers.include), "-Xcompiler", "-Wall,-Wextra", kind, str(src),
            "-o", str(out)]  # fmt: skip


def header_closure(include: Path, src: Path | None = None, exe: str | None = None) -> list[str]:
    """The headers under `include` that compiling `src` (the kernels by default) reads, as
    paths relative to `include`, sorted: nvcc -M on the wheel's whole include directory gave
    headers.HEADERS."""
    exe = exe or nvcc()
    if exe is None:
        raise UnsupportedError("nvcc not found")
    cuda = cuda_dir()
    src = src or cuda / SOURCE
    cmd = [exe, f"-arch={DEFAULT_ARCH}", "-std=c++17", f"-I{cuda}", "-isystem", str(include),
           "-M", str(src)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise UnsupportedError(f"nvcc -M failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    root = include.resolve()
    found = set()
    for tok in proc.stdout.replace("\\\n", " ").split():
        p = Path(tok)
        if p.is_absolute() and p.resolve().is_relative_to(root):
            found.add(str(p.resolve().relative_to(root)))
    return sorted(found)


def cache_root(cache_dir: Path | None = None) -> Path:
    return cache_dir or Path(
        os.environ.get(CACHE_ENV, Path.home() / ".cache" / "gicbench" / "nvshmem")
    )


def cubin_path(headers: Nvshmem, arch: str, variant: str, cache_dir: Path | None = None) -> Path:
    """Where the cubin of these sources, headers, arch and variant is cached."""
    h = hashlib.sha256()
    for f in sorted((cuda_dir() / "nvshmem").glob("*")) + sorted(headers.include.rglob("*")):
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    h.update(f"{arch} {variant}".encode())
    return cache_root(cache_dir) / f"nvshmem_kernels-{variant}-{arch}-{h.hexdigest()[:16]}.cubin"


def unbuildable_reason(arch: str = DEFAULT_ARCH, variant: str = "default") -> str | None:
    """Why no cubin of the current sources can be had here (none cached, and nvcc or rdma-core's
    header missing), else None."""
    headers = find()
    if headers is None:
        return unavailable_reason()
    if cubin_path(headers, arch, variant).is_file():
        return None
    return missing_prerequisite()


def compile_cubin(arch: str = DEFAULT_ARCH, cache_dir: Path | None = None, *,
                  variant: str = "default") -> tuple[Path, Nvshmem]:  # fmt: skip
    """The cubin of every NVSHMEM kernel for `arch` and `variant` (built once per
    sources/headers/flags)."""
    headers = find()
    if headers is None:
        raise UnsupportedError(unavailable_reason())
    cuda = cuda_dir()
    out = cubin_path(headers, arch, variant, cache_dir)
    if out.is_file():  # a cubin built elsewhere (where mlx5dv.h exists) serves as it is
        return out, headers
    why = missing_prerequisite()
    if why:
        raise UnsupportedError(why)
    exe = nvcc()
    assert exe is not None
    nvcc_into(out, lambda tmp: nvcc_command(exe, cuda / SOURCE, tmp, headers, cuda, arch=arch,
                                            variant=variant), SOURCE)  # fmt: skip
    return out, headers


def log_path(cubin: Path) -> Path:
    """nvcc's command line and output for `cubin`."""
    return cubin.with_suffix(".log")
