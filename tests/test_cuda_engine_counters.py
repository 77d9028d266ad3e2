"""The CUDA engine's counters and build switches, on the CPU: the host's sum of the per-warp
counter rows (the engine keeps its own segment's counts in GPU memory, not with system-scope
atomics on the mapped segment), EmuFabric.counters() adding them, the placement flags that the
GPU-scope variant reads, bench/cuda_engine.py's --variants switches (refused when the engine does
not read them), and nvcc compiling the engine with every switch set."""

from __future__ import annotations

import importlib.util
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gpu_helpers import nvcc_or_skip

from gicbench.errors import ConfigError, FabricError
from gicbench.fabric.emu import EmuFabric
from gicbench.fabric.emu import cuda_engine as ce

REPO = Path(__file__).resolve().parents[1]


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_cuda_engine", REPO / "bench" / "cuda_engine.py"
    )
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_warp_rows_add_to_the_segment_counts_by_index() -> None:
    counts = {"wqes": 5, "doorbells": 1, "bytes": 40}
    rows = np.array([[1, 2, 3], [10, 0, 30], [0, 0, 0]], np.uint64)
    out = ce.add_warp_counts(counts, rows)
    assert out == {"wqes": 16, "doorbells": 3, "bytes": 73}
    assert list(out) == list(counts)  # the layout's order kept
    assert counts == {"wqes": 5, "doorbells": 1, "bytes": 40}  # the input is not changed


def test_warp_rows_sum_beyond_32_bits() -> None:
    rows = np.full((4, 1), 3 << 40, np.uint64)
    assert ce.add_warp_counts({"bytes": 1}, rows) == {"bytes": 1 + 12 * (1 << 40)}


def test_warp_rows_of_another_layout_refused() -> None:
    with pytest.raises(FabricError, match="do not match"):
        ce.add_warp_counts({"wqes": 0, "bytes": 0}, np.zeros((2, 3), np.uint64))


class _FakeEngine:
    """What EmuFabric.counters() asks of a CUDA engine, with fixed warp rows."""

    def __init__(self, rows: np.ndarray) -> None:
        self.rows = rows

    def add_counters(self, counts: dict[str, int]) -> dict[str, int]:
        return ce.add_warp_counts(counts, self.rows)


def test_fabric_counters_add_the_engines_rows() -> None:
    f = EmuFabric(0, 1, "cc-" + uuid.uuid4().hex[:8], progress="inline", segment_bytes=1 << 20)
    try:
        seg = f.counters()
        wqe_path = [k for k in seg if not k.startswith("gpi_")]  # the engine's columns
        rows = np.zeros((3, len(wqe_path)), np.uint64)
        rows[:, wqe_path.index("wqes")] = (7, 0, 5)
        rows[1, wqe_path.index("cqes")] = 2
        f._cuda = _FakeEngine(rows)
        try:
            c = f.counters()
        finally:
            f._cuda = None
        assert c["wqes"] == seg["wqes"] + 12
        assert c["cqes"] == seg["cqes"] + 2
        assert {k: v for k, v in c.items() if k not in ("wqes", "cqes")} == {
            k: v for k, v in seg.items() if k not in ("wqes", "cqes")
        }
    finally:
        f.close()


def test_place_flags_only_for_the_engines_gpu_allocations() -> None:
    gpu = ce.AddressRanges([(0x1000, 0x2000), (0x9000, 0x9040)])
    assert ce.place_flags(gpu, 0x1000, 0x9000, 0x1FC0) == (
        ce.PLACE_RING_GPU | ce.PLACE_DBREC_GPU | ce.PLACE_DOORBELL_GPU
    )
    # host-resident (the mapped segment) or unknown: system scope
    assert ce.place_flags(gpu, 0x5000, 0x9040, 0x2000) == 0
    assert ce.place_flags(gpu, 0x1800, 0x5000, 0x5040) == ce.PLACE_RING_GPU
    assert ce.place_flags(ce.AddressRanges(), 0x1000, 0x9000, 0x1FC0) == 0


