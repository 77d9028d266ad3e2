"""loaded-rtt on mini-gda: a probe's round trip while background CTAs load the endpoint with
bulk writes (the paper, arXiv 2610.01380, §4.2, Figure 6, Table 11), the probe on a QP shared
with the background or on a private QP (mini-gda's analogue of mini-proxy's shared and reserved
rings). Kernels: cuda/gda/loaded.cu.

Lanes: lane 0 is the probe's. Shared: background CTA c posts on lane c (CTA 0 shares lane 0 with
the probe, as the paper's shared GDAKI context is one background CTA's); private: on lane c + 1.
Either way C background QPs carry the load, so only the probe's queue differs.

The background runs on its own stream, the probe on another; the probe waits until every
background CTA runs, and however it ends it sets the stop word the CTAs poll (GPU memory), so they
finish their batch, drain it and exit. A signal sets the host-mapped abort word both poll; a
background that outlives the probe by the timeout is aborted and reported with its counters.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ...cuda_host import cuda_dir
from ...errors import CompletionTimeout, ConfigError
from ..work import LoadedResult, LoadedWork
from . import build, status

if TYPE_CHECKING:
    from .submitter import GpuSubmitter

KERNELS = ("gda_load_background", "gda_load_probe")
LOAD_WORDS = 8  # cuda/gda/loaded.cu LoadWord
STARTED, T0, T1, BACKGROUND, PROBES = 1, 2, 3, 4, 5
CTA_WORDS = 3  # posted, doorbells, cqes
WARP = 32  # a background CTA is one warp: its batch is built in lockstep
MAX_BATCH = WARP
MAX_INLINE = 512
_MODULES: dict[tuple[str, int], Any] = {}


def lanes_needed(background: int) -> int:
    """Lanes per peer: the probe's private QP and one QP per background CTA."""
    return background + 1


def check(work: LoadedWork, bbs: int) -> None:
    """What the kernels rely on, refused before anything is launched."""
    if not 8 <= work.size <= MAX_INLINE:
        raise ConfigError("size", work.size, f"8..{MAX_INLINE} (an inline probe)")
    if not 1 <= work.batch <= MAX_BATCH:
        raise ConfigError("batch (--batch)", work.batch, f"1..{MAX_BATCH} with --submitter gpu")
    if len(work.lanes) != lanes_needed(work.background):
        raise ConfigError(
            "lanes", len(work.lanes), f"{lanes_needed(work.background)} (--background + 1)"
        )
    for i, lane in enumerate(work.lanes):
        depth = lane.qp.sq.wqebb_cnt
        if (work.batch + 1) * bbs > depth:  # a batch and the probe's WQE fit the SQ
            raise ConfigError(
                "batch (--batch)", work.batch, f"<= {depth // bbs - 1} with an SQ of {depth}"
            )
        if min(lane.src.length, lane.dst.length) // work.size < 2:
            raise ConfigError(
                "landing_bytes (--landing-bytes)",
                min(lane.src.length, lane.dst.length),
                f">= {2 * work.size} per lane slice (lane {i}: slot 0 is the probe's, the "
                "background writes slots 1..)",
            )


def module(ordering: str) -> Any:
    """cuda/gda/loaded.cu for `ordering` on the current device (cached per process)."""
    import cupy as cp

    key = (ordering, cp.cuda.runtime.getDevice())
    if key not in _MODULES:
        root = cuda_dir()
        src = (root / "gda" / "loaded.cu").read_text()
        mod = cp.RawModule(code=src, options=build.build_options(ordering, root))
        mod.compile()
        _MODULES[key] = mod
    return _MODULES[key]


def kernels(ordering: str) -> dict[str, Any]:
    mod = module(ordering)
    return {name: mod.get_function(name) for name in KERNELS}


def pace_ps(background: int, pace_mps: float) -> int:
    """Picoseconds per message of one CTA when `background` CTAs share `pace_mps` M msg/s."""
    return round(background * 1e6 / pace_mps) if pace_mps > 0 else 0


def run(sub: GpuSubmitter, work: LoadedWork) -> LoadedResult:
    """One loaded round trip call: prepare, launch, wait."""
    call = Call(sub, work)
    call.start()
    return call.finish()


