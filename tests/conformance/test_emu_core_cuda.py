"""cuda/emu_core.cuh outside the CPU engine: the scenario of cuda/emu_core_selftest.cu (IBGDA
and rdma-core doorbells, an inline write, a gather write, a 4-byte masked fetch-add, an 8-byte
masked compare-and-swap, a fetch-add, a bad rkey, a flush; then a GPI queue: a torn descriptor,
a fan-out, a descriptor error) run
through nvcc's host compiler and, with a GPU, in a kernel. Both must leave what the CPU engine's
semantics say (the conformance cases check the same rules on the CPU engine)."""

from __future__ import annotations

import importlib.resources
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gicbench import mlx5

REPO = Path(__file__).resolve().parents[2]
CUDA_DIR = REPO / "cuda"
HOST_DRIVER = Path(__file__).resolve().parent / "c" / "emu_core_host.cu"
BUF_BYTES, DST, RES, CQ, NCQE, NUM_OUT = 16384, 8192, 12288, 2048, 8, 16
GPI_CTL, GPI_DST, GPI_SIG = 2560, 256, 512  # the GPI queue's control block; its landing, signals
QPN = 0x000101
SRC = bytes(range(256))


def _nvcc() -> str:
    exe = shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None
    )
    if exe is None:
        pytest.skip("nvcc not found (the CUDA compiler is needed to compile cuda/emu_core.cuh)")
    return exe


def check_gpi(out: list[int], dst: bytes, ctl: bytes) -> None:
    """gpi_scenario: a torn write+signal waits, then runs; a fan-out to two slots; a bad window
    fails on its descriptor (counter 1 flagged) without stopping the queue."""
    ci, errors, torn, writes, signals = out[10:15]
    assert (ci, errors, torn, writes, signals) == (3, 1, 1, 3, 3)
    land = dst[GPI_DST : GPI_DST + 64]
    assert land[:8] == SRC[16:24]  # descriptor 0
    assert land[16:20] == SRC[32:36] and land[48:52] == SRC[32:36]  # fan-out slots 1 and 3
    assert land[8:16] == bytes(8) and land[20:48] == bytes(28)
    sig = [int.from_bytes(dst[GPI_SIG + 8 * i : GPI_SIG + 8 * i + 8], "little", signed=True)
           for i in range(5)]  # fmt: skip
    assert sig == [0, 5, -1, -1, 0]
    words = [int.from_bytes(ctl[8 * i : 8 * i + 8], "little") for i in range(len(ctl) // 8)]
    assert words[64 // 8] == 3 and words[128 // 8] == 1  # ci, errors
    assert words[136 // 8] == (1 << 63) | (0x02 << 32) | 2  # LOCAL_QP_OP on descriptor 2
    assert words[256 // 8 : 256 // 8 + 2] == [1, 1 | (1 << 62)]  # the counters


def check(out: list[int], dst: bytes, res: bytes, cq: bytes) -> None:
    # reuse_scenario: each CQE frees (zeroes) the next slot; both WQEs still execute, as on a
    # NIC that has read WQE i + 1 before it completes WQE i
    assert (out[15] & 0xFF, (out[15] >> 8) & 0xFF, out[15] >> 16) == (2, 0, 2)
    assert dst[896:904] == bytes(range(0xA0, 0xA8))
    executed, errors, flushed, doorbells, stale, lag, cq_pi, state, ci, nbytes = out[:10]
    assert (executed, errors, flushed, doorbells, stale, lag) == (5, 1, 1, 3, 0, 0)
    assert (cq_pi, state, ci, nbytes) == (4, 6, 8, 4 + 12 + 4 + 8 + 8)
    assert dst[:16] == SRC[0:8] + SRC[32:40]  # inline write + a gather list of two segments
    assert dst[64:72] == (12).to_bytes(8, "little")  # 7 + 5
    assert dst[80:84] == (0x02008001).to_bytes(4, "little")  # byte fields: no carry between
    assert dst[88:96] == (0x1111_2222_AAAA_4444).to_bytes(8, "little")
    assert res[:8] == (7).to_bytes(8, "little")  # the old values
    assert res[8:16] == (0x01FF7F00).to_bytes(4, "little") + bytes(4)  # 4 bytes, no more
    assert res[16:24] == (0x1111_2222_3333_4444).to_bytes(8, "little")
    cqes = [mlx5.decode_cqe(cq[64 * i : 64 * (i + 1)]) for i in range(4)]
    assert [(c.opcode, c.wqe_counter, c.qpn) for c in cqes[:2]] == [
        (mlx5.CqeOpcode.REQ, 1, QPN),
        (mlx5.CqeOpcode.REQ, 5, QPN),
    ]
    assert cqes[1].wqe_opcode == mlx5.Opcode.ATOMIC_FA and cqes[0].byte_cnt == 12
    assert (cqes[2].opcode, cqes[2].syndrome, cqes[2].vendor_syndrome, cqes[2].wqe_counter) == (
        mlx5.CqeOpcode.REQ_ERR,
        mlx5.Syndrome.REMOTE_ACCESS,
        0x88,
        6,
    )
    assert (cqes[3].syndrome, cqes[3].wqe_counter) == (mlx5.Syndrome.WR_FLUSH, 7)


@pytest.mark.nvcc
def test_core_scenario_on_host(tmp_path: Path) -> None:
    exe = tmp_path / "emu_core_host"
    build = subprocess.run(
        [_nvcc(), "-arch=sm_90", "-std=c++17", f"-I{CUDA_DIR}", "-Xcompiler", "-Wall,-Wextra",
         str(HOST_DRIVER), "-o", str(exe)],
        capture_output=True, text=True,
    )  # fmt: skip
    log = (build.stdout + build.stderr).strip()
    assert build.returncode == 0, log
    assert "warning" not in log.lower(), log
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    out = [int(x) for x in lines[0].split()]
    check(out, bytes.fromhex(lines[1]), bytes.fromhex(lines[2]), bytes.fromhex(lines[3]))
    check_gpi(out, bytes.fromhex(lines[1]), bytes.fromhex(lines[4]))


@pytest.mark.gpu
def test_core_scenario_on_gpu(tmp_path: Path) -> None:
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except cp.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA device: {e}")
    with importlib.resources.as_file(importlib.resources.files("gicbench") / "cuda") as cuda_dir:
        cubin = tmp_path / "emu_core_selftest.cubin"
        cc = cp.cuda.Device().compute_capability
        build = subprocess.run(
            [_nvcc(), f"-arch=sm_{cc}", "-std=c++17", f"-I{cuda_dir}", "-cubin",
             str(cuda_dir / "emu_core_selftest.cu"), "-o", str(cubin)],
            capture_output=True, text=True,
        )  # fmt: skip
        assert build.returncode == 0, build.stderr
    kernel = cp.RawModule(path=str(cubin)).get_function("emu_core_selftest")
    mem = cp.zeros(BUF_BYTES, dtype=cp.uint8)
    out = cp.zeros(NUM_OUT, dtype=cp.uint64)
    kernel((1,), (1,), (mem, out))
    cp.cuda.runtime.deviceSynchronize()
    host = cp.asnumpy(mem).tobytes()
    words = [int(x) for x in cp.asnumpy(out)]
    check(words, host[DST : DST + 1024], host[RES : RES + 24], host[CQ : CQ + NCQE * 64])
    check_gpi(words, host[DST : DST + 1024], host[GPI_CTL : GPI_CTL + 512])
    assert np.frombuffer(host[DST : DST + 16], np.uint8).size == 16
