"""The CUDA engine across processes (CUDA IPC), under mpiexec -n 2 (marked gpu and mpi; skipped
without a GPU): rank 0's engine executes WQEs aimed at rank 1's GPU-memory MR and CQ, which it
reaches through the IPC handles exchanged in local_info()/add_peers() (NVLink peer access with
one rank per GPU; the same GPU under MPS). Payloads, the atomic, the READ and the responder CQE
of a WRITE_IMM are checked where they land; an MR created after the exchange is out of reach
(REMOTE_ACCESS) until update_peers() maps it.

    mpiexec -n 2 python3 -m pytest -p no:cacheprovider --with-mpi -m mpi \
        tests/mpi/test_emu_cuda_ipc_mpi.py
"""

from __future__ import annotations

import struct
import time
from typing import Any

import numpy as np
import pytest
from gpu_helpers import cupy_or_skip

from gicbench.fabric.base import Access, host_view
from gicbench.fabric.emu import EmuFabric, segment_bytes_for
from gicbench.fabric.emu.cuda_engine import TABLES_WHAT, arena_bytes
from gicbench.mlx5 import (
    SND_DBR,
    Opcode,
    SqRing,
    cqe_ready,
    dbrec_value,
    decode_cqe,
    doorbell_value,
)
from gicbench.mlx5.wqe import data_seg, imm_from_host, raddr_seg

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.gpu]
MR_BYTES = 1 << 16
NQ = 3  # QPs: the main one, one aimed at a late MR, one after update_peers()


@pytest.fixture
def cp() -> Any:
    return cupy_or_skip()


@pytest.fixture
def comm():
    from mpi4py import MPI

    return MPI.COMM_WORLD


class Poster:
    """The CPU posts to a host-resident SQ of the CUDA engine (mapped into the GPU)."""

    def __init__(self, qp: Any) -> None:
        self.qp = qp
        self.ring = SqRing(host_view(qp.sq.buf, qp.sq.wqebb_cnt * 64), qp.sq.wqebb_cnt)
        self.pi = 0

    def post(self, opcode: int, body: list, imm: int = 0) -> int:
        idx = self.pi
        self.pi += self.ring._post(idx, opcode, self.qp.qpn, 0x08, imm, body)  # signaled
        return idx

    def ring_doorbell(self) -> None:
        last = (self.pi - 1) & 0xFFFF
        rec = np.frombuffer(dbrec_value(self.pi), np.uint8)
        host_view(self.qp.sq.dbrec + 4 * SND_DBR, 4)[:] = rec
        ctrl = self.ring.read(last, 0, 16)
        host_view(self.qp.sq.doorbell, 8).view(np.uint64)[0] = doorbell_value(ctrl)


def from_gpu(cp: Any, addr: int, n: int) -> np.ndarray:
    out = np.zeros(n, np.uint8)
    cp.cuda.runtime.memcpy(out.ctypes.data, addr, n, 2)  # device to host
    return out


def poll(cq: Any, n: int, timeout: float = 10.0) -> list[Any]:
    buf = host_view(cq.buf, cq.ncqe * 64)
    out, t0 = [], time.monotonic()
    while len(out) < n:
        i = len(out)
        raw = buf[(i % cq.ncqe) * 64 : (i % cq.ncqe + 1) * 64]
        if cqe_ready(raw, i, cq.ncqe):
            out.append(decode_cqe(raw))
        elif time.monotonic() - t0 > timeout:
            raise AssertionError(f"CQ {cq.cqn:#x}: {len(out)} of {n} CQEs after {timeout} s")
    return out


