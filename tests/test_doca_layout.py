"""gicbench's queues -> DOCA's device QP: the Python records (gicbench.submit.doca.layout) and
the adaptor (cuda/doca/gicbench_doca.cuh, run on the CPU through nvcc) fill DOCA's own
`struct doca_gpu_dev_verbs_qp` from real emu QPs, field by field (docs/doca.md's table)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from doca_helpers import headers_or_fail, nvcc_or_skip

from gicbench.errors import ConfigError
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.doca import build
from gicbench.submit.doca.layout import (
    JOB_DTYPE,
    LANE_DTYPE,
    QP_BYTES,
    QUEUE_DTYPE,
    RESULT_DTYPE,
    CqType,
    NicHandler,
    Op,
    Scope,
    be32,
    job_record,
    lane_record,
    proxy_bytes,
    queue_kwargs,
    queue_record,
    supported,
)

REPO = Path(__file__).resolve().parents[1]
DRIVER = REPO / "tests" / "c" / "doca_build_host.cu"
GPU_OFFSET = 0x7F00_0000_0000  # a stand-in "device" address space: host address + offset


@pytest.fixture
def fabric() -> Iterator[EmuFabric]:
    f = EmuFabric(0, 1, "dl-" + uuid.uuid4().hex[:8], progress="inline", segment_bytes=8 << 20)
    try:
        yield f
    finally:
        f.close()


def device_table(f: EmuFabric, qps: list) -> dict:
    """What register_cuda() returns, with addresses moved by GPU_OFFSET (no GPU here)."""
    return {
        "qps": {q.qpn: {"buf": q.sq.buf + GPU_OFFSET, "dbrec": q.sq.dbrec + GPU_OFFSET,
                        "doorbell": q.sq.doorbell + GPU_OFFSET} for q in qps},
        "cqs": {q.sq.cq.cqn: {"buf": q.sq.cq.buf + GPU_OFFSET,
                              "dbrec": q.sq.cq.dbrec + GPU_OFFSET} for q in qps},
    }  # fmt: skip


def make(f: EmuFabric, h: NicHandler, t: CqType, depth: int):
    a = queue_kwargs(h, t, depth)
    return f.create_qp(f.create_cq(a.ncqe, **a.cq), depth, **a.qp)


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("doca") / "doca_build_host"
    cmd = build.nvcc_command(nvcc_or_skip(), DRIVER, exe, headers_or_fail(), REPO / "cuda",
                             kind="")  # fmt: skip
    proc = subprocess.run([c for c in cmd if c], capture_output=True, text=True)
    log = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and "warning" not in log.lower(), log
    return exe


def run_driver(exe: Path, recs: np.ndarray) -> tuple[list[int], list[dict[str, int]]]:
    out = subprocess.run([str(exe)], input=recs.tobytes(), capture_output=True, check=True)
    lines = out.stdout.decode().splitlines()
    sizes = [int(x) for x in lines[0].split()[1:]]
    built, cur = [], {}
    for ln in lines[1:]:
        if ln == "end":
            built.append(cur)
            cur = {}
        else:
            k, v = ln.split()
            cur[k] = int(v)
    return sizes, built


@pytest.mark.nvcc
def test_record_sizes_match_the_c_structures(driver: Path) -> None:
    sizes, _ = run_driver(driver, np.zeros(0, QUEUE_DTYPE))
    assert sizes == [QUEUE_DTYPE.itemsize, LANE_DTYPE.itemsize, JOB_DTYPE.itemsize,
                     RESULT_DTYPE.itemsize, QP_BYTES]  # fmt: skip


@pytest.mark.nvcc
def test_adaptor_fills_docas_qp_from_emu_queues(driver: Path, fabric: EmuFabric) -> None:
    cases = [
        (NicHandler.GPU_SM_DB, CqType.CQ_64B, 64, 0),
        (NicHandler.GPU_SM_NO_DBR, CqType.CQ_64B_COLLAPSED, 1024, 0),
        (NicHandler.GPU_SM_BF, CqType.CQ_64B, 32768, 0),
        (NicHandler.CPU_PROXY, CqType.CQ_64B, 16, 0x1234_5000),
        (NicHandler.CPU_PROXY_FREE_FLOW, CqType.CQ_64B_COLLAPSED, 128, 0x2234_5000),
    ]
    qps = [make(fabric, h, t, d) for h, t, d, _ in cases]
    dev = device_table(fabric, qps)
    recs = np.stack(
        [
            queue_record(q, h, t, dev, proxy_addr=p, start=7 * i)
            for i, (q, (h, t, _, p)) in enumerate(zip(qps, cases, strict=True))
        ]
    )
    _, built = run_driver(driver, recs)
    assert len(built) == len(cases)
    for i, (qp, (h, t, depth, proxy), b) in enumerate(zip(qps, cases, built, strict=True)):
        sq, cq = qp.sq, qp.sq.cq
        s8 = qp.qpn << 8
        assert b["sq_num"] == qp.qpn and b["sq_num_shift8"] == s8
        assert b["sq_num_shift8_be"] == be32(s8)
        for n in (1, 3, 4, 5):
            assert b[f"sq_num_shift8_be_{n}ds"] == be32(s8 | n), n
        assert b["sq_rsvd_index"] == b["sq_ready_index"] == b["sq_wqe_pi"] == b["cqe_ci"] == 7 * i
        assert (b["sq_wqe_num"], b["sq_wqe_mask"]) == (depth, depth - 1)
        assert b["sq_wqe_daddr"] == sq.buf + GPU_OFFSET
        assert b["sq_dbrec"] == sq.dbrec + GPU_OFFSET + 4  # MLX5_SND_DBR
        assert b["sq_db"] == (proxy or sq.doorbell + GPU_OFFSET)
        assert b["cqe_daddr"] == cq.buf + GPU_OFFSET and b["cq_dbrec"] == cq.dbrec + GPU_OFFSET
        assert (b["cq_num"], b["cqe_num"], b["cqe_mask"]) == (cq.cqn, cq.ncqe, cq.ncqe - 1)
        assert cq.ncqe == depth
        assert (b["cqe_size"], b["cqe_rsvd"], b["cq_type"]) == (64, 0, int(t))
        assert b["nic_handler"] == int(h) and b["mem_type"] == b["cq_mem_type"] == 1  # host
        assert b["sq_lock"] == 0
        want = sum(1 << k for k, (sc, op) in enumerate(
            [(Scope.THREAD, o) for o in Op] + [(Scope.WARP, Op.PUT), (Scope.WARP, Op.P)])
            if supported(h, sc, op))  # fmt: skip
        assert b["supported"] == want


def test_queue_kwargs_per_handler() -> None:
    a = queue_kwargs(NicHandler.GPU_SM_NO_DBR, CqType.CQ_64B_COLLAPSED, 256)
    assert a.qp == {"dbr": False} and a.ncqe == 256
    assert a.cq == {"collapsed": True, "overrun_ignore": True}
    assert queue_kwargs(NicHandler.GPU_SM_DB, CqType.CQ_64B, 8).qp == {"dbr": True}
    with pytest.raises(ConfigError, match="sq_wqebbs"):
        queue_kwargs(NicHandler.GPU_SM_DB, CqType.CQ_64B, 65536)


def test_queue_record_refusals(fabric: EmuFabric) -> None:
    qp = make(fabric, NicHandler.GPU_SM_DB, CqType.CQ_64B, 64)
    dev = device_table(fabric, [qp])
    with pytest.raises(ConfigError, match="register the queues with CUDA"):
        queue_record(qp, NicHandler.GPU_SM_DB, CqType.CQ_64B, None)
    with pytest.raises(ConfigError, match="proxy_addr"):
        queue_record(qp, NicHandler.CPU_PROXY, CqType.CQ_64B, dev)
    with pytest.raises(ConfigError, match="proxy_addr"):
        queue_record(qp, NicHandler.GPU_SM_DB, CqType.CQ_64B, dev, proxy_addr=4096)
    small = fabric.create_qp(fabric.create_cq(16), 64)
    with pytest.raises(ConfigError, match=r"cq\.ncqe"):
        queue_record(small, NicHandler.GPU_SM_DB, CqType.CQ_64B, device_table(fabric, [small]))
    dci = fabric.create_qp(fabric.create_cq(64), 64, dci=True)
    with pytest.raises(ConfigError, match="RC QP"):
        queue_record(dci, NicHandler.GPU_SM_DB, CqType.CQ_64B, device_table(fabric, [dci]))


def test_lane_and_job_records(fabric: EmuFabric) -> None:
    src = fabric.register(4096)
    rec = lane_record(src, 0xABC000, 0x11223344, sig_remote=0xDEF000, sig_rkey=0x55, sig_local=src)
    assert rec["src"] == src.addr and rec["src_lkey_be"] == be32(src.lkey)
    # the key's little-endian bytes in the record are the key big-endian, as the WQE carries it
    assert rec["dst_rkey_be"].tobytes() == bytes.fromhex("11223344")
    assert (rec["sig_remote"], rec["sig_local"]) == (0xDEF000, src.addr)
    assert proxy_bytes(NicHandler.CPU_PROXY, 64) == 8
    assert proxy_bytes(NicHandler.CPU_PROXY_FREE_FLOW, 64) == 512
    assert proxy_bytes(NicHandler.GPU_SM_DB, 64) == 0
    j = job_record(Op.PUT, 4096, 3, 2, seed=9)
    assert (j["op"], j["size"], j["iters"], j["nqps"], j["seed"]) == (0, 4096, 3, 2, 9)
    with pytest.raises(ConfigError, match="size"):
        job_record(Op.P, 16, 1, 1)