def test_variant_switches_are_the_engines() -> None:
    b = _bench()
    known = ce.engine_macros()
    for m in ("GICBENCH_ENGINE_ROUNDS", "GICBENCH_ENGINE_IDLE_PACE_NS",
              "GICBENCH_ENGINE_SCOPE_GPU", "GICBENCH_ENGINE_CTL_WARP",
              "GICBENCH_ENGINE_CTL_PACE_NS", "GICBENCH_ENGINE_SEG_COUNTERS",
              "GICBENCH_ENGINE_CQ_REGS", "GICBENCH_ENGINE_HEAD_CACHE",
              "GICBENCH_ENGINE_STAMPS", "GICBENCH_ENGINE_QP_COPY",
              "GICBENCH_ENGINE_IDLE_FLUSH_PASSES", "GICBENCH_ENGINE_CQ_PREFETCH",
              "GICBENCH_ENGINE_SERVE_CACHE", "GICBENCH_ENGINE_RESP_PAR",
              "GICBENCH_ENGINE_REC_ONCE", "GICBENCH_ENGINE_LOCK_EARLY"):  # fmt: skip
        assert m in known
    assert b.variant_defines("r8@SCOPE_GPU=1@GICBENCH_ENGINE_IDLE_PACE_NS=200") == [
        "#define GICBENCH_ENGINE_ROUNDS 8",
        "#define GICBENCH_ENGINE_SCOPE_GPU 1",
        "#define GICBENCH_ENGINE_IDLE_PACE_NS 200",
    ]
    for bad, msg in (("r4@SCOPEGPU=1", "not an engine switch"), ("r4@ROUNDS=8", "not an engine"),
                     ("r4@CTL_WARP=x", "integer"), ("r4@CTL_WARP", "integer"),
                     ("/nonexistent.cu", "neither")):  # fmt: skip
        with pytest.raises(ValueError, match=msg):
            b.variant_defines(bad)


def test_stamp_breakdown_pairs_each_ping_with_its_record() -> None:
    """Stage deltas from synthetic stamps: ping i rings at t0[i] and sees its CQE lat[i] later;
    its record's stages are 100 ns apart. A record whose scan stamp is outside its ping (a
    record of another serve) is left out, as is the last ping (no next doorbell)."""
    b = _bench()
    t0 = np.arange(6, dtype=np.int64) * 10_000 + 1_000
    rec = np.stack([t0 + 100 * (k + 1) for k in range(len(b.STAGES))], axis=1)
    rec[2, 0] = t0[2] - 50  # seen before its doorbell: not this ping's
    lat = np.full(6, 900, np.int64)
    out = b.stamp_breakdown(rec, t0, lat)
    assert out["pings"] == 6 and out["matched"] == 4
    st = out["stages_p50_ns"]
    assert st["doorbell store -> pass sees it"] == 100
    assert st["fence + CQ lock + CQE + unlock"] == 100
    assert st["CQE written -> pinger sees it"] == 900 - 600
    assert st["pass end -> next doorbell store"] == 10_000 - 800
    assert out["total_p50_ns"] == 900


def test_bad_variant_refused_with_exit_2_before_anything_runs(capsys: Any) -> None:
    b = _bench()
    with pytest.raises(SystemExit) as e:
        b.main(["--variants", "r4@IDLE_PACE=100"])  # no such switch (IDLE_PACE_NS)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "GICBENCH_ENGINE_IDLE_PACE in" in err and "is not an engine switch" in err


def test_engine_defines_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ce.DEFINES_ENV, "SCOPE_GPU=1, GICBENCH_ENGINE_CQ_REGS=1")
    assert ce.engine_defines() == ["-DGICBENCH_ENGINE_SCOPE_GPU=1", "-DGICBENCH_ENGINE_CQ_REGS=1"]
    monkeypatch.setenv(ce.DEFINES_ENV, "")
    assert ce.engine_defines() == []
    for bad in ("SCOPEGPU=1", "CTL_WARP=-1", "CTL_WARP"):
        monkeypatch.setenv(ce.DEFINES_ENV, bad)
        with pytest.raises(ConfigError, match=ce.DEFINES_ENV):
            ce.engine_defines()


