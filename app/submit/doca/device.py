"""The GPU side of the doca submitter, through CuPy: the compiled kernels, DOCA's QP structures
in GPU memory, and bounded kernel launches. (The proxy words of the CPU_PROXY handlers are a
"host-mapped" memory region of the fabric: register(n, domain="host-mapped"), whose GPU address
register_cuda() returns.)

    dev = DocaDevice()                        # nvcc-built cubin for this GPU's arch
    qps = dev.build(np.stack([queue_record(...), ...]))
    res = dev.post(qps, lanes, job, handler, sharing, scope, blocks, threads)

A launch whose kernel has not finished `job.timeout_ns` + `grace_s` after it started raises
TimeoutError (the kernel itself bounds its final wait; a kernel stuck in DOCA's own slot wait or
ringing for a host thread that is not running is what this catches)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ...cuda_host import import_cupy, launch_stream, note_stuck_kernel
from .build import compile_cubin
from .layout import (
    CQE_OP_OWN,
    DOCA_CQE_INIT,
    JOB_DTYPE,
    LANE_DTYPE,
    QP_BYTES,
    QUEUE_DTYPE,
    RESULT_DTYPE,
    SHAPES,
    NicHandler,
    Scope,
    Sharing,
    kernel_name,
    units,
)

_MODULES: dict[tuple[str, int], Any] = {}  # (cubin, device) -> RawModule


def _cupy() -> Any:
    return import_cupy("the doca submitter")


class DocaDevice:
    def __init__(self, arch: str | None = None) -> None:
        cp = _cupy()
        if arch is None:
            arch = f"sm_{cp.cuda.Device().compute_capability}"
        self.arch = arch
        self.cubin, self.headers = compile_cubin(arch)
        # One module per cubin and device for the process: the functions preload() loaded
        # stay loaded (a fresh module would load them again, under a running engine).
        key = (str(self.cubin), cp.cuda.runtime.getDevice())
        if key not in _MODULES:
            _MODULES[key] = cp.RawModule(path=str(self.cubin))
        self.module = _MODULES[key]

    def build(self, queues: np.ndarray) -> Any:
        """DOCA QP structures (n x QP_BYTES bytes of GPU memory) from QUEUE_DTYPE records."""
        cp = _cupy()
        queues = np.ascontiguousarray(queues, QUEUE_DTYPE).reshape(-1)
        n = len(queues)
        src = cp.asarray(queues.view(np.uint8))
        out = cp.zeros(n * QP_BYTES, cp.uint8)
        init = self.module.get_function("gicbench_doca_init")
        init(((n + 127) // 128,), (128,), (src, np.int32(n), out))
        cp.cuda.get_current_stream().synchronize()  # not the device: an engine kernel may run
        return out

    def kernel_names(self) -> list[str]:
        """Every kernel of the module: the posting variants and the QP-structure builder."""
        return ["gicbench_doca_init"] + [
            kernel_name(h, s, e, shape)
            for h in NicHandler
            for s in Sharing
            for e in Scope
            for shape in SHAPES
        ]

    def preload(self) -> None:
        """Load every kernel this submitter launches into the current context now: the
        module's functions (cuModuleGetFunction loads a function under CUDA's lazy loading) and
        the CuPy kernels the loops use (gather and scatter of QP structures, the strided CQ
        fill), each run once on a stream of its own. Called before emu's CUDA engine starts:
        with lazy loading, loading a kernel while the engine's persistent kernel runs may need
        a context synchronisation that never comes (CUDA guide, "Lazy Loading": concurrent
        execution)."""
        cp = _cupy()
        for name in self.kernel_names():
            self.module.get_function(name)
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            qps = cp.zeros((2, QP_BYTES), cp.uint8)
            rows = cp.asarray(np.array([1, 0], np.int64))
            arr = cp.ascontiguousarray(qps[rows])
            qps[rows] = arr
            ring = cp.zeros((2, 64), cp.uint8)
            ring[:, CQE_OP_OWN] = DOCA_CQE_INIT
        stream.synchronize()

    def init_cq(self, cq: Any) -> None:
        """layout.init_cq for a ring in GPU memory (the CUDA engine's --queues device): every
        CQE's op_own = 0xF1, written by a CuPy kernel on a stream of its own, waited on alone
        (the engine kernel runs until its fabric closes: never synchronise the device)."""
        cp = _cupy()
        addr, n = int(cq.device_buf or cq.buf), int(cq.ncqe)
        mem = cp.cuda.UnownedMemory(addr, n * 64, owner=cq)
        ring = cp.ndarray((n, 64), cp.uint8, cp.cuda.MemoryPointer(mem, 0))
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            ring[:, CQE_OP_OWN] = DOCA_CQE_INIT
        stream.synchronize()

    def latency(
        self,
        qps: Any,
        lanes: np.ndarray,
        job: np.ndarray,
        handler: NicHandler,
        sharing: Sharing,
        scope: Scope,
        blocks: int,
        threads: int,
        grace_s: float = 5.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Latency shape: RESULT_DTYPE per unit, and cycles[unit, iter, {issue, completion}]
        (clock64; convert with the measured SM clock)."""
        cp = _cupy()
        n = units(sharing, scope, int(job["nqps"]), blocks, threads)
        iters = int(job["iters"])
        cycles = cp.zeros(n * iters * 2, cp.uint64)
        res = self._launch("latency", qps, lanes, job, handler, sharing, scope, blocks, threads,
                           grace_s, (cycles,))  # fmt: skip
        return res, cp.asnumpy(cycles).reshape(n, iters, 2)

    def post(
        self,
        qps: Any,
        lanes: np.ndarray,
        job: np.ndarray,
        handler: NicHandler,
        sharing: Sharing,
        scope: Scope,
        blocks: int,
        threads: int,
        grace_s: float = 5.0,
        marks: bool = False,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Rate shape: one launch; RESULT_DTYPE per issuing unit. marks=True: also the time
        marks (ns since the unit's first post, every job.window ops), marks[unit, k]."""
        cp = _cupy()
        n = units(sharing, scope, int(job["nqps"]), blocks, threads)
        mw = int(job["max_windows"]) if marks else 0
        d_marks = cp.zeros(max(1, n * mw), cp.uint64)
        res = self._launch("post", qps, lanes, job, handler, sharing, scope, blocks, threads,
                           grace_s, (d_marks if marks else np.uint64(0),))  # fmt: skip
        if not marks:
            return res
        return res, cp.asnumpy(d_marks)[: n * mw].reshape(n, mw)

    def _launch(
        self,
        shape: str,
        qps: Any,
        lanes: np.ndarray,
        job: np.ndarray,
        handler: NicHandler,
        sharing: Sharing,
        scope: Scope,
        blocks: int,
        threads: int,
        grace_s: float,
        extra: tuple[Any, ...],
    ) -> np.ndarray:
        cp = _cupy()
        nqps = int(job["nqps"])
        n = units(sharing, scope, nqps, blocks, threads)
        lanes = np.ascontiguousarray(lanes, LANE_DTYPE).reshape(-1)
        need = max(nqps, int(job["nquiet"]))  # the quiet walks QPs past the posting ones
        if len(lanes) != nqps or qps.size < need * QP_BYTES or qps.size % QP_BYTES:
            raise ValueError(f"{len(lanes)} lanes and {qps.size // QP_BYTES} QPs for nqps={nqps}"
                             f", nquiet={int(job['nquiet'])}")  # fmt: skip
        name = kernel_name(handler, sharing, scope, shape)
        fn = self.module.get_function(name)
        smem = threads * 64 if (handler == NicHandler.GPU_SM_BF and scope == Scope.THREAD) else 0
        d_lanes = cp.asarray(lanes.view(np.uint8))
        d_job = cp.asarray(np.ascontiguousarray(job, JOB_DTYPE).reshape(1).view(np.uint8))
        d_res = cp.zeros(n * RESULT_DTYPE.itemsize, cp.uint8)
        stream = launch_stream(cp)
        with stream:
            fn((blocks,), (threads,), (qps, d_lanes, d_job, d_res, *extra), shared_mem=smem)
        deadline = time.monotonic() + int(job["timeout_ns"]) / 1e9 + grace_s
        while not stream.done:
            if time.monotonic() > deadline:
                note_stuck_kernel(f"DOCA {name}")
                raise TimeoutError(
                    f"{name} still running "
                    f"{int(job['timeout_ns']) / 1e9 + grace_s:.1f} s after launch"
                )
            time.sleep(0.0005)
        stream.synchronize()
        return cp.asnumpy(d_res).view(RESULT_DTYPE)
