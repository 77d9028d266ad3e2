"""NVSHMEM's IBGDA device code run on gicbench's emulated queues, in one process.

    world = Loopback(rc_per_pe=16)           # two emu ranks (PE 0 sends to PE 1), CPU engine
    states = build_states(world, gpu_bases, dev=...)   # every record, from the emu objects (CPU)
    dev = NvshmemDevice()                    # the cubin, loaded through CuPy
    dev.install(world)                       # GPU arrays + nvshmemi_*_device_state_d filled
    run = dev.run(world, "gicbench_nvshmem_internal_put_all", size=8, iters=100)

`Loopback` and `build_states` need no GPU (the layout test reads build_states' records back
through NVSHMEM's own structures); `NvshmemDevice` needs CuPy and a GPU. A launch is bounded on
the host: NVSHMEM's polls have no timeout, so the kernel runs on a stream of its own and, when it
has not finished `timeout_s` after launch, the QPs' management variables (read on another
stream, itself bounded), entry 0 of every CQ and the emulated NIC's counters are put in the
TimeoutError (and the stuck kernel recorded, so that the fabric's close does not wait for it).

The symmetric heap is the NIC's address space (docs/nvshmem.md, Addresses): heap_base is rank
0's heap region's address, sources and destinations are given as heap_base + offset, and each
PE's peer_heap_base_remote is that PE's heap region's address. NVSHMEM's put paths never
dereference them on the GPU.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...cuda_host import import_cupy, note_stuck_kernel
from ...errors import UnsupportedError
from ...fabric.base import (
    ACCESS_ALL,
    CompletionQueue,
    MemoryDomain,
    MemoryRegion,
    QueuePair,
    host_view,
)
from . import layout

CQE_BYTES = 64
CQE_WQE_COUNTER, CQE_OP_OWN = 60, 63  # big-endian uint16, opcode << 4 | owner
HEAP_BYTES = 1 << 22  # halves of 2 MiB: 192 ops of 4 KiB from one to the other
LOG2_CHUNK = 20  # one key-table entry covers the whole heap
NPES, MYPE, PEER = 2, 0, 1


def cqe0(entry: np.ndarray) -> str:
    """Entry 0 of a collapsed CQ as NVSHMEM's poll reads it."""
    ctr = int.from_bytes(bytes(entry[CQE_WQE_COUNTER:CQE_WQE_COUNTER + 2]), "big")
    return f"cqe0.wqe_counter={ctr} cqe0.op_own={int(entry[CQE_OP_OWN]):#x}"


def ring_init(cq: CompletionQueue) -> None:
    """The CQ ring as NVSHMEM's host transport leaves it: every byte 0xff (opcode INVALID,
    owner 1, wqe_counter 0xffff, so the collapsed poll's first read means "WQE -1 done").
    A host-visible ring (the CPU engine's segment)."""
    host_view(cq.buf, cq.ncqe * CQE_BYTES)[:] = layout.CQE_INIT


