"""A collapsed CQ as DOCA GPUNetIO polls it (the H200 device check's failing case).

DOCA's collapsed-CQ poll reads entry 0's 4-byte tail (wqe_counter, signature, op_own) as one load
and takes any counter outside its window for a completion. The emu core must therefore publish
each CQE's tail in one store, as a NIC's single DMA write is seen: a reader racing the writer
(tests/c/doca_collapsed_race.cpp, compiled with the CPU engine's flags) must never see a valid
opcode next to a counter lower than one it already saw. Filling the entry in place (zeroing it,
then writing wqe_counter byte by byte) shows such counters thousands of times per second."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "tests" / "c" / "doca_collapsed_race.cpp"


def test_collapsed_cqe_tail_never_goes_backwards(tmp_path: Path) -> None:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++/c++) to build the race driver")
    exe = tmp_path / "race"
    build = subprocess.run(
        [cxx, "-std=c++17", "-O2", "-Wall", "-Wextra", "-pthread", f"-I{REPO / 'cuda'}",
         str(SRC), "-o", str(exe)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert build.returncode == 0 and not build.stderr.strip(), build.stderr
    out = subprocess.run([str(exe), "65000", "16"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    reads, valid, backward = (int(x) for x in out.stdout.split())
    assert valid > 0, f"the reader never saw a written CQE ({reads} reads)"
    assert backward == 0, f"{backward} of {valid} valid reads saw wqe_counter go backwards"
