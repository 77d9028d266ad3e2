"""GPU producers for mini-proxy: CuPy launches the kernels of cuda/proxy/kernels.cu over the
engine's rings, registered with CUDA (cudaHostRegister, mapped) for the call and unregistered
after it, whatever happened. While a kernel runs the host watches the engine, signals and a
deadline; on any of them it sets the abort bit the kernels poll, so no GPU thread is left
spinning."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from ...cuda_host import device_pointer, launch_stream
from ...errors import CompletionTimeout, ConfigError, FabricError
from ..failures import LoopInterrupted
from ..work import CycleWork, LatencyWork, LoadedWork, ProxyRateWork, RespondWork
from .gpu_kernels import options, source
from .params import ProxyParams
from .rings import check_background, lane_slots, ring_counts, rings_of

_REGISTER_PORTABLE_MAPPED = 0x1 | 0x2  # cudaHostRegisterPortable | cudaHostRegisterMapped
_ALREADY_REGISTERED = 712  # cudaErrorHostMemoryAlreadyRegistered
_PAGE = 4096
STOP, ABORT = 1, 2
STATUS = {1: "timeout", 2: "aborted by the host"}


KERNELS = ("px_clock", "px_latency", "px_rate", "px_cycle", "px_background", "px_probe")
# cuFuncLoad (CUDA >= 12.4): loads a function now where module loading is lazy.
_CU_FUNC_LOAD: Any = None
# Per process and device: (module, functions, SM clock Hz), compiled and loaded once.
_LOADED: dict[int, tuple[Any, dict[str, Any], float]] = {}


def _force_load(fn: Any, name: str) -> None:
    """Load `fn` into the context now. px_background runs until the host sets the stop bit
    after px_probe, launched after it, ends; under CUDA's lazy loading a kernel first loaded at
    its launch may need a context synchronisation, which would wait for px_background forever
    (and the host, inside the launch call, would never set the abort bit). Likewise for a
    provider's persistent engine kernel (Submitter.preload)."""
    import ctypes

    global _CU_FUNC_LOAD
    if _CU_FUNC_LOAD is None:
        try:
            _CU_FUNC_LOAD = ctypes.CDLL("libcuda.so.1").cuFuncLoad
        except (OSError, AttributeError):
            _CU_FUNC_LOAD = False
    ptr = getattr(fn, "ptr", None)
    if _CU_FUNC_LOAD and ptr:
        rc = _CU_FUNC_LOAD(ctypes.c_void_p(int(ptr)))
        if rc != 0:
            raise FabricError(f"cuFuncLoad({name}) failed: CUresult {rc}")
    else:
        int(fn.num_regs)  # cuFuncGetAttribute needs the function loaded


def load_kernels(cp: Any, consts: Any) -> tuple[Any, dict[str, Any], float]:
    """The producers' module on the current device, compiled, every kernel loaded, and the SM
    clock measured (px_clock) — once per process and device (ProxySubmitter.preload calls it
    before the NIC opens)."""
    dev = int(cp.cuda.Device().id)
    if dev not in _LOADED:
        module = cp.RawModule(code=source(), options=options(consts))
        fns = {n: module.get_function(n) for n in KERNELS}
        for n, fn in fns.items():
            _force_load(fn, n)
        _LOADED[dev] = (module, fns, _measure_clock(cp, fns["px_clock"]))
    return _LOADED[dev]


def _measure_clock(cp: Any, fn: Any) -> float:
    stream = cp.cuda.Stream(non_blocking=True)  # never the legacy stream: it waits for others
    with stream:
        out = cp.zeros(2, dtype=cp.int64)
        fn((1,), (1,), (np.int64(20_000_000), out))
        stream.synchronize()
        cycles, ns = (int(v) for v in out.get())
    return cycles / ns * 1e9


