"""cuda/nvshmem/ compiles for sm_90 against NVSHMEM's headers, unchanged: every path x op x quiet
kernel, in the wheel's build and the GPU-memory-only one, with NVSHMEM's own device states in
the module and no warning from gicbench's code; the fetched headers are exactly the include
closure of the kernels; the GPU-memory-only build rings with release stores.

Skips as DOCA's compile tests do: without nvcc (or rdma-core's mlx5dv.h, which NVSHMEM's IBGDA
headers include); without headers it fails naming the fix, unless set-up recorded that no
package index was reachable (then it skips with that reason)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from nvshmem_helpers import headers_or_fail, nvcc_or_skip

from gicbench.submit.nvshmem import build, headers

REPO = Path(__file__).resolve().parents[1]
CUDA = REPO / "cuda"
PATHS = {"internal": ("qp", "pe", "all"), "public": ("pe", "all")}
OPS = ("put", "p", "put_signal")
KERNELS = sorted(
    f"gicbench_nvshmem_{p}_{o}_{q}" for p, qs in PATHS.items() for o in OPS for q in qs
)
# the harness loops --submitter nvshmem launches (gicbench_nvshmem_loops.cuh)
LOOP_KERNELS = sorted(
    [f"gicbench_nvshmem_single_{p}_{o}" for p in PATHS for o in OPS]
    + [f"gicbench_nvshmem_rate_{p}_{o}" for p in PATHS for o in ("put", "p")]
    + ["gicbench_nvshmem_qp_of"]
)
STATES = ("nvshmemi_device_state_d", "nvshmemi_ibgda_device_state_d")
# gicbench's own kernels beside NVSHMEM's paths: the device states' addresses and their read-back
STATE_KERNELS = ("gicbench_nvshmem_state_addrs", "gicbench_nvshmem_state_read")


@pytest.fixture(scope="module")
def cubin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The run-time build (build.compile_cubin) once for the module: (cubin, its cache dir)."""
    nvcc_or_skip()
    headers_or_fail()
    cache = tmp_path_factory.mktemp("nvshmem-cubin")
    path, _ = build.compile_cubin(cache_dir=cache)
    return path, cache


def symbols(cubin: Path) -> set[str]:
    return {m.decode() for m in re.findall(rb"[A-Za-z_][A-Za-z0-9_]{5,}", cubin.read_bytes())}


@pytest.mark.nvcc
def test_every_kernel_compiles_for_sm90_with_the_device_states(cubin: tuple[Path, Path]) -> None:
    path, _ = cubin
    log = build.log_path(path).read_text()
    assert "warning" not in log.lower(), log
    names = symbols(path)
    assert len(KERNELS) == 15 and set(KERNELS) <= names, sorted(set(KERNELS) - names)
    assert len(LOOP_KERNELS) == 11 and set(LOOP_KERNELS) <= names
    # what the submitter preloads before the NIC opens: every kernel of the module
    from gicbench.submit.nvshmem.runtime import kernel_names

    assert sorted(kernel_names()) == sorted([*KERNELS, *LOOP_KERNELS, *STATE_KERNELS])
    # the headers define NVSHMEM's device states in this module (the host fills them by name)
    assert set(STATES) <= names


@pytest.mark.nvcc
def test_build_caches_the_cubin(cubin: tuple[Path, Path]) -> None:
    first, cache = cubin
    mtime = first.stat().st_mtime_ns
    again, h = build.compile_cubin(cache_dir=cache)
    assert again == first and again.stat().st_mtime_ns == mtime
    assert h.nvshmem_version.startswith("3.8")


@pytest.mark.nvcc
def test_the_fetched_headers_are_the_include_closure() -> None:
    """nvcc -M of the kernels against the extracted set names every extracted header (none is
    extra) and, as the compile above succeeds with only these, none is missing."""
    exe = nvcc_or_skip()
    found = headers_or_fail()
    assert build.header_closure(found.include, exe=exe) == sorted(headers.HEADERS)


def ptx(tmp: Path, variant: str) -> str:
    exe = nvcc_or_skip()
    out = tmp / f"{variant}.ptx"
    cmd = build.nvcc_command(exe, CUDA / build.SOURCE, out, headers_or_fail(), CUDA, kind="-ptx",
                             variant=variant)  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and "warning" not in log.lower(), log
    return out.read_text()


@pytest.mark.nvcc
def test_gpumem_only_rings_with_release_stores(tmp_path: Path) -> None:
    """NVSHMEM_IBGDA_SUPPORT_GPUMEM_ONLY: the doorbell record and the doorbell are
    st.release.gpu stores (no separate fence); the wheel's build fences and stores plainly."""
    release = "st.release.gpu.global.L1::no_allocate"
    gpumem, default = ptx(tmp_path, "gpumem-only"), ptx(tmp_path, "default")
    assert f"{release}.b32" in gpumem and f"{release}.b64" in gpumem
    assert release not in default
    for text in (gpumem, default):
        entries = set(re.findall(r"\.entry\s+(gicbench_nvshmem_\w+)\(", text))
        assert entries == set(KERNELS) | set(STATE_KERNELS) | set(LOOP_KERNELS)


def test_rdc_is_refused(tmp_path: Path) -> None:
    """The module must own NVSHMEM's device states: an -rdc compile stops at the #error."""
    exe = nvcc_or_skip()
    found = headers_or_fail()
    cmd = build.nvcc_command(exe, CUDA / build.SOURCE, tmp_path / "x.o", found, CUDA, kind="-c")
    proc = subprocess.run([*cmd[:1], "-rdc=true", *cmd[1:]], capture_output=True, text=True)
    assert proc.returncode != 0 and "whole-program compile" in proc.stderr
