"""cuda/doca/ compiles for sm_90 against DOCA GPUNetIO's headers: every handler x sharing mode x
execution scope x shape (rate, latency: the kernels layout.kernel_name names), each header alone,
with no warnings from gicbench's own code."""

from __future__ import annotations

import itertools
import re
import subprocess
from pathlib import Path

import pytest
from doca_helpers import headers_or_fail, nvcc_or_skip

from gicbench.submit.doca import build
from gicbench.submit.doca.layout import SHAPES, NicHandler, Scope, Sharing, kernel_name

REPO = Path(__file__).resolve().parents[1]
CUDA = REPO / "cuda"


def compile_(src: Path, out: Path, kind: str = "-cubin") -> subprocess.CompletedProcess:
    exe = nvcc_or_skip()
    cmd = build.nvcc_command(exe, src, out, headers_or_fail(), CUDA, kind=kind)
    return subprocess.run(cmd, capture_output=True, text=True)


def assert_clean(proc: subprocess.CompletedProcess) -> None:
    log = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, log
    assert "warning" not in log.lower(), log


@pytest.fixture(scope="module")
def cubin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The run-time build (build.compile_cubin) once for the module: (cubin, its cache dir)."""
    nvcc_or_skip()
    headers_or_fail()
    cache = tmp_path_factory.mktemp("doca-cubin")
    path, _ = build.compile_cubin(cache_dir=cache)
    return path, cache


@pytest.mark.nvcc
def test_every_variant_compiles_for_sm90(cubin: tuple[Path, Path]) -> None:
    path, _ = cubin
    log = build.log_path(path).read_text()
    assert "warning" not in log.lower(), log
    names = set(re.findall(rb"gicbench_doca_[a-z0-9_]+", path.read_bytes()))
    want = {
        kernel_name(h, s, e, shape).encode()
        for h, s, e, shape in itertools.product(NicHandler, Sharing, Scope, SHAPES)
    }
    assert len(want) == 60
    assert want <= names, sorted(want - names)
    assert b"gicbench_doca_init" in names


@pytest.mark.nvcc
@pytest.mark.parametrize("header", sorted(p.name for p in (CUDA / "doca").glob("*.cuh")))
def test_header_compiles_alone(tmp_path: Path, header: str) -> None:
    tu = tmp_path / f"only_{header}.cu"
    tu.write_text(f'#include "doca/{header}"\n')
    assert_clean(compile_(tu, tmp_path / "o.o", kind="-c"))


@pytest.mark.nvcc
def test_build_module_caches_the_cubin(cubin: tuple[Path, Path]) -> None:
    """compile_cubin() (the run-time path) reuses a cubin built for the same sources."""
    first, cache = cubin
    mtime = first.stat().st_mtime_ns
    again, h = build.compile_cubin(cache_dir=cache)
    assert again == first and again.stat().st_mtime_ns == mtime
    assert h.doca_version.startswith("4.")