def test_engine_reaches_a_peer_process_gpu_memory(cp: Any, comm: Any) -> None:
    if comm.size != 2:
        pytest.skip("two ranks")
    rank = comm.rank
    cp.cuda.Device(rank % cp.cuda.runtime.getDeviceCount()).use()
    job = comm.bcast(f"ipc{int(time.time()) % 100000}" if rank == 0 else None)
    arena = arena_bytes() > 0
    f = EmuFabric(rank, 2, job, progress="inline", engine="cuda", engine_ctas=2, queues="host",
                  segment_bytes=segment_bytes_for(NQ, NQ, 0, 64, 64, [MR_BYTES] * 3,
                                                  rq_wqes=16),
                  max_qps=NQ, max_cqs=NQ, max_mrs=3, max_dcts=0)  # fmt: skip
    try:
        if rank == 1:  # the target: CQ and MR in GPU memory
            cq = f.create_cq(64, domain="device")
            qps = [f.create_qp(cq, 64, rq_wqes=16) for _ in range(NQ)]
            acc = Access.LOCAL_WRITE | Access.REMOTE_WRITE | Access.REMOTE_READ
            mr = f.register(MR_BYTES, acc | Access.REMOTE_ATOMIC, domain="device")
            # the engine's tables (peers check their responder there), and the CQ and the MR;
            # with an arena (ARENA_ENV), the arena they were carved from
            whats = [e["what"] for e in f.local_info()["ipc"]]
            assert whats[0] == TABLES_WHAT and len(whats) == (2 if arena else 3), whats
        else:
            cq = f.create_cq(64)
            qps = [f.create_qp(cq, 64) for _ in range(NQ)]
            mr = f.register(MR_BYTES, Access.LOCAL_WRITE, domain="host-mapped")
        infos = comm.allgather(f.local_info())
        f.add_peers(infos)
        eps = comm.allgather([f.endpoint(q) for q in qps])
        for q, ep in zip(qps, eps[1 - rank], strict=True):
            f.connect(q, ep)
        remote = comm.allgather((mr.addr, mr.rkey))[1 - rank]
        comm.Barrier()
        f.seal()
        if rank == 1:  # receives for the WRITE_IMM (no scatter list needed)
            rq = qps[0].rq
            ring = host_view(rq.buf, rq.wqe_cnt * 16)
            ring[:16] = data_seg(0, 0, 0)
            host_view(rq.dbrec, 4)[:] = np.frombuffer(struct.pack(">I", 1), np.uint8)
        comm.Barrier()

        # 1. rank 0 writes (inline and gather), adds, reads and writes with immediate.
        pay = np.random.default_rng(3).integers(0, 256, 256, dtype=np.uint8)
        if rank == 0:
            src = host_view(mr.addr, MR_BYTES)
            src[:256] = pay
            p = Poster(qps[0])
            raddr, rkey = remote
            p.pi += p.ring.post_write(0, qps[0].qpn, raddr, rkey, payload=b"IPC-8B!!",
                                      signaled=True)  # fmt: skip
            p.pi += p.ring.post_write(p.pi, qps[0].qpn, raddr + 64, rkey, lkey=mr.lkey,
                                      addr=mr.addr, length=256, signaled=True)  # fmt: skip
            p.pi += p.ring.post_fetch_add(p.pi, qps[0].qpn, raddr + 1024, rkey, 5, mr.lkey,
                                          mr.addr + 4096)  # fmt: skip
            p.post(Opcode.RDMA_READ, [raddr_seg(raddr + 64, rkey),
                                      data_seg(256, mr.lkey, mr.addr + 8192)])  # fmt: skip
            p.pi += p.ring.post_write(p.pi, qps[0].qpn, raddr + 2048, rkey, payload=b"imm-data",
                                      imm=imm_from_host(0xC0FFEE), signaled=True)  # fmt: skip
            p.ring_doorbell()
            cqes = poll(cq, 5)
            assert [c.syndrome for c in cqes if c.is_error] == []
            assert bytes(src[8192 : 8192 + 256]) == pay.tobytes()  # the READ came back
            assert src[4096:4104].view(np.uint64)[0] == 0  # fetch-add's old value
        comm.Barrier()
        if rank == 1:
            got = from_gpu(cp, mr.addr, 4096)
            assert bytes(got[:8]) == b"IPC-8B!!"
            assert bytes(got[64:320]) == pay.tobytes()
            assert got[1024:1032].view(np.uint64)[0] == 5
            assert bytes(got[2048:2056]) == b"imm-data"
            ring = from_gpu(cp, cq.buf, 64)
            assert cqe_ready(ring[:64], 0, cq.ncqe)
            c = decode_cqe(ring[:64])
            assert not c.is_error and c.byte_cnt == 8 and c.qpn == qps[0].qpn
            assert f.cq_status(cq)["pi"] == 1

        # 2. an MR registered after the exchange: out of reach until update_peers(); with an
        # arena, carved from the arena rank 0 has mapped already: in reach at once (as on a NIC).
        late = None
        if rank == 1:
            late = f.register(4096, Access.LOCAL_WRITE | Access.REMOTE_WRITE, domain="device")
            assert f.unexchanged() == ([] if arena else [f"MR key {late.rkey:#x}"])
        late_remote = comm.bcast((late.addr, late.rkey) if late else None, root=1)
        comm.Barrier()
        if rank == 0:
            p = Poster(qps[1])
            p.pi += p.ring.post_write(0, qps[1].qpn, late_remote[0], late_remote[1],
                                      payload=b"too-soon", signaled=True)  # fmt: skip
            p.ring_doorbell()
            (c,) = poll(cq, 6)[5:]
            if arena:
                assert not c.is_error
            else:
                assert c.is_error and c.syndrome == 0x13  # REMOTE_ACCESS: never a stray store
                f.errors()  # the completion error record is expected
        comm.Barrier()
        n = f.update_peers(comm.allgather(f.local_info()))
        assert n == (1 if rank == 0 and not arena else 0)
        assert f.unexchanged() == []
        comm.Barrier()
        if rank == 0:
            p = Poster(qps[2])
            p.pi += p.ring.post_write(0, qps[2].qpn, late_remote[0], late_remote[1],
                                      payload=b"in-reach", signaled=True)  # fmt: skip
            p.ring_doorbell()
            (c,) = poll(cq, 7)[6:]
            assert not c.is_error
        comm.Barrier()
        if rank == 1:
            got = from_gpu(cp, late.addr, 8)
            assert bytes(got) == b"in-reach"
            f.check()
        comm.Barrier()
    finally:
        f.stop_engine()
        comm.Barrier()  # no engine writes into a peer's memory while it is freed
        f.close()
