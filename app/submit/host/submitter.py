"""The host submitter: Python configures, the native loops (native/) post and poll.

Lanes travel to C++ as one uint64 table (app/submit/native_lanes.py). A loop that fails returns
the queue state as the native error record; it is raised through the one decoder
(app/submit/failures.py) as CompletionTimeout, CompletionError or LoopInterrupted with rank, QP
and indices. On a provider without mlx5 queues in memory (verbs), the same typed work goes
through the post-send path (post_send.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...fabric.base import Posting, ProviderCaps
from ...platform import Probe
from ..base import Shape, Submitter, register
from ..failures import LoopFailure, raise_failure
from ..native_lanes import lane_table
from ..work import (
    MODE_CODES,
    Buffer,
    CycleWork,
    LatencyWork,
    RateResult,
    RateWork,
    RespondWork,
)
from .post_send import post_send_path


def write_wqebbs(payload: str, size: int, transport: str = "rc", compact_av: bool = False) -> int:
    """64-byte WQEBBs of one RDMA write as the native loops build it (ValueError if unbuildable)."""
    return _native_host().write_wqebbs(payload == "inline", size, transport == "dc", compact_av)


def max_batch(sq_wqebbs: int, payload: str, size: int, transport: str = "rc") -> int:
    """The largest msg-rate batch (WQEs per doorbell) the native loop accepts on this SQ."""
    return sq_wqebbs // write_wqebbs(payload, size, transport)


def _native_host() -> Any:
    from ... import _native

    return _native.host


def _buf(b: Buffer) -> tuple[int, int, int]:
    return (b.addr, b.key, b.length)


@register
class HostSubmitter(Submitter):
    name = "host"
    summary = "CPU threads post WQEs and poll CQEs directly (native C++ loops; post_send on verbs)"
    shapes = frozenset({Shape.LATENCY, Shape.RESPOND, Shape.RATE, Shape.CYCLE})
    posting = (Posting.MLX5_QUEUES.value, Posting.POST_SEND.value)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # None on a provider with mlx5 queues in memory (emu, mlx5): the native WQE loops.
        self._post_send = post_send_path(self.fabric, self.rank, self.timeout_ns)

    @classmethod
    def availability(cls, probes: Mapping[str, Probe]) -> str | None:
        try:
            _native_host()
        except ImportError as e:
            return f"native module missing ({e}); run `make setup`"
        return None

    @classmethod
    def check_provider(
        cls,
        params: Any,
        points: Sequence[tuple[str, Mapping[str, Any]]],
        provider: str,
        caps: ProviderCaps,
        provider_params: Any,
    ) -> None:
        """The post-send path (a provider without mlx5 queues in memory) cycles connections
        from one submitting thread: more units are refused before anything exists."""
        if Posting.MLX5_QUEUES.value in caps.posting:
            return
        for exp, pt in points:
            if "writes_per_visit" in pt and int(pt.get("threads", 1)) != 1:
                raise ConfigError(
                    "threads (-t)",
                    pt["threads"],
                    f"1 for {exp} on provider {provider} (the post-send path has one "
                    "submitting thread)",
                )

    @property
    def _hook(self) -> tuple[int, int]:
        return self.progress.cpu_hook

    def _raise(self, what: str, err: dict[str, Any], values: dict[str, Any]) -> None:
        where = (
            f"rank {self.rank}, {what}, QP 0x{err['qpn']:06x}: SQ producer index "
            f"{err['pi']}, retired {err['retired']}, CQ consumer index {err['cq_ci']}"
        )
        raise_failure(
            LoopFailure.from_native(err, where), what, self.timeout_ns / 1e9, values=values
        )

    def latency(self, work: LatencyWork) -> np.ndarray:
        if self._post_send is not None:
            return self._post_send.latency(work)
        sel = work.lanes[work.selected]
        reply = work.reply if work.reply is not None else sel.src
        ok, samples, err = _native_host().single_op(
            lane_table(work.lanes),
            MODE_CODES[work.mode],
            work.size,
            work.inline,
            work.scope_all,
            work.selected,
            _buf(sel.src),
            _buf(sel.dst),
            _buf(reply),
            work.iters,
            work.warmup,
            self.timeout_ns,
            *self._hook,
        )
        if not ok:
            self._raise(f"single-op {work.mode}", err, {"size": work.size})
        return samples

    def respond(self, work: RespondWork) -> None:
        if self._post_send is not None:
            return self._post_send.respond(work)
        ok, err = _native_host().rtt_respond(
            lane_table([work.lane]),
            0,
            work.size,
            work.inline,
            _buf(work.watch),
            _buf(work.lane.src),
            _buf(work.lane.dst),
            work.count,
            self.timeout_ns,
            *self._hook,
        )
        if not ok:
            self._raise("round-trip responder", err, {"size": work.size})

    def rate(self, work: RateWork) -> RateResult:
        if self._post_send is not None:
            return self._post_send.rate(work)
        ok, windows, stats, err = _native_host().msg_rate(
            lane_table(work.lanes),
            work.threads,
            work.batch,
            work.size,
            work.inline,
            work.messages_per_thread,
            work.warmup_per_thread,
            work.window,
            self.timeout_ns,
            *self._hook,
        )
        if not ok:
            self._raise(
                "msg-rate",
                err,
                {
                    "batch": work.batch,
                    "threads": work.threads,
                    "size": work.size,
                    "messages_per_thread": work.messages_per_thread,
                    "warmup_per_thread": work.warmup_per_thread,
                    "window": work.window,
                },
            )
        return RateResult.from_stats(windows, stats)

    def cycle(self, work: CycleWork) -> RateResult:
        if self._post_send is not None:
            return self._post_send.cycle(work)
        ok, windows, stats, err = _native_host().cycle(
            lane_table(work.lanes),
            work.units,
            work.writes_per_visit,
            work.batch,
            work.size,
            work.inline,
            work.visits,
            work.warmup_visits,
            work.window,
            self.timeout_ns,
            *self._hook,
        )
        if not ok:
            self._raise(
                "active-connections cycle",
                err,
                {
                    "threads": work.units,
                    "writes_per_visit": work.writes_per_visit,
                    "batch": work.batch,
                    "size": work.size,
                    "visits": work.visits,
                    "warmup_visits": work.warmup_visits,
                    "window": work.window,
                },
            )
        return RateResult.from_stats(windows, stats)
