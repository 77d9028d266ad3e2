"""cuda/: every .cu compiles for sm_90, and cuda/mlx5.cuh encodes on the GPU exactly what
gicbench.mlx5 encodes.

cuda/wire_selftest.cu runs a table of cases (WQEs of every layout, CQEs of every kind, doorbell
values, device-side decodes). The same table runs three ways: on the CPU through nvcc's host
compiler (tests/c/wire_selftest_host.cu, wherever nvcc exists), and on a GPU through CuPy's
RawModule as the application compiles it (marked gpu). Both compare with numpy expectations.
"""

from __future__ import annotations

import importlib.resources
import os
import struct
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from gpu_helpers import nvcc_or_skip

from gicbench import mlx5

REPO = Path(__file__).resolve().parents[1]
CUDA_DIR = REPO / "cuda"
HOST_DRIVER = REPO / "tests" / "c" / "wire_selftest_host.cu"
CU_FILES = sorted(CUDA_DIR.glob("*.cu"))
CUH_FILES = sorted(CUDA_DIR.glob("*.cuh"))
HOST_BIN = "host driver binary"

# cuda/wire_selftest.cu's table and output layout
WORDS = 16
RING_WQEBBS = 4
RING_BYTES = RING_WQEBBS * mlx5.WQEBB_BYTES
CQE_OFF = RING_BYTES
RES_OFF = CQE_OFF + mlx5.CQE_BYTES
CASE_BYTES = RES_OFF + 64
MAX_INLINE = 160
WRITE, FETCH_ADD, NOP, REQ_CQE, RESP_CQE, ERR_CQE = range(6)
WITH_IMM, INLINE, DC, COMPACT_AV = 1, 2, 4, 8
# word indices: WQE kinds / CQE kinds
KIND, PI, QPN, RADDR, RKEY, LKEY, LADDR, LENGTH, FM_CE_SE, IMM, FLAGS, ADD_KEY, DCT, SEED = range(
    14
)
C_QPN, C_WOP, C_WC, C_BC, C_TS, C_OWNER, C_OP, C_IMM, C_SYND, C_VSYND, C_CI, C_NCQE = range(1, 13)


# ---- the case table and its numpy expectations ---------------------------------------------------
def av_from_seed(dc_key: int, dct: int, seed: int, compact: bool) -> np.ndarray:
    """Twin of wire_selftest.cu's av_from_seed, encoded by gicbench.mlx5."""
    kw = dict(rlid=(seed >> 16) & 0xFFFF, stat_rate_sl=seed & 0xFF, fl_mlid=(seed >> 8) & 0xFF)
    if compact:
        return mlx5.av_compact(dc_key, dct, **kw)
    return mlx5.av_full(
        dc_key, dct, **kw,
        rmac=bytes((seed + 3 * i) & 0xFF for i in range(6)),
        tclass=(seed >> 32) & 0xFF, hop_limit=(seed >> 40) & 0xFF,
        grh_gid_fl=(seed >> 24) & 0xFFFFFFFF,
        rgid=bytes((7 * seed + i) & 0xFF for i in range(16)),
    )  # fmt: skip


def payload_of(seed: int, n: int) -> bytes:
    return bytes((seed + 13 * i) & 0xFF for i in range(n))


def max_inline(flags: int) -> int:
    """Largest inline payload whose WQE fits the 4-WQEBB ring (16 segments), capped at 160."""
    av_segs = (1 if flags & COMPACT_AV else 3) if flags & DC else 0
    return min(MAX_INLINE, (16 - 2 - av_segs) * mlx5.SEG_BYTES - 4)


