"""MoE token dispatch on mini-gda (the paper, arXiv 2611.12362, §II-B/C): the launcher of
cuda/moe/dispatch.cu's kernels for the four backends.

Per iteration, on one stream: a host barrier (`DispatchWork.barrier`), then the send kernel
(`plan.sm_cap` CTAs), the one-thread delay kernel when the plan has a wait, and the receive
kernel, with CUDA events around each. The tokens are copied into GPU memory once per call
(activations live in GPU memory, as in the paper); the send kernel stages each into the staging
buffer the NIC reads.

Backends: gdaki and free-flow post mlx5 WQEs on the lanes (one QP per (peer, local expert));
free-flow gets a fresh host-forwarded doorbell thread per call (forward.py), whose ready arrays
start at each QP's producer index then, so gdaki and free-flow points may alternate on the same
QPs. gpi and gpi-mc write descriptors into a GPI queue of the rank (EmuFabric.create_gpi, the
CPU engine only); its windows come from the lanes' remote slices, so no exchange is needed:
handle e is local expert e's slice at each peer, then the staging, then gpi-mc's fan-out windows
(the slices of a group of local experts at a peer, as many experts as the fan-out's 15-bit slots
reach; the slices must be at one pitch).

A count signal's old value (the masked fetch-add returns it) lands in a small region the
submitter registers for it (8 bytes a lane; only the NIC writes it, nothing reads it).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...cuda_host import cuda_dir, device_pointer, note_stuck_kernel
from ...errors import CompletionTimeout, ConfigError, FabricError, UnsupportedError
from ...fabric.base import host_view
from ...fabric.emu.gpi_format import OFF_CI, OFF_ERRORS, OFF_PI
from ...moe import routing
from ..gpu_runtime.device_map import stage
from ..work import (
    COUNT_WORD_BYTES,
    DISPATCH_BACKENDS,
    GPI_BACKENDS,
    DispatchResult,
    DispatchWork,
    Lane,
)
from . import build, lanes, status

if TYPE_CHECKING:
    from .submitter import GpuSubmitter

BACKENDS = ("gdaki", "free-flow", "gpi", "gpi-mc")  # cuda/moe/dispatch.cuh Backend
assert BACKENDS == DISPATCH_BACKENDS
# cuda/moe/dispatch.cuh Arg, in the same order
ARGS = (
    "backend", "rank", "tokens", "topk", "experts", "experts_local", "slot_bytes",
    "counter_off", "route", "slot", "count", "lane_of", "sent", "tokens_dev", "staging_dev",
    "staging_nic", "staging_key", "self_recv", "fetch_nic", "fetch_key", "signal_every",
    "gpi_base", "gpi_pi", "gpi_ring", "gpi_log_depth", "fan_stride", "fan_pitch", "fan_token",
    "fan_group", "timeout_ns",
)  # fmt: skip
ARG = {name: i for i, name in enumerate(ARGS)}
KERNELS = ("moe_send", "moe_recv", "moe_delay", "moe_drain")
SEND_BLOCK = 256  # threads of a send CTA: the staging copy; warp 0 posts
RECV_BLOCK = 256
MAX_TOPK = 32  # one warp posts a token's destinations
GPI_DEPTH = 4096
GPI_WINDOWS = 256  # one queue per rank, every window handle a descriptor can name
MAX_FAN_SLOT = (1 << 15) - 1  # a fan-out destination's slot is 15 bits
MAX_FAN_RANK = 255
MAX_FAN_K = 8
MAX_WINDOWS = 256  # window handles of a GPI queue (app/fabric/emu/gpi.py)
CALIBRATION_RUNS = 20
_MODULES: dict[tuple[str, str, int], Any] = {}


def refusals(provider: str, provider_params: Any) -> dict[str, str | None]:
    """Backend -> None when mini-gda can run it on `provider`, else why not (pre-flight)."""
    out: dict[str, str | None] = {b: None for b in BACKENDS}
    if getattr(provider_params, "queues", "host") == "device":
        out["free-flow"] = (
            "free-flow: the host thread that rings stores the doorbell record and the doorbell, "
            "which --queues device keeps in GPU memory (use --queues host)"
        )
    for b in GPI_BACKENDS:
        if provider != "emu":
            out[b] = (
                f"{b}: GPI descriptor queues exist only on the emulated NIC (--provider emu); "
                f"provider {provider} has none"
            )
        elif getattr(provider_params, "engine", "cpu") != "cpu":
            out[b] = (
                f"{b}: emu's CUDA engine does not serve GPI queues (docs/gpi.md, Engines); use "
                "--engine cpu"
            )
    return out


def module(ordering: str, cq_poll: str) -> Any:
    """cuda/moe/dispatch.cu for one ordering and CQ polling on the current device (cached)."""
    import cupy as cp

    key = (ordering, cq_poll, cp.cuda.runtime.getDevice())
    if key not in _MODULES:
        root = cuda_dir()
        src = (root / "moe" / "dispatch.cu").read_text()
        mod = cp.RawModule(code=src, options=build.build_options(ordering, root, cq_poll))
        mod.compile()
        _MODULES[key] = mod
    return _MODULES[key]


def kernels(ordering: str, cq_poll: str) -> dict[str, Any]:
    mod = module(ordering, cq_poll)
    return {name: mod.get_function(name) for name in KERNELS}


# ---- what the kernels are given, computed on the host ------------------------------------------
@dataclass(frozen=True)
class FanLayout:
    """gpi-mc's fan-out windows: at each peer, this source's slices of a group of `group` local
    experts from the group's first, `pitch_slots` slots apart, slots of `stride` bytes (one
    window for all local experts when their slots fit a destination's 15 bits)."""

    stride: int
    pitch_slots: int  # slots between two experts' slices
    token_slots: int  # slots of one token
    group: int  # local experts a window covers
    windows: dict[tuple[int, int], tuple[int, int, int]]  # (peer, group) -> (addr, length, key)

    @property
    def groups(self) -> int:
        return len({g for _, g in self.windows})


