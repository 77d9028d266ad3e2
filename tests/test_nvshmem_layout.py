"""gicbench's records of NVSHMEM's device structures (gicbench.submit.nvshmem.layout) against
NVSHMEM's own headers: every field gicbench writes at the offset and size offsetof/sizeof give
(cuda/nvshmem/nvshmem_layout_host.cu, compiled for the host by nvcc), the enum values, and
records built from real emu queues read back through NVSHMEM's structures."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from nvshmem_helpers import headers_or_fail, nvcc_or_skip

from gicbench.errors import ConfigError
from gicbench.fabric.emu import EmuFabric
from gicbench.submit.nvshmem import build, layout

REPO = Path(__file__).resolve().parents[1]
CUDA = REPO / "cuda"
PROGRAM = CUDA / "nvshmem" / "nvshmem_layout_host.cu"
GPU_OFFSET = 0x7F00_0000_0000  # a stand-in device address space: host address + offset
RECORDS = {  # layout record -> the C struct name the program prints
    "cq_t": layout.CQ_DTYPE, "qp_t": layout.QP_DTYPE, "key_t_": layout.KEY_DTYPE,
    "mh_t": layout.LOCAL_MHANDLE_DTYPE,
    "ibgda_t": layout.IBGDA_STATE_DTYPE, "state_t": layout.DEVICE_STATE_DTYPE,
    "job_t": layout.JOB_DTYPE, "sample_t": layout.SAMPLE_DTYPE,
}  # fmt: skip


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("nvshmem-layout") / "layout"
    cmd = build.nvcc_command(nvcc_or_skip(), PROGRAM, exe, headers_or_fail(), CUDA, kind="")
    proc = subprocess.run([c for c in cmd if c and not c.startswith("-arch")],
                          capture_output=True, text=True)  # fmt: skip
    log = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0 and "warning" not in log.lower(), log
    return exe


@pytest.fixture(scope="module")
def c_layout(program: Path) -> tuple[dict, dict, dict]:
    sizes: dict[str, int] = {}
    fields: dict[str, dict[str, tuple[int, int]]] = {}
    consts: dict[str, int] = {}
    for line in subprocess.run([str(program)], capture_output=True, text=True,
                               check=True).stdout.splitlines():  # fmt: skip
        kind, *rest = line.split()
        if kind == "size":
            sizes[rest[0]] = int(rest[1])
        elif kind == "field":
            fields.setdefault(rest[0], {})[rest[1]] = (int(rest[2]), int(rest[3]))
        else:
            consts[rest[0]] = int(rest[1])
    return sizes, fields, consts


@pytest.mark.nvcc
@pytest.mark.parametrize("struct", sorted(RECORDS))
def test_every_field_gicbench_writes_sits_where_nvshmem_has_it(c_layout, struct: str) -> None:
    sizes, fields, _ = c_layout
    dt = RECORDS[struct]
    assert dt.itemsize == sizes[struct]
    c = fields[struct]
    for name, (off, size) in layout.flat_fields(dt).items():
        if name.startswith("mvars."):  # inside the nested management struct
            inner = fields["mvars_t"][name.removeprefix("mvars.")]
            want = (c["mvars"][0] + inner[0], inner[1])
        else:
            want = c[name]
        assert (off, size) == want, name


@pytest.mark.nvcc
def test_management_variables_and_constants(c_layout) -> None:
    sizes, fields, consts = c_layout
    assert sizes["mvars_t"] == layout.MVARS_BYTES
    assert fields["qp_t"]["mvars"][0] == layout.MVARS_OFFSET
    for name, off in layout.MVARS.items():
        assert fields["mvars_t"][name][0] == off, name
    for name in ("resv_head", "ready_head", "prod_idx", "cons_idx"):
        assert layout.mvars_addr(0, f"tx_wq.{name}") == fields["qp_t"][f"mvars.tx_wq.{name}"][0]
    want = {
        "NVSHMEMI_IBGDA_DEVICE_QP_TYPE_DCI": layout.QP_TYPE_DCI,
        "NVSHMEMI_IBGDA_DEVICE_QP_TYPE_RC": layout.QP_TYPE_RC,
        "NVSHMEMI_DEVICE_TRANSPORT_TYPE_IBGDA": layout.TRANSPORT_IBGDA,
        "NVSHMEMI_JOB_GPU_LDST": layout.JOB_GPU_LDST,
        "NVSHMEMI_JOB_GPU_PROXY": layout.JOB_GPU_PROXY,
        "NVSHMEMI_PROXY_NONE": layout.PROXY_NONE, "NVSHMEMX_TMA_DISABLE": layout.TMA_DISABLE,
        "NVSHMEMI_IBGDA_MAX_CONST_LKEYS": layout.MAX_CONST_KEYS,
        "NVSHMEMI_IBGDA_MAX_CONST_RKEYS": layout.MAX_CONST_KEYS,
        "NVSHMEMI_IBGDA_MIN_QP_DEPTH": layout.MIN_QP_DEPTH,
        "NVSHMEMI_IBGDA_MAX_QP_DEPTH": layout.MAX_QP_DEPTH,
        "NVSHMEMI_IBGDA_IBUF_SLOT_SIZE": layout.IBUF_SLOT,
        "NVSHMEMX_QP_DEFAULT": layout.QP_DEFAULT, "NVSHMEMX_QP_ALL": layout.QP_ALL,
        "NVSHMEMX_PE_ANY": layout.PE_ANY, "NVSHMEM_SIGNAL_ADD": layout.SIGNAL_ADD,
    }  # fmt: skip
    want.update({f"NVSHMEMI_IBGDA_DEVICE_QP_MAP_TYPE_{k.upper()}": v
                 for k, v in layout.MAP_TYPE.items()})  # fmt: skip
    assert {k: consts[k] for k in want} == want


@pytest.fixture
def fabric() -> Iterator[EmuFabric]:
    f = EmuFabric(0, 1, "nl-" + uuid.uuid4().hex[:8], progress="inline", segment_bytes=8 << 20)
    try:
        yield f
    finally:
        f.close()


@pytest.mark.nvcc
def test_records_from_emu_queues_read_back_through_nvshmems_structs(program: Path,
                                                                    fabric: EmuFabric) -> None:
    """A QP and its CQ made as NVSHMEM makes them (queue_kwargs: collapsed, overrun-ignoring),
    their records built from the emu objects, read by the program through NVSHMEM's types."""
    a = layout.queue_kwargs(256)
    cq = fabric.create_cq(a.ncqe, **a.cq)
    qp = fabric.create_qp(cq, 256, **a.qp)
    heap = fabric.register(1 << 20)
    ibuf = fabric.register(layout.IBUF_SLOT * 2)
    rcs, cqs, sw = 0x7E00_0000_0000, 0x7E00_0010_0000, 0x7E00_0020_0000
    qp_addr = rcs + layout.rc_index(1, 1, 2, 2) * layout.QP_DTYPE.itemsize
    cq_addr = cqs + layout.rc_index(1, 1, 2, 2) * layout.CQ_DTYPE.itemsize
    q = layout.qp_record(qpn=qp.qpn, wqe=qp.sq.buf + GPU_OFFSET, nwqes=qp.sq.wqebb_cnt,
                         dbrec=qp.sq.dbrec + GPU_OFFSET + 4, bf=qp.sq.doorbell + GPU_OFFSET,
                         cq_addr=cq_addr, qp_addr=qp_addr, ibuf=ibuf.addr, ibuf_lkey=ibuf.lkey,
                         ibuf_rkey=ibuf.rkey)  # fmt: skip
    c = layout.cq_record(cqn=cq.cqn, ncqe=cq.ncqe, cqe=cq.buf + GPU_OFFSET,
                         dbrec=cq.dbrec + GPU_OFFSET, qpn=qp.qpn, qp_addr=qp_addr)  # fmt: skip
    lk = layout.lkeys(heap.addr, heap.length, heap.lkey, 16)
    rk = layout.rkeys(heap.length, [0x1111, heap.rkey], 16)
    assert len(lk) == 16 and len(rk) == 32  # > 64 entries would go to globalmem
    ib = layout.ibgda_state(rcs=rcs, cqs=cqs, qp_group_switches=sw, lkey_table=lk,
                            rkey_table=rk, log2_chunk=16, requests_in_batch=32)  # fmt: skip
    st = layout.device_state(mype=0, npes=2, heap_base=heap.addr, heap_size=heap.length,
                             peer_heap_base_p2p=0x1000, peer_heap_base_remote=0x2000,
                             region_active_count=0x3000)  # fmt: skip
    blob = q.tobytes() + c.tobytes() + ib.tobytes() + st.tobytes()
    out = subprocess.run([str(program), "read"], input=blob, capture_output=True, check=True)
    got = dict(ln.split() for ln in out.stdout.decode().splitlines())
    got = {k: int(v) for k, v in got.items()}
    be = layout.be32
    assert (got["qp.qp_type"], got["qp.qpn"], got["qp.dev_idx"]) == (3, qp.qpn, 0)
    assert got["qp.version"] == (1 << 16) + 184 and got["cq.version"] == (1 << 16) + 72
    assert got["qp.tx_wq.nwqes"] == 256 and got["qp.tx_wq.wqe"] == qp.sq.buf + GPU_OFFSET
    assert got["qp.tx_wq.dbrec"] == qp.sq.dbrec + GPU_OFFSET + 4  # the SND word
    assert got["qp.tx_wq.bf"] == qp.sq.doorbell + GPU_OFFSET and got["qp.tx_wq.cq"] == cq_addr
    assert got["qp.tx_wq.prod_idx"] == got["cq.prod_idx"] == qp_addr + 88 + 24
    assert (got["cq.cons_idx"], got["cq.resv_head"], got["cq.ready_head"]) == (
        qp_addr + 88 + 32, qp_addr + 88 + 8, qp_addr + 88 + 16)  # fmt: skip
    assert (got["qp.ibuf.lkey"], got["qp.ibuf.buf"]) == (be(ibuf.lkey), ibuf.addr)
    assert got["qp.mvars.post_send_lock"] == 0 and got["qp.mvars.tx_wq.resv_head"] == 0
    assert (got["cq.cqn"], got["cq.ncqes"], got["cq.qpn"], got["cq.qp_type"]) == (
        cq.cqn, 256, qp.qpn, 3)  # fmt: skip
    assert got["cq.cqe"] == cq.buf + GPU_OFFSET and got["cq.dbrec"] == cq.dbrec + GPU_OFFSET
    assert (got["ibgda.num_rc_per_pe"], got["ibgda.num_default_rc_per_pe"]) == (2, 2)
    assert (got["ibgda.rc_map_type"], got["ibgda.num_requests_in_batch"]) == (0, 32)
    assert (got["ibgda.num_shared_dcis"], got["ibgda.num_exclusive_dcis"]) == (0, 0)
    assert (got["ibgda.may_skip_cst"], got["ibgda.use_async_postsend"]) == (1, 0)
    assert got["ibgda.num_devices_initialized"] == 1 and got["ibgda.num_qp_groups"] == 2
    assert got["ibgda.log2_cumem_granularity"] == 16
    assert got["ibgda.constmem.lkeys[0].key"] == be(heap.lkey)
    assert got["ibgda.constmem.lkeys[0].next_addr"] == heap.addr + heap.length
    assert got["ibgda.constmem.rkeys[1].key"] == be(heap.rkey)
    assert got["ibgda.constmem.rkeys[1].next_addr"] == heap.length
    assert (got["ibgda.globalmem.rcs"], got["ibgda.globalmem.cqs"],
            got["ibgda.globalmem.qp_group_switches"]) == (rcs, cqs, sw)  # fmt: skip
    assert (got["state.mype"], got["state.npes"], got["state.job_connectivity"]) == (0, 2, 8)
    assert got["state.heap_base"] == heap.addr and got["state.heap_size"] == heap.length
    assert (got["state.peer_heap_base_p2p"], got["state.peer_heap_base_remote"],
            got["state.region_active_count"]) == (0x1000, 0x2000, 0x3000)  # fmt: skip
    assert (got["state.selected_device_transport"], got["state.tma_policy"]) == (1, 0)
    assert (got["state.symmetric_heap_kind"], got["state.enable_rail_opt"]) == (1, 0)