class Loopback:
    """Two emu ranks in this process, PE 0 (rank 0) posting to PE 1 (rank 1): `rc_per_pe` RC
    QP pairs, rank 0's made as NVSHMEM's transport makes them (layout.queue_kwargs: a collapsed,
    overrun-ignoring CQ per QP of the QP's depth, a doorbell record, the ring 0xff-filled),
    each rank a heap region of `heap_bytes` (the symmetric heap), rank 0 an ibuf scratch slot
    pair per QP. progress "thread": an engine thread per rank. A context manager."""

    def __init__(self, rc_per_pe: int, *, depth: int = 256, heap_bytes: int = HEAP_BYTES,
                 progress: str = "thread", segment_bytes: int = 64 << 20) -> None:  # fmt: skip
        from ...fabric.emu.loopback import open_pair, rc_pairs

        args = layout.queue_kwargs(depth)
        self.rc_per_pe, self.depth = rc_per_pe, depth
        self.fabrics = open_pair("nv", progress=progress, segment_bytes=segment_bytes)
        try:
            f0 = self.fabrics[MYPE]
            pairs = rc_pairs(self.fabrics, rc_per_pe, depth, ncqe=args.ncqe, qp=args.qp,
                             cq=args.cq)  # fmt: skip
            self.qps: list[QueuePair] = [q0 for q0, _ in pairs]  # rank 0's, by QP slot (to PE 1)
            self.remote: list[QueuePair] = [q1 for _, q1 in pairs]
            for q0 in self.qps:
                ring_init(q0.sq.cq)
            self.heaps: list[MemoryRegion] = [f.register(heap_bytes, ACCESS_ALL)
                                              for f in self.fabrics]  # fmt: skip
            self.ibuf = f0.register(2 * layout.IBUF_SLOT * rc_per_pe, ACCESS_ALL)
        except BaseException:
            self.close()
            raise

    @property
    def heap(self) -> MemoryRegion:
        return self.heaps[MYPE]

    def addr(self, offset: int) -> int:
        """The symmetric address of heap offset `offset` (heap_base + offset)."""
        return self.heap.addr + offset

    def view(self, pe: int, offset: int, n: int) -> np.ndarray:
        return host_view(self.heaps[pe].addr + offset, n)

    def quiesce(self) -> None:
        for f in self.fabrics:
            f.quiesce()

    def counters(self) -> dict[str, int]:
        return dict(self.fabrics[MYPE].counters())

    def close(self) -> None:
        from ...fabric.emu.loopback import close_pair

        close_pair(getattr(self, "fabrics", []))

    def __enter__(self) -> Loopback:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Bases:
    """GPU addresses of the arrays the device states point to (allocated before the records
    are built: the CQ records point into the QP array's management variables)."""

    rcs: int
    cqs: int
    switches: int
    p2p: int
    remote: int
    region_count: int
    rkeys_rest: int = 0  # the rkey entries past constant memory (0: none)


def array_bytes(rc_per_pe: int, npes: int = NPES, rkeys: int = 0) -> dict[str, int]:
    """Bytes of each GPU array for `rc_per_pe` QPs per PE among `npes` PEs and an rkey table of
    `rkeys` entries."""
    n = rc_per_pe * npes
    out = {"rcs": n * layout.QP_DTYPE.itemsize, "cqs": n * layout.CQ_DTYPE.itemsize,
           "switches": 4 * (max(rc_per_pe, 2) + 1), "p2p": 8 * npes, "remote": 8 * npes,
           "region_count": 8}  # fmt: skip
    if rkeys > layout.MAX_CONST_KEYS:
        out["rkeys_rest"] = (rkeys - layout.MAX_CONST_KEYS) * layout.KEY_DTYPE.itemsize
    return out


@dataclass
class States:
    """Every record gicbench writes: the QP and CQ arrays ([QP slot][PE], PE 0's entries zero:
    NVSHMEM never takes a QP to itself), the two device states, peer_heap_base_remote, the
    zeroed arrays (qp_group_switches, peer_heap_base_p2p, region_active_count's word)."""

    qps: np.ndarray
    cqs: np.ndarray
    ibgda: np.ndarray
    device: np.ndarray
    remote: np.ndarray
    bases: Bases
    index: dict[int, int] = field(default_factory=dict)  # qpn -> index in qps/cqs