@dataclass(frozen=True)
class Layout:
    """The host side of one dispatch call: the lane order, each expert's lane, the receive
    kernel's CTAs and gpi-mc's window."""

    order: tuple[tuple[int, int], ...]  # lane i = (peer, local expert)
    lane_of: np.ndarray  # int32 [E]: lane of a remote expert, -1 for this rank's
    rows: np.ndarray  # int64 [E_local * world]: first expert-major row of CTA e * world + s
    room: np.ndarray  # int32 [E_local * world]: the plan's count of (e, s)
    total_rows: int
    fan: FanLayout | None


def lane_list(work: DispatchWork, order: tuple[tuple[int, int], ...]) -> list[Lane]:
    return [work.lanes[d][e] for d, e in order]


def fan_layout(work: DispatchWork) -> FanLayout:
    """gpi-mc's windows over this source's slices at each peer, as few as the fan-out's 15-bit
    slots allow; refused (UnsupportedError, naming why) when the slices are not at one pitch,
    when one token's slots alone do not fit, or when the windows do not fit the queue's table."""
    sb = work.slot_bytes
    el = work.plan.local_experts(work.world)
    pitches = set()
    for d, ls in sorted(work.lanes.items()):
        if len({lane.dst.key for lane in ls}) != 1:
            raise UnsupportedError(f"gpi-mc: peer {d}'s landing slices are under several keys")
        steps = {b.dst.addr - a.dst.addr for a, b in itertools.pairwise(ls)}
        if len(steps) > 1 or any(s <= 0 for s in steps):
            raise UnsupportedError(
                f"gpi-mc: peer {d}'s landing slices are not at one pitch (a fan-out window "
                "covers several)"
            )
        pitches |= steps
    if len(pitches) > 1:
        raise UnsupportedError("gpi-mc: the peers' landing slices are at different pitches")
    pitch = pitches.pop() if pitches else sb
    stride = math.gcd(pitch, sb)
    pitch_slots, token_slots = pitch // stride, sb // stride
    top = (work.plan.tokens - 1) * token_slots
    if top > MAX_FAN_SLOT:
        raise UnsupportedError(
            f"gpi-mc: the fan-out slot of the last token would be {top} (slices {pitch} bytes "
            f"apart, tokens of {sb} bytes, slots of {stride}): above the {MAX_FAN_SLOT} a "
            "destination holds"
        )
    group = min(el, (MAX_FAN_SLOT - top) // pitch_slots + 1)
    ngroups = -(-el // group)
    if el + 1 + ngroups > MAX_WINDOWS:
        raise UnsupportedError(
            f"gpi-mc: {ngroups} fan-out windows of {group} experts (slices {pitch} bytes apart) "
            f"beside {el + 1} others: above the {MAX_WINDOWS} window handles of a GPI queue"
        )
    if max(work.lanes, default=0) > MAX_FAN_RANK:
        raise UnsupportedError(f"gpi-mc: a fan-out destination's rank is at most {MAX_FAN_RANK}")
    windows: dict[tuple[int, int], tuple[int, int, int]] = {}
    for d, ls in work.lanes.items():
        for g in range(ngroups):
            first, last = ls[g * group], ls[min(el, (g + 1) * group) - 1]
            length = last.dst.addr - first.dst.addr + last.dst.length
            windows[(d, g)] = (first.dst.addr, length, first.dst.key)
    return FanLayout(stride, pitch_slots, token_slots, group, windows)


def layout(work: DispatchWork) -> Layout:
    """Check what the kernels rely on (ConfigError naming the field) and compute their tables."""
    plan = work.plan
    if plan.backend not in BACKENDS:
        raise ConfigError("backend", plan.backend, " | ".join(BACKENDS))
    T, k, E, W, r = plan.tokens, plan.topk, plan.experts, work.world, work.rank
    if E % W:
        raise ConfigError("experts", E, f"a multiple of the world size {W}")
    el = E // W
    sb = work.slot_bytes
    if sb != plan.token_bytes:
        raise ConfigError("slot_bytes", sb, f"{plan.token_bytes} (2 x hidden)")
    if not 1 <= k <= MAX_TOPK:
        raise ConfigError("topk", k, f"1..{MAX_TOPK} with --submitter gpu (one warp a token)")
    if plan.backend in GPI_BACKENDS and el + 2 > MAX_WINDOWS:
        raise ConfigError(
            "experts",
            E,
            f"<= {(MAX_WINDOWS - 2) * W} for {plan.backend} with {W} ranks (a window "
            "handle a local expert and two more, of a GPI queue's 256)",
        )
    if plan.backend == "gpi-mc" and k > MAX_FAN_K:
        raise ConfigError("topk", k, f"1..{MAX_FAN_K} for gpi-mc (a fan-out's destinations)")
    if plan.sm_cap < 1:
        raise ConfigError("sm_cap", plan.sm_cap, ">= 1")
    if work.counter_offset % COUNT_WORD_BYTES or work.counter_offset < T * sb:
        raise ConfigError(
            "counter_offset", work.counter_offset, f"a multiple of 8, >= {T * sb} (after the slots)"
        )
    if work.tokens_src.length < T * sb:
        raise ConfigError("tokens_src", work.tokens_src.length, f">= {T * sb} bytes")
    if len(work.self_recv) != el:
        raise ConfigError("self_recv", len(work.self_recv), f"{el} slices (one a local expert)")
    need = work.counter_offset + COUNT_WORD_BYTES
    peers = [d for d in range(W) if d != r]
    for d in peers:
        ls = work.lanes.get(d, ())
        if len(ls) != el:
            raise ConfigError(f"lanes[{d}]", len(ls), f"{el} lanes (one a local expert of peer)")
        for e, lane in enumerate(ls):
            if lane.dc is not None:
                raise ConfigError(f"lanes[{d}][{e}]", "DC", "RC lanes for dispatch")
            if lane.dst.length < need:
                raise ConfigError(f"lanes[{d}][{e}].dst", lane.dst.length, f">= {need} bytes")
        bufs = work.recv.get(d, ())
        if len(bufs) != el:
            raise ConfigError(f"recv[{d}]", len(bufs), f"{el} slices (one a local expert)")
    for e, b in enumerate(work.self_recv):
        if b.length < need:
            raise ConfigError(f"self_recv[{e}]", b.length, f">= {need} bytes")
    for s in peers:
        for e, b in enumerate(work.recv[s]):
            if b.length < need:
                raise ConfigError(f"recv[{s}][{e}]", b.length, f">= {need} bytes")
    order = tuple((d, e) for d in peers for e in range(el))
    lane_of = np.full(E, -1, dtype=np.int32)
    for i, (d, e) in enumerate(order):
        lane_of[d * el + e] = i
    if work.staging.length < T * sb:
        raise ConfigError("staging", work.staging.length, f">= {T * sb} bytes (the tokens)")
    rows = routing.expert_major_rows(plan.counts, r, W).ravel().astype(np.int64)
    room = routing.expected_received(plan.counts, r, W).ravel().astype(np.int32)
    fan = fan_layout(work) if plan.backend == "gpi-mc" and order else None
    return Layout(order, lane_of, rows, room, int(room.sum()), fan)


def signal_every(depth: int) -> int:
    """Every n-th WQE of a lane is signaled, n a power of two and a quarter SQ at most, so a
    write waiting for room always has a CQE coming."""
    return 1 << max(0, (max(1, depth // 4)).bit_length() - 1)


def lane_wqebbs(plan: Any, rank: int, order: tuple[tuple[int, int], ...], el: int) -> list[int]:
    """WQEBBs each lane carries over a call (every WQE is one): per iteration the writes to its
    expert and the count signal."""
    total = plan.warmup + plan.iters
    return [total * (int(plan.counts[rank, d * el + e]) + 1) for d, e in order]


def descriptors(plan: Any, rank: int, world: int, group: int | None = None) -> int:
    """GPI descriptors one iteration writes: gpi one a (token, remote expert), gpi-mc one a
    (token, fan-out window group it has remote experts in); then a SIGNAL per remote expert."""
    el = plan.experts // world
    remote = (plan.routing[rank] // el) != rank
    signals = plan.experts - el
    if plan.backend == "gpi":
        return int(remote.sum()) + signals
    g = (plan.routing[rank] % el) // (group or el)
    return sum(len(set(g[t][remote[t]].tolist())) for t in range(plan.tokens)) + signals


# ---- the call ------------------------------------------------------------------------------------
class _Gpi:
    """The rank's GPI queue for a window count, its windows set for one call. This GPU is the
    queue's only producer, so its reservation counter (pi) lives in GPU memory, where the send
    kernel's fetch-adds stay on the GPU; the control block's pi is brought up to it after each
    call (the engine never reads pi: docs/gpi.md)."""

    def __init__(self, sub: GpuSubmitter, nwindows: int) -> None:
        cp = sub.cp
        # One queue of GPI_WINDOWS handles for every point (GpuSubmitter.queue_options reserved
        # its room): a point uses the first `nwindows`.
        if nwindows > GPI_WINDOWS:
            raise ConfigError("experts (--experts)", nwindows, f"<= {GPI_WINDOWS - 2} per rank")
        cache: dict[int, tuple[Any, Any]] = sub.__dict__.setdefault("_moe_gpi", {})
        if GPI_WINDOWS not in cache:
            q = sub.fabric.create_gpi(GPI_DEPTH, ncounters=1, nwindows=GPI_WINDOWS)
            pi = cp.asarray(np.array([self._word(q, OFF_PI)], dtype=np.uint64))
            cache[GPI_WINDOWS] = (q, pi)
        self.q, self.pi = cache[GPI_WINDOWS]
        # the queue lies in the queue arena, which register_cuda() mapped whole into the GPU
        host, _ = sub.fabric.queue_arena()
        dev = device_pointer(cp.cuda.runtime, host)
        self.base = dev + (self.q.base - host)
        self.ring = dev + (self.q.ring - host)
        self.fabric = sub.fabric

    @staticmethod
    def _word(q: Any, off: int) -> int:
        return int(host_view(q.base + off, 8, np.uint64)[0])

    def word(self, off: int) -> int:
        """A word of the queue's control block (gpi_format's offsets)."""
        return self._word(self.q, off)

    def windows(self, work: DispatchWork, lay: Layout) -> None:
        from ...fabric.emu.gpi import GpiWindow

        f, q, el = self.fabric, self.q, work.plan.local_experts(work.world)
        st = work.staging
        f.set_gpi_window(q, el, work.rank, GpiWindow(st.addr, st.length, st.key))
        for d, ls in work.lanes.items():
            for e, lane in enumerate(ls):
                f.set_gpi_window(q, e, d, GpiWindow(lane.dst.addr, lane.dst.length, lane.dst.key))
        if lay.fan is not None:
            for (d, g), w in lay.fan.windows.items():
                f.set_gpi_window(q, el + 1 + g, d, GpiWindow(*w))

    def drain(self, timeout_s: float, errors_before: int) -> int:
        """Every descriptor reserved is consumed (the block's pi set to the reservations);
        any that failed is raised. Returns the descriptors of the call's queue so far."""
        reserved = int(self.pi.get()[0])
        host_view(self.q.base + OFF_PI, 8, np.uint64)[0] = reserved
        deadline = time.monotonic() + timeout_s
        while (ci := self.word(OFF_CI)) != reserved:
            if time.monotonic() > deadline:
                raise CompletionTimeout(
                    f"GPI queue {self.q.num:#x}: {ci} of {reserved} descriptors consumed after "
                    f"{timeout_s:g} s"
                )
            time.sleep(20e-6)
        errors = self.word(OFF_ERRORS)
        if errors != errors_before:
            st = self.fabric.gpi_status(self.q)
            raise FabricError(
                f"GPI queue {self.q.num:#x}: {errors - errors_before} descriptors failed "
                f"(last: {st['last_error']})"
            )
        return reserved


def fetch_region(sub: GpuSubmitter, lanes_n: int) -> Any:
    """The region the count signals' old values land in, 8 bytes a lane: the submitter's
    scratch region (GpuSubmitter.queue_options), 8 bytes for every QP bring-up made,
    registered once."""
    mr = sub.__dict__.get("_moe_fetch")
    if mr is None:
        qps = int(getattr(sub, "attached_qps", 0)) or lanes_n
        mr = sub.fabric.register(sub.FETCH_BYTES_PER_QP * qps)
        sub.__dict__["_moe_fetch"] = mr
    if mr.length < 8 * lanes_n:
        raise FabricError(f"rank {sub.rank}: {lanes_n} dispatch lanes, fetch region of "
                          f"{mr.length} bytes (8 a QP bring-up made)")  # fmt: skip
    return mr


STUCK_GRACE_S = 2.0  # past the call's timeout: the abort word's turn, then the kernel is stuck


def _wait(sub: GpuSubmitter, ev: Any, what: str, diagnose: Any) -> None:
    """Wait for `ev` without blocking signals: a signal sets the abort word the kernels poll.
    Every device wait has its own deadline, so kernels still running past the call's timeout
    have a wait that does not check it: the abort word is set; a kernel that still runs after
    that is left on the GPU (note_stuck_kernel) and the call fails with `diagnose()`'s state,
    never a hang."""
    limit = sub.timeout_ns / 1e9 + STUCK_GRACE_S
    deadline = time.monotonic() + limit
    try:
        while not ev.done:
            if time.monotonic() > deadline:
                break
            time.sleep(20e-6)
        else:
            return
    except BaseException:
        sub._abort[0] = 1
        ev.synchronize()
        raise
    sub._abort[0] = 1
    stop = time.monotonic() + STUCK_GRACE_S
    while not ev.done and time.monotonic() < stop:
        time.sleep(1e-3)
    stopped = "stopped when aborted" if ev.done else "did not stop when aborted (left running)"
    if not ev.done:
        note_stuck_kernel(what)
    raise CompletionTimeout(
        f"rank {sub.rank}: {what} still running {limit:.1f} s after launch, {stopped}; {diagnose()}"
    )


def calibrate(sub: GpuSubmitter, k: dict[str, Any], stream: Any) -> float:
    """The delay kernel's cost beyond its spin (ns, by CUDA events): the median over short
    runs of a zero spin, subtracted from every wait so the kernel lasts the wait."""
    cached = sub.__dict__.get("_moe_delay_overhead")
    if cached is not None:
        return float(cached)
    cp = sub.cp
    out = cp.zeros(1, dtype=cp.int64)
    e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    got = []
    with stream:
        for _ in range(CALIBRATION_RUNS):
            e0.record()
            k["moe_delay"]((1,), (1,), (np.uint64(0), out))
            e1.record()
            e1.synchronize()
            got.append(cp.cuda.get_elapsed_time(e0, e1) * 1e6)
    over = float(np.median(got))
    sub.__dict__["_moe_delay_overhead"] = over
    return over


def run(sub: GpuSubmitter, work: DispatchWork) -> DispatchResult:
    """One dispatch point on this rank: warm-up and timed iterations (see the module doc)."""
    from .forward import Forwarder

    cp = sub.cp
    plan = work.plan
    lay = layout(work)
    W, r, T, sb = work.world, work.rank, plan.tokens, work.slot_bytes
    el = plan.local_experts(W)
    backend = plan.backend
    if W > 1 and work.barrier is None:
        raise UnsupportedError("dispatch over more than one rank needs DispatchWork.barrier")
    k = kernels(sub.ordering, sub.params.cq_poll)
    dm = sub.dm
    total = plan.warmup + plan.iters
    work_lanes = lane_list(work, lay.order)
    mlx5 = backend in ("gdaki", "free-flow")

    # lanes: the QPs attached, a ready array each for free-flow (a fresh forwarder)
    fwd = Forwarder(cp, r, sub.timeout_ns / 1e9) if backend == "free-flow" and work_lanes else None
    rows_, attach = [], []
    depth = min((lane.qp.sq.wqebb_cnt for lane in work_lanes), default=1)
    for lane in work_lanes:
        if lane.qp.sq.cq.ncqe < lane.qp.sq.wqebb_cnt:
            raise ConfigError(
                "cq depth", lane.qp.sq.cq.ncqe, f">= the SQ's {lane.qp.sq.wqebb_cnt} (dispatch)"
            )
        slot, fresh = sub._slot(lane.qp.qpn)
        ready = fwd.ready(lane.qp) if fwd is not None else 0
        rows_.append(lanes.lane_row(dm, lane, slot, 0, 0, ready))
        attach.append(1 if fresh else 0)
    n = len(rows_)
    fetch = fetch_region(sub, n)
    stream = cp.cuda.Stream(non_blocking=True)
    keep: list[Any] = []
    with stream:
        tab = cp.asarray(lanes.table(rows_)) if n else cp.zeros(lanes.COL["ready"] + 1, cp.uint64)
        if n:
            att = cp.asarray(np.array(attach, dtype=np.uint8))
            slack = 0 if sub.params.cq_poll == "scan" else max(0, min(
                lane.qp.sq.cq.ncqe for lane in work_lanes) - depth)  # fmt: skip
            k_prep = sub.k["gda_prepare"]
            k_prep(((n + 127) // 128,), (128,),
                   (tab, np.int32(n), sub.states, att, np.uint32(1), np.uint32(slack)))  # fmt: skip

        # the argument table
        tok_keep, (tok_dev,) = stage(cp, [work.tokens_src.slice(0, max(T * sb, 1))])
        keep.append(tok_keep)
        dev = [cp.asarray(np.ascontiguousarray(a, dtype=np.int32)) for a in (
            plan.routing[r].reshape(-1), plan.slots[r].reshape(-1), plan.counts[r],
            lay.lane_of)]  # fmt: skip
        sent = cp.zeros(plan.experts, dtype=cp.uint32)
        self_dev = cp.asarray(
            np.array(
                [dm.local(b.addr, "self landing slice") for b in work.self_recv], dtype=np.uint64
            )
        )
        keep += [*dev, sent, self_dev]
        nwin = el + 1 + (lay.fan.groups if lay.fan else 1)
        gpi = _Gpi(sub, nwin) if backend in GPI_BACKENDS else None
        if gpi is not None:
            gpi.windows(work, lay)
        a = np.zeros(len(ARGS), dtype=np.uint64)
        fan = lay.fan
        vals = {
            "backend": BACKENDS.index(backend), "rank": r, "tokens": T, "topk": plan.topk,
            "experts": plan.experts, "experts_local": el, "slot_bytes": sb,
            "counter_off": work.counter_offset, "route": int(dev[0].data.ptr),
            "slot": int(dev[1].data.ptr), "count": int(dev[2].data.ptr),
            "lane_of": int(dev[3].data.ptr), "sent": int(sent.data.ptr), "tokens_dev": tok_dev,
            "staging_dev": dm.local(work.staging.addr, "staging buffer"),
            "staging_nic": work.staging.addr, "staging_key": work.staging.key,
            "self_recv": int(self_dev.data.ptr), "fetch_nic": fetch.addr,
            "fetch_key": fetch.lkey,
            "signal_every": signal_every(depth),
            "gpi_base": gpi.base if gpi else 0, "gpi_pi": int(gpi.pi.data.ptr) if gpi else 0,
            "gpi_ring": gpi.ring if gpi else 0,
            "gpi_log_depth": gpi.q.log_depth if gpi else 0,
            "fan_stride": fan.stride if fan else sb, "fan_pitch": fan.pitch_slots if fan else 0,
            "fan_token": fan.token_slots if fan else 1, "fan_group": fan.group if fan else el,
            "timeout_ns": sub.timeout_ns,
        }  # fmt: skip
        for name, v in vals.items():
            a[ARG[name]] = np.uint64(v)
        args = cp.asarray(a)

        # the receive kernel's CTAs: (e, s) in expert-major order
        words, slices = [], []
        for e in range(el):
            for s in range(W):
                b = work.self_recv[e] if s == r else work.recv[s][e]
                base = dm.local(b.addr, f"landing slice of source {s}, expert {e}")
                slices.append(base)
                words.append(base + work.counter_offset)
        words_d = cp.asarray(np.array(words, dtype=np.uint64))
        slices_d = cp.asarray(np.array(slices, dtype=np.uint64))
        rows_d = cp.asarray(lay.rows)
        room_d = cp.asarray(lay.room)
        received = cp.zeros(el * W, dtype=cp.int32)
        em_bytes = max(lay.total_rows * sb, 16)
        if work.expert_major is not None:
            if work.expert_major.length < lay.total_rows * sb:
                raise ConfigError("expert_major", work.expert_major.length,
                                  f">= {lay.total_rows * sb} bytes")  # fmt: skip
            em_dev, em_keep = dm.local(work.expert_major.addr, "expert-major buffer"), None
        else:
            em_keep = cp.zeros(em_bytes, dtype=cp.uint8)
            em_dev = int(em_keep.data.ptr)
        keep += [words_d, slices_d, rows_d, room_d, em_keep]
        gt = cp.zeros((total, 2), dtype=cp.uint64)
        gt[:, 0] = np.uint64(2**64 - 1)
        spun = cp.zeros(max(total, 1), dtype=cp.int64)
    stream.synchronize()

    over = calibrate(sub, k, stream) if plan.wait_us is not None else 0.0
    spin_ns = max(0, round(plan.wait_us * 1000 - over)) if plan.wait_us is not None else 0
    # this rank's count words start at zero (before the first barrier: no peer has sent yet)
    for b in [*work.self_recv, *(b for s in work.recv for b in work.recv[s])]:
        host_view(b.addr + work.counter_offset, COUNT_WORD_BYTES, np.uint64)[:] = 0

    send_ns = np.zeros(plan.iters, dtype=np.int64)
    recv_ns = np.zeros(plan.iters, dtype=np.int64)
    wait_ns = np.zeros(plan.iters, dtype=np.int64)
    with stream:  # on this stream: a non-blocking one does not wait for the default stream
        sub.status.fill(0)
    stream.synchronize()
    sub._abort[0] = 0
    evs = [cp.cuda.Event() for _ in range(4)]
    what = f"dispatch {backend}"
    gpi_err = gpi.word(OFF_ERRORS) if gpi is not None else 0
    expect = [(lane.qp.qpn, w) for lane, w in zip(work_lanes, lane_wqebbs(plan, r, lay.order, el),
                                                   strict=True)]  # fmt: skip
    grid = (n + 127) // 128
    abort = np.uint64(sub._abort_dev)

    def diagnose() -> str:
        """What host memory says while a kernel may still run (nothing read from the GPU)."""
        parts = []
        if gpi is not None:
            st = sub.fabric.gpi_status(gpi.q)
            parts.append(f"GPI queue {gpi.q.num:#x}: ci {st['ci']}, errors {st['errors']}, "
                         f"last error {st['last_error']}")  # fmt: skip
        for lane in work_lanes[:8]:
            rec = int.from_bytes(host_view(lane.qp.sq.dbrec + 4, 4).tobytes(), "big") & 0xFFFF
            parts.append(f"QP {lane.qp.qpn:#x}: doorbell record {rec}")
        c = sub.fabric.counters()
        parts.append(", ".join(f"{k} {c[k]}" for k in ("wqes", "doorbells", "errors") if k in c))
        return "; ".join(parts)

    def finish() -> None:  # the CQ records up to date however the call ends
        if n:
            with stream:
                sub.k["gda_finish"]((grid,), (128,), (tab, np.int32(n), sub.states))
            stream.synchronize()

    with contextlib.ExitStack() as stack:
        if fwd is not None:
            stack.callback(fwd.close)
            stack.enter_context(fwd.call(expect))  # the host thread rings while the loop runs
        stack.callback(finish)
        for i in range(total):
            if work.barrier is not None:
                work.barrier()
            with stream:
                evs[0].record()
                k["moe_send"]((plan.sm_cap,), (SEND_BLOCK,),
                              (args, tab, sub.states, np.uint64(int(gt.data.ptr) + 16 * i),
                               sub.status, abort))  # fmt: skip
                evs[1].record()
                if plan.wait_us is not None:
                    k["moe_delay"]((1,), (1,), (np.uint64(spin_ns),
                                               np.uint64(int(spun.data.ptr) + 8 * i)))  # fmt: skip
                evs[2].record()
                k["moe_recv"]((el * W,), (RECV_BLOCK,),
                              (words_d, slices_d, rows_d, room_d, np.uint64(em_dev), received,
                               np.uint64(sb), np.uint64(sub.timeout_ns), sub.status,
                               abort))  # fmt: skip
                evs[3].record()
            _wait(sub, evs[3], f"{what} iteration {i}", diagnose)
            status.raise_for(sub.status.get(), r, what, sub.timeout_ns / 1e9, total)
            if i >= plan.warmup:
                j = i - plan.warmup
                send_ns[j] = round(cp.cuda.get_elapsed_time(evs[0], evs[1]) * 1e6)
                if plan.wait_us is not None:  # else no kernel ran between the events: 0
                    wait_ns[j] = round(cp.cuda.get_elapsed_time(evs[1], evs[2]) * 1e6)
                recv_ns[j] = round(cp.cuda.get_elapsed_time(evs[2], evs[3]) * 1e6)
        if n and mlx5:  # every WQE retired (for free-flow the host thread still rings)
            with stream:
                drain = (tab, np.int32(n), sub.states, np.uint64(sub.timeout_ns), sub.status, abort)
                k["moe_drain"]((grid,), (128,), drain)
                evs[3].record()
            _wait(sub, evs[3], f"{what} drain", diagnose)
            status.raise_for(sub.status.get(), r, f"{what} drain", sub.timeout_ns / 1e9, total)
        rings = fwd.rings() if fwd is not None else 0
    if gpi is not None:
        gpi.drain(sub.timeout_ns / 1e9, gpi_err)
    sub._check_stale()

    g = gt.get()
    send_gt = (g[plan.warmup :, 1] - g[plan.warmup :, 0]).astype(np.int64)
    if work.expert_major is not None:
        em = np.array(host_view(work.expert_major.addr, lay.total_rows * sb), dtype=np.uint8)
    else:
        em = em_keep.get()[: lay.total_rows * sb]
    got = received.get().reshape(el, W)
    del keep
    per_iter_wqes = sum(int(plan.counts[r, d * el + e]) + 1 for d, e in lay.order)
    details: dict[str, float] = {
        "send_ctas": float(plan.sm_cap),
        "send_block": float(SEND_BLOCK),
        "lanes": float(n),
    }
    if mlx5:
        details["wqes_per_iter"] = float(per_iter_wqes)
        details["doorbells"] = float(rings if fwd is not None else per_iter_wqes * total)
        details["signal_every"] = float(signal_every(depth))
    if gpi is not None:
        group = lay.fan.group if lay.fan else None
        details["descriptors_per_iter"] = float(descriptors(plan, r, W, group))
        if lay.fan is not None:
            details["fan_windows"] = float(lay.fan.groups)
        details["gpi_depth"] = float(gpi.q.depth)
    if plan.wait_us is not None:
        s = spun.get()[plan.warmup : total]
        details["delay_overhead_ns"] = over
        details["delay_spin_ns"] = float(spin_ns)
        details["delay_spun_mean_ns"] = float(s.mean()) if s.size else float("nan")
    sub.details = {"sm_clock_hz": sub.details.get("sm_clock_hz", float("nan")), **details}
    return DispatchResult(
        send_ns=send_ns,
        recv_ns=recv_ns,
        wait_ns=wait_ns,
        send_gt_ns=send_gt,
        received=got,
        expert_major=em,
        details=dict(details),
    )