@pytest.mark.nvcc
def test_engine_compiles_with_every_switch(tmp_path: Path) -> None:
    """The default build is test_wire_cuda's; here every variant switch set at once, the old
    counter path (SEG_COUNTERS=1), and a refused value."""
    exe = nvcc_or_skip()
    inc = [f"-I{REPO / 'cuda'}", f"-I{REPO / 'native' / 'src'}"]
    common = [exe, "-arch=sm_90", "-std=c++17", *inc, "-Xcompiler", "-Wall,-Wextra", "-c",
              str(REPO / "cuda" / "emu_engine.cu")]  # fmt: skip
    builds = {
        "all": [
            "-DGICBENCH_ENGINE_SCOPE_GPU=1",
            "-DGICBENCH_ENGINE_CTL_WARP=1",
            "-DGICBENCH_ENGINE_CTL_PACE_NS=2000",
            "-DGICBENCH_ENGINE_IDLE_PACE_NS=200",
            "-DGICBENCH_ENGINE_ROUNDS=8",
            "-DGICBENCH_ENGINE_CQ_REGS=1",
            "-DGICBENCH_ENGINE_STAMPS=1",
            "-DGICBENCH_ENGINE_QP_COPY=1",
            "-DGICBENCH_ENGINE_SERVE_CACHE=1",
            "-DGICBENCH_ENGINE_RESP_PAR=1",
            "-DGICBENCH_ENGINE_REC_ONCE=1",
            "-DGICBENCH_ENGINE_LOCK_EARLY=1",
            "-DGICBENCH_ENGINE_PEER_TABLES=1",
        ],
        "nocopy": ["-DGICBENCH_ENGINE_QP_COPY=0", "-DGICBENCH_ENGINE_IDLE_FLUSH_PASSES=0",
                   "-DGICBENCH_ENGINE_CQ_PREFETCH=0", "-DGICBENCH_ENGINE_SERVE_CACHE=0",
                   "-DGICBENCH_ENGINE_RESP_PAR=0", "-DGICBENCH_ENGINE_REC_ONCE=0",
                   "-DGICBENCH_ENGINE_LOCK_EARLY=0", "-DGICBENCH_ENGINE_PEER_TABLES=0"],
        "nocopy_serve": ["-DGICBENCH_ENGINE_QP_COPY=0", "-DGICBENCH_ENGINE_SERVE_CACHE=1",
                         "-DGICBENCH_ENGINE_RESP_PAR=1", "-DGICBENCH_ENGINE_REC_ONCE=1",
                         "-DGICBENCH_ENGINE_LOCK_EARLY=1"],
        "seg": ["-DGICBENCH_ENGINE_SEG_COUNTERS=1"],
        "bad": ["-DGICBENCH_ENGINE_CTL_WARP=2"],
        "bad_cache": ["-DGICBENCH_ENGINE_CQ_PREFETCH=0", "-DGICBENCH_ENGINE_SERVE_CACHE=1"],
    }
    with ThreadPoolExecutor(len(builds)) as pool:
        futs = {k: pool.submit(subprocess.run, [*common, *d, "-o", str(tmp_path / f"{k}.o")],
                               capture_output=True, text=True)
                for k, d in builds.items()}  # fmt: skip
        res = {k: f.result() for k, f in futs.items()}
    for k in ("all", "seg", "nocopy", "nocopy_serve"):
        log = (res[k].stdout + res[k].stderr).strip()
        assert res[k].returncode == 0, f"nvcc failed ({k}):\n{log}"
        assert "warning" not in log.lower(), f"nvcc warnings ({k}):\n{log}"
    assert res["bad"].returncode != 0
    assert "GICBENCH_ENGINE_CTL_WARP: 0 (last warp) or 1" in res["bad"].stdout + res["bad"].stderr
    assert res["bad_cache"].returncode != 0
    log = res["bad_cache"].stdout + res["bad_cache"].stderr
    assert "build on GICBENCH_ENGINE_CQ_PREFETCH" in log


def test_address_ranges_find_every_allocation_and_nothing_else() -> None:
    r = ce.AddressRanges([(0x9000, 0x9040), (0x1000, 0x2000)])
    r.add(0x4000, 0x4100)  # added out of order: still found
    assert all(a in r for a in (0x1000, 0x1FFF, 0x4000, 0x40FF, 0x9000, 0x903F))
    assert not any(a in r for a in (0, 0xFFF, 0x2000, 0x3FFF, 0x4100, 0x9040, 1 << 60))
