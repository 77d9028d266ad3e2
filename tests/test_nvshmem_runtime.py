"""The CPU side of NVSHMEM's device code on emu (gicbench.submit.nvshmem.runtime): the loopback
world's queues made as NVSHMEM's transport makes them, and every record build_states writes read
back through NVSHMEM's own structures (the layout program, compiled by nvcc for the host): each
field the program reads back equals what was written, each field it does not read is zero, and
the values are the emu objects' (stand-in GPU addresses: host address + an offset)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_nvshmem_layout import program  # noqa: F401  (the compiled layout program, a fixture)

from gicbench.fabric.base import host_view
from gicbench.submit.nvshmem import layout, runtime

OFF = 0x7F00_0000_0000  # stand-in device address space
BASES = runtime.Bases(rcs=0x7E00_0000_0000, cqs=0x7E00_0010_0000, switches=0x7E00_0020_0000,
                      p2p=0x7E00_0030_0000, remote=0x7E00_0040_0000,
                      region_count=0x7E00_0050_0000)  # fmt: skip
PREFIX = {"qp": layout.QP_DTYPE, "cq": layout.CQ_DTYPE, "ibgda": layout.IBGDA_STATE_DTYPE,
          "state": layout.DEVICE_STATE_DTYPE}  # fmt: skip


def _states(world: runtime.Loopback) -> runtime.States:
    return runtime.build_states(
        world, BASES,
        sq_dev=lambda q: (q.sq.buf + OFF, q.sq.dbrec + OFF, q.sq.doorbell + OFF),
        cq_dev=lambda c: (c.buf + OFF, c.dbrec + OFF),
    )  # fmt: skip


@pytest.fixture(params=[1, 16], ids=["1qp", "16qp"])
def world(request):
    with runtime.Loopback(request.param, progress="inline", segment_bytes=16 << 20) as w:
        yield w


def _read(prog: Path, qp: np.ndarray, cq: np.ndarray, st: runtime.States) -> dict[str, int]:
    blob = qp.tobytes() + cq.tobytes() + st.ibgda.tobytes() + st.device.tobytes()
    out = subprocess.run([str(prog), "read"], input=blob, capture_output=True, check=True)
    return {k: int(v) for k, v in (ln.split() for ln in out.stdout.decode().splitlines())}


def _check_generic(got: dict[str, int], recs: dict[str, np.ndarray]) -> None:
    """Every scalar field of every record: read back equal, or (not read back) zero."""
    for prefix, dt in PREFIX.items():
        rec = recs[prefix]
        for name in dt.names:
            if dt.fields[name][0].shape or name.startswith("constmem."):
                continue
            key = f"{prefix}.{name}"
            if key in got:
                assert got[key] == int(rec[name]), key
            else:
                assert int(rec[name]) == 0, f"{key} written ({int(rec[name])}) but not read back"
    ib = recs["ibgda"]
    assert got["ibgda.constmem.lkeys[0].key"] == int(ib["constmem.lkeys"][0]["key"])
    assert got["ibgda.constmem.rkeys[1].next_addr"] == int(ib["constmem.rkeys"][1]["next_addr"])


@pytest.mark.nvcc
def test_every_record_reads_back_through_nvshmems_structs(program, world) -> None:  # noqa: F811
    st = _states(world)
    rc = world.rc_per_pe
    assert len(st.qps) == len(st.cqs) == rc * runtime.NPES
    filled = set()
    be = layout.be32
    for slot, qp in enumerate(world.qps):
        i = layout.rc_index(slot, runtime.PEER, runtime.NPES, rc)
        assert st.index[qp.qpn] == i
        filled.add(i)
        got = _read(program, st.qps[i], st.cqs[i], st)
        _check_generic(got, {"qp": st.qps[i], "cq": st.cqs[i], "ibgda": st.ibgda,
                             "state": st.device})  # fmt: skip
        qp_addr = BASES.rcs + i * layout.QP_DTYPE.itemsize
        mv = qp_addr + layout.MVARS_OFFSET
        cq = qp.sq.cq
        assert (got["qp.qpn"], got["qp.qp_type"], got["qp.dev_idx"]) == (qp.qpn, 3, 0)
        assert got["qp.tx_wq.wqe"] == qp.sq.buf + OFF and got["qp.tx_wq.nwqes"] == world.depth
        assert got["qp.tx_wq.dbrec"] == qp.sq.dbrec + OFF + 4  # the SND word
        assert got["qp.tx_wq.bf"] == qp.sq.doorbell + OFF
        assert got["qp.tx_wq.cq"] == BASES.cqs + i * layout.CQ_DTYPE.itemsize
        assert got["qp.tx_wq.prod_idx"] == got["cq.prod_idx"] == mv + 24
        assert (got["cq.resv_head"], got["cq.ready_head"], got["cq.cons_idx"]) == (
            mv + 8, mv + 16, mv + 32)  # fmt: skip
        assert (got["cq.cqn"], got["cq.ncqes"], got["cq.qpn"]) == (cq.cqn, cq.ncqe, qp.qpn)
        assert got["cq.cqe"] == cq.buf + OFF and got["cq.dbrec"] == cq.dbrec + OFF
        assert got["qp.ibuf.buf"] == world.ibuf.addr + slot * 2 * layout.IBUF_SLOT
        assert got["qp.ibuf.lkey"] == be(world.ibuf.lkey)
        for k in ("post_send_lock", "tx_wq.resv_head", "tx_wq.ready_head", "tx_wq.prod_idx",
                  "tx_wq.cons_idx"):  # fmt: skip
            assert got[f"qp.mvars.{k}"] == 0
    # PE 0's entries (NVSHMEM never takes a QP to itself) stay zero
    for i in set(range(len(st.qps))) - filled:
        assert not st.qps[i].tobytes().strip(b"\0") and not st.cqs[i].tobytes().strip(b"\0")
    assert (got["ibgda.num_rc_per_pe"], got["ibgda.num_default_rc_per_pe"]) == (rc, rc)
    assert got["ibgda.num_qp_groups"] == max(rc, 2) and got["ibgda.log2_cumem_granularity"] == 20
    assert (got["ibgda.globalmem.rcs"], got["ibgda.globalmem.cqs"],
            got["ibgda.globalmem.qp_group_switches"]) == (BASES.rcs, BASES.cqs, BASES.switches)
    heap, peer = world.heaps
    assert got["ibgda.constmem.lkeys[0].key"] == be(heap.lkey)
    assert got["ibgda.constmem.lkeys[0].next_addr"] == heap.addr + heap.length
    assert got["ibgda.constmem.rkeys[1].key"] == be(peer.rkey)  # chunk 0, PE 1
    assert got["ibgda.constmem.rkeys[1].next_addr"] == heap.length
    assert (got["state.mype"], got["state.npes"], got["state.heap_base"],
            got["state.heap_size"]) == (0, 2, heap.addr, heap.length)  # fmt: skip
    assert (got["state.peer_heap_base_p2p"], got["state.peer_heap_base_remote"],
            got["state.region_active_count"]) == (BASES.p2p, BASES.remote, BASES.region_count)
    assert (got["state.job_connectivity"], got["state.selected_device_transport"]) == (8, 1)
    assert list(st.remote) == [heap.addr, peer.addr]
    assert heap.length == peer.length  # symmetric


def test_queues_made_as_nvshmem_makes_them(world) -> None:
    for qp in world.qps:
        cq = qp.sq.cq
        assert cq.ncqe == qp.sq.wqebb_cnt == world.depth
        assert (host_view(cq.buf, cq.ncqe * 64) == 0xFF).all()  # NVSHMEM's CQ start
    sizes = runtime.array_bytes(world.rc_per_pe)
    assert sizes["rcs"] == world.rc_per_pe * 2 * 184 and sizes["cqs"] == world.rc_per_pe * 2 * 72
    assert sizes["switches"] >= 4 * (max(world.rc_per_pe, 2) + 1)
