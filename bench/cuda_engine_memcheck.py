"""The CUDA engine alone under compute-sanitizer memcheck.

compute-sanitizer runs one kernel at a time, so bench/cuda_engine.py's submitter kernels wait
behind the persistent engine kernel for ever under it. Here the host is the submitter: it builds
WQEs with gicbench.mlx5 and copies them, the doorbell record and the doorbell into the QP's GPU
memory (cudaMemcpy; no kernel), and polls the CQ in GPU memory the same way. Queues, CQ and MRs
are in GPU memory, carved from the engine's arena (GICBENCH_CUDA_ENGINE_ARENA_MB), which exists
before the launch, so memcheck knows every address the engine touches.

Ops: inline RDMA WRITEs, pointer WRITEs from a second MR and fetch-adds, every one signaled and
checked at its target. Run:
    GICBENCH_CUDA_ENGINE_ARENA_MB=64 compute-sanitizer --tool memcheck \
        python3 bench/cuda_engine_memcheck.py --ops 60
"""

from __future__ import annotations

import argparse
import time
import uuid

import numpy as np

from gicbench.fabric.emu import EmuFabric, segment_bytes_for
from gicbench.mlx5.cqe import cqe_ready, decode_cqe
from gicbench.mlx5.doorbell import cq_ci_value, dbrec_value, doorbell_value
from gicbench.mlx5.sq import SqRing

DEPTH = 64  # WQEBBs of the SQ, CQEs of the CQ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--ops", type=int, default=60, help="operations (a third of each kind)")
    ap.add_argument("--timeout", type=float, default=60.0, help="s per CQE (the tool is slow)")
    a = ap.parse_args(argv)
    if not 1 <= a.ops <= 300:  # fetch-adds return into src word 300, which writes must not read
        ap.error(f"--ops {a.ops}: allowed 1..300")
    import cupy as cp

    rt = cp.cuda.runtime
    f = EmuFabric(0, 1, "cm-" + uuid.uuid4().hex[:8], progress="inline",
                  segment_bytes=segment_bytes_for(1, 1, 0, DEPTH, DEPTH, [4096, 4096]),
                  max_qps=1, max_cqs=1, max_mrs=2, max_dcts=0, engine="cuda", engine_ctas=2,
                  queues="device")  # fmt: skip

    def put(dst: int, data: bytes) -> None:
        host = np.frombuffer(data, np.uint8)
        rt.memcpy(dst, host.ctypes.data, host.size, 1)  # host to device

    def get(src: int, n: int) -> np.ndarray:
        host = np.zeros(n, np.uint8)
        rt.memcpy(host.ctypes.data, src, n, 2)  # device to host
        return host

    try:
        cq = f.create_cq(DEPTH)
        qp = f.create_qp(cq, DEPTH)
        f.connect(qp, f.endpoint(qp))  # loopback: the targets are this rank's MRs
        dst = f.register(4096, domain="device")
        src = f.register(4096, domain="device")
        put(src.addr, np.arange(512, dtype=np.uint64).tobytes())
        sq, ring = qp.sq, SqRing(np.zeros(qp.sq.wqebb_cnt * 64, np.uint8), qp.sq.wqebb_cnt)
        expect = np.zeros(512, np.uint64)
        for i in range(a.ops):
            kind, slot = i % 3, i % 64  # write inline, write from src, fetch-add
            raddr = dst.addr + 8 * slot
            if kind == 0:
                word = int(1000 + i).to_bytes(8, "little")
                n = ring.post_write(i, qp.qpn, raddr, dst.rkey, payload=word, signaled=True)
                expect[slot] = 1000 + i
            elif kind == 1:
                at = src.addr + 8 * (i % 512)
                n = ring.post_write(i, qp.qpn, raddr, dst.rkey, lkey=src.lkey, addr=at, length=8,
                                    signaled=True)  # fmt: skip
                expect[slot] = i % 512
            else:
                n = ring.post_fetch_add(i, qp.qpn, raddr, dst.rkey, 1, src.lkey,
                                        src.addr + 8 * 300)  # fmt: skip
                expect[slot] += 1
            assert n == 1
            off = (i % sq.wqebb_cnt) * 64
            put(sq.device_buf + off, ring.buf[off : off + 64].tobytes())
            put(sq.device_dbrec + 4, dbrec_value(i + 1))
            put(sq.device_doorbell, doorbell_value(ring.buf[off : off + 8]).to_bytes(8, "little"))
            t0 = time.monotonic()
            while True:  # this WQE's CQE (one outstanding at a time)
                c = get(cq.device_buf + (i % cq.ncqe) * 64, 64)
                if cqe_ready(c, i, cq.ncqe):
                    break
                if time.monotonic() - t0 > a.timeout:
                    print(f"op {i}: no CQE within {a.timeout:g} s: QP {f.qp_counters(qp)}, "
                          f"CQ {f.cq_status(cq)}")  # fmt: skip
                    return 1
            e = decode_cqe(c)
            if e.is_error or e.wqe_counter != i & 0xFFFF:
                print(f"op {i}: CQE {e}")
                return 1
            put(cq.device_dbrec, cq_ci_value(i + 1))
        got = get(dst.addr, 512 * 8).view(np.uint64)
        bad = np.flatnonzero(got[:64] != expect[:64])
        f.quiesce()
        c = f.counters()
        f.check()
        print(f"{a.ops} ops: targets {'ok' if bad.size == 0 else f'wrong at {bad[:8].tolist()}'}; "
              f"counters wqes={c['wqes']} cqes={c['cqes']} errors={c['errors']}")  # fmt: skip
        return 0 if bad.size == 0 and c["wqes"] == a.ops and c["errors"] == 0 else 1
    finally:
        f.close()


if __name__ == "__main__":
    raise SystemExit(main())