def expected(w: list[int]) -> bytes:
    out = np.zeros(CASE_BYTES, np.uint8)
    res = bytearray(64)
    kind = w[KIND]
    if kind in (WRITE, FETCH_ADD, NOP):
        sq = mlx5.SqRing(out[:RING_BYTES], RING_WQEBBS)
        pi, qpn, flags, fm = w[PI], w[QPN], w[FLAGS], w[FM_CE_SE]
        signaled, fence = bool(fm & mlx5.CtrlFlags.CQ_UPDATE), bool(fm & mlx5.CtrlFlags.FENCE)
        av = (
            av_from_seed(w[ADD_KEY], w[DCT], w[SEED], bool(flags & COMPACT_AV))
            if flags & DC
            else None
        )
        inline_len = 0
        if kind == WRITE:
            inline = bool(flags & INLINE)
            inline_len = w[LENGTH] if inline else 0
            payload = payload_of(w[SEED], inline_len) if inline else None
            nbb = sq.post_write(
                pi, qpn, w[RADDR], w[RKEY], payload=payload,
                lkey=w[LKEY], addr=w[LADDR], length=w[LENGTH], signaled=signaled, fence=fence,
                imm=w[IMM] if flags & WITH_IMM else None, av=av,
            )  # fmt: skip
        elif kind == FETCH_ADD:
            nbb = sq.post_fetch_add(pi, qpn, w[RADDR], w[RKEY], w[ADD_KEY], w[LKEY], w[LADDR],
                                    signaled=signaled, fence=fence, av=av)  # fmt: skip
        else:
            nbb = sq.post_nop(pi, qpn, signaled=signaled, fence=fence)
        ctrl = sq.read(pi, 0, mlx5.SEG_BYTES)
        c = mlx5.decode_ctrl(ctrl)
        struct.pack_into("<Q", res, 0, mlx5.doorbell_value(ctrl))
        res[8:12], res[12:16] = mlx5.dbrec_value(pi), mlx5.cq_ci_value(pi)
        struct.pack_into("<7I", res, 16, c.opcode, c.wqe_index, c.qpn, c.ds, c.fm_ce_se, c.imm, nbb)
        first = 2 + (av.size // mlx5.SEG_BYTES if av is not None else 0)
        if inline_len:
            n = min(inline_len, 16)
            res[44 : 44 + n] = mlx5.read_inline(sq, pi, first)[:n]
    else:
        owner, wc = w[C_OWNER], w[C_WC]
        if kind == REQ_CQE:
            cqe = mlx5.req_cqe(w[C_QPN], w[C_WOP], wc, w[C_BC], timestamp=w[C_TS], owner=owner)
        elif kind == RESP_CQE:
            cqe = mlx5.resp_cqe(w[C_OP], w[C_QPN], wc, w[C_BC], imm=w[C_IMM], timestamp=w[C_TS],
                                owner=owner)  # fmt: skip
        else:
            cqe = mlx5.err_cqe(w[C_OP], w[C_SYND], w[C_QPN], w[C_WOP], wc,
                               vendor_syndrome=w[C_VSYND], owner=owner)  # fmt: skip
        out[CQE_OFF:RES_OFF] = cqe
        d = mlx5.decode_cqe(cqe)
        struct.pack_into("<9I", res, 0, d.opcode, d.owner, d.wqe_counter, d.byte_cnt, d.qpn,
                         d.wqe_opcode, d.imm, d.syndrome, d.vendor_syndrome)  # fmt: skip
        struct.pack_into("<QI", res, 40, d.timestamp, mlx5.cqe_ready(cqe, w[C_CI], w[C_NCQE]))
    out[RES_OFF:] = np.frombuffer(bytes(res), np.uint8)
    return out.tobytes()


def make_cases(n_random: int = 240, seed: int = 20261129) -> list[list[int]]:
    rng = np.random.default_rng(seed)

    def r(bits: int) -> int:
        return int(rng.integers(0, 1 << bits, dtype=np.uint64))

    def wqe(kind: int, flags: int, length: int | None = None, pi: int | None = None) -> list[int]:
        w = [0] * WORDS
        w[KIND], w[FLAGS] = kind, flags
        w[PI] = r(32) if pi is None else pi
        w[QPN], w[RADDR], w[RKEY], w[LKEY], w[LADDR] = r(24), r(64), r(32), r(32), r(64)
        w[FM_CE_SE] = int(rng.choice([0, 0x08, 0x80, 0x88]))
        w[IMM], w[ADD_KEY], w[DCT], w[SEED] = r(32), r(64), r(24), r(64)
        if length is not None:
            w[LENGTH] = length
        else:
            w[LENGTH] = int(rng.integers(0, max_inline(flags) + 1)) if flags & INLINE else r(32)
        return w

    def cqe(kind: int) -> list[int]:
        w = [0] * WORDS
        w[KIND] = kind
        w[C_QPN], w[C_WOP], w[C_WC], w[C_BC], w[C_TS] = r(24), r(8), r(16), r(32), r(64)
        w[C_OWNER], w[C_IMM], w[C_VSYND] = r(1), r(32), r(8)
        w[C_SYND] = int(rng.choice([s.value for s in mlx5.Syndrome]))
        w[C_OP] = {
            REQ_CQE: 0,
            RESP_CQE: int(rng.integers(1, 4)),
            ERR_CQE: int(rng.choice([13, 14])),
        }[kind]
        if kind == REQ_CQE:
            w[C_IMM] = 0  # requester CQEs carry no immediate
        if kind == RESP_CQE:
            w[C_WOP] = 0  # responder CQEs carry no WQE opcode
        w[C_NCQE] = 1 << int(rng.integers(0, 17))
        w[C_CI] = r(32)
        return w

    cases: list[list[int]] = []
    # every layout, at the ring start and at its last WQEBB (the WQE wraps)
    for pi in (0, 3, 0x1FFFF, 0xFFFFFFFF):
        for flags in (0, WITH_IMM, INLINE, INLINE | WITH_IMM, DC, DC | INLINE, DC | COMPACT_AV,
                      DC | COMPACT_AV | INLINE | WITH_IMM):  # fmt: skip
            cases.append(
                wqe(WRITE, flags, pi=pi, length=max_inline(flags) if flags & INLINE else None)
            )
            cases.append(wqe(WRITE, flags, pi=pi, length=8 if flags & INLINE else None))
        for flags in (0, DC, DC | COMPACT_AV):
            cases.append(wqe(FETCH_ADD, flags, pi=pi))
        cases.append(wqe(NOP, 0, pi=pi))
    for n in range(0, 40):  # short inline payloads around the 16-byte segment edges
        cases.append(wqe(WRITE, INLINE, length=n, pi=3))
    for kind in (REQ_CQE, RESP_CQE, ERR_CQE):
        cases.extend(cqe(kind) for _ in range(8))
    for _ in range(n_random):
        kind = int(rng.integers(0, 6))
        if kind in (WRITE, FETCH_ADD, NOP):
            flags = (
                int(rng.integers(0, 16))
                if kind == WRITE
                else (int(rng.integers(0, 16)) & (DC | COMPACT_AV))
            )
            if not flags & DC:
                flags &= ~COMPACT_AV
            cases.append(wqe(kind, flags if kind != NOP else 0))
        else:
            cases.append(cqe(kind))
    return cases


def check_outputs(cases: list[list[int]], got: bytes, where: str) -> None:
    assert len(got) == len(cases) * CASE_BYTES, f"{where}: {len(got)} bytes for {len(cases)} cases"
    bad = []
    for i, w in enumerate(cases):
        want = expected(w)
        have = got[i * CASE_BYTES : (i + 1) * CASE_BYTES]
        if have != want:
            off = next(k for k in range(CASE_BYTES) if have[k] != want[k])
            area, base = ("ring", 0) if off < CQE_OFF else ("cqe", CQE_OFF)
            if off >= RES_OFF:
                area, base = "results", RES_OFF
            bad.append(
                f"case {i} kind {w[KIND]} flags {w[FLAGS]:#x} words {w}: first difference at "
                f"{area}+{off - base}: {where} {have[off : off + 16].hex()} "
                f"numpy {want[off : off + 16].hex()}"
            )
    assert not bad, f"{len(bad)} of {len(cases)} cases differ:\n" + "\n".join(bad[:10])


def table(cases: list[list[int]]) -> np.ndarray:
    return np.array(cases, dtype=np.uint64).reshape(-1, WORDS)


# ---- nvcc: every cuda/*.cu compiles for sm_90 ----------------------------------------------------
@pytest.fixture(scope="module")
def nvcc_results(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess]:
    """Compile every cuda/*.cu (objects) and the host driver (the program `HOST_BIN` names in the
    returned dict) at once, in parallel."""
    exe = nvcc_or_skip()
    tmp = tmp_path_factory.mktemp("nvcc")
    # native/src: cuda/emu_engine.cu includes the segment layout (installed beside cuda/ files)
    common = ["-arch=sm_90", "-std=c++17", f"-I{CUDA_DIR}", f"-I{REPO / 'native' / 'src'}",
              "-Xcompiler", "-Wall,-Wextra"]  # fmt: skip
    jobs = {f.name: [exe, *common, "-c", str(f), "-o", str(tmp / f"{f.stem}.o")] for f in CU_FILES}
    for h in CUH_FILES:  # every header compiles on its own (includes what it uses)
        tu = tmp / f"only_{h.stem}.cu"
        tu.write_text(f'#include "{h.name}"\n')
        jobs[h.name] = [exe, *common, "-c", str(tu), "-o", str(tmp / f"only_{h.stem}.o")]
    jobs["host driver"] = [exe, *common, str(HOST_DRIVER), "-o", str(tmp / "wire_selftest_host")]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futs = {
            k: pool.submit(subprocess.run, cmd, capture_output=True, text=True)
            for k, cmd in jobs.items()
        }
        results = {k: f.result() for k, f in futs.items()}
    results[HOST_BIN] = tmp / "wire_selftest_host"  # type: ignore[assignment]
    return results


def assert_clean(name: str, proc: subprocess.CompletedProcess) -> None:
    log = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, f"nvcc failed on {name}:\n{log}"
    warnings = [ln for ln in log.splitlines() if "warning" in ln.lower()]
    assert not warnings, f"nvcc warnings on {name}:\n" + "\n".join(warnings)


def test_cuda_sources_exist() -> None:
    assert {f.name for f in CU_FILES} >= {"wire_selftest.cu"}


@pytest.mark.nvcc
@pytest.mark.parametrize("name", [f.name for f in CU_FILES])
def test_cu_compiles_for_sm90(nvcc_results: dict, name: str) -> None:
    assert_clean(name, nvcc_results[name])


@pytest.mark.nvcc
@pytest.mark.parametrize("name", [f.name for f in CUH_FILES])
def test_cuh_compiles_alone(nvcc_results: dict, name: str) -> None:
    assert_clean(name, nvcc_results[name])


@pytest.mark.nvcc
def test_selftest_table_on_host(nvcc_results: dict) -> None:
    """wire_selftest.cu's cases run on the CPU (nvcc host code) against numpy."""
    proc = nvcc_results["host driver"]
    assert_clean(HOST_DRIVER.name, proc)
    cases = make_cases()
    run = subprocess.run(
        [str(nvcc_results[HOST_BIN])], input=table(cases).tobytes(), capture_output=True
    )
    assert run.returncode == 0, run.stderr.decode()
    check_outputs(cases, run.stdout, "mlx5.cuh (host)")


# ---- the same table on a GPU, compiled as the application does (CuPy/NVRTC) ----------------------
@pytest.mark.gpu
def test_selftest_table_on_gpu() -> None:
    cp = pytest.importorskip("cupy")
    try:
        ndev = cp.cuda.runtime.getDeviceCount()
    except cp.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"no usable CUDA device: {e}")
    if ndev < 1:
        pytest.skip("no CUDA device")
    with importlib.resources.as_file(importlib.resources.files("gicbench") / "cuda") as cuda_dir:
        src = (cuda_dir / "wire_selftest.cu").read_text()
        module = cp.RawModule(code=src, options=(f"-I{cuda_dir}", "--std=c++17"))
        kernel = module.get_function("gicbench_wire_selftest")
    cases = make_cases()
    params = cp.asarray(table(cases))
    out = cp.zeros(len(cases) * CASE_BYTES, dtype=cp.uint8)
    threads = 64
    kernel(
        ((len(cases) + threads - 1) // threads,), (threads,), (params, np.int32(len(cases)), out)
    )
    cp.cuda.runtime.deviceSynchronize()
    check_outputs(cases, cp.asnumpy(out).tobytes(), "mlx5.cuh (GPU)")