class Call:
    """One call in three steps, so that two ranks in one process can prepare both before either
    launches: a device allocation or copy waits for the kernels already running, and a probe
    waiting for its peer's answer would then wait for that peer's preparation (until timeout)."""

    def __init__(self, sub: GpuSubmitter, work: LoadedWork) -> None:
        cp = sub.cp
        self.sub, self.work = sub, work
        self.bbs = sub._bbs(True, work.size, False)
        check(work, self.bbs)
        if any(lane.dc is not None for lane in work.lanes):
            raise ConfigError("transport (--transport)", "dc", "rc for loaded-rtt")
        self.k = kernels(sub.ordering)
        self.keep, self.srcs = sub._stage([lane.src for lane in work.lanes])
        # One QP owes at most a batch and the probe's WQE (check() keeps both in the SQ).
        self.tab = sub._prepare(
            work.lanes, self.bbs, self.srcs, [0] * len(work.lanes), work.batch + 1
        )
        self.watch = sub.dm.local(work.reply.addr, "reply buffer")
        C = work.background
        self.lw = cp.zeros(LOAD_WORDS, dtype=cp.uint64)
        self.cta_out = cp.zeros((C, CTA_WORDS), dtype=cp.int64)
        self.snap = cp.zeros(C, dtype=cp.uint32)
        self.samples = cp.zeros(max(1, work.iters), dtype=cp.int64)
        sub.status.fill(0)
        cp.cuda.get_current_stream().synchronize()  # prepare and staging, before other streams
        self.bg = cp.cuda.Stream(non_blocking=True)
        self.pr = cp.cuda.Stream(non_blocking=True)
        self.what = "loaded round trip" if work.requester else "loaded responder"

    def start(self) -> None:
        sub, work, C = self.sub, self.work, self.work.background
        first = 0 if work.shared else 1
        sub._abort[0] = 0
        with self.bg:
            self.k["gda_load_background"](
                (C,), (WARP,),
                (self.tab, np.int32(first), sub.states, np.uint32(work.batch),
                 np.uint32(work.size), np.uint64(pace_ps(C, work.pace_mps)),
                 np.uint64(sub.timeout_ns), self.lw, self.cta_out, sub.status,
                 np.uint64(sub._abort_dev)),
            )  # fmt: skip
        with self.pr:
            self.k["gda_load_probe"](
                (1,), (1,),
                (self.tab, np.int32(first), np.int32(C), sub.states, np.int32(work.requester),
                 np.uint32(work.size), np.uint64(self.srcs[0]), np.uint64(self.watch),
                 np.uint32(work.iters), np.uint32(work.warmup), np.uint32(C),
                 np.uint64(sub.timeout_ns), self.lw, self.snap, self.samples, sub.status,
                 np.uint64(sub._abort_dev)),
            )  # fmt: skip

    def finish(self) -> LoadedResult:
        sub, work = self.sub, self.work
        _wait(sub, self.pr, self.bg, self.lw, self.cta_out, self.what)
        st = sub.status.get()
        status.raise_for(st, sub.rank, self.what, sub.timeout_ns / 1e9, work.iters + work.warmup)
        sub._check_stale()
        words = self.lw.get()
        out = self.cta_out.get()
        background = int(words[BACKGROUND]) // self.bbs - (work.iters if work.shared else 0)
        posted = int(out[:, 0].sum())
        res = LoadedResult(
            rtt_ns=self.samples.get()[: work.iters]
            if work.requester
            else np.array([], dtype=np.int64),
            background=max(0, background),
            probe_ns=int(words[T1]) - int(words[T0]),
            details={
                "background_posted": posted,
                "background_doorbells": int(out[:, 1].sum()),
                "background_cqes": int(out[:, 2].sum()),
            },
        )
        self.keep = None
        sub.details = {
            "background_ctas": float(work.background),
            "background_posted": float(posted),
        }
        return res


def _wait(sub: GpuSubmitter, pr: Any, bg: Any, lw: Any, cta_out: Any, what: str) -> None:
    """Wait for the probe, then the background; a signal aborts both (and propagates); a
    background still running `timeout` after the probe ended is aborted and reported."""
    ev_pr, ev_bg = sub.cp.cuda.Event(), sub.cp.cuda.Event()
    ev_pr.record(pr)
    ev_bg.record(bg)
    deadline = None
    try:
        while not (ev_pr.done and ev_bg.done):
            if ev_pr.done and deadline is None:
                deadline = time.monotonic() + sub.timeout_ns / 1e9
            if deadline is not None and time.monotonic() > deadline:
                sub._abort[0] = 1
                ev_bg.synchronize()
                words, out = lw.get(), cta_out.get()
                raise CompletionTimeout(
                    f"rank {sub.rank}, {what} (GPU): the background did not stop within "
                    f"{sub.timeout_ns / 1e9:g} s of the probe's end (aborted; "
                    f"{int(words[STARTED])} CTAs started, {int(out[:, 0].sum())} writes posted, "
                    f"{int(words[PROBES])} probes done)"
                )
            time.sleep(20e-6)
    except BaseException:
        sub._abort[0] = 1
        ev_pr.synchronize()
        ev_bg.synchronize()
        raise