def build_states(world: Loopback, bases: Bases, *,
                 sq_dev: Callable[[QueuePair], tuple[int, int, int]],
                 cq_dev: Callable[[CompletionQueue], tuple[int, int]],
                 requests_in_batch: int = layout.DEFAULT_REQUESTS_IN_BATCH) -> States:  # fmt: skip
    """The records from the world's emu objects. sq_dev(qp) -> the GPU addresses of its SQ
    ring, doorbell record and doorbell register; cq_dev(cq) -> its ring's and record's."""
    rc = world.rc_per_pe
    n = rc * NPES
    qps = np.zeros(n, layout.QP_DTYPE)
    cqs = np.zeros(n, layout.CQ_DTYPE)
    index: dict[int, int] = {}
    for slot, qp in enumerate(world.qps):
        i = layout.rc_index(slot, PEER, NPES, rc)
        qp_addr = bases.rcs + i * layout.QP_DTYPE.itemsize
        cq_addr = bases.cqs + i * layout.CQ_DTYPE.itemsize
        buf, dbrec, doorbell = sq_dev(qp)
        cq = qp.sq.cq
        cbuf, cdbrec = cq_dev(cq)
        ibuf = world.ibuf.addr + slot * 2 * layout.IBUF_SLOT
        qps[i] = layout.qp_record(qpn=qp.qpn, wqe=buf, nwqes=qp.sq.wqebb_cnt, dbrec=dbrec + 4,
                                  bf=doorbell, cq_addr=cq_addr, qp_addr=qp_addr, ibuf=ibuf,
                                  ibuf_lkey=world.ibuf.lkey, ibuf_rkey=world.ibuf.rkey)  # fmt: skip
        cqs[i] = layout.cq_record(cqn=cq.cqn, ncqe=cq.ncqe, cqe=cbuf, dbrec=cdbrec, qpn=qp.qpn,
                                  qp_addr=qp_addr)  # fmt: skip
        index[qp.qpn] = i
    heap = world.heap
    lk = layout.lkeys(heap.addr, heap.length, heap.lkey, LOG2_CHUNK)
    rk = layout.rkeys(heap.length, [h.rkey for h in world.heaps], LOG2_CHUNK)
    ibgda = layout.ibgda_state(rcs=bases.rcs, cqs=bases.cqs, qp_group_switches=bases.switches,
                               lkey_table=lk, rkey_table=rk, log2_chunk=LOG2_CHUNK,
                               rc_per_pe=rc, requests_in_batch=requests_in_batch)  # fmt: skip
    device = layout.device_state(mype=MYPE, npes=NPES, heap_base=heap.addr,
                                 heap_size=heap.length, peer_heap_base_p2p=bases.p2p,
                                 peer_heap_base_remote=bases.remote,
                                 region_active_count=bases.region_count)  # fmt: skip
    remote = np.array([h.addr for h in world.heaps], np.uint64)
    return States(qps, cqs, ibgda, device, remote, bases, index)


# ---- the GPU side ---------------------------------------------------------------------------
_PRELOADED: dict[tuple[str, int], list[Any]] = {}  # (cubin, device) -> what preload() made
ABORT_WAIT_S = 2.0  # how long an aborted launch is given to see the abort word and end
STATES_BYTES = layout.DEVICE_STATE_DTYPE.itemsize + layout.IBGDA_STATE_DTYPE.itemsize


def streams(cp: Any) -> tuple[Any, Any]:
    """The launch stream and the side stream (reads while a launch may be stuck) of one
    NvshmemDevice, made once, before the NIC opens: CUDA maps streams onto its hardware queues
    round-robin (CUDA_DEVICE_MAX_CONNECTIONS), so a stream made per launch may come to share the
    queue of a persistent kernel (emu's CUDA engine) and wait behind it (app/cuda_host.py)."""
    return cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)


def kernel_names() -> list[str]:
    """Every kernel of cuda/nvshmem/nvshmem_kernels.cu."""
    paths = {"internal": ("qp", "pe", "all"), "public": ("pe", "all")}
    ops = ("put", "p", "put_signal")
    return ([f"gicbench_nvshmem_{p}_{o}_{q}" for p, qs in paths.items() for o in ops for q in qs]
            + [f"gicbench_nvshmem_single_{p}_{o}" for p in paths for o in ops]
            + [f"gicbench_nvshmem_rate_{p}_{o}" for p in paths for o in ("put", "p")]
            + ["gicbench_nvshmem_qp_of", "gicbench_nvshmem_state_addrs",
               "gicbench_nvshmem_state_read"])  # fmt: skip


def _cupy() -> Any:
    return import_cupy("NVSHMEM's device code on emu")