class _BlockTiming:
    """The per-block outputs of a timed producer kernel (px_rate, px_cycle: the kernels'
    Windows), and the trailing kernel arguments that carry them."""

    def __init__(self, cp: Any, blocks: int, max_windows: int) -> None:
        self.blocks, self.max_windows = blocks, max_windows
        self.sent = cp.zeros(blocks, dtype=cp.uint64)
        self.status = cp.zeros(blocks, dtype=cp.int32)
        self.t_start, self.t_open, self.t_end = (cp.zeros(blocks, dtype=cp.uint64)
                                                 for _ in range(3))  # fmt: skip
        self.windows = cp.zeros(blocks * max_windows, dtype=cp.int64)
        self.nwin = cp.zeros(blocks, dtype=cp.uint32)

    def args(self, eng: Any, ctl_dev: int) -> tuple:
        """max_windows, timeout_ns, control, sent, status, t_start, t_open, t_end, windows,
        nwin: the kernels' last ten parameters."""
        return (np.uint32(self.max_windows), np.int64(eng.sub.timeout_ns), np.uint64(ctl_dev),
                self.sent, self.status, self.t_start, self.t_open, self.t_end, self.windows,
                self.nwin)  # fmt: skip


class GpuProducers:
    def __init__(self, params: ProxyParams, device: int = 0) -> None:
        import cupy
        from cupy.cuda import runtime

        from ... import _native

        self.cp, self.rt, self.params = cupy, runtime, params
        self.consts = _native.proxy
        self.host = _native.host
        n = runtime.getDeviceCount()
        self.device = cupy.cuda.Device(device % n)  # node-local rank i: GPU i mod count
        self.device.use()
        self.pci_bus_id: str | None = self.device.pci_bus_id
        self.module, self.fn, self.sm_hz = load_kernels(cupy, self.consts)

    # ---- plumbing --------------------------------------------------------------------------
    @contextmanager
    def mapped(self, addr: int, nbytes: int) -> Iterator[int]:
        """The device address of host bytes [addr, addr + nbytes), registered for the block
        (pages already registered by someone else are used as they are)."""
        lo = addr & ~(_PAGE - 1)
        hi = (addr + nbytes + _PAGE - 1) & ~(_PAGE - 1)
        ours = True
        try:
            self.rt.hostRegister(lo, hi - lo, _REGISTER_PORTABLE_MAPPED)
        except self.rt.CUDARuntimeError as e:
            if getattr(e, "status", None) != _ALREADY_REGISTERED:
                raise FabricError(f"cudaHostRegister of {hi - lo} bytes at 0x{lo:x}: {e}") from e
            ours = False
        try:
            yield device_pointer(self.rt, lo) + (addr - lo)
        finally:
            if ours:
                self.rt.hostUnregister(lo)

    def _rings(self, eng: Any, stack: ExitStack) -> list[int]:
        n = eng.native.ring_bytes()
        return [
            stack.enter_context(self.mapped(eng.native.ring_addr(r), n))
            for r in self._ring_range(eng)
        ]

    @staticmethod
    def _ring_range(eng: Any) -> range:
        return range(eng.native.rings())

    def _control(self, eng: Any) -> np.ndarray:
        """Ring 0's control word, host view (the kernels poll it)."""
        import ctypes

        addr = eng.native.ring_addr(0) + self.consts.CONTROL_OFF
        return np.ctypeslib.as_array((ctypes.c_uint64 * 1).from_address(addr))

    def _watch(self, eng: Any, stream: Any, what: str, timeout_s: float) -> None:
        """Wait for `stream`'s work; on an engine failure, a signal or the deadline, tell the
        kernels to give up (abort bit), wait for them, and raise."""
        ctl = self._control(eng)
        ev = self.cp.cuda.Event()
        ev.record(stream)
        deadline = time.monotonic() + timeout_s
        why = None
        while not ev.done:
            if eng.native.failed():
                why = "engine"
            elif self.host.interrupted():
                why = "interrupted"
            elif time.monotonic() > deadline:
                why = "timeout"
            if why:
                ctl[0] |= ABORT
                ev.synchronize()
                break
            time.sleep(0.0002)
        if why == "engine":
            err = eng.native.first_error()
            eng.sub.raise_error(what, err, {})
        if why == "interrupted":
            raise LoopInterrupted(f"rank {eng.sub.rank}: {what} interrupted by a signal", 0, 0)
        if why == "timeout":
            raise CompletionTimeout(
                f"rank {eng.sub.rank}: {what}: GPU producers did not finish within "
                f"{timeout_s:g} s (aborted; rings: {self._ring_state(eng)})"
            )

    def _ring_state(self, eng: Any) -> str:
        import ctypes

        parts = []
        for r in self._ring_range(eng):
            base = eng.native.ring_addr(r)
            head = ctypes.c_uint64.from_address(base + self.consts.HEAD_OFF).value
            done = ctypes.c_uint64.from_address(base + self.consts.COMPLETED_OFF).value
            parts.append(f"ring {r} consumed {head} completed {done}")
        return "; ".join(parts)

    def _status(self, eng: Any, what: str, status: Any, where: Any = None) -> None:
        st = status.get()
        bad = [(i, int(s)) for i, s in enumerate(st) if s != 0]
        if bad:
            i, s = bad[0]
            at = f" at operation {int(where.get()[0])}" if where is not None else ""
            raise CompletionTimeout(
                f"rank {eng.sub.rank}: {what}: GPU producer block {i}: {STATUS.get(s, s)}{at} "
                f"({self._ring_state(eng)})"
            )

    def _cycles_to_ns(self, cycles: np.ndarray) -> np.ndarray:
        return np.rint(np.asarray(cycles, dtype=np.float64) * 1e9 / self.sm_hz).astype(np.int64)

    def _timeout_s(self, eng: Any, ops: int) -> float:
        return eng.sub.timeout_ns / 1e9 + ops * 1e-4

    def _lanes_slots(self, eng: Any, size: int, lanes: tuple) -> tuple[Any, Any]:
        rr = self._ring_range(eng)
        lane_of = [eng.native.ring_lane(r) for r in rr]
        slots = [lane_slots(lanes[ln], size) for ln in lane_of]
        return (
            self.cp.asarray(np.array(lane_of, dtype=np.uint32)),
            self.cp.asarray(np.array(slots, dtype=np.uint64)),
        )

    # ---- single-op ----------------------------------------------------------------------------
    def latency(self, eng: Any, work: LatencyWork, handoff: int) -> np.ndarray:
        """issue and put+completion (px_latency; --scope all also reads the other configured
        QPs' ring counters), round trip (px_probe, the peer answering): the host producers'
        `latency` (proxy_host.cpp) operation for operation, ring 0 on the selected lane."""
        if work.mode == "round_trip":
            assert work.reply is not None
            return self._probe(eng, work.lanes[work.selected], work.reply.addr, work, handoff)
        cp = self.cp
        with ExitStack() as stack:
            rings = self._rings(eng, stack)
            ctl_dev = rings[0] + self.consts.CONTROL_OFF
            # ring 0 writes slot 0 of the selected lane; its last word carries the sequence
            sel = work.lanes[work.selected]
            src = stack.enter_context(self.mapped(sel.src.addr + work.size - 8, 8))
            others = rings[1:] if work.scope_all else []
            others_dev = cp.asarray(np.array(others or [0], dtype=np.uint64))
            out = self._one_thread(
                eng,
                "px_latency",
                (
                    np.uint64(rings[0]),
                    cp.zeros(1, dtype=cp.uint64),  # reserve
                    np.int32(handoff),
                    np.uint32(self.params.ring_depth),
                    np.uint32(eng.native.ring_lane(0)),
                    np.uint32(work.size),
                    np.int32(0 if work.mode == "issue" else 1),
                    np.uint64(src),
                    others_dev,
                    np.uint32(len(others)),
                    np.uint32(work.iters),
                    np.uint32(work.warmup),
                    np.int64(eng.sub.timeout_ns),
                    np.uint64(ctl_dev),
                ),
                work.iters,
                f"single-op {work.mode}",
                work.iters + work.warmup,
            )
            return self._cycles_to_ns(out[: work.iters])

    def respond(self, eng: Any, work: RespondWork, handoff: int) -> None:
        """The round trip's responder (px_probe answering): wait for request s in the watched
        word, stamp s into the source's last word, write it back (proxy_host.cpp `respond`)."""
        self._probe(eng, work.lane, work.watch.addr, work, handoff, responder=True)

    def _probe(
        self,
        eng: Any,
        lane: Any,
        watch: int,
        work: LatencyWork | RespondWork,
        handoff: int,
        responder: bool = False,
    ) -> np.ndarray:
        """px_probe alone on ring 0 (no background): the requester's round trips, or the
        responder's answers (`work.count` of them)."""
        cp = self.cp
        size = work.size
        iters, warmup = (work.count, 0) if responder else (work.iters, work.warmup)
        what = "single-op round trip" + (" responder" if responder else "")
        with ExitStack() as stack:
            rings = self._rings(eng, stack)
            ctl_dev = rings[0] + self.consts.CONTROL_OFF
            src = stack.enter_context(self.mapped(lane.src.addr + size - 8, 8))
            reply = stack.enter_context(self.mapped(watch + size - 8, 8))
            out = self._one_thread(
                eng,
                "px_probe",
                (
                    np.uint64(rings[0]),
                    cp.zeros(1, dtype=cp.uint64),  # reserve
                    np.int32(handoff),
                    np.uint32(self.params.ring_depth),
                    np.uint32(eng.native.ring_lane(0)),
                    np.uint32(size),
                    np.int32(1 if responder else 0),
                    np.uint64(src),
                    np.uint64(reply),
                    np.uint32(iters),
                    np.uint32(warmup),
                    np.int64(eng.sub.timeout_ns),
                    np.uint64(ctl_dev),
                ),
                0 if responder else iters,
                what,
                iters + warmup,
            )
            if responder:
                return np.array([], dtype=np.int64)
            return self._cycles_to_ns(out[:iters])

    def _one_thread(
        self, eng: Any, kernel: str, args: tuple, samples: int, what: str, ops: int
    ) -> np.ndarray:
        """Launch a one-thread kernel whose last three arguments are (samples out, status,
        where) on a stream of its own, watch it (engine failure, signal, deadline for `ops`
        operations), raise what its status says, and return the samples (host)."""
        cp = self.cp
        out = cp.zeros(max(1, samples), dtype=cp.int64)
        status = cp.zeros(1, dtype=cp.int32)
        where = cp.zeros(1, dtype=cp.uint64)
        s = launch_stream(cp)
        with s:
            self.fn[kernel]((1,), (1,), (*args, out, status, where))
        self._watch(eng, s, f"{what} (GPU producer)", self._timeout_s(eng, ops))
        self._status(eng, what, status, where)
        return out.get()

    # ---- rate -------------------------------------------------------------------------------
    def rate(self, eng: Any, work: ProxyRateWork, handoff: int) -> tuple[np.ndarray, dict]:
        """px_rate, timed as the host producers' rate loop: windows of `work.window`
        descriptors after the warm-up, the last one closed by the drain; elapsed from the first
        timed descriptor to the drain; messages without the warm-up (globaltimer ns)."""
        cp = self.cp
        if work.window < 1 or work.messages < 1:
            raise ConfigError("messages", work.messages, "at least 1 message and 1 per window")
        with ExitStack() as stack:
            rings = self._rings(eng, stack)
            ctl_dev = rings[0] + self.consts.CONTROL_OFF
            nr = len(rings)
            lanes, slots = self._lanes_slots(eng, work.size, work.lanes)
            ring_ptrs = cp.asarray(np.array(rings, dtype=np.uint64))
            reserve = cp.zeros(nr, dtype=cp.uint64)
            P = work.producers
            total = work.messages + work.warmup
            given = ring_counts(nr, P, total)
            given_dev = cp.asarray(np.array(given, dtype=np.uint64))  # alive until the end
            timing = _BlockTiming(cp, P, work.messages // work.window + 1)
            s = launch_stream(cp)
            with s:
                self.fn["px_rate"](
                    (P,),
                    (32,),
                    (
                        ring_ptrs,
                        reserve,
                        np.int32(handoff),
                        np.uint32(nr),
                        np.uint32(self.params.ring_depth),
                        lanes,
                        slots,
                        np.uint32(work.size),
                        np.uint64(work.warmup),
                        np.uint64(work.messages),
                        np.uint64(work.window),
                        given_dev,
                        *timing.args(eng, ctl_dev),
                    ),
                )
            self._watch(eng, s, "proxy rate (GPU producers)", self._timeout_s(eng, total))
            self._status(eng, "proxy rate", timing.status)
            windows, elapsed = self._drained(eng, timing, given, "proxy rate")
        return windows, {
            "elapsed_ns": elapsed,
            "messages": work.messages * P,
            "ring_messages": given,
        }

    def cycle(
        self, eng: Any, work: CycleWork, unit_lanes: list[list[int]], handoff: int
    ) -> tuple[np.ndarray, dict]:
        """px_cycle: block u is unit u on ring u, visiting unit_lanes[u] in turn, W writes a
        visit (the host producers' cycle rule), timed as px_rate."""
        cp = self.cp
        with ExitStack() as stack:
            rings = self._rings(eng, stack)
            ctl_dev = rings[0] + self.consts.CONTROL_OFF
            U = len(unit_lanes)
            flat = [lane for mine in unit_lanes for lane in mine]
            first = np.cumsum([0, *(len(m) for m in unit_lanes)]).astype(np.uint32)
            slots = [lane_slots(work.lanes[ln], work.size) for ln in flat]
            lanes_dev = cp.asarray(np.array(flat, dtype=np.uint32))
            slots_dev = cp.asarray(np.array(slots, dtype=np.uint64))
            first_dev = cp.asarray(first)
            ring_ptrs = cp.asarray(np.array(rings, dtype=np.uint64))  # ring u: unit u's
            reserve = cp.zeros(U, dtype=cp.uint64)
            warmup = work.warmup_visits * work.writes_per_visit
            messages = work.visits * work.writes_per_visit
            timing = _BlockTiming(cp, U, messages // work.window + 1)
            s = launch_stream(cp)
            with s:
                self.fn["px_cycle"](
                    (U,),
                    (32,),
                    (
                        ring_ptrs,
                        reserve,
                        np.int32(handoff),
                        np.uint32(self.params.ring_depth),
                        lanes_dev,
                        slots_dev,
                        first_dev,
                        np.uint32(work.size),
                        np.uint64(work.writes_per_visit),
                        np.uint64(warmup),
                        np.uint64(messages),
                        np.uint64(work.window),
                        *timing.args(eng, ctl_dev),
                    ),
                )
            given = [warmup + messages] * U
            self._watch(eng, s, "active-connections cycle (GPU producers)",
                        self._timeout_s(eng, warmup + messages))  # fmt: skip
            self._status(eng, "active-connections cycle", timing.status)
            windows, elapsed = self._drained(eng, timing, given, "active-connections cycle")
        return windows, {"elapsed_ns": elapsed, "messages": messages * U, "ring_messages": given}

    @staticmethod
    def _drained(
        eng: Any, timing: _BlockTiming, given: list[int], what: str
    ) -> tuple[np.ndarray, int]:
        """After the blocks' drain: each ring's counter checked on the host too (a failed
        worker still says so), then each block's windows with its last one closed at the
        latest drain, and the elapsed time from the first timed descriptor to it."""
        for r, n in enumerate(given):
            ok, err = eng.native.wait_completed(r, n, "drain")
            eng.check(f"{what} drain", ok, err, {})
        end = int(timing.t_end.get().max())
        opened, counts = timing.t_open.get(), timing.nwin.get()
        per_block = timing.windows.get().reshape(timing.blocks, timing.max_windows)
        out = []
        for b in range(timing.blocks):
            out.extend(int(v) for v in per_block[b, : int(counts[b])])
            out.append(end - int(opened[b]))
        return np.array(out, dtype=np.int64), end - int(timing.t_start.get().min())

    # ---- loaded round trip ------------------------------------------------------------------
    def loaded(self, eng: Any, work: LoadedWork, handoff: int) -> tuple[np.ndarray, dict]:
        cp = self.cp
        check_background(handoff == 1, work.background, eng.native.rings(), not work.shared)
        for r in self._ring_range(eng):  # slot 0 is the probe's; px_background cycles over 1..
            ln = work.lanes[eng.native.ring_lane(r)]
            if min(ln.src.length, ln.dst.length) // work.size < 2:
                raise ConfigError(
                    "size", work.size, "a size that leaves two slots per lane (probe, background)"
                )
        lane0 = work.lanes[eng.native.ring_lane(0)]
        with ExitStack() as stack:
            rings = self._rings(eng, stack)
            ctl_dev = rings[0] + self.consts.CONTROL_OFF
            ctl = self._control(eng)
            nr = len(rings)
            first = 0 if work.shared else 1
            lanes, slots = self._lanes_slots(eng, work.size, work.lanes)
            ring_ptrs = cp.asarray(np.array(rings, dtype=np.uint64))
            reserve = cp.zeros(nr, dtype=cp.uint64)
            P = work.background
            sent = cp.zeros(P * 32, dtype=cp.uint64)
            bstatus = cp.zeros(P, dtype=cp.int32)
            src = stack.enter_context(self.mapped(lane0.src.addr + work.size - 8, 8))
            reply = stack.enter_context(self.mapped(work.reply.addr + work.size - 8, 8))
            out = cp.zeros(max(1, work.iters), dtype=cp.int64)
            pstatus = cp.zeros(1, dtype=cp.int32)
            where = cp.zeros(1, dtype=cp.uint64)
            per_block_ns = P / (work.pace_mps * 1e6) * 1e9 if work.pace_mps > 0 else 0.0
            bg_stream = launch_stream(cp)
            probe_stream = launch_stream(cp)
            with bg_stream:
                self.fn["px_background"](
                    (P,),
                    (32,),
                    (
                        ring_ptrs,
                        reserve,
                        np.int32(handoff),
                        np.uint32(first),
                        np.uint32(nr),
                        np.uint32(self.params.ring_depth),
                        lanes,
                        slots,
                        np.uint32(work.size),
                        np.float64(per_block_ns),
                        np.int64(eng.sub.timeout_ns),
                        np.uint64(ctl_dev),
                        sent,
                        bstatus,
                    ),
                )
            bg0 = self._completed(eng, range(first, nr))
            t0 = time.perf_counter_ns()
            try:
                with probe_stream:
                    self.fn["px_probe"](
                        (1,),
                        (1,),
                        (
                            np.uint64(rings[0]),
                            reserve,
                            np.int32(handoff),
                            np.uint32(self.params.ring_depth),
                            np.uint32(eng.native.ring_lane(0)),
                            np.uint32(work.size),
                            np.int32(0 if work.requester else 1),
                            np.uint64(src),
                            np.uint64(reply),
                            np.uint32(work.iters),
                            np.uint32(work.warmup),
                            np.int64(eng.sub.timeout_ns),
                            np.uint64(ctl_dev),
                            out,
                            pstatus,
                            where,
                        ),
                    )
                self._watch(
                    eng,
                    probe_stream,
                    "loaded round trip (GPU probe)",
                    self._timeout_s(eng, work.iters + work.warmup),
                )
                probe_ns = time.perf_counter_ns() - t0
                bg1 = self._completed(eng, range(first, nr))
            finally:
                self._stop_background(eng, bg_stream, ctl)
            self._status(eng, "loaded round trip (probe)", pstatus, where)
            self._status(eng, "loaded round trip (background)", bstatus)
            per_block = sent.get().reshape(P, 32)
            counts = [0] * nr
            for b in range(P):
                for j, r in enumerate(rings_of(b, P, nr, first)):
                    counts[r] += int(per_block[b, j])
            if work.shared:
                counts[0] += work.iters + work.warmup
            for r in range(nr):
                ok, err = eng.native.wait_completed(r, counts[r], "drain")
                eng.check("loaded drain", ok, err, {})
            background = bg1 - bg0
            if work.shared:
                background = max(0, background - (work.iters + work.warmup))
            rtt = (
                self._cycles_to_ns(out.get()[: work.iters])
                if work.requester
                else np.array([], dtype=np.int64)
            )
        return rtt, {"background": background, "probe_ns": probe_ns, "ring_messages": counts}

    def _stop_background(self, eng: Any, stream: Any, ctl: np.ndarray) -> None:
        """Set the stop bit and wait for the background kernel, bounded: blocks that do not
        end within the timeout (one that never saw the bit, or waits on a ring the workers no
        longer drain) are aborted and named, instead of a host wait that cannot end."""
        import sys

        ctl[0] |= STOP
        ev = self.cp.cuda.Event()
        ev.record(stream)
        deadline = time.monotonic() + eng.sub.timeout_ns / 1e9
        while not ev.done and time.monotonic() < deadline:
            if self.host.interrupted() or eng.native.failed():  # abort at once
                break
            time.sleep(0.0002)
        if ev.done:
            return
        ctl[0] |= ABORT
        ev.synchronize()
        if sys.exc_info()[0] is None:  # do not mask the failure that brought us here
            raise CompletionTimeout(
                f"rank {eng.sub.rank}: loaded round trip: GPU background producers did not stop "
                f"within {eng.sub.timeout_ns / 1e9:g} s of the stop bit (aborted; rings: "
                f"{self._ring_state(eng)})"
            )

    def _completed(self, eng: Any, rings: range) -> int:
        import ctypes

        return sum(
            ctypes.c_uint64.from_address(eng.native.ring_addr(r) + self.consts.COMPLETED_OFF).value
            for r in rings
        )

    def close(self) -> None:
        self.module = None
        self.fn = {}
