"""mini-gda's timed issue path and the bare probe as the compiler emits them (no GPU needed):
between single-op's two timer reads the SASS loads nothing from global or generic memory (the
lane's columns and producer index are in registers, an inline payload is staged in shared
memory), takes no atomic and writes the WQE in 16-byte stores; the probe (cuda/gda/probe.cu)
writes its WQE as four 16-byte stores and carries the ordering it is built with."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from gpu_helpers import nvcc_or_skip
from test_gpu_kernels_nvcc import MUST, MUST_NOT

from gicbench.submit.gpu import ORDERINGS

CUDA = Path(__file__).resolve().parents[1] / "cuda"


def _cuobjdump() -> str:
    tool = shutil.which("cuobjdump") or next(
        (p for p in ("/usr/local/cuda/bin/cuobjdump",) if Path(p).exists()), None
    )
    if tool is None:
        pytest.skip("cuobjdump not found (pip's nvidia-cuda-cuobjdump has one: put it on PATH)")
    return tool


def _build(src: Path, ordering: str, out: Path, kind: str) -> Path:
    cmd = [nvcc_or_skip("cuda/gda"), "-arch=sm_90", "-std=c++17", f"-I{CUDA}", f"-{kind}",
           f"-DGDA_ORDERING={ORDERINGS.index(ordering)}", str(src), "-o", str(out)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out


def _sass(tool: str, cubin: Path, name: str) -> list[str]:
    text = subprocess.run([tool, "-sass", "-fun", name, str(cubin)], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    return [m.group(1).strip() for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+([^;]*;)", text)]


def _timed(sass: list[str]) -> list[str]:
    """The instructions from the first globaltimer read followed by a clock64 read (t0) to the
    next globaltimer read (t1)."""
    for i, ins in enumerate(sass[:-1]):
        if "SR_GLOBALTIMERLO" in ins and "SR_CLOCKLO" in sass[i + 1]:
            end = next(j for j in range(i + 2, len(sass)) if "SR_GLOBALTIMERLO" in sass[j])
            return sass[i + 2 : end]
    raise AssertionError("no timed section (globaltimer then clock64) found")


@pytest.mark.nvcc
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_single_op_issue_reads_no_memory_between_its_timers(ordering: str, tmp_path) -> None:
    tool = _cuobjdump()
    cubin = _build(CUDA / "gda" / "kernels.cu", ordering, tmp_path / "k.cubin", "cubin")
    timed = _timed(_sass(tool, cubin, "gda_single_op"))
    loads = [i for i in timed if re.match(r"(@!?U?P\w+\s+)?(LDG|LD\.|LDL|ATOM|RED)", i)]
    assert not loads, loads  # LDS (the staged payload) and LDC (kernel arguments) only
    wide = [i for i in timed if i.split()[0].startswith("STG.E.128") or " STG.E.128" in i]
    assert len(wide) >= 3, timed  # control, remote address and data segments, 16 B each
    narrow = [i for i in timed if re.search(r"\bSTG\.E(\.64)?\s", i) and "STRONG" not in i]
    assert not narrow, narrow  # the only narrow stores are the record and the doorbell


@pytest.mark.nvcc
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_the_probe_stores_four_segments_and_publishes_with_its_ordering(
    ordering: str, tmp_path
) -> None:
    ptx = _build(CUDA / "gda" / "probe.cu", ordering, tmp_path / "p.ptx", "ptx").read_text()
    body = ptx[ptx.index(".entry gda_probe(") :]
    assert len(re.findall(r"st\.global\.v4\.b32", body)) == 4
    for pat in MUST[ordering]:
        if "ld.acquire" in pat or "ld\\.acquire" in pat:
            continue  # the probe polls nothing
        assert re.search(pat, body), (ordering, pat)
    for pat in MUST_NOT.get(ordering, []):
        assert not re.search(pat, body), (ordering, pat)