@dataclass
class Run:
    """One launch: the samples (layout.SAMPLE_DTYPE per op), the payload check, the rank-0
    NIC counters before and after."""

    kernel: str
    size: int
    samples: np.ndarray
    valid: bool
    mismatch: int
    before: dict[str, int]
    after: dict[str, int]

    def p50(self, name: str, skip: int = 0) -> float:
        return float(np.median(self.samples[name][skip:].astype(np.float64)))

    def delta(self) -> dict[str, int]:
        return {k: self.after[k] - self.before.get(k, 0) for k in self.after}


class NvshmemDevice:
    """The cubin (build.compile_cubin for this GPU's arch), its device states, the GPU arrays
    they point to."""

    def __init__(self, arch: str | None = None, variant: str = "default", *,
                 preloaded: bool = False) -> None:  # fmt: skip
        """preloaded: take a module preload() loaded earlier in this process for this cubin and
        GPU, if one is left (each module has its own device states, so each is taken once)."""
        from .build import compile_cubin

        cp = _cupy()
        self.cp = cp
        if arch is None:
            arch = f"sm_{cp.cuda.Device().compute_capability}"
        self.cubin, self.headers = compile_cubin(arch, variant=variant)
        pool = _PRELOADED.get((str(self.cubin), cp.cuda.runtime.getDevice()), [])
        if preloaded and pool:
            self.module, self.stream, self.side = pool.pop()
        else:
            self.module = cp.RawModule(path=str(self.cubin))
            self.stream, self.side = streams(cp)
        from ..gpu_runtime.abort import abort_page

        abort_host, self.abort_dev = abort_page(cp, cp.cuda.runtime.getDevice())
        self.abort = host_view(abort_host, 4, np.uint32)  # the word the loops' kernels poll
        self.arrays: dict[str, Any] = {}
        self.states: States | None = None
        self.symbols: dict[str, int] = {}

    def preload(self) -> None:
        """Load every function of the module into the current context now and keep the module
        and its two streams for a later NvshmemDevice(preloaded=True), called before the NIC
        opens: under CUDA's lazy loading a function first loaded while emu's CUDA engine kernel
        runs may wait for a context synchronisation that never comes, and streams made before
        the engine's own sit on hardware queues of their own (streams), never behind its
        persistent kernel."""
        for name in kernel_names():
            self.module.get_function(name)
        self._launch_idle()
        _PRELOADED.setdefault((str(self.cubin), self.cp.cuda.runtime.getDevice()),
                              []).append((self.module, self.stream, self.side))  # fmt: skip

    def _launch_idle(self) -> None:
        """Launch every kernel the submitter uses once with nothing to do (single: no CTA is the
        issuing one; rate: every lane unused; qp_of: no PE), before the NIC opens: a kernel's
        first launch may wait for the device to go idle (on the H200, a kernel first launched
        beside emu's CUDA engine never started), and after that first launch it never does."""
        cp = self.cp
        job = np.zeros((), layout.SINGLE_JOB_DTYPE)
        job["cta"] = 0xFFFFFFFF
        d_job = cp.asarray(np.ascontiguousarray(job).reshape(1).view(np.uint8))
        out = cp.zeros(layout.SAMPLE_DTYPE.itemsize, cp.uint8)
        res = cp.zeros(layout.RATE_RESULT_DTYPE.itemsize, cp.uint8)
        lane = np.zeros(1, layout.RATE_LANE_DTYPE)
        lane["pe"] = -1
        d_lane = cp.asarray(lane.view(np.uint8))
        d_rate = cp.zeros(layout.RATE_JOB_DTYPE.itemsize, cp.uint8)
        marks = cp.zeros(1, cp.uint64)
        pes = cp.asarray(np.array([-1], np.int32))
        qpn = cp.zeros(1, cp.uint32)
        abort = np.uint64(self.abort_dev)
        cp.cuda.get_current_stream().synchronize()
        with self.stream:
            for name in kernel_names():
                fn = self.module.get_function(name)
                if "_single_" in name:
                    fn((1,), (32,), (d_job, out, res, abort))
                elif "_rate_" in name:
                    fn((1,), (32,), (d_rate, d_lane, res, marks, abort))
                elif name == "gicbench_nvshmem_qp_of":
                    fn((1,), (32,), (pes, qpn))
                elif name == "gicbench_nvshmem_state_addrs":
                    fn((1,), (32,), (cp.zeros(2, cp.uint64),))
                elif name == "gicbench_nvshmem_state_read":
                    fn((1,), (256,), (cp.zeros(STATES_BYTES, cp.uint8),))
        self.stream.synchronize()

    def _global(self, name: str) -> Any:
        try:
            return self.module.get_global(name)
        except Exception as e:  # cupy raises CUDADriverError (CUDA_ERROR_NOT_FOUND)
            raise UnsupportedError(f"cuModuleGetGlobal({name}) failed on {self.cubin}: {e} (the "
                                   "states are local symbols of the whole-program cubin)") from e

    def allocate(self, sizes: dict[str, int]) -> Bases:
        """Zeroed GPU arrays of `sizes` bytes (array_bytes' names, plus "rkeys_rest" where the
        rkey table outgrows constant memory); their addresses for the records."""
        cp = self.cp
        self.arrays = {k: cp.zeros(v, cp.uint8) for k, v in sizes.items()}
        return Bases(**{k: int(a.data.ptr) for k, a in self.arrays.items()})

    def install(self, world: Loopback, requests_in_batch: int = layout.DEFAULT_REQUESTS_IN_BATCH
                ) -> States:  # fmt: skip
        """Map the world's queues into the GPU, allocate the arrays, build and write every
        record and both device states (write_states)."""
        from ..gpu_runtime.device_map import DeviceMap

        dm = DeviceMap.of(world.fabrics[MYPE])
        b = self.allocate(array_bytes(world.rc_per_pe))
        st = build_states(world, b, sq_dev=lambda q: dm.sq(q.sq), cq_dev=dm.cq,
                          requests_in_batch=requests_in_batch)  # fmt: skip
        self.write_states(st)
        return st

    def write_arrays(self, st: States) -> None:
        """The QP, CQ and peer-base arrays into GPU memory (the QPs' management variables too:
        only before the first launch, or they lose NVSHMEM's indices)."""
        # copies from the host (no CuPy kernel: none may load under a running engine)
        self.arrays["rcs"].set(st.qps.view(np.uint8))
        self.arrays["cqs"].set(st.cqs.view(np.uint8))
        self.arrays["remote"].set(st.remote.view(np.uint8))
        self.cp.cuda.get_current_stream().synchronize()

    def write_rkeys(self, rest: np.ndarray) -> None:
        """The rkey entries past constant memory (PEs 64 and up) into their GPU array."""
        if len(rest):
            self.arrays["rkeys_rest"][: rest.nbytes].set(rest.view(np.uint8))
            self.cp.cuda.get_current_stream().synchronize()

    def write_symbols(self, st: States) -> None:
        """Both device states into the module's __constant__ symbols, read back through the
        module's own code (gicbench_nvshmem_state_read) and compared."""
        cp = self.cp
        for sym, rec in ((layout.DEVICE_STATE_SYMBOL, st.device),
                         (layout.IBGDA_STATE_SYMBOL, st.ibgda)):  # fmt: skip
            ptr = self._global(sym)
            host = np.ascontiguousarray(rec).reshape(1).view(np.uint8)
            rt = cp.cuda.runtime
            rt.memcpy(int(ptr.ptr), host.ctypes.data, host.size, rt.memcpyHostToDevice)
            self.symbols[sym] = int(ptr.ptr)
        cp.cuda.get_current_stream().synchronize()  # the copies that staged the arguments
        stream = self.stream
        addrs = cp.zeros(2, cp.uint64)
        seen = cp.zeros(STATES_BYTES, cp.uint8)
        with stream:
            self.module.get_function("gicbench_nvshmem_state_addrs")((1,), (32,), (addrs,))
            self.module.get_function("gicbench_nvshmem_state_read")((1,), (256,), (seen,))
        stream.synchronize()
        a = cp.asnumpy(addrs)
        self.symbols["kernel:" + layout.DEVICE_STATE_SYMBOL] = int(a[0])
        self.symbols["kernel:" + layout.IBGDA_STATE_SYMBOL] = int(a[1])
        want = st.device.tobytes() + st.ibgda.tobytes()
        got = cp.asnumpy(seen).tobytes()
        if got != want:
            bad = next(i for i in range(len(want)) if got[i] != want[i])
            raise UnsupportedError(f"the device states the kernels read differ from those written"
                                   f" (first at byte {bad}; symbols {self.symbols})")  # fmt: skip

    def write_states(self, st: States) -> None:
        self.write_arrays(st)
        self.write_symbols(st)
        self.states = st

    def launch(self, kernel: str, grid: int, block: int, args: tuple, *, timeout_s: float,
               what: str, diagnose: Callable[[], str],
               progress: Callable[[], object] | None = None) -> None:  # fmt: skip
        """`kernel` on the device's launch stream, waited for at most `timeout_s` (NVSHMEM's
        polls have no bound of their own): past it TimeoutError carries `what` and diagnose()'s
        account. Past it, or on a signal, the abort word is set (the harness's loops end at
        their next check) and the kernel given ABORT_WAIT_S; one still running is recorded as
        stuck. `progress`: a value that changes while the launch moves (NVSHMEM's producer
        indices); each change re-arms the bound, so a long healthy launch is not cut."""
        fn = self.module.get_function(kernel)
        self.cp.cuda.get_current_stream().synchronize()  # the copies that staged the arguments
        stream = self.stream
        self.abort[0] = 0
        with stream:
            fn((grid,), (block,), args)
        deadline = time.monotonic() + timeout_s
        last: object = None  # read only when a bound passes: no copy at every launch
        try:
            while not stream.done:
                if time.monotonic() > deadline:
                    now = progress() if progress is not None else None
                    if now is not None and now != last:  # moved (or first read): another bound
                        last, deadline = now, time.monotonic() + timeout_s
                        continue
                    try:  # 600: not ready (running or not started); anything else: an error
                        state = f"stream query {self.cp.cuda.runtime.streamQuery(stream.ptr)}"
                    except Exception as e:
                        state = f"stream query raised {e}"
                    raise TimeoutError(f"{what} still running, no progress for {timeout_s} s "
                                       f"({state}):\n" + diagnose())  # fmt: skip
                time.sleep(0.0002)
        except BaseException:  # a signal (the harness raises in this thread) or the timeout
            self.abort[0] = 1  # the loops' kernels end at their next check
            end = time.monotonic() + ABORT_WAIT_S
            while not stream.done and time.monotonic() < end:
                time.sleep(0.001)
            if not stream.done:  # the fabric's close must not wait for it
                note_stuck_kernel(f"NVSHMEM {kernel}")
            raise
        stream.synchronize()

    def read_mvars(self, rows: list[int]) -> list[dict[str, int]] | None:
        """The management variables of the QP records at `rows` of the QP array, read on a
        stream of its own given 2 s (a stuck kernel may hold the device); None if it did not
        return."""
        box: dict[str, np.ndarray] = {}

        def read() -> None:
            s = self.side
            box["rcs"] = self.arrays["rcs"].get(stream=s)
            s.synchronize()

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(2.0)
        mv = box.get("rcs")
        if mv is None:
            return None
        size, base = layout.QP_DTYPE.itemsize, layout.MVARS_OFFSET
        out = []
        for i in rows:
            rec = mv[i * size:(i + 1) * size]
            out.append({k[6:]: int(rec[base + off: base + off + 8].view(np.uint64)[0])
                        for k, off in layout.MVARS.items() if k.startswith("tx_wq.")
                        and k not in ("tx_wq.get_head", "tx_wq.get_tail")})  # fmt: skip
        return out

    def describe(self, qps: list[QueuePair], labels: list[str], counters: dict) -> str:
        """What a stuck poll was waiting for: each QP's management variables (labelled), entry 0
        of its CQ where the host can read it, and the NIC's counters."""
        assert self.states is not None
        mv = self.read_mvars([self.states.index[qp.qpn] for qp in qps])
        out: list[str] = []
        for n, (qp, label) in enumerate(zip(qps, labels, strict=True)):
            line = f"{label} qpn {qp.qpn:#x} cqn {qp.sq.cq.cqn:#x}"
            if mv is not None:
                line += " " + " ".join(f"{k}={v}" for k, v in mv[n].items())
            if qp.sq.cq.domain != MemoryDomain.DEVICE:
                line += " " + cqe0(host_view(qp.sq.cq.buf, CQE_BYTES))
            out.append(line)
        if mv is None:
            out.append("(NVSHMEM's management variables unreadable: the copy did not return)")
        out.append(f"counters {counters}")
        return "\n".join(out)

    def diagnose(self, world: Loopback) -> str:
        return self.describe(world.qps, [f"slot {s}" for s in range(len(world.qps))],
                             world.counters())  # fmt: skip

    def run(self, world: Loopback, kernel: str, *, size: int, iters: int, src_off: int = 0,
            dst_off: int = HEAP_BYTES // 2, timeout_s: float = 10.0,
            seed: int = 0) -> Run:  # fmt: skip
        """One launch of `kernel` (one block, its thread 0 issuing `iters` ops of `size` bytes,
        op i from heap offset src_off + i*size of PE 0 to dst_off + i*size of PE 1, each
        followed by the kernel's quiet); the landed bytes compared with the sources."""

        cp = self.cp
        if self.states is None:
            raise UnsupportedError("install() the world first")
        span = size * iters
        if src_off + span > dst_off or dst_off + span > world.heap.length:
            raise ValueError(f"{iters} ops of {size} B do not fit the heap halves")
        rng = np.random.default_rng(seed)
        world.view(MYPE, src_off, span)[:] = rng.integers(0, 256, span, np.uint8)
        world.view(PEER, dst_off, span)[:] = 0
        job = layout.job_record(dst=world.addr(dst_off), src=world.addr(src_off), size=size,
                                iters=iters, pe=PEER, stride=size)  # fmt: skip
        d_job = cp.asarray(np.ascontiguousarray(job).reshape(1).view(np.uint8))
        d_out = cp.zeros(iters * layout.SAMPLE_DTYPE.itemsize, cp.uint8)
        before = world.counters()
        self.launch(kernel, 1, 32, (d_job, d_out), timeout_s=timeout_s,
                    what=f"{kernel} ({size} B x {iters}, {world.rc_per_pe} QPs per peer)",
                    diagnose=lambda: self.diagnose(world))  # fmt: skip
        world.quiesce()
        got = world.view(PEER, dst_off, span)
        want = world.view(MYPE, src_off, span)
        mismatch = int(np.count_nonzero(got != want))
        samples = cp.asnumpy(d_out).view(layout.SAMPLE_DTYPE)
        return Run(kernel, size, samples, mismatch == 0, mismatch, before, world.counters())


# The NIC's counters that stay zero on a clean run
CLEAN_COUNTERS = ("errors", "stale_wqes", "flushed", "cq_overruns", "cqe_dropped", "not_rts",
                  "bad_doorbells", "dbrec_lag", "qp_fatal")  # fmt: skip

# The kernels the probe and the GPU test launch: (label, kernel)
PATHS = (
    ("internal put + quiet(qp)", "gicbench_nvshmem_internal_put_qp"),
    ("internal put + quiet(all)", "gicbench_nvshmem_internal_put_all"),
    ("public putmem_nbi + quiet", "gicbench_nvshmem_public_put_all"),
)