def test_refusals() -> None:
    with pytest.raises(ConfigError, match="sq_wqebbs"):
        layout.queue_kwargs(64)  # below NVSHMEM's minimum depth
    with pytest.raises(ConfigError, match="sq_wqebbs"):
        layout.queue_kwargs(65536)
    with pytest.raises(ConfigError, match="requests_in_batch"):
        layout.ibgda_state(rcs=1, cqs=1, qp_group_switches=1, lkey_table=[], rkey_table=[],
                           log2_chunk=16, requests_in_batch=3)  # fmt: skip
    many = [(1, 2)] * (layout.MAX_CONST_KEYS + 1)
    with pytest.raises(ConfigError, match="lkeys_rest"):
        layout.ibgda_state(rcs=1, cqs=1, qp_group_switches=1, lkey_table=many, rkey_table=[],
                           log2_chunk=16)  # fmt: skip
    const, rest = layout.key_table(many)
    assert len(const) == layout.MAX_CONST_KEYS and len(rest) == 1
    assert layout.rc_index(1, 3, 4, 2) == 7 and layout.rc_index(0, 3, 4, 2, dev=1) == 11
    with pytest.raises(ConfigError):
        layout.rc_index(2, 0, 4, 2)
    assert np.zeros((), layout.JOB_DTYPE).itemsize == 48
    m = layout.local_mhandle(start=0x1000, length=0x100, lkey=0x11223344)
    assert (m["start"], m["end"], m["lkeys"][0]) == (0x1000, 0x10FF, layout.be32(0x11223344))
